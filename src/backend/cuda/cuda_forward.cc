// The forward pass of a step on the device (cuda_backend_impl.h): the kernels of each layer in
// stream order, eager or captured into a CUDA graph.
#include <cmath>

#include "backend/cuda/cuda_backend_impl.h"

namespace s4kv::backend::cuda::impl {

// The step's kernels, in stream order; nothing here reads host state that a graph replay
// would not see again (the counts that vary between replays are in step_.live).
void CudaBackend::launch_forward(int64_t n, int64_t num_logits) {
  launch_embed(embed_, act_, step_.token_ids, x_, n, config_.hidden_size, stream_);
  for (int64_t layer = 0; layer < config_.num_hidden_layers; ++layer) {
    attention_block(layer, n);
    mlp_block(layer, n);
  }
  launch_row_rmsnorm({x_, step_.logits_rows, final_norm_, rows_, act_, num_logits,
                      config_.hidden_size, static_cast<float>(config_.rms_norm_eps)},
                     stream_);
  gemm_->run(rows_, lm_head_, logits_, num_logits, config_.hidden_size, config_.vocab_size, false);
}

void CudaBackend::norm_rows(const float* weight, int64_t n) {
  launch_row_rmsnorm({x_, nullptr, weight, h_, act_, n, config_.hidden_size,
                      static_cast<float>(config_.rms_norm_eps)},
                     stream_);
}

void CudaBackend::attention_block(int64_t layer, int64_t n) {
  const LayerWeights& w = layers_[static_cast<size_t>(layer)];
  const model::ModelConfig& c = config_;
  norm_rows(w.input_norm, n);
  RopeArgs rope;
  rope.x = qkv_;
  rope.row_stride = qkv_dim_;
  rope.positions = step_.positions;
  rope.cos = rope_cos_;
  rope.sin = rope_sin_;
  rope.num_tokens = n;
  rope.num_heads = c.num_attention_heads + c.num_key_value_heads;  // q then k, adjacent
  rope.head_dim = kHeadDim;

  const bool int4 = kv_.dtype == kv::KvCacheDtype::kInt4Kivi;
  const bool fp8 = kv_.dtype == kv::KvCacheDtype::kFp8E4M3;
  const int64_t es = fp8 ? 1 : 2;
  KvWriteArgs wr;
  wr.k = qkv_ + q_dim_;
  wr.v = qkv_ + q_dim_ + kv_dim_;
  wr.row_stride = qkv_dim_;
  wr.num_tokens = n;
  wr.kv_dim = kv_dim_;
  wr.cache_dtype = fp8 ? DType::kF8E4M3 : kv16_;
  wr.fp8_from = kv16_;
  if (int4) {
    wr.k_cache = staging_k_;
    wr.v_cache = staging_v_;
  } else {
    wr.slot_mapping = step_.slots;
    wr.k_cache = static_cast<std::byte*>(kv_k_) + layer * kv_layer_elems_ * es;
    wr.v_cache = static_cast<std::byte*>(kv_v_) + layer * kv_layer_elems_ * es;
  }
  gemm_->run_rope_kv(h_, w.qkv, qkv_, n, c.hidden_size, qkv_dim_, w.qkv_bias, rope,
                     c.num_attention_heads, wr);

  const int64_t nkv = c.num_key_value_heads, B = kv_.block_size;
  PagedAttentionArgs at;
  at.q = qkv_;
  at.q_stride = qkv_dim_;
  at.out = attn_;
  at.out_dtype = act_;
  at.num_tokens = n;
  at.num_heads = static_cast<int>(c.num_attention_heads);
  at.num_kv_heads = static_cast<int>(nkv);
  at.block_size = static_cast<int>(B);
  at.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  at.token_seq = step_.token_seq;
  at.positions = step_.positions;
  at.query_start_loc = step_.qsl;
  at.seq_lens = step_.seq_lens;
  at.block_tables = step_.tables;
  at.max_blocks_per_seq = step_max_blocks_;
  at.cache = kv_.dtype;
  at.bf16 = kv16_ == DType::kBF16;
  if (int4) {
    const int64_t block_stride = nkv * static_cast<int64_t>(layout_.block_bytes);
    at.pool = pool_ + layer * int4_pool_blocks(kv_, layout_) * block_stride;
    at.layout = layout_;
    at.num_pool_blocks = kv_.num_blocks;
    at.residual = reinterpret_cast<const uint16_t*>(at.pool + kv_.ring_base() * block_stride);
    at.seat_stride = int4_ring_blocks(kv_, layout_) * block_stride / 2;
    at.ring = ring_;
    if (kv_.sink_base_block >= 0) {  // sink runs in the pool (backend.h)
      at.sink = reinterpret_cast<const uint16_t*>(at.pool + kv_.sink_base_block * block_stride);
      at.sink_stride = kv_.sink_run_blocks * block_stride / 2;
    } else {
      at.sink = sink_ + layer * (kv_.num_sink_blocks + 1) * 2 * B * kv_dim_;
    }
    at.staging_k = staging_k_;
    at.staging_v = staging_v_;
    at.seats = step_.res_slots;
    at.seat_starts = step_.res_starts;
    at.pool_ends = step_.pool_ends;
    at.rope_cos = rope_cos_;
    at.rope_sin = rope_sin_;
    at.int4_rotations = int4_rotations_;
    at.rope_f16 = rope_f16_;
    at.keys_post_rope = kv_.int4_keys_post_rope;
    at.value_hadamard = kv_.int4_value_hadamard;
  } else {
    at.k_cache = wr.k_cache;
    at.v_cache = wr.v_cache;
  }
  const DecodePlan& plan = attention_plan_;
  // int4_kivi: a decode-only step's tokens go into the residual ring in the decode merge.
  const bool ring_in_merge = int4 && static_cast<int64_t>(plan.seqs.size()) == n;
  if (!pool_rows_plan_.seqs.empty()) {
    at.pool_rows_k = pool_rows_k_;
    at.pool_rows_v = pool_rows_v_;
    at.pool_row_base = step_.pool_row_base;
    at.pool_row_tiles = step_.pool_row_tiles;
    launch_int4_pool_rows(at, step_.pool_row_seqs,
                          static_cast<int32_t>(pool_rows_plan_.seqs.size()),
                          pool_rows_plan_.max_tiles, stream_);
  }
  if (!prefill_tiles_.empty()) {
    // Split tiles' partial sums, merged before the decode items use the buffer.
    const PrefillSplitLaunch split{partials_, step_.prefill_merges,
                                   static_cast<int32_t>(prefill_merges_.size())};
    launch_prefill_attention(at, step_.prefill_tiles, static_cast<int32_t>(prefill_tiles_.size()),
                             stream_, &split);
  }
  if (!plan.other_tokens.empty()) {
    at.token_list = step_.other_tokens;
    at.num_listed = static_cast<int64_t>(plan.other_tokens.size());
    launch_paged_attention(at, stream_);
  }
  if (!plan.seqs.empty()) {
    DecodeLaunch dl;
    dl.items = step_.items;
    dl.num_items = static_cast<int32_t>(plan.items.size());
    dl.num_int4_items = plan.num_int4_items;
    dl.seqs = step_.decode_seqs;
    dl.num_seqs = static_cast<int32_t>(plan.seqs.size());
    dl.partials = partials_;
    if (graph_size_ > 0) {  // grids of the capture size's capacity; the counts on the device
      const DecodeCapacity cap = decode_capacity(graph_size_, decode_shape_);
      dl.num_int4_items = static_cast<int32_t>(cap.int4_items);
      dl.num_items = static_cast<int32_t>(cap.int4_items + cap.row_items);
      dl.live = step_.live;
    }
    dl.write_residual = ring_in_merge;
    if (merge_counts_ != nullptr) {  // S4KV_DECODE_MERGE=fused: where the items are few
      if (graph_size_ > 0) {         // the step's choice in step_.live[4]; the merge kernel beside
        dl.merge_counts = merge_counts_;
        dl.merge_flag = step_.live + 4;
      } else if (step_merge_in_items_) {
        dl.merge_counts = merge_counts_;
      }
    }
    launch_decode_attention(at, dl, stream_, &fork_);
  }

  // kv_commit; a graph of a step where no block fills (graph_commit_ false) has only its
  // residual_write, and not that when the merge wrote the ring.
  if (int4 && graph_size_ > 0 && !graph_commit_) {
    if (!ring_in_merge) {
      launch_int4_kivi_residual_write(int4_cache_batch(at), int4_cache_layer(at), stream_);
    }
  } else if (int4) {
    Int4CommitStep st;
    st.fills = step_.fills;
    st.num_fills = step_num_fills_;
    st.first_position = step_.first_pos;
    st.out_index = step_.out_index;
    st.num_quantized = step_num_quantized_;
    st.scratch_k = scratch_k_;
    st.scratch_v = scratch_v_;
    st.pool = const_cast<std::byte*>(at.pool);
    st.layout = layout_;
    st.cos = rope_cos_;
    st.sin = rope_sin_;
    st.num_positions = opt_.max_model_len;
    st.bf16 = at.bf16;
    st.keys_post_rope = kv_.int4_keys_post_rope;
    st.value_hadamard = kv_.int4_value_hadamard;
    st.residual_written = ring_in_merge;
    if (graph_size_ > 0) {  // a decode row fills at most one block
      st.num_fills = st.num_quantized = graph_size_;
      st.live = step_.live + 2;
    }
    launch_int4_kivi_commit_step(st, int4_cache_batch(at), int4_cache_layer(at), stream_);
  }
  gemm_->run(attn_, w.o, x_, n, q_dim_, c.hidden_size, true);
}

void CudaBackend::mlp_block(int64_t layer, int64_t n) {
  const LayerWeights& w = layers_[static_cast<size_t>(layer)];
  const model::ModelConfig& c = config_;
  norm_rows(w.post_norm, n);
  gemm_->run_silu_mul(h_, w.gate_up, gate_up_, act_buf_, n, c.hidden_size, c.intermediate_size);
  gemm_->run(act_buf_, w.down, x_, n, c.intermediate_size, c.hidden_size, true);
}

}  // namespace s4kv::backend::cuda::impl
