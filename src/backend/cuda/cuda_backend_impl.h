// The CUDA backend's class (cuda_backend.h makes it): shared by cuda_backend.cc (construction,
// memory, steps, graphs) and cuda_forward.cc (the forward pass's kernels of a step).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda/backend_memory.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/device.h"
#include "backend/cuda/forward_kernels.cuh"
#include "backend/cuda/gemm.h"
#include "backend/cuda/int4_kivi_cache.cuh"
#include "backend/cuda/paged_attention.cuh"
#include "backend/cuda/prefill_attention.cuh"
#include "backend/cuda/rope.cuh"
#include "backend/cuda/sampler.h"
#include "backend/cuda/step_arena.h"
#include "backend/forward_batch_builder.h"
#include "backend/rope_table.h"
#include "kv/int4_kivi_layout.h"

namespace s4kv::backend::cuda::impl {

struct LayerWeights {
  const float* input_norm = nullptr;  // [hidden] fp32
  const float* post_norm = nullptr;   // [hidden] fp32
  const void* qkv = nullptr;          // [qkv_dim, hidden] compute dtype
  const float* qkv_bias = nullptr;    // [qkv_dim] fp32 or null
  const void* o = nullptr;            // [hidden, q_dim]
  const void* gate_up = nullptr;      // [2 * inter, hidden]
  const void* down = nullptr;         // [hidden, inter]
};

// Asynchronous: submit() enqueues a step (its arena upload, the deferred tokens' resolution,
// the forward pass eagerly or as a graph replay, sampling, the results' copy into pinned host
// memory of the step's result slot) and records an event; wait() waits for the oldest step's
// event. Steps alternate between two result slots (and the arenas between two host buffers),
// so the second step in flight never writes what the first one's copies still read.
class CudaBackend final : public Backend {
 public:
  CudaBackend(const model::ModelConfig& config, const KvCacheConfig& kv,
              const CudaBackendOptions& options, std::span<const float> inv_freq,
              const kv::Int4KiviLayout& layout);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  std::vector<std::string> unsupported(const KvCacheConfig& kv) const override;
  Result<MemoryProfile> profile() override;
  Status init_kv_cache(const KvCacheConfig& kv) override;
  const KvCacheConfig& kv_cache_config() const override {
    S4KV_CHECK(initialized_, "cuda backend: kv_cache_config() before init_kv_cache()");
    return kv_;
  }
  int64_t graph_replays() const { return graph_replays_; }
  void submit(const ForwardBatch& batch) override;
  StepOutput wait() override;
  int64_t weight_bytes() const override { return cuda::weight_bytes(config_, act_); }
  double measure_copy_bandwidth() override;

  void load_weights(const model::ModelWeights& weights);

 private:
  // A submitted step, waiting for wait().
  struct Pending {
    int slot = 0;                   // its result slot and event
    bool sampling = false;          // samples come back (in the sampler's slot)
    std::span<const float> logits;  // [num_logits, vocab] host, when asked for
  };
  // Enqueues the copy of the logits rows for a step that returns them (moving an earlier
  // in-flight step's out of the way first).
  std::span<const float> copy_logits_out(int64_t num_logits);

  // Uploads a tensor (any of bf16/fp16/fp32) converted to `dtype` at dst.
  void upload(const model::TensorView& t, DType dtype, void* dst);
  // Zeroed device memory kept in `into` (owned_: for the backend's life).
  void* alloc(size_t bytes, std::vector<DeviceBuffer>& into);
  void* alloc(size_t bytes) { return alloc(bytes, owned_); }
  // The cache's buffers for `kv` (and its dummy block and seat), kept in `into`.
  void allocate_cache(const KvCacheConfig& kv, std::vector<DeviceBuffer>& into);
  void profiling_step();
  // A step in three parts: host plans and the arena's upload (stage), the kernels (launch_forward;
  // what a CUDA graph captures), then sampling and the copies out (in run).
  void stage(const ForwardBatch& b, int64_t graph_size);
  void launch_forward(int64_t n, int64_t num_logits);
  // h_ = the RMSNorm of x_'s n rows times weight, in the compute dtype (a GEMM's input).
  void norm_rows(const float* weight, int64_t n);
  void attention_block(int64_t layer, int64_t n);
  void mlp_block(int64_t layer, int64_t n);
  // CUDA graphs of decode-only steps: the capture size a batch runs at (0: eagerly), the batch
  // padded to it, and the capture at start-up.
  int64_t graph_size(const ForwardBatch& b) const;
  const ForwardBatch& padded(const ForwardBatch& b, int64_t size);
  void capture_graphs();

  model::ModelConfig config_;
  KvCacheConfig kv_;  // the shape given at construction; num_blocks from init_kv_cache()
  bool initialized_ = false;
  CudaBackendOptions opt_;
  DType act_;   // compute dtype of GEMM inputs
  DType kv16_;  // the 16-bit dtype of the cache (bf16 or fp16)
  int64_t q_dim_, kv_dim_, qkv_dim_;
  Sizes sizes_;
  int64_t max_blocks_per_seq_;
  int64_t max_fills_;
  kv::Int4KiviLayout layout_;
  int ring_ = 1;
  cudaStream_t stream_ = nullptr;
  DecodeFork fork_;  // int4_kivi: the decode row kernel beside the int4 kernel
  std::vector<DeviceBuffer> owned_;
  std::unique_ptr<Gemm> gemm_;

  // Weights.
  const void* embed_ = nullptr;
  const void* lm_head_ = nullptr;
  const float* final_norm_ = nullptr;
  std::vector<LayerWeights> layers_;

  // RoPE table rows 0..max_model_len-1.
  const float* rope_cos_ = nullptr;
  const float* rope_sin_ = nullptr;
  const uint32_t* int4_rotations_ = nullptr;  // int4_kivi: int4_rotation_image of the tables
  const uint16_t* rope_f16_ = nullptr;        // int4_kivi: int4_prefill_rope_image of the tables

  // KV cache (per layer strides in elements / bytes).
  void* kv_k_ = nullptr;  // 16-bit / fp8: [L, num_blocks * B * kv_dim]
  void* kv_v_ = nullptr;
  int64_t kv_layer_elems_ = 0;
  // int4: [L, int4_pool_blocks, nkv, block_bytes]; the seats' rings in it (backend.h)
  std::byte* pool_ = nullptr;
  uint16_t* sink_ = nullptr;       // [L, num_sink, 2, B, kv_dim]
  uint16_t* staging_k_ = nullptr;  // [max_tokens, kv_dim]
  uint16_t* staging_v_ = nullptr;
  uint16_t* scratch_k_ = nullptr;  // [max_fills, nkv, B, 128]
  uint16_t* scratch_v_ = nullptr;
  // The prefilling sequences' pool rows (launch_int4_pool_rows), [Sizes::pool_rows_capacity,
  // kv_dim] each; the step's plan of them (none where the capacity is 0).
  uint16_t* pool_rows_k_ = nullptr;
  uint16_t* pool_rows_v_ = nullptr;
  Int4PoolRows pool_rows_plan_;

  // Attention: decode rows on the tensor-core kernels (16-bit compute), the rest on the
  // reference kernel; the plan is made per step.
  bool decode_kernels_ = false;
  bool prefill_kernels_ = false;  // rows of q_len >= 2 on the tensor-core prefill kernel
  int num_sms_ = 1;
  DecodeShape decode_shape_;  // the step's, made by stage(): its plan and graph grids
  DecodePlan attention_plan_;
  std::vector<PrefillTile> prefill_tiles_;
  std::vector<PrefillMerge> prefill_merges_;  // split_prefill's; their partial sums in partials_
  int64_t prefill_wave_ = 0;                  // the prefill kernel's resident blocks, all SMs
  float* partials_ = nullptr;  // [decode_items, num_heads, 130]; a step's split prefill tiles'
                               // partial sums first (Sizes::partials)
  int32_t* merge_counts_ = nullptr;  // S4KV_DECODE_MERGE=fused: [max_num_seqs, num_kv_heads]

  // Activations.
  float* x_ = nullptr;        // [max_tokens, hidden]
  void* h_ = nullptr;         // [max_tokens, hidden] compute dtype
  float* qkv_ = nullptr;      // [max_tokens, qkv_dim]
  void* attn_ = nullptr;      // [max_tokens, q_dim] compute dtype
  float* gate_up_ = nullptr;  // [max_tokens, 2 * inter]
  void* act_buf_ = nullptr;   // [max_tokens, inter] compute dtype
  void* rows_ = nullptr;      // [max_tokens, hidden] compute dtype
  float* logits_ = nullptr;   // [max_tokens, vocab]
  PinnedBuffer logits_host_;

  // This step's device arrays (pointers only: a captured step's are compared bytewise) and
  // counts. live: [int4 decode items, all decode items, fills, quantizer inputs, whether the
  // decode items merge themselves (merge_in_items; read only with S4KV_DECODE_MERGE=fused)],
  // what the kernels of a graph replay read instead of their grids.
  StepArena arena_;
  struct StepArrays {
    const int32_t *token_ids, *positions, *token_seq, *qsl, *seq_lens, *tables, *logits_rows,
        *res_slots, *res_starts, *first_pos, *other_tokens, *pool_ends, *live, *pool_row_base,
        *pool_row_tiles, *pool_row_seqs;
    const PrefillTile* prefill_tiles;
    const PrefillMerge* prefill_merges;
    const int64_t *slots, *out_index;
    const Int4FillBlock* fills;
    const DecodeItem* items;
    const DecodeSeq* decode_seqs;
  } step_{};
  int64_t step_max_blocks_ = 0, step_num_fills_ = 0, step_num_quantized_ = 0;
  bool step_merge_in_items_ = false;  // fused merge on (merge_counts_) and merge_in_items
  int64_t graph_size_ = 0;    // the capture size of the step being staged or launched; 0: eager
  bool graph_commit_ = true;  // the graph being captured has int4_kivi's kv_commit
  std::vector<int32_t> token_seq_host_;
  Int4FillPlan fills_;
  std::vector<uint8_t> slot_used_;  // check_distinct_seats scratch

  CudaSampler sampler_;
  std::vector<SampleOutput> samples_[2];  // per result slot, filled by wait()

  // Steps in flight, oldest first; the next result slot; the last step's sampling rows (what
  // the next step's deferred tokens may name).
  Pending pending_[kMaxInFlight];
  int in_flight_ = 0;
  int next_slot_ = 0;
  int64_t last_num_samples_ = 0;
  cudaEvent_t done_[2] = {nullptr, nullptr};
  std::vector<float> kept_logits_[2];  // an in-flight step's logits moved out of logits_host_
  int next_kept_ = 0;

  // CUDA graphs (ascending capture sizes), each with the arena addresses it was captured with.
  std::vector<int64_t> capture_sizes_;
  // int4_kivi: per size also a graph without kv_commit, for the steps where no block fills
  // (at batch 1 with 16-token blocks, 15 steps of 16): its kernels would find nothing to do.
  std::vector<cudaGraphExec_t> graphs_, graphs_no_commit_;
  std::vector<StepArrays> graph_arrays_;
  ForwardBatchBuilder pad_builder_;
  ForwardBatch padded_;
  int64_t graph_replays_ = 0;
};

}  // namespace s4kv::backend::cuda::impl
