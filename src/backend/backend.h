// The Backend interface: what the engine (model runner) sees of a forward pass. One flat batch
// per step mixes prefill chunks and decode tokens (vLLM v1's vocabulary); the backend embeds
// the tokens, writes their K/V into its paged cache at slot_mapping, attends over each
// sequence's blocks and returns logits for the rows asked for. It owns the weights (in its
// own compute format) and the KV cache memory; the engine owns block ids and decides every
// slot. No CUDA types here: the engine includes only this header. Not thread-safe: engine
// thread only. Malformed batches are engine bugs (S4KV_CHECK), not request errors.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/sampling.h"
#include "common/status.h"
#include "kv/int4_kivi_layout.h"
#include "kv/kv_format.h"

namespace s4kv::backend {

// The paged KV cache a backend allocates at start-up.
struct KvCacheConfig {
  int64_t num_blocks = 0;  // blocks per layer (block ids 0..num_blocks-1)
  int64_t block_size = 0;  // tokens per block
  // k16Bit: K (after RoPE) and V in the model's 16-bit dtype (fp16 for fp16 models, bf16
  // otherwise). int4_kivi (docs/kv-format.md): full blocks quantized; each running sequence's
  // last, partly filled block lives 16-bit in its seat's residual ring (ForwardBatch::seats).
  kv::KvCacheDtype dtype = kv::KvCacheDtype::k16Bit;
  // Seats: per-sequence state on the backend, one per running sequence (at least max_num_seqs),
  // for every dtype (int4_kivi keeps each seat's 16-bit residual ring there; the others keep
  // nothing yet). The word slot stays for slot_mapping. And int4_kivi's value group size Gv.
  int64_t num_seats = 0;
  int64_t value_group_size = 128;
  // int4_kivi only: sink blocks, 16-bit blocks with ids num_blocks .. num_blocks +
  // num_sink_blocks - 1 (format v2, docs/kv-format.md). With num_sink_blocks > 0 every block
  // table's first block (positions 0 .. block_size - 1) is a sink block and no other entry is:
  // it is never quantized. 0 gives format v1 (every full block int4), for comparisons only.
  int64_t num_sink_blocks = 0;
  // int4_kivi only, an `s4kv eval` candidate: full blocks (0 or 1) kept 16-bit in the residual
  // slot after they are quantized, so the newest block_size .. 2 * block_size - 1 tokens are
  // read 16-bit (ForwardBatch::seat_starts says from where the slot holds them).
  int64_t num_window_blocks = 0;
  // int4_kivi only, an `s4kv eval` candidate: values rotated by a Hadamard transform before
  // quantization (docs/kv-format.md).
  bool int4_value_hadamard = false;
  // int4_kivi: the seats' residual rings live in the pool's memory, seat s (the dummy seat too)
  // in the Int4KiviLayout::ring_blocks(1 + num_window_blocks) blocks from ring_base_block +
  // s * that; -1 puts them after the block ids (num_blocks on). The engine puts the real seats'
  // inside, at the top of 0..num_blocks-1, and never gives a held seat's blocks to a block table
  // (kv_cache_manager.h); backends allocate pool memory up to the dummy seat's ring.
  int64_t ring_base_block = -1;
  int64_t ring_base() const { return ring_base_block < 0 ? num_blocks : ring_base_block; }
  // int4_kivi: with sink_base_block >= 0 the sink blocks' 16-bit bytes live in the pool's memory
  // too, sink k (the dummy block's, k = num_sink_blocks, included) in the sink_run_blocks blocks
  // from sink_base_block + k * sink_run_blocks, laid out as a sink of its own memory is
  // ([2 (K, V), block_size, num_kv_heads, head_dim] 16-bit); the engine holds a sink's run
  // while the sink is in use or cached (kv_cache_manager.h "Sink runs"). -1: memory of their own.
  int64_t sink_base_block = -1;
  int64_t sink_run_blocks = 0;
  // The block after the last sink run (the dummy block's): at most ring_base().
  int64_t sink_runs_end() const {
    return sink_base_block + (num_sink_blocks + 1) * sink_run_blocks;
  }
  // Padding (a step of fixed shape with fewer real sequences, as CUDA graphs replay): one more
  // block and one more seat than the counts above, which backends allocate and the engine never
  // hands out. A padding sequence has seat dummy_seat() (or, without seats, dummy_block() first)
  // and dummy_block() as every block table entry; what it writes is never read.
  int64_t dummy_block() const { return num_blocks + num_sink_blocks; }
  int64_t dummy_seat() const { return num_seats; }
  // int4_kivi only, for comparisons, never the default: quantize keys AFTER RoPE (the KIVI
  // paper's way) instead of before it; full blocks then hold post-RoPE keys and attention does
  // not rotate them. Same block layout and residual. DESIGN.md says why pre-RoPE is the format.
  bool int4_keys_post_rope = false;
};

// One step's work. Every span is host memory owned by the caller and read only during
// forward(). Sequence s owns query rows [query_start_loc[s], query_start_loc[s+1]); its
// q_len new tokens sit at the end of its context, so token j of it has position
// seq_lens[s] - q_len + j and attends (causally) to cache positions 0..that position, its own
// K/V included. A decode token is a sequence with q_len 1.
//
// Deferred tokens (async scheduling): a token id -1 - r (negative) stands for the token that
// logits row r of the step submitted just before this one samples; that step must have had
// sampling rows, at least r + 1 of them. The backend resolves it where the sampled ids are (a
// synchronous backend from its host copy, the CUDA backend on the device), so that the engine
// can submit this step before the previous one's tokens reach the host.
struct ForwardBatch {
  // [num_tokens] in 0..vocab_size-1, or a deferred token -1 - r (above)
  std::span<const int32_t> token_ids;
  std::span<const int32_t> positions;        // [num_tokens] position of each token in its sequence
  std::span<const int32_t> query_start_loc;  // [num_seqs + 1] prefix sums of q_len; [0] == 0
  std::span<const int32_t> seq_lens;         // [num_seqs] context length including the new tokens
  // [num_seqs, max_num_blocks_per_seq] row-major block ids; row s covers positions
  // 0..seq_lens[s]-1 with block i holding positions [i*block_size, (i+1)*block_size).
  std::span<const int32_t> block_tables;
  int64_t max_num_blocks_per_seq = 0;
  // [num_tokens] where each new token's K/V go: block_id * block_size + offset; must agree
  // with block_tables at the token's position (checked).
  std::span<const int64_t> slot_mapping;
  std::span<const int32_t> logits_indices;  // [num_logits] token rows that need logits
  // [num_seqs] each sequence's seat (0..num_seats-1); required for int4_kivi (its seat holds
  // the 16-bit tail block), else empty or given. The engine gives a sequence one seat while it
  // runs (kept across steps, never shared between running sequences; freed on finish, abort or
  // preemption, after which the sequence is recomputed into a fresh seat).
  std::span<const int32_t> seats;
  // [num_seqs] with seats: how many tokens the sequence had computed when it took its seat (0,
  // or the length of a prefix-cache hit; an int4_kivi seat holds the 16-bit K/V of positions
  // from there on, nothing before). With the window variant the last full block is read 16-bit
  // from the seat only when it starts at or after this position.
  std::span<const int32_t> seat_starts;
  // [num_logits] or empty. Given, logits row i is sampled with sampling[i] (backend/sampling.h,
  // on the backend's device) and the step returns one SampleOutput per row; its logits come
  // back too only with return_logits. Empty: the step returns the logits (eval, tests).
  std::span<const SamplingRow> sampling;
  bool return_logits = false;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_seqs() const { return static_cast<int64_t>(seq_lens.size()); }
  int64_t num_logits() const { return static_cast<int64_t>(logits_indices.size()); }
};

// What a step gives back, in the backend's host memory, valid until the next wait().
struct StepOutput {
  // [num_logits, vocab_size] fp32, row i for token row logits_indices[i]: when the batch had no
  // sampling rows or asked for return_logits; else empty.
  std::span<const float> logits;
  // [num_logits] when the batch had sampling rows, else empty.
  std::span<const SampleOutput> samples;
};

// int4_kivi: the pool blocks one seat's residual ring takes (1 + num_window_blocks ring blocks,
// Int4KiviLayout::ring_blocks), and the pool blocks a layer allocates: the block ids and every
// seat's ring, the dummy seat's included (ring_base_block). One rule for every backend.
inline int64_t int4_ring_blocks(const KvCacheConfig& kv, const kv::Int4KiviLayout& layout) {
  return layout.ring_blocks(1 + static_cast<int>(kv.num_window_blocks));
}
inline int64_t int4_pool_blocks(const KvCacheConfig& kv, const kv::Int4KiviLayout& layout) {
  const int64_t end = kv.ring_base() + int4_ring_blocks(kv, layout) * (kv.num_seats + 1);
  return end > kv.num_blocks ? end : kv.num_blocks;
}

// The cache shape's own rules, whatever the backend (num_blocks aside): sink, window and
// Hadamard values only with int4_kivi, a window of 0 or 1 blocks, sink blocks >= 0, the int4
// variant and layout valid for head_dim (kv_format.h, int4_kivi_layout.h), seats for int4_kivi,
// a positive block size. kInvalidArgument naming the first problem.
Status check_kv_cache_shape(const KvCacheConfig& kv, int64_t head_dim);

// S4KV_CHECKs that no seat is given to two sequences of one batch (int4_kivi's rings would mix),
// the dummy seat aside: any number of padding sequences share it (nothing reads what they write).
// `seen`: the caller's scratch, reused across steps so that a warm check allocates nothing.
void check_distinct_seats(std::span<const int32_t> seats, int64_t dummy_seat,
                          std::vector<uint8_t>& seen);

// int4_kivi: how many of sequence `seq`'s first blocks are read as pool blocks (or its sink
// block, a table id >= num_pool_blocks); the rest of its context is read 16-bit from its
// residual ring and this step's staging. The last full block before the step is the window,
// read from the ring, when the ring keeps one (ring > 1), it is not a sink block and the seat
// wrote it (it starts at or after the seat's start). One rule for every backend.
inline int64_t int4_pool_end(const ForwardBatch& b, int64_t seq, int64_t block_size, int ring,
                             int64_t num_pool_blocks) {
  const int32_t* table = b.block_tables.data() + seq * b.max_num_blocks_per_seq;
  const int64_t q_len = b.query_start_loc[seq + 1] - b.query_start_loc[seq];
  const int64_t num_full = (b.seq_lens[seq] - q_len) / block_size;  // quantized before the step
  const bool window = ring > 1 && num_full > 0 && table[num_full - 1] < num_pool_blocks &&
                      (num_full - 1) * block_size >= b.seat_starts[seq];
  return window ? num_full - 1 : num_full;
}

// S4KV_CHECKs every invariant above against a cache of `kv` shape and a vocabulary size;
// deferred tokens may name rows 0..num_deferred_rows-1 (the previous step's sampling rows).
// Backends call it at the top of submit(); costs O(num_tokens + num_seqs).
void check_forward_batch(const ForwardBatch& batch, const KvCacheConfig& kv, int64_t vocab_size,
                         int64_t num_deferred_rows = 0);

// The token ids with every deferred token (-1 - r) replaced by prev_sampled[r], into `out`.
// False (out untouched) when the batch has no deferred token.
bool resolve_deferred_tokens(std::span<const int32_t> token_ids,
                             std::span<const int32_t> prev_sampled, std::vector<int32_t>& out);

// Sizes every per-step buffer of a backend at construction (nothing is grown per step).
struct BackendLimits {
  int64_t max_num_tokens = 0;  // tokens of one step (--max-num-batched-tokens)
  int64_t max_num_seqs = 0;    // sequences of one step (--max-num-seqs)
  int64_t max_model_len = 0;   // the longest sequence (--max-model-len)
  // Rows of logits one step asks for (its logits_indices); 0: max_num_tokens (every token, as
  // tests and goldens ask). The engine samples one row a sequence and gives min(max_num_seqs,
  // max_num_tokens): a GPU backend sizes its logits buffers by it (rows x vocabulary x 4 bytes,
  // 4.6 GiB for 8,192 rows of Qwen2.5's 152,064 ids), memory the KV cache gets instead.
  int64_t max_num_logits = 0;
};

// What profile() measured: the bytes the backend can give its KV cache now that its weights and
// a step's activations are resident (zero or less: none left), and a line saying how; no value
// when the backend has no memory budget of its own (the CPU: --kv-cache-memory decides). Used
// only when --kv-cache-memory is auto: bytes given explicitly are the user's decision.
struct MemoryProfile {
  std::optional<int64_t> kv_cache_bytes;
  std::string line;
};

// A backend is built with its weights and limits, then started in this order, once each:
//   unsupported(kv)   -> why it cannot run a cache of this shape (num_blocks not yet set);
//   profile()         -> how many KV bytes fit (the backend, not the engine, answers);
//   init_kv_cache(kv) -> allocates the cache of the engine's chosen num_blocks.
// Then every step is submit(batch) followed by wait(); at most kMaxInFlight steps are submitted
// and not yet waited for, and wait() returns outputs in submit order.
class Backend {
 public:
  static constexpr int kMaxInFlight = 2;

  virtual ~Backend() = default;

  // "cpu" | "cuda".
  virtual std::string_view name() const = 0;
  virtual int64_t vocab_size() const = 0;

  // Reasons this backend cannot run a cache of this shape, each one line naming the value;
  // empty when it can.
  virtual std::vector<std::string> unsupported(const KvCacheConfig& kv) const {
    (void)kv;
    return {};
  }
  virtual Result<MemoryProfile> profile() { return MemoryProfile{}; }
  // Allocates the cache. Refuses a shape that unsupported() names, or a second call.
  virtual Status init_kv_cache(const KvCacheConfig& kv) = 0;
  // The initialized cache's config (S4KV_CHECK: after init_kv_cache).
  virtual const KvCacheConfig& kv_cache_config() const = 0;

  // Starts a step. The batch's spans are read before submit returns.
  virtual void submit(const ForwardBatch& batch) = 0;
  // Waits for the oldest submitted step and returns its output (valid until the next wait()).
  virtual StepOutput wait() = 0;

  // One step: submit() then wait().
  StepOutput forward(const ForwardBatch& batch) {
    submit(batch);
    return wait();
  }

  // For `s4kv bench latency`'s weights-only floor of a decode step (every weight read once):
  // the bytes of the weights as this backend holds them (its own dtype and layout; 0 = unknown),
  // and the bytes per second of a copy in its memory (read plus written bytes; 0 = unknown).
  // measure_copy_bandwidth allocates and frees its own buffers and takes about a second; call
  // it between steps, never during one.
  virtual int64_t weight_bytes() const { return 0; }
  virtual double measure_copy_bandwidth() { return 0.0; }
};

// A backend that computes a step inside submit() (the CPU backend, test fakes): run() returns
// the step's output in the backend's own buffers, valid until the next run(); this base keeps a
// copy when a second step is submitted before the first is waited for, and resolves deferred
// tokens from the previous step's samples before run() sees the batch.
class SynchronousBackend : public Backend {
 public:
  void submit(const ForwardBatch& batch) final;
  StepOutput wait() final;

 protected:
  virtual StepOutput run(const ForwardBatch& batch) = 0;

 private:
  std::vector<int32_t> last_sampled_;  // the token ids the last submitted step sampled
  std::vector<int32_t> resolved_;      // this step's token ids with deferred ones resolved
  StepOutput pending_[kMaxInFlight];   // oldest first
  // Copies of pending_[0] made when a second step was submitted (two: the other may be what the
  // last wait() returned, still valid until the next wait()).
  std::vector<float> kept_logits_[2];
  std::vector<SampleOutput> kept_samples_[2];
  int next_kept_ = 0;
  int in_flight_ = 0;
};

// A synchronous backend whose logits are in host memory (the CPU backend, test fakes): it
// computes them in run_logits() and samples the rows that ask with the reference sampler.
class HostSamplingBackend : public SynchronousBackend {
 protected:
  explicit HostSamplingBackend(int64_t vocab_size) : sampler_(vocab_size) {}
  // The logits [num_logits, vocab_size] of the batch's logits rows, valid until the next call.
  virtual std::span<const float> run_logits(const ForwardBatch& batch) = 0;

 private:
  StepOutput run(const ForwardBatch& batch) final;

  ReferenceSampler sampler_;
  std::vector<SampleOutput> samples_;
};

}  // namespace s4kv::backend
