// Sampling on the GPU: one step's logits rows, already on the device, into one token each with
// the logprobs a row asked for; only those come back to the host. The semantics are the
// reference sampler's (backend/sampling.h), step by step: logit_bias -> min_tokens mask ->
// repetition / frequency / presence penalties (each float operation rounded as the CPU does)
// -> greedy argmax (lowest id among equals) or temperature -> top_k (ties kept) -> top_p ->
// min_p -> one draw in token id order with the same counter-based u (computed on the host,
// uniform01). Raw logprobs: log_softmax of the unmodified row, rank, top-N (lower id first
// among equals).
//
// The blocks of a row walk the whole vocabulary (selections by bisection over the ordered bits
// of the logits, sums by fixed-order reductions: deterministic run to run): on sm_90, for calls
// of few rows, a thread block cluster of 8 per row, whose blocks combine their parts through
// distributed shared memory in rank order; one block per row otherwise. Where the
// reference sums probabilities one by one, the GPU sums them in another order: a draw or a
// top_p cut can differ only when u or the cut lies within rounding (~1e-15) of a boundary.
// Correct first; the next issue makes it fast.
//
// Asynchronous use (the CUDA backend's submit/wait): submit() enqueues a call's work and the
// copy of its results into pinned host memory of a result slot (0 or 1, so that two steps can
// be in flight), collect() reads them once the stream has passed them. The sampled ids stay on
// the device for the next step's deferred tokens (resolve_deferred).
//
// Host API (no kernels here). Engine thread only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/step_arena.h"
#include "backend/sampling.h"

namespace s4kv::backend::cuda {

class CudaSampler {
 public:
  // Rows of vocab_size, max_rows at a time (more in one call run in groups, up to
  // max_call_rows in one call; 0: max_rows); rows whose prompt + output (the penalties read
  // them) hold up to max_model_len ids.
  CudaSampler(int64_t vocab_size, int64_t max_rows, int64_t max_model_len,
              int64_t max_call_rows = 0);

  // The device memory a sampler of these limits allocates (for the start-up budget).
  static int64_t device_bytes(int64_t vocab_size, int64_t max_rows, int64_t max_model_len,
                              int64_t max_call_rows = 0);

  // logits: device [rows.size(), vocab_size] fp32, read only. Samples every row on `stream`,
  // waits for the results and writes them to `out` (resized to rows.size()).
  void sample(const float* logits, std::span<const SamplingRow> rows, cudaStream_t stream,
              std::vector<SampleOutput>& out);

  // Enqueues sampling of every row on `stream` with its results copied to `slot`'s host memory;
  // returns without waiting when the rows fit one group (more groups wait between them, for the
  // arena). The slot must have been collected since its previous submit.
  void submit(const float* logits, std::span<const SamplingRow> rows, cudaStream_t stream,
              int slot);
  // Once the stream has passed slot's submit: its results, resized to its rows.
  void collect(int slot, std::vector<SampleOutput>& out);
  // Enqueues on `stream`: every token id -1 - r of token_ids ([num_tokens], device) becomes
  // the id the last submit sampled for row r (still on the device; stream order makes it the
  // last submit's as long as the next one is enqueued after this).
  void resolve_deferred(int32_t* token_ids, int64_t num_tokens, cudaStream_t stream) const;

 private:
  int64_t vocab_size_, max_rows_, list_capacity_, max_call_rows_;
  DeviceBuffer work_;  // [max_rows, vocab] the processed logits
  StepArena arena_;    // per call: the rows' settings and id lists (host side double-buffered)
  DeviceBuffer out_device_;   // [max_call_rows] RowResult: the last submit's, by row
  PinnedBuffer out_host_[2];  // [max_call_rows] RowResult per result slot
  int64_t num_rows_[2] = {0, 0};
  // Blocks of a row for a call of `rows` rows (a thread block cluster when > 1).
  int blocks_per_row(int64_t rows) const;
  bool clusters_ = false;  // sm_90 and not S4KV_SAMPLER_CLUSTER=0
  int64_t sms_ = 0;
  PenaltyScratch penalties_;  // each row's distinct penalty ids, on the host
};

}  // namespace s4kv::backend::cuda
