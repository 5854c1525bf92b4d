// Random streams for sampling (the draws themselves: backend/sampling.h uniform01). Draws are
// counter-based: the uniform a sequence uses for its
// t-th output token is a pure function of (its key, t). So a seeded request samples the same
// tokens whatever else shares the batch, at whatever batch position, and even after
// preemption and recompute; nothing is advanced per step. Keys: a seeded request's sequence i
// gets a key derived from (seed, i); unseeded sequences take keys from the engine's RNG
// (seeded by --seed), drawn once when the sequence is created. Engine thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <random>

#include "backend/sampling.h"

namespace s4kv::engine {

using backend::mix64;
using backend::uniform01;

// The key of sequence seq_index (0..n-1) of a request with this seed.
constexpr uint64_t seeded_sequence_key(int64_t seed, int64_t seq_index) {
  return mix64(mix64(static_cast<uint64_t>(seed) ^ 0x5334'4b56'5345'4544ull) +
               0x9e3779b97f4a7c15ull * static_cast<uint64_t>(seq_index + 1));
}

// Hands out sequence keys: derived from the seed when the request has one, else drawn from
// the engine's own generator.
class SequenceKeySource {
 public:
  explicit SequenceKeySource(uint64_t engine_seed) : engine_rng_(engine_seed) {}

  uint64_t key(const std::optional<int64_t>& seed, int64_t seq_index) {
    return seed ? seeded_sequence_key(*seed, seq_index) : engine_rng_();
  }

 private:
  std::mt19937_64 engine_rng_;
};

}  // namespace s4kv::engine
