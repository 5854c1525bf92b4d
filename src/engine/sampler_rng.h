// Random streams for sampling. Draws are counter-based: the uniform a sequence uses for its
// t-th output token is a pure function of (its key, t). So a seeded request samples the same
// tokens whatever else shares the batch, at whatever batch position, and even after
// preemption and recompute; nothing is advanced per step. Keys: a seeded request's sequence i
// gets a key derived from (seed, i); unseeded sequences take keys from the engine's RNG
// (seeded by --seed), drawn once when the sequence is created. Engine thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <random>

namespace s4kv::engine {

// SplitMix64's finalizer: a bijective 64-bit mix with full avalanche.
constexpr uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// The key of sequence seq_index (0..n-1) of a request with this seed.
constexpr uint64_t seeded_sequence_key(int64_t seed, int64_t seq_index) {
  return mix64(mix64(static_cast<uint64_t>(seed) ^ 0x5334'4b56'5345'4544ull) +
               0x9e3779b97f4a7c15ull * static_cast<uint64_t>(seq_index + 1));
}

// Uniform double in [0, 1) for draw `counter` of the stream `key` (53 random bits).
constexpr double uniform01(uint64_t key, uint64_t counter) {
  const uint64_t bits = mix64(key ^ mix64(counter + 0x2545f4914f6cdd1dull));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
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
