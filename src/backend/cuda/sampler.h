// Sampling on the GPU: one step's logits rows, already on the device, into one token each with
// the logprobs a row asked for; only those come back to the host. The semantics are the
// reference sampler's (backend/sampling.h), step by step: logit_bias -> min_tokens mask ->
// repetition / frequency / presence penalties (each float operation rounded as the CPU does)
// -> greedy argmax (lowest id among equals) or temperature -> top_k (ties kept) -> top_p ->
// min_p -> one draw in token id order with the same counter-based u (computed on the host,
// uniform01). Raw logprobs: log_softmax of the unmodified row, rank, top-N (lower id first
// among equals).
//
// One block per row walks the whole vocabulary (selections by bisection over the ordered bits
// of the logits, sums by fixed-order block reductions: deterministic run to run). Where the
// reference sums probabilities one by one, the GPU sums them in another order: a draw or a
// top_p cut can differ only when u or the cut lies within rounding (~1e-15) of a boundary.
// Correct first; the next issue makes it fast.
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
  // Rows of vocab_size, max_rows at a time (more in one call run in groups); rows whose
  // prompt + output (the penalties read them) hold up to max_model_len ids.
  CudaSampler(int64_t vocab_size, int64_t max_rows, int64_t max_model_len);

  // The device memory a sampler of these limits allocates (for the start-up budget).
  static int64_t device_bytes(int64_t vocab_size, int64_t max_rows, int64_t max_model_len);

  // logits: device [rows.size(), vocab_size] fp32, read only. Samples every row on `stream`,
  // waits for the results and writes them to `out` (resized to rows.size()).
  void sample(const float* logits, std::span<const SamplingRow> rows, cudaStream_t stream,
              std::vector<SampleOutput>& out);

 private:
  int64_t vocab_size_, max_rows_, list_capacity_;
  DeviceBuffer work_;  // [max_rows, vocab] the processed logits
  StepArena arena_;    // per call: the rows' settings and id lists
  DeviceBuffer out_device_;
  PinnedBuffer out_host_;
  PenaltyScratch penalties_;  // each row's distinct penalty ids, on the host
};

}  // namespace s4kv::backend::cuda
