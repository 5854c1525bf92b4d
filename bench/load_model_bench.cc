// load_model_bench: how long a checkpoint takes to become usable — resolve the path, parse and
// validate config.json, map and validate every safetensors header, then read every weight byte
// once (converting to fp32, as the CPU backend will). Prints a table; --json writes the figures.
//
//   build/bench/load_model_bench --model models/s4kv-tiny [--repeats 7] [--json OUT]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/half.h"
#include "common/json.h"
#include "model/model_config.h"
#include "model/model_path.h"
#include "model/weights.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Reads every element of every tensor as fp32; returns a sum so the work is not elided.
double touch_all(const s4kv::model::ModelWeights& w) {
  double sum = 0.0;
  for (const auto& [name, t] : w.tensors()) {
    const auto* p = reinterpret_cast<const uint16_t*>(t.data.data());
    const int64_t n = t.numel();
    float acc = 0.0f;
    if (t.dtype == s4kv::DType::kBF16) {
      for (int64_t i = 0; i < n; ++i) acc += s4kv::bf16_to_float(p[i]);
    } else if (t.dtype == s4kv::DType::kF16) {
      for (int64_t i = 0; i < n; ++i) acc += s4kv::fp16_to_float(p[i]);
    } else {
      const auto* f = reinterpret_cast<const float*>(t.data.data());
      for (int64_t i = 0; i < n; ++i) acc += f[i];
    }
    sum += acc;
  }
  return sum;
}

struct Timing {
  double validate_s = 0;  // path + config + weight headers (mmap)
  double total_s = 0;     // validate + every weight byte read as fp32
};

Timing load_once(const std::string& model, double* checksum, int64_t* num_params) {
  const auto t0 = Clock::now();
  auto path = s4kv::model::resolve_model_path(model);
  if (!path.is_ok()) throw std::runtime_error(path.status().message());
  auto config = s4kv::model::load_model_config(*path);
  if (!config.is_ok()) throw std::runtime_error(config.status().message());
  auto weights = s4kv::model::load_weights(*path, *config, s4kv::model::LoadFormat::kAuto);
  if (!weights.is_ok()) throw std::runtime_error(weights.status().message());
  Timing t;
  t.validate_s = seconds_since(t0);
  *checksum = touch_all(*weights);
  *num_params = weights->num_parameters();
  t.total_s = seconds_since(t0);
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time loading a checkpoint"};
  std::string model = "models/s4kv-tiny";
  std::string json_out;
  int repeats = 7;
  app.add_option("--model", model);
  app.add_option("--repeats", repeats)->check(CLI::Range(1, 1000));
  app.add_option("--json", json_out);
  CLI11_PARSE(app, argc, argv);

  std::vector<double> validate, total;
  double checksum = 0;
  int64_t num_params = 0;
  try {
    load_once(model, &checksum, &num_params);  // warm-up: page cache
    for (int i = 0; i < repeats; ++i) {
      const Timing t = load_once(model, &checksum, &num_params);
      validate.push_back(t.validate_s);
      total.push_back(t.total_s);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  std::printf("model %s, %lld parameters, %d repeats (median, warm page cache)\n", model.c_str(),
              static_cast<long long>(num_params), repeats);
  std::printf("  validate (config + headers, mmap): %8.3f ms\n", median(validate) * 1e3);
  std::printf("  load + read every weight as fp32:  %8.3f ms\n", median(total) * 1e3);
  std::printf("  checksum %.6g\n", checksum);
  if (!json_out.empty()) {
    s4kv::Json j = {{"benchmark", "load_model_bench"},
                    {"model", model},
                    {"num_parameters", num_params},
                    {"repeats", repeats},
                    {"median_validate_ms", median(validate) * 1e3},
                    {"median_load_and_read_ms", median(total) * 1e3}};
    std::ofstream(json_out) << j.dump(1) << "\n";
  }
  return 0;
}
