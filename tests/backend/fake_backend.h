// FakeBackend: a deterministic, batch-invariant stand-in for a model, for exact engine and
// server tests (the idea of tests/engine/fake_model.h one level down: it implements
// backend::Backend and sees only ForwardBatch, so the model runner, scheduler, prefix cache and
// AsyncEngine above it run unchanged).
//
// Its "KV cache" holds per slot the token written there and a chain value that depends on every
// earlier token of the sequence, read back through the block table when the token is written.
// A logits row reads the whole sequence back slot by slot through the block table and hashes
// its tokens; a slot whose chain value is not the one of this very prefix (a wrong block table
// or slot_mapping, a prefix-cache hit on the wrong blocks, a block reused while in use) is
// counted in FakeBackendProbe::num_stale_reads and changes the output. A row's logits depend
// only on its own sequence's tokens: the same request gives the same logits bit for bit
// whatever else is in the batch, however it is chunked and whatever the thread timing.
//
// Logits: kTopLogit for fake_next_token(tokens), kSecondLogit for a second token (so top-2
// logprobs have a margin), 0 elsewhere. The probe's StepLatch lets a test hold the engine
// thread inside forward() and release it. forward() runs on the engine thread; the probe is
// thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"
#include "model/model_config.h"

namespace s4kv::backend::testing {

inline constexpr float kTopLogit = 12.0f;
inline constexpr float kSecondLogit = 8.0f;

// The chain value after `token`, from the one before it (kFakeChainSeed at position 0).
inline constexpr uint64_t kFakeChainSeed = 0x243f6a8885a308d3ull;
uint64_t fake_chain(uint64_t prev, int32_t token);

// What a FakeBackend's greedy pick after `tokens` is, computed without any cache.
int32_t fake_next_token(std::span<const int32_t> tokens, int64_t vocab_size);

// Greedy continuation of `prompt` for max_tokens steps, without any cache and without stop
// conditions: what a request with temperature 0 and ignore_eos produces.
std::vector<int32_t> fake_greedy(std::vector<int32_t> prompt, int64_t max_tokens,
                                 int64_t vocab_size);

// Holds one forward() call per arm(). Test thread: arm(), then wait_held() (the engine thread is
// inside forward()), then release(); arm() again right after release() holds the next call.
class StepLatch {
 public:
  void arm();
  void release();  // lets the held call go (and disarms when nothing is held yet)
  // True once a forward() call is held; false when the timeout passes first.
  bool wait_held(std::chrono::steady_clock::duration timeout);
  // FakeBackend::forward: when armed, blocks until the next release().
  void pass();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false;
  bool held_ = false;
  uint64_t generation_ = 0;  // release() count
};

// What a test sees of a FakeBackend it handed to an engine (which owns the backend).
struct FakeBackendProbe {
  StepLatch latch;
  std::atomic<int64_t> num_forward_calls{0};
  std::atomic<int64_t> num_stale_reads{0};
};

class FakeBackend final : public HostSamplingBackend {
 public:
  FakeBackend(const KvCacheConfig& kv, int64_t vocab_size, std::shared_ptr<FakeBackendProbe> probe);

  std::string_view name() const override { return "fake"; }
  int64_t vocab_size() const override { return vocab_size_; }
  const KvCacheConfig& kv_cache_config() const override { return kv_; }
  // Built with its cache (fake_backend_factory): accepts only the config it has.
  Status init_kv_cache(const KvCacheConfig& kv) override {
    return kv.num_blocks == kv_.num_blocks && kv.block_size == kv_.block_size
               ? Status::ok()
               : invalid_argument("fake backend: another cache than the one it was built with");
  }

 protected:
  std::span<const float> run_logits(const ForwardBatch& batch) override;

 private:
  struct Slot {
    int32_t token = -1;
    uint64_t value = 0;  // 0: never written
  };
  Slot& slot(const ForwardBatch& batch, int64_t seq, int64_t pos);
  float* logits_row(const ForwardBatch& batch, int64_t seq, int64_t pos, float* row);

  KvCacheConfig kv_;
  int64_t vocab_size_;
  std::shared_ptr<FakeBackendProbe> probe_;
  std::vector<Slot> slots_;    // [(num_blocks + num_sink_blocks) * block_size]
  std::vector<float> logits_;  // [num_logits, vocab_size], reused
};

// For engine::EngineArgs::backend_factory: a FakeBackend reporting to `probe`.
std::function<Result<std::unique_ptr<Backend>>(const model::ModelConfig&, const KvCacheConfig&)>
fake_backend_factory(std::shared_ptr<FakeBackendProbe> probe);

}  // namespace s4kv::backend::testing
