// The workload and the statistics of `s4kv bench` (bench_command.h), kept apart from the engine
// so that they can be tested alone: random prompts as vLLM's "random" dataset makes them (each
// exactly input_len ids drawn uniformly, with a seed, from the vocabulary less its special and
// added tokens, so that no prompt holds a control token and no two share a prefix by design),
// and the mean, percentiles and medians the commands print. Pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace s4kv::cli {

// The ids a random prompt draws from: 0..vocab_size-1 (the model's vocabulary) that the
// tokenizer knows and that are no added token (special or not): ascending.
std::vector<int32_t> prompt_token_pool(const tokenizer::Tokenizer& tokenizer, int64_t vocab_size);

// num_prompts prompts of exactly input_len ids each, every id drawn uniformly from `pool`
// (nonempty): a pure function of (pool, sizes, seed), the same on every platform.
std::vector<std::vector<int32_t>> random_prompts(std::span<const int32_t> pool, int64_t num_prompts,
                                                 int64_t input_len, uint64_t seed);

// The p-th percentile (0..100) of `values` (nonempty, any order), interpolated linearly
// between the closest ranks (numpy's default); the median is percentile 50.
double percentile(std::vector<double> values, double p);

double mean(std::span<const double> values);

}  // namespace s4kv::cli
