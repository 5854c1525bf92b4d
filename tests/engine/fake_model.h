// A deterministic fake model and a fake engine loop for scheduler tests (as vLLM tests its
// scheduler on CPU with scripted model outputs).
//
// FakeModel keeps a fake KV cache: one slot per (block, offset), holding the token written there
// and a "KV value" that, like real keys and values, depends on every earlier token (a hash chain
// read back through the block table). Its next token is a hash of the whole chain, read back
// slot by slot, so a wrong block table, a prefix hit on the wrong blocks or a block reused while
// still in use changes the output; a correct recompute after preemption reproduces it exactly.
// It also checks each step's shape: ranges contiguous with what was computed before, block tables
// covering every position, sampling only where the chunk reaches the last token.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/scheduler.h"

namespace s4kv::engine::testing {

inline uint64_t fake_mix(uint64_t h, int32_t token) {
  h ^= static_cast<uint64_t>(static_cast<uint32_t>(token)) + 0x9e3779b97f4a7c15ull;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 31);
}

constexpr uint64_t kFakeSeed = 0x243f6a8885a308d3ull;

inline int32_t fake_next_token(uint64_t chain, int32_t vocab) {
  return static_cast<int32_t>((chain >> 17) % static_cast<uint64_t>(vocab));
}

// What the model would sample after `tokens`, computed without any cache.
inline int32_t reference_next_token(std::span<const int32_t> tokens, int32_t vocab) {
  uint64_t h = kFakeSeed;
  for (int32_t t : tokens) h = fake_mix(h, t);
  return fake_next_token(h, vocab);
}

// Greedy outputs of a request run alone: up to max_tokens, stopping at max_model_len.
inline std::vector<int32_t> reference_outputs(std::vector<int32_t> tokens, int max_tokens,
                                              int64_t max_model_len, int32_t vocab) {
  std::vector<int32_t> out;
  while (static_cast<int>(out.size()) < max_tokens) {
    out.push_back(reference_next_token(tokens, vocab));
    tokens.push_back(out.back());
    if (static_cast<int64_t>(tokens.size()) >= max_model_len) break;  // the scheduler's cap
  }
  return out;
}

class FakeModel {
 public:
  FakeModel(int num_blocks, int block_size, int32_t vocab)
      : slots_(static_cast<size_t>(num_blocks) * block_size),
        block_size_(block_size),
        vocab_(vocab) {}

  // One sampled token per scheduled entry (-1 where the entry does not sample).
  std::vector<int32_t> forward(const SchedulerOutput& out) {
    for (const std::vector<RequestId>* gone : {&out.preempted_ids, &out.finished_ids}) {
      for (RequestId id : *gone) {
        num_computed_.erase(id);
        seat_of_.erase(id);
      }
    }
    std::vector<int32_t> sampled;
    int64_t total = 0;
    std::vector<int32_t> step_seats;
    for (const ScheduledRequest& s : out.scheduled) {
      check_range(s);
      // A request keeps the seat it was admitted with; no two running requests share one.
      EXPECT_GE(s.seat, 0);
      if (s.is_new) {
        for (const auto& [id, seat] : seat_of_) EXPECT_NE(seat, s.seat) << "seat taken";
        seat_of_[s.request_id] = s.seat;
      } else {
        EXPECT_EQ(seat_of_[s.request_id], s.seat);
      }
      EXPECT_EQ(std::count(step_seats.begin(), step_seats.end(), s.seat), 0);
      step_seats.push_back(s.seat);
      for (int64_t i = 0; i < s.num_scheduled_tokens; ++i) {
        write(s.block_table, s.num_computed_tokens + i, s.token_ids[static_cast<size_t>(i)]);
      }
      num_computed_[s.request_id] = s.num_computed_tokens + s.num_scheduled_tokens;
      sampled.push_back(s.samples ? sample(s) : -1);
      total += s.num_scheduled_tokens;
    }
    EXPECT_EQ(total, out.total_num_scheduled_tokens);
    return sampled;
  }

  // Requests whose state the "runner" still holds (should be none once all have finished and a
  // last schedule() has reported them).
  size_t num_tracked() const { return num_computed_.size(); }
  // Requests holding a seat as the "runner" sees them.
  size_t num_seated() const { return seat_of_.size(); }

 private:
  struct Slot {
    int32_t token = -1;
    uint64_t value = 0;  // 0: never written
  };

  Slot& slot(std::span<const kv::BlockId> table, int64_t pos) {
    const auto block = static_cast<size_t>(table[static_cast<size_t>(pos / block_size_)]);
    return slots_[block * static_cast<size_t>(block_size_) +
                  static_cast<size_t>(pos % block_size_)];
  }

  void check_range(const ScheduledRequest& s) {
    ASSERT_GT(s.num_scheduled_tokens, 0);
    ASSERT_EQ(static_cast<int64_t>(s.token_ids.size()), s.num_scheduled_tokens);
    const int64_t end = s.num_computed_tokens + s.num_scheduled_tokens;
    ASSERT_GE(static_cast<int64_t>(s.block_table.size()) * block_size_, end)
        << "block table does not cover the positions of request " << s.request_id;
    if (s.is_new) {
      // A prefix-cache hit is whole blocks.
      EXPECT_EQ(s.num_computed_tokens % block_size_, 0);
      EXPECT_FALSE(num_computed_.contains(s.request_id)) << "new request already tracked";
    } else {
      ASSERT_TRUE(num_computed_.contains(s.request_id)) << "unknown request " << s.request_id;
      EXPECT_EQ(s.num_computed_tokens, num_computed_[s.request_id])
          << "range not contiguous for request " << s.request_id;
    }
  }

  // The KV of position pos depends on the KV of pos - 1, read through the block table: a prefix
  // hit on the wrong blocks or a stale block shows up in every later value.
  void write(std::span<const kv::BlockId> table, int64_t pos, int32_t token) {
    const uint64_t prev = pos == 0 ? kFakeSeed : slot(table, pos - 1).value;
    ASSERT_NE(prev, 0u) << "position " << pos - 1 << " read before it was written";
    slot(table, pos) = Slot{token, fake_mix(prev, token)};
  }

  // "Attention": reads every slot of the sequence and checks that each holds the KV of this very
  // prefix (a block overwritten by another request after the fact breaks the chain).
  int32_t sample(const ScheduledRequest& s) {
    const int64_t len = s.num_computed_tokens + s.num_scheduled_tokens;
    uint64_t h = kFakeSeed;
    for (int64_t pos = 0; pos < len; ++pos) {
      const Slot& sl = slot(s.block_table, pos);
      h = fake_mix(h, sl.token);
      EXPECT_EQ(sl.value, h) << "request " << s.request_id << " reads stale KV at " << pos;
    }
    return fake_next_token(h, vocab_);
  }

  std::vector<Slot> slots_;
  int block_size_;
  int32_t vocab_;
  std::unordered_map<RequestId, int64_t> num_computed_;
  std::unordered_map<RequestId, int32_t> seat_of_;
};

// The engine side of the loop: schedule -> fake forward -> update -> finish after max_tokens.
class FakeEngine {
 public:
  FakeEngine(const SchedulerConfig& config, const CacheConfig& cache, int32_t vocab)
      : scheduler(config, cache), model(cache.num_blocks, cache.block_size, vocab) {}

  void add(RequestId id, std::vector<int32_t> prompt, int max_tokens) {
    ASSERT_TRUE(scheduler.add_request(id, std::move(prompt)).is_ok());
    max_tokens_[id] = max_tokens;
    outputs[id];
  }

  // One step; returns false when nothing was scheduled. `between` runs after the forward pass
  // and before update_from_output (an abort arriving mid-step).
  bool step(const std::function<void()>& between = {}) {
    last = scheduler.schedule();
    scheduler.check_invariants();
    if (!last.preempted_ids.empty()) {
      // A step that had to evict for memory admits nobody new (it would only thrash).
      for (const ScheduledRequest& s : last.scheduled) EXPECT_FALSE(s.is_new);
    }
    const std::vector<int32_t> sampled = model.forward(last);
    if (between) between();
    const std::vector<TokenOutput> results = scheduler.update_from_output(last, sampled);
    scheduler.check_invariants();
    for (const TokenOutput& r : results) on_token(r);
    scheduler.check_invariants();
    ++num_steps;
    return !last.scheduled.empty();
  }

  // Steps until every request has finished; fails the test if it takes more than max_steps.
  void run(int max_steps = 100000) {
    while (scheduler.has_unfinished_requests()) {
      ASSERT_LT(num_steps, max_steps) << "scheduler made no progress";
      ASSERT_TRUE(step()) << "nothing scheduled with unfinished requests";
    }
  }

  // Reports the last finished ids to the model and checks that nothing is left anywhere.
  void expect_all_free() {
    const SchedulerOutput flush = scheduler.schedule();
    EXPECT_TRUE(flush.scheduled.empty());
    (void)model.forward(flush);
    scheduler.check_invariants();
    const kv::KvCacheManager& kv = scheduler.kv_cache_manager();
    EXPECT_EQ(kv.num_requests(), 0);
    EXPECT_EQ(kv.pool().num_free_blocks(), kv.pool().num_blocks());
    EXPECT_EQ(model.num_tracked(), 0u);
  }

  Scheduler scheduler;
  FakeModel model;
  SchedulerOutput last;
  int num_steps = 0;
  std::map<RequestId, std::vector<int32_t>> outputs;  // streamed tokens per request
  std::map<RequestId, FinishReason> finish_reasons;

 private:
  void on_token(const TokenOutput& r) {
    std::vector<int32_t>& out = outputs[r.request_id];
    out.push_back(r.token_id);
    if (r.finish_reason.has_value()) {
      finish_reasons[r.request_id] = *r.finish_reason;
    } else if (static_cast<int>(out.size()) >= max_tokens_[r.request_id]) {
      std::unique_ptr<Request> done = scheduler.finish(r.request_id, FinishReason::kLength);
      ASSERT_NE(done, nullptr);
      // The streamed tokens are the request's outputs: preemption never re-emits or drops one.
      EXPECT_EQ(
          std::vector<int32_t>(done->output_token_ids().begin(), done->output_token_ids().end()),
          out);
      finish_reasons[r.request_id] = FinishReason::kLength;
    }
  }

  std::unordered_map<RequestId, int> max_tokens_;
};

}  // namespace s4kv::engine::testing
