// FakeBackend (fake_backend.h): the hash-chain cache, the batch-invariant logits and the latch.
#include "fake_backend.h"

#include <algorithm>

#include "common/check.h"

namespace s4kv::backend::testing {

uint64_t fake_chain(uint64_t prev, int32_t token) {
  uint64_t h = prev ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 0x9e3779b97f4a7c15ull);
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 31;
  return h == 0 ? 1 : h;  // 0 marks a slot never written
}

namespace {

int32_t next_of(uint64_t chain, int64_t vocab) {
  return static_cast<int32_t>((chain >> 17) % static_cast<uint64_t>(vocab));
}

int32_t second_of(uint64_t chain, int32_t next, int64_t vocab) {
  const auto step = 1 + static_cast<int64_t>((chain >> 40) % static_cast<uint64_t>(vocab - 1));
  return static_cast<int32_t>((next + step) % vocab);
}

}  // namespace

int32_t fake_next_token(std::span<const int32_t> tokens, int64_t vocab_size) {
  uint64_t h = kFakeChainSeed;
  for (int32_t t : tokens) h = fake_chain(h, t);
  return next_of(h, vocab_size);
}

std::vector<int32_t> fake_greedy(std::vector<int32_t> prompt, int64_t max_tokens,
                                 int64_t vocab_size) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < max_tokens; ++i) {
    out.push_back(fake_next_token(prompt, vocab_size));
    prompt.push_back(out.back());
  }
  return out;
}

void StepLatch::arm() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = true;
}

void StepLatch::release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
    held_ = false;
    ++generation_;
  }
  cv_.notify_all();
}

bool StepLatch::wait_held(std::chrono::steady_clock::duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return held_; });
}

void StepLatch::pass() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!armed_) return;
  armed_ = false;  // one arm holds one call
  held_ = true;
  const uint64_t generation = generation_;
  cv_.notify_all();
  cv_.wait(lock, [&] { return generation_ != generation; });
}

FakeBackend::FakeBackend(const KvCacheConfig& kv, int64_t vocab_size,
                         std::shared_ptr<FakeBackendProbe> probe)
    : HostSamplingBackend(vocab_size),
      kv_(kv),
      vocab_size_(vocab_size),
      probe_(std::move(probe)),
      slots_(static_cast<size_t>((kv.num_blocks + kv.num_sink_blocks) * kv.block_size)) {
  S4KV_CHECK(vocab_size_ > 1 && probe_ != nullptr, "FakeBackend: vocab or probe");
}

FakeBackend::Slot& FakeBackend::slot(const ForwardBatch& batch, int64_t seq, int64_t pos) {
  const int32_t block = batch.block_tables[static_cast<size_t>(seq * batch.max_num_blocks_per_seq +
                                                               pos / kv_.block_size)];
  return slots_[static_cast<size_t>(block * kv_.block_size + pos % kv_.block_size)];
}

// "Attention" for the token at `pos` of sequence `seq`: reads positions 0..pos back.
float* FakeBackend::logits_row(const ForwardBatch& batch, int64_t seq, int64_t pos, float* row) {
  uint64_t h = kFakeChainSeed;
  for (int64_t p = 0; p <= pos; ++p) {
    const Slot& s = slot(batch, seq, p);
    h = fake_chain(h, s.token);
    if (s.value != h) {
      probe_->num_stale_reads.fetch_add(1);
      h = fake_chain(h ^ s.value, -1);  // a stale read changes the output too
    }
  }
  std::fill_n(row, vocab_size_, 0.0f);
  const int32_t next = next_of(h, vocab_size_);
  row[next] = kTopLogit;
  row[second_of(h, next, vocab_size_)] = kSecondLogit;
  return row;
}

std::span<const float> FakeBackend::run_logits(const ForwardBatch& batch) {
  probe_->latch.pass();
  probe_->num_forward_calls.fetch_add(1);
  check_forward_batch(batch, kv_, vocab_size_);
  // Tokens in batch order: a sequence's new tokens are contiguous and in position order, so
  // each one's predecessor is written before it is read.
  std::vector<int64_t> seq_of(static_cast<size_t>(batch.num_tokens()));
  for (int64_t s = 0; s < batch.num_seqs(); ++s) {
    for (int32_t t = batch.query_start_loc[s]; t < batch.query_start_loc[s + 1]; ++t) {
      seq_of[static_cast<size_t>(t)] = s;
      const int64_t pos = batch.positions[t];
      uint64_t prev = kFakeChainSeed;
      if (pos > 0) {
        prev = slot(batch, s, pos - 1).value;
        if (prev == 0) probe_->num_stale_reads.fetch_add(1);
      }
      Slot& dst = slots_[static_cast<size_t>(batch.slot_mapping[t])];
      dst = Slot{batch.token_ids[t], fake_chain(prev, batch.token_ids[t])};
    }
  }
  logits_.resize(static_cast<size_t>(batch.num_logits() * vocab_size_));
  for (int64_t i = 0; i < batch.num_logits(); ++i) {
    const int32_t t = batch.logits_indices[i];
    logits_row(batch, seq_of[static_cast<size_t>(t)], batch.positions[t],
               logits_.data() + i * vocab_size_);
  }
  return logits_;
}

std::function<Result<std::unique_ptr<Backend>>(const model::ModelConfig&, const KvCacheConfig&)>
fake_backend_factory(std::shared_ptr<FakeBackendProbe> probe) {
  return [probe](const model::ModelConfig& model,
                 const KvCacheConfig& kv) -> Result<std::unique_ptr<Backend>> {
    return std::unique_ptr<Backend>(std::make_unique<FakeBackend>(kv, model.vocab_size, probe));
  };
}

}  // namespace s4kv::backend::testing
