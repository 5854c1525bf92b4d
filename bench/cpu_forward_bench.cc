// cpu_forward_bench: the CPU backend's forward pass on a model (default s4kv-tiny) through
// the paged KV cache of --kv-cache-dtype (16bit, fp8_e4m3, int4_kivi): prefill tokens/s of one
// sequence at 512 and 2,048 tokens (logits for the last token only, as an engine asks), and
// decode tokens/s at batch 1 and 8 with 512- and 2,048-token contexts. Correctness first: the
// golden prompt p0's last logits row must be within relative L2 1e-3 of transformers' (p0 is
// shorter than a block, so int4_kivi computes it bit for bit like 16-bit; fp8 gets 3e-2)
// before anything is timed.
// Prints a table with the weights' bytes as the backend holds them (the checkpoint's dtype) and
// the instruction set its kernels use (gemm16.h; S4KV_CPU_ISA lowers it); --json writes the
// figures (then bench/stamp.py adds provenance).
//
//   build/bench/cpu_forward_bench [--model models/s4kv-tiny] [--kv-cache-dtype int4_kivi]
//       [--value-group-size 128] [--threads N] [--json OUT]
#include <cblas.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/gemm16.h"
#include "backend/cpu/thread_pool.h"
#include "common/json.h"
#include "kv/kv_format.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace {

using Clock = std::chrono::steady_clock;
using s4kv::backend::Backend;
using s4kv::backend::ForwardBatch;

constexpr int64_t kBlockSize = 64;
constexpr int64_t kMaxBlocks = 48;  // per sequence: 3,072 tokens

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One step over several sequences, each with `cached` tokens in the cache and new tokens
// appended; sequence s owns blocks [s * kMaxBlocks, (s + 1) * kMaxBlocks). Logits for each
// sequence's last new token.
struct Step {
  std::vector<int32_t> token_ids, positions, query_start_loc{0}, seq_lens, block_tables,
      logits_indices;
  std::vector<int64_t> slot_mapping;
  std::vector<int32_t> seats, seat_starts;  // int4_kivi: sequence s sits in seat s from 0
  bool int4 = false;

  void add(int64_t seq, int64_t cached, const std::vector<int32_t>& new_tokens) {
    for (size_t j = 0; j < new_tokens.size(); ++j) {
      const int64_t pos = cached + static_cast<int64_t>(j);
      token_ids.push_back(new_tokens[j]);
      positions.push_back(static_cast<int32_t>(pos));
      slot_mapping.push_back(seq * kMaxBlocks * kBlockSize + pos);
    }
    query_start_loc.push_back(static_cast<int32_t>(token_ids.size()));
    seq_lens.push_back(static_cast<int32_t>(cached + static_cast<int64_t>(new_tokens.size())));
    for (int64_t b = 0; b < kMaxBlocks; ++b) {
      block_tables.push_back(static_cast<int32_t>(seq * kMaxBlocks + b));
    }
    logits_indices.push_back(static_cast<int32_t>(token_ids.size()) - 1);
    if (int4) {
      seats.push_back(static_cast<int32_t>(seq));
      seat_starts.push_back(0);
    }
  }
  ForwardBatch batch() const {
    ForwardBatch b{token_ids,  positions,    query_start_loc, seq_lens, block_tables,
                   kMaxBlocks, slot_mapping, logits_indices,  seats};
    b.seat_starts = seat_starts;
    return b;
  }
};

std::vector<int32_t> tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>((seed = seed * 1664525u + 1013904223u) % vocab);
  return t;
}

double time_s(Backend& backend, const Step& step) {
  const auto t0 = Clock::now();
  const auto logits = backend.forward(step.batch()).logits;
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!std::isfinite(logits[0])) throw std::runtime_error("non-finite logits");
  return s;
}

// Relative L2 of our last logits row of golden prompt p0 against transformers'.
double golden_check(Backend& backend, int64_t vocab, bool int4) {
  auto file = s4kv::model::SafetensorsFile::open("tests/golden/s4kv-tiny/logits.safetensors");
  if (!file.is_ok()) throw std::runtime_error(file.status().message());
  const auto* ids_t = file->find("p0.ids");
  const auto* logits_t = file->find("p0.logits");
  std::vector<int32_t> ids(static_cast<size_t>(ids_t->numel()));
  std::memcpy(ids.data(), ids_t->data.data(), ids.size() * 4);
  std::vector<float> ref(static_cast<size_t>(vocab));
  std::memcpy(ref.data(), logits_t->data.data() + (logits_t->shape[0] - 1) * vocab * 4,
              ref.size() * 4);
  Step step;
  step.int4 = int4;
  step.add(0, 0, ids);
  const auto ours = backend.forward(step.batch()).logits;
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    diff += (double{ours[i]} - ref[i]) * (double{ours[i]} - ref[i]);
    norm += double{ref[i]} * ref[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU backend forward pass: prefill and decode tokens/s"};
  std::string model = "models/s4kv-tiny";
  std::string json_out;
  std::string kv_dtype_name = "16bit";
  int64_t value_group_size = 128;
  int repeats = 5;
  app.add_option("--model", model, "model directory");
  app.add_option("--repeats", repeats, "timed repetitions per prefill figure (median)");
  app.add_option("--json", json_out, "write the figures as JSON here");
  app.add_option("--kv-cache-dtype", kv_dtype_name, "16bit (auto, fp16, bf16), fp8_e4m3, int4_kivi")
      ->check(CLI::IsMember({"16bit", "auto", "fp16", "bf16", "fp8_e4m3", "int4_kivi"}));
  app.add_option("--value-group-size", value_group_size, "int4_kivi: Gv (32, 64, 128)");
  std::vector<int64_t> prefill_lengths = {512, 2048}, contexts = {512, 2048}, batches = {1, 8};
  app.add_option("--prefill-lengths", prefill_lengths, "prompt lengths timed (0: none)");
  app.add_option("--contexts", contexts, "decode contexts timed (0: none)");
  app.add_option("--batches", batches, "decode batch sizes timed (at most 8)")
      ->check(CLI::Range(1, 8));
  int decode_steps = 32;
  app.add_option("--decode-steps", decode_steps, "timed decode steps per figure (median)");
  int threads = 0;
  app.add_option("--threads", threads,
                 "forward-pass threads (--cpu-threads); 0: the cores available");
  CLI11_PARSE(app, argc, argv);
  // Every figure's tokens must fit a sequence's block table (kMaxBlocks blocks).
  const int64_t max_tokens = kMaxBlocks * kBlockSize;
  if (decode_steps < 1) {
    std::fprintf(stderr, "--decode-steps must be at least 1\n");
    return 2;
  }
  for (int64_t n : prefill_lengths) {
    if (n > max_tokens) {
      std::fprintf(stderr, "--prefill-lengths %lld: at most %lld tokens\n",
                   static_cast<long long>(n), static_cast<long long>(max_tokens));
      return 2;
    }
  }
  for (int64_t c : contexts) {
    if (c > 0 && c + decode_steps > max_tokens) {
      std::fprintf(stderr,
                   "--contexts %lld with --decode-steps %d: at most %lld tokens a sequence\n",
                   static_cast<long long>(c), decode_steps, static_cast<long long>(max_tokens));
      return 2;
    }
  }

  auto config = s4kv::model::load_model_config(model);
  if (!config.is_ok()) {
    std::fprintf(stderr, "%s\n", config.status().message().c_str());
    return 2;
  }
  auto weights = s4kv::model::load_weights(model, *config, s4kv::model::LoadFormat::kAuto);
  if (!weights.is_ok()) {
    std::fprintf(stderr, "%s\n", weights.status().message().c_str());
    return 2;
  }
  const int64_t weight_bytes = s4kv::backend::cpu::convert_weights(*config, *weights).num_bytes();
  const std::string isa(s4kv::backend::cpu::cpu_isa_name(s4kv::backend::cpu::cpu_isa()));
  const int64_t vocab = config->vocab_size;
  s4kv::backend::KvCacheConfig kv_config{8 * kMaxBlocks, kBlockSize};
  if (kv_dtype_name == "fp8_e4m3") kv_config.dtype = s4kv::kv::KvCacheDtype::kFp8E4M3;
  if (kv_dtype_name == "int4_kivi") kv_config.dtype = s4kv::kv::KvCacheDtype::kInt4Kivi;
  const bool int4 = kv_config.dtype == s4kv::kv::KvCacheDtype::kInt4Kivi;
  kv_config.num_seats = 8;
  kv_config.value_group_size = value_group_size;
  auto made = s4kv::backend::cpu::make_cpu_backend(*config, *weights, kv_config,
                                                   s4kv::backend::cpu::CpuBackendOptions{threads});
  if (!made.is_ok()) {
    std::fprintf(stderr, "%s\n", made.status().message().c_str());
    return 2;
  }
  Backend& backend = **made;
  const double golden_rel_l2 = golden_check(backend, vocab, int4);
  const double golden_tol = kv_config.dtype == s4kv::kv::KvCacheDtype::kFp8E4M3 ? 3e-2 : 1e-3;
  if (!(golden_rel_l2 <= golden_tol)) {
    std::fprintf(stderr, "correctness check failed: rel L2 %.3e vs golden\n", golden_rel_l2);
    return 1;
  }

  s4kv::Json rows = s4kv::Json::array();
  std::printf("%-10s %6s %8s %12s %12s\n", "phase", "batch", "tokens", "ms/step", "tokens/s");
  for (int64_t n : prefill_lengths) {
    if (n <= 0) continue;
    Step step;
    step.int4 = int4;
    step.add(0, 0, tokens(n, vocab, static_cast<uint32_t>(n)));
    (void)time_s(backend, step);  // warm-up: buffers grow, pages fault in
    std::vector<double> t;
    for (int r = 0; r < repeats; ++r) t.push_back(time_s(backend, step));
    const double s = median(t);
    std::printf("%-10s %6d %8lld %12.2f %12.0f\n", "prefill", 1, static_cast<long long>(n), s * 1e3,
                static_cast<double>(n) / s);
    rows.push_back({{"phase", "prefill"},
                    {"batch", 1},
                    {"tokens", n},
                    {"median_ms", s * 1e3},
                    {"tokens_per_s", static_cast<double>(n) / s}});
  }
  for (int64_t context : contexts) {
    if (context <= 0) continue;
    for (int64_t batch : batches) {
      Step prefill;
      prefill.int4 = int4;
      for (int64_t s = 0; s < batch; ++s) {
        prefill.add(s, 0, tokens(context, vocab, static_cast<uint32_t>(s + 1)));
      }
      (void)time_s(backend, prefill);
      std::vector<double> t;
      for (int i = 0; i < decode_steps; ++i) {
        Step step;
        step.int4 = int4;
        for (int64_t s = 0; s < batch; ++s) {
          step.add(s, context + i, tokens(1, vocab, static_cast<uint32_t>(i * 8 + s)));
        }
        t.push_back(time_s(backend, step));
      }
      const double s = median(t);
      std::printf("%-10s %6lld %8lld %12.2f %12.0f   (context %lld)\n", "decode",
                  static_cast<long long>(batch), static_cast<long long>(batch), s * 1e3,
                  static_cast<double>(batch) / s, static_cast<long long>(context));
      rows.push_back({{"phase", "decode"},
                      {"batch", batch},
                      {"context", context},
                      {"median_ms", s * 1e3},
                      {"tokens_per_s", static_cast<double>(batch) / s}});
    }
  }
  std::printf("weights %.1f MB as held; kernels %s\n", static_cast<double>(weight_bytes) / 1e6,
              isa.c_str());
  std::printf(
      "golden p0 last row rel L2 %.2e; threads: %d forward pass (%u hardware), OpenBLAS %d\n",
      golden_rel_l2, threads > 0 ? threads : s4kv::backend::cpu::available_cores(),
      std::thread::hardware_concurrency(), openblas_get_num_threads());

  if (!json_out.empty()) {
    s4kv::Json out = {
        {"benchmark", "cpu_forward_bench"},
        {"model", model},
        {"kv_cache", std::string(s4kv::kv::kv_cache_dtype_name(kv_config.dtype))},
        {"value_group_size", int4 ? s4kv::Json(value_group_size) : s4kv::Json(nullptr)},
        {"kv_cache_bytes_per_token",
         s4kv::kv::kv_bytes_per_token(kv_config.dtype, config->num_hidden_layers,
                                      config->num_key_value_heads, config->head_dim, kBlockSize,
                                      static_cast<int>(value_group_size))},
        {"block_size", kBlockSize},
        {"golden_p0_rel_l2", golden_rel_l2},
        {"weights_bytes", weight_bytes},
        {"cpu_isa", isa},
        {"hardware_threads", std::thread::hardware_concurrency()},
        {"forward_threads", threads > 0 ? threads : s4kv::backend::cpu::available_cores()},
        {"openblas_threads", openblas_get_num_threads()},
        {"results", rows}};
    std::ofstream(json_out) << out.dump(1) << "\n";
  }
  return 0;
}
