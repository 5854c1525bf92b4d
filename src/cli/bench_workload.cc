#include "cli/bench_workload.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "common/check.h"

namespace s4kv::cli {

std::vector<int32_t> prompt_token_pool(const tokenizer::Tokenizer& tokenizer, int64_t vocab_size) {
  std::vector<bool> added(static_cast<size_t>(std::max<int64_t>(vocab_size, 0)), false);
  for (const tokenizer::AddedToken& t : tokenizer.added_tokens()) {
    if (t.id >= 0 && t.id < vocab_size) added[static_cast<size_t>(t.id)] = true;
  }
  std::vector<int32_t> pool;
  const int64_t end = std::min<int64_t>(vocab_size, tokenizer.vocab_size());
  for (int32_t id = 0; id < end; ++id) {
    if (!added[static_cast<size_t>(id)] && !tokenizer.is_special(id) &&
        tokenizer.id_to_token(id).has_value()) {
      pool.push_back(id);
    }
  }
  return pool;
}

std::vector<std::vector<int32_t>> random_prompts(std::span<const int32_t> pool, int64_t num_prompts,
                                                 int64_t input_len, uint64_t seed) {
  S4KV_CHECK(!pool.empty(), "random_prompts: empty token pool");
  // mt19937_64's sequence is fixed by the standard; std::uniform_int_distribution's mapping is
  // not, so the reduction to [0, pool size) is done here: rejection keeps it unbiased.
  std::mt19937_64 rng(seed);
  const uint64_t n = pool.size();
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // draws at or above it are redrawn
  auto draw = [&] {
    uint64_t x = rng();
    while (x >= limit) x = rng();
    return pool[x % n];
  };
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(num_prompts));
  for (std::vector<int32_t>& p : prompts) {
    p.resize(static_cast<size_t>(input_len));
    for (int32_t& id : p) id = draw();
  }
  return prompts;
}

double percentile(std::vector<double> values, double p) {
  S4KV_CHECK(!values.empty() && p >= 0.0 && p <= 100.0, "percentile: bad arguments");
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (rank - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

double mean(std::span<const double> values) {
  if (values.empty()) return 0.0;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

}  // namespace s4kv::cli
