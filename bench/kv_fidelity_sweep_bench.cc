// kv_fidelity_sweep_bench: every KV cache layout of the CPU backend against the 16-bit cache on
// s4kv-tiny's 2,048-token golden prompt (tests/golden/s4kv-tiny p5), two-pass: a prefix
// prefilled, then the remaining tokens teacher-forced one decode step at a time, so every step
// reads the prefix from the cache it wrote. Layouts: fp8_e4m3; int4_kivi at B = 32/64/128 with
// Gv = 128 and at B = 64 with Gv = 32/64; int4_kivi with keys quantized after RoPE (the KIVI
// paper's placement, for comparison). Prints mean KL(16-bit || layout), top-1 agreement and the
// agreement where the 16-bit model is confident (p(top-1) >= 0.5); --json writes the table
// (then bench/stamp.py adds provenance). cpu_kv_dtypes_golden_test checks the default layout
// (and fp8) on a shorter run; bench/run_fidelity.sh measures on held-out text via `s4kv eval`.
//
//   build/bench/kv_fidelity_sweep_bench [--prefix 1024] [--json OUT]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/forward_batch_builder.h"
#include "common/check.h"
#include "common/json.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace {

using s4kv::backend::Backend;
using s4kv::backend::KvCacheConfig;
using s4kv::kv::KvCacheDtype;

constexpr const char* kModel = "models/s4kv-tiny";
constexpr const char* kGolden = "tests/golden/s4kv-tiny/logits.safetensors";
constexpr int64_t kMaxTokens = 2560;

struct Layout {
  std::string name;
  KvCacheDtype dtype;
  int64_t block_size;
  int64_t gv;
  bool post_rope;
};

std::unique_ptr<Backend> make(const s4kv::model::ModelConfig& config,
                              const s4kv::model::ModelWeights& weights, const Layout& l) {
  KvCacheConfig c;
  c.block_size = l.block_size;
  c.num_blocks = kMaxTokens / l.block_size;
  c.dtype = l.dtype;
  if (l.dtype == KvCacheDtype::kInt4Kivi) c.num_seats = 1;
  c.value_group_size = l.gv;
  c.int4_keys_post_rope = l.post_rope;
  auto b = s4kv::backend::cpu::make_cpu_backend(config, weights, c);
  S4KV_CHECK(b.is_ok(), b.status().message());
  return std::move(b).value();
}

// Last-token logits of tokens [begin, end) on a sequence whose first `begin` are cached.
std::vector<float> step(Backend& backend, const std::vector<int32_t>& ids, int64_t begin,
                        int64_t end) {
  const KvCacheConfig& kv = backend.kv_cache_config();
  std::vector<int32_t> table(static_cast<size_t>(kv.num_blocks));
  std::iota(table.begin(), table.end(), 0);
  s4kv::backend::ForwardBatchBuilder b(kv.block_size, kv.num_blocks);
  const int32_t row0 = b.add(std::span(ids).subspan(begin, end - begin), begin, table,
                             kv.dtype == KvCacheDtype::kInt4Kivi ? 0 : -1);
  b.want_logits(row0 + static_cast<int32_t>(end - begin) - 1);
  const auto logits = backend.forward(b.batch()).logits;
  return {logits.begin(), logits.end()};
}

// Log-softmax of every two-pass row: the prefix's last row, then one per teacher-forced token.
std::vector<std::vector<double>> two_pass(Backend& backend, const std::vector<int32_t>& ids,
                                          int64_t prefix) {
  std::vector<std::vector<double>> rows;
  const auto add = [&rows](const std::vector<float>& x) {
    const double m = *std::max_element(x.begin(), x.end());
    double s = 0;
    for (float v : x) s += std::exp(v - m);
    std::vector<double> lp(x.size());
    for (size_t i = 0; i < x.size(); ++i) lp[i] = x[i] - m - std::log(s);
    rows.push_back(std::move(lp));
  };
  add(step(backend, ids, 0, prefix));
  for (auto p = prefix; p + 1 < static_cast<int64_t>(ids.size()); ++p) {
    add(step(backend, ids, p, p + 1));
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("KV layouts against the 16-bit cache on s4kv-tiny's 2,048-token golden prompt");
  int64_t prefix = 1024;
  std::string json_out;
  app.add_option("--prefix", prefix, "tokens prefilled before the teacher-forced decode steps");
  app.add_option("--json", json_out, "write the table as JSON here");
  CLI11_PARSE(app, argc, argv);

  auto config = s4kv::model::load_model_config(kModel);
  S4KV_CHECK(config.is_ok(), config.status().message());
  auto weights = s4kv::model::load_weights(kModel, *config, s4kv::model::LoadFormat::kAuto);
  S4KV_CHECK(weights.is_ok(), weights.status().message());
  auto file = s4kv::model::SafetensorsFile::open(kGolden);
  S4KV_CHECK(file.is_ok(), file.status().message());
  const auto ids = file->find("p5.ids")->to_vector<int32_t>();
  S4KV_CHECK(prefix > 0 && prefix + 1 < static_cast<int64_t>(ids.size()), "--prefix ", prefix);

  const auto ref = two_pass(
      *make(*config, *weights, {"16-bit", KvCacheDtype::k16Bit, 64, 128, false}), ids, prefix);
  const std::vector<Layout> layouts = {
      {"fp8_e4m3", KvCacheDtype::kFp8E4M3, 64, 128, false},
      {"int4_kivi B32 Gv128", KvCacheDtype::kInt4Kivi, 32, 128, false},
      {"int4_kivi B64 Gv128", KvCacheDtype::kInt4Kivi, 64, 128, false},
      {"int4_kivi B128 Gv128", KvCacheDtype::kInt4Kivi, 128, 128, false},
      {"int4_kivi B64 Gv64", KvCacheDtype::kInt4Kivi, 64, 64, false},
      {"int4_kivi B64 Gv32", KvCacheDtype::kInt4Kivi, 64, 32, false},
      {"int4 post-RoPE B64 Gv128", KvCacheDtype::kInt4Kivi, 64, 128, true},
  };
  std::printf("two-pass rows: %zu (prefix %lld of %zu tokens)\n", ref.size(),
              static_cast<long long>(prefix), ids.size());
  std::printf("| layout                   | mean KL (nats) | top-1 agree | confident agree |\n");
  std::printf("| ------------------------ | -------------- | ----------- | --------------- |\n");
  auto results = s4kv::OrderedJson::array();
  for (const Layout& l : layouts) {
    const auto rows = two_pass(*make(*config, *weights, l), ids, prefix);
    double kl = 0;
    int64_t agree = 0, confident = 0, confident_agree = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto& p = ref[r];
      const auto& q = rows[r];
      for (size_t i = 0; i < p.size(); ++i) kl += std::exp(p[i]) * (p[i] - q[i]);
      const auto top = std::max_element(p.begin(), p.end()) - p.begin();
      const bool same = top == std::max_element(q.begin(), q.end()) - q.begin();
      agree += same;
      if (std::exp(p[static_cast<size_t>(top)]) >= 0.5) {
        ++confident;
        confident_agree += same;
      }
    }
    const auto n = static_cast<double>(rows.size());
    const double mean_kl = kl / n, top1 = static_cast<double>(agree) / n;
    const double conf = static_cast<double>(confident_agree) / static_cast<double>(confident);
    std::printf("| %-24s | %14.5f | %11.4f | %8.4f (%4lld) |\n", l.name.c_str(), mean_kl, top1,
                conf, static_cast<long long>(confident));
    std::fflush(stdout);
    results.push_back({{"layout", l.name},
                       {"mean_kl_nats", mean_kl},
                       {"top1_agreement", top1},
                       {"confident_agreement", conf},
                       {"confident_rows", confident},
                       {"rows", rows.size()}});
  }
  if (!json_out.empty()) {
    s4kv::OrderedJson j = {{"bench", "kv_fidelity_sweep_bench"},
                           {"model", kModel},
                           {"text", "tests/golden/s4kv-tiny p5 (2,048 tokens)"},
                           {"prefix", prefix},
                           {"results", results}};
    std::ofstream(json_out) << j.dump(1) << "\n";
  }
  return 0;
}
