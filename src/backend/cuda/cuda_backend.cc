#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/rope.h"
#include "backend/cuda/backend_memory.h"
#include "backend/cuda/cuda_backend_impl.h"
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
#include "common/half.h"
#include "common/log.h"
#include "kv/int4_kivi_layout.h"

namespace s4kv::backend::cuda {
namespace {

// Why a cache of this shape cannot run here (num_blocks aside), one line each: the format's
// own rules, and the keys-after-RoPE evaluation layout, which only the CPU runs.
std::vector<std::string> unsupported_reasons(const KvCacheConfig& kv) {
  std::vector<std::string> r;
  if (Status s = check_kv_cache_shape(kv, kHeadDim); !s.is_ok()) r.push_back(s.message());
  if (kv.dtype == kv::KvCacheDtype::kInt4Kivi && kv.int4_keys_post_rope) {
    r.push_back(
        "cuda backend: int4_kivi with keys quantized after RoPE is a CPU evaluation layout");
  }
  return r;
}

// The cache a (init_kv_cache's) of the shape b (the one the backend was built for) but for
// num_blocks and its placement, with at most b's seats and sink blocks (a defaulted
// --max-num-seqs that a small cache lowers, engine_config.h): nothing is sized by them before
// the cache is allocated.
bool same_shape(const KvCacheConfig& a, const KvCacheConfig& b) {
  return a.block_size == b.block_size && a.dtype == b.dtype && a.num_seats <= b.num_seats &&
         a.value_group_size == b.value_group_size && a.num_sink_blocks <= b.num_sink_blocks &&
         a.num_window_blocks == b.num_window_blocks &&
         a.int4_value_hadamard == b.int4_value_hadamard &&
         a.int4_keys_post_rope == b.int4_keys_post_rope;
}

}  // namespace

namespace impl {

CudaBackend::CudaBackend(const model::ModelConfig& config, const KvCacheConfig& kv,
                         const CudaBackendOptions& options, std::span<const float> inv_freq,
                         const kv::Int4KiviLayout& layout)
    : config_(config),
      kv_(kv),
      opt_(options),
      act_(options.compute_dtype),
      kv16_(options.compute_dtype == DType::kF16 ||
                    (options.compute_dtype == DType::kF32 && config.dtype == DType::kF16)
                ? DType::kF16
                : DType::kBF16),
      q_dim_(config.num_attention_heads * kHeadDim),
      kv_dim_(config.num_key_value_heads * kHeadDim),
      qkv_dim_(q_dim_ + 2 * kv_dim_),
      sizes_(config, kv, options),
      max_blocks_per_seq_(sizes_.max_blocks_per_seq),
      max_fills_(sizes_.max_fills),
      layout_(layout),
      ring_(1 + static_cast<int>(kv.num_window_blocks)),
      arena_(static_cast<size_t>(sizes_.arena)),
      sampler_(config.vocab_size, sizes_.sample_rows, options.max_model_len, sizes_.logit_rows),
      pad_builder_(kv.block_size, sizes_.max_blocks_per_seq) {
  S4KV_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  S4KV_CUDA_CHECK(cudaStreamCreateWithFlags(&fork_.side, cudaStreamNonBlocking));
  S4KV_CUDA_CHECK(cudaEventCreateWithFlags(&fork_.fork, cudaEventDisableTiming));
  S4KV_CUDA_CHECK(cudaEventCreateWithFlags(&fork_.join, cudaEventDisableTiming));
  for (cudaEvent_t& e : done_)
    S4KV_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  pad_builder_.reserve(static_cast<size_t>(options.max_num_seqs),
                       static_cast<size_t>(options.max_num_seqs));
  gemm_ = std::make_unique<Gemm>(act_, stream_);
  const Sizes& z = sizes_;

  RopeTable rope(inv_freq);
  // Every position a sequence reaches, and at least row block_size: the int4_kivi decode kernel
  // turns its query from one block to the next by that row's angles.
  rope.ensure(std::max<int64_t>(options.max_model_len, int64_t{kv.block_size} + 1));
  // A host table into device memory of its own (alloc: freed with the backend).
  auto to_device = [this]<typename T>(std::span<const T> host) {
    auto* d = static_cast<T*>(alloc(host.size_bytes()));
    S4KV_CUDA_CHECK(cudaMemcpy(d, host.data(), host.size_bytes(), cudaMemcpyHostToDevice));
    return static_cast<const T*>(d);
  };
  rope_cos_ = to_device(rope.cos_table());
  rope_sin_ = to_device(rope.sin_table());

  if (kv.dtype == kv::KvCacheDtype::kInt4Kivi) {
    // The decode kernel's rotations and the prefill kernel's rows, from the tables (once); then
    // per step, sized by the limits.
    if (tensor_core_attention(act_)) {
      int4_rotations_ = to_device(std::span<const uint32_t>(
          int4_rotation_image(rope.cos_table(), rope.sin_table(), kv.block_size)));
      rope_f16_ = to_device(
          std::span<const uint16_t>(int4_prefill_rope_image(rope.cos_table(), rope.sin_table())));
    }
    staging_k_ = static_cast<uint16_t*>(alloc(static_cast<size_t>(z.staging)));
    staging_v_ = static_cast<uint16_t*>(alloc(static_cast<size_t>(z.staging)));
    scratch_k_ = static_cast<uint16_t*>(alloc(static_cast<size_t>(z.scratch)));
    scratch_v_ = static_cast<uint16_t*>(alloc(static_cast<size_t>(z.scratch)));
    if (z.pool_rows > 0) {
      pool_rows_k_ = static_cast<uint16_t*>(alloc(static_cast<size_t>(z.pool_rows)));
      pool_rows_v_ = static_cast<uint16_t*>(alloc(static_cast<size_t>(z.pool_rows)));
    }
  }

  partials_ = static_cast<float*>(alloc(static_cast<size_t>(z.partials)));
  if (options.fused_decode_merge.value_or(decode_merge_mode() == DecodeMerge::kFused)) {
    // zero between launches (merge_if_last)
    merge_counts_ = static_cast<int32_t*>(alloc(static_cast<size_t>(z.merge_counts)));
    S4KV_CUDA_CHECK(cudaMemset(merge_counts_, 0, static_cast<size_t>(z.merge_counts)));
  }
  num_sms_ = std::max(1, device_sm_count());
  {
    PagedAttentionArgs probe;
    probe.cache = kv.dtype;
    probe.layout = layout;
    probe.keys_post_rope = kv.int4_keys_post_rope;
    decode_kernels_ = tensor_core_attention(act_) &&
                      decode_kernels_support(static_cast<int>(config.num_attention_heads),
                                             static_cast<int>(config.num_key_value_heads), probe);
    probe.out_dtype = act_;
    probe.block_size = static_cast<int>(kv.block_size);
    prefill_kernels_ = tensor_core_attention(act_) &&
                       prefill_kernels_support(static_cast<int>(config.num_attention_heads),
                                               static_cast<int>(config.num_key_value_heads), probe);
    if (prefill_kernels_) prefill_wave_ = int64_t{num_sms_} * prefill_blocks_per_sm(kv.dtype);
  }
  x_ = static_cast<float*>(alloc(static_cast<size_t>(z.x)));
  h_ = alloc(static_cast<size_t>(z.h));
  qkv_ = static_cast<float*>(alloc(static_cast<size_t>(z.qkv)));
  attn_ = alloc(static_cast<size_t>(z.attn));
  gate_up_ = static_cast<float*>(alloc(static_cast<size_t>(z.gate_up)));
  act_buf_ = alloc(static_cast<size_t>(z.act));
  rows_ = alloc(static_cast<size_t>(z.rows));
  logits_ = static_cast<float*>(alloc(static_cast<size_t>(z.logits)));
  logits_host_ = PinnedBuffer(static_cast<size_t>(z.logits));
}

CudaBackend::~CudaBackend() {
  for (cudaGraphExec_t g : graphs_) cudaGraphExecDestroy(g);
  for (cudaGraphExec_t g : graphs_no_commit_) cudaGraphExecDestroy(g);
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    gemm_.reset();
    cudaStreamDestroy(stream_);
  }
  for (cudaEvent_t e : {done_[0], done_[1], fork_.fork, fork_.join}) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (fork_.side != nullptr) cudaStreamDestroy(fork_.side);
}

Status CudaBackend::init_kv_cache(const KvCacheConfig& kv) {
  if (initialized_) return invalid_argument("cuda backend: init_kv_cache() called twice");
  if (const auto reasons = unsupported(kv); !reasons.empty())
    return ::s4kv::unsupported(reasons.front());
  if (!same_shape(kv, kv_)) {
    return invalid_argument(
        "cuda backend: init_kv_cache() with another shape than the backend was "
        "built for");
  }
  if (kv.num_blocks <= 0) {
    return invalid_argument("cuda backend: num_blocks must be positive (got " +
                            std::to_string(kv.num_blocks) + ")");
  }
  const auto need = static_cast<size_t>(kv_parts(config_, kv, layout_).total());
  size_t free_bytes = 0, total_bytes = 0;
  S4KV_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (need > free_bytes) {
    return Status(StatusCode::kResourceExhausted,
                  "cuda backend: the KV cache needs " + std::to_string(need >> 20) + " MiB, " +
                      std::to_string(free_bytes >> 20) + " MiB are free");
  }
  allocate_cache(kv, owned_);
  kv_ = kv;
  initialized_ = true;
  capture_graphs();
  return Status::ok();
}

void CudaBackend::allocate_cache(const KvCacheConfig& kv, std::vector<DeviceBuffer>& into) {
  const KvParts parts = kv_parts(config_, kv, layout_);
  if (kv.dtype == kv::KvCacheDtype::kInt4Kivi) {
    pool_ = static_cast<std::byte*>(alloc(static_cast<size_t>(parts.pool), into));
    sink_ = static_cast<uint16_t*>(alloc(static_cast<size_t>(parts.sink), into));
    slot_used_.assign(static_cast<size_t>(kv.num_seats + 1), 0);
  } else {
    kv_layer_elems_ = (kv.num_blocks + 1 /* the dummy block */) * kv.block_size * kv_dim_;
    kv_k_ = alloc(static_cast<size_t>(parts.k), into);
    kv_v_ = alloc(static_cast<size_t>(parts.v), into);
  }
}

// vLLM's profile run: one step of max_num_tokens tokens (padding sequences of up to
// max_model_len tokens, at most max_num_seqs, each one's last row sampled with top-p and 20
// logprobs) over a cache of nothing but the dummy block and seat, freed afterwards, so that
// whatever the runtime allocates when a step first runs (kernel modules, library state) is in
// use when profile() measures.
void CudaBackend::profiling_step() {
  const KvCacheConfig kv = profiling_kv_config(kv_);
  std::vector<DeviceBuffer> cache;
  allocate_cache(kv, cache);
  const KvCacheConfig shape = kv_;
  kv_ = kv;
  initialized_ = true;
  const bool int4 = kv.dtype == kv::KvCacheDtype::kInt4Kivi;
  ForwardBatchBuilder b(kv.block_size, max_blocks_per_seq_);
  const std::vector<int32_t> tokens(static_cast<size_t>(opt_.max_model_len), 0);
  const std::vector<int32_t> table(static_cast<size_t>(max_blocks_per_seq_),
                                   static_cast<int32_t>(kv.dummy_block()));
  for (int64_t s = 0, left = opt_.max_num_tokens; s < opt_.max_num_seqs && left > 0; ++s) {
    const int64_t n = std::min(left, opt_.max_model_len);
    b.add({tokens.data(), static_cast<size_t>(n)}, 0,
          {table.data(), static_cast<size_t>(ceil_div(n, kv.block_size))},
          int4 ? static_cast<int32_t>(kv.dummy_seat()) : -1);
    b.want_logits(b.num_tokens() - 1);
    left -= n;
  }
  SamplingRow row;
  row.greedy = false;
  row.top_p = 0.9;
  row.num_logprobs = kMaxTopLogprobs;
  const std::vector<SamplingRow> rows(b.num_logits(), row);
  ForwardBatch batch = b.batch();
  batch.sampling = rows;
  (void)forward(batch);
  kv_ = shape;
  initialized_ = false;
  pool_ = nullptr;
  sink_ = nullptr;
  kv_k_ = kv_v_ = nullptr;
}

std::vector<std::string> CudaBackend::unsupported(const KvCacheConfig& kv) const {
  return unsupported_reasons(kv);
}

// Weights and every per-step buffer are resident since construction, and the profiling step
// has run (a step allocates nothing, so what is in use now is the peak outside the KV cache):
// the cache gets the utilization's share of the device minus all that is in use, minus a
// reserve for the runtime.
Result<MemoryProfile> CudaBackend::profile() {
  S4KV_CHECK(!initialized_, "cuda backend: profile() after init_kv_cache()");
  profiling_step();
  S4KV_CUDA_CHECK(cudaDeviceSynchronize());
  size_t free_bytes = 0, total_bytes = 0;
  S4KV_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const auto total = static_cast<int64_t>(total_bytes);
  const int64_t in_use = total - static_cast<int64_t>(free_bytes);
  const auto share = static_cast<int64_t>(opt_.gpu_memory_utilization * static_cast<double>(total));
  MemoryProfile p;
  const int64_t kv_bytes = share - in_use - kRuntimeReserveBytes;
  p.kv_cache_bytes = kv_bytes;
  const auto mib = [](int64_t b) { return std::to_string(b >> 20) + " MiB"; };
  char util[32];
  std::snprintf(util, sizeof(util), "%.2f", opt_.gpu_memory_utilization);
  p.line = device_description() + ": " + mib(total) + " x " + util + " - in use " + mib(in_use) +
           " (weights " + mib(cuda::weight_bytes(config_, act_)) + ", activations " +
           mib(sizes_.total()) + ", runtime) - reserve " + mib(kRuntimeReserveBytes) +
           " = KV cache " + mib(kv_bytes);
  return p;
}

// A device-to-device copy of 1 GiB (or a quarter of the free memory when less), best of 5
// after a warm-up, timed with events on the backend's stream: read plus written bytes per s.
double CudaBackend::measure_copy_bandwidth() {
  size_t free_bytes = 0, total_bytes = 0;
  S4KV_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const size_t bytes = std::min<size_t>(size_t{1} << 30, free_bytes / 4 / 256 * 256);
  if (bytes < (size_t{1} << 20)) return 0.0;
  DeviceBuffer src(bytes), dst(bytes);
  S4KV_CUDA_CHECK(cudaMemsetAsync(src.data(), 1, bytes, stream_));
  cudaEvent_t start = nullptr, stop = nullptr;
  S4KV_CUDA_CHECK(cudaEventCreate(&start));
  S4KV_CUDA_CHECK(cudaEventCreate(&stop));
  float best_ms = 0.0f;
  for (int i = 0; i < 6; ++i) {
    S4KV_CUDA_CHECK(cudaEventRecord(start, stream_));
    S4KV_CUDA_CHECK(
        cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream_));
    S4KV_CUDA_CHECK(cudaEventRecord(stop, stream_));
    S4KV_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    S4KV_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (i > 0 && (best_ms == 0.0f || ms < best_ms)) best_ms = ms;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best_ms > 0.0f ? 2.0 * static_cast<double>(bytes) / (best_ms * 1e-3) : 0.0;
}

void* CudaBackend::alloc(size_t bytes, std::vector<DeviceBuffer>& into) {
  into.emplace_back(std::max<size_t>(bytes, 16));
  S4KV_CUDA_CHECK(cudaMemset(into.back().data(), 0, into.back().bytes()));
  return into.back().data();
}

void CudaBackend::upload(const model::TensorView& t, DType dtype, void* dst) {
  const auto n = static_cast<size_t>(t.numel());
  if (t.dtype == dtype) {  // same element type: the bytes as they are
    S4KV_CUDA_CHECK(cudaMemcpy(dst, t.data.data(), t.data.size(), cudaMemcpyHostToDevice));
    return;
  }
  std::vector<float> f32;
  f32.reserve(n);
  cpu::append_as_f32(t, f32);
  if (dtype == DType::kF32) {
    S4KV_CUDA_CHECK(cudaMemcpy(dst, f32.data(), n * 4, cudaMemcpyHostToDevice));
    return;
  }
  std::vector<uint16_t> bits(n);
  for (size_t i = 0; i < n; ++i) {
    bits[i] = dtype == DType::kBF16 ? float_to_bf16(f32[i]) : float_to_fp16(f32[i]);
  }
  S4KV_CUDA_CHECK(cudaMemcpy(dst, bits.data(), n * 2, cudaMemcpyHostToDevice));
}

void CudaBackend::load_weights(const model::ModelWeights& w) {
  const model::ModelConfig& c = config_;
  const int64_t as = act_size(act_);
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size;
  const auto matrix = [&](const std::string& name) {
    const model::TensorView& t = w.get(name);
    void* p = alloc(static_cast<size_t>(t.numel() * as));
    upload(t, act_, p);
    return p;
  };
  const auto vec_f32 = [&](const std::string& name) {
    const model::TensorView& t = w.get(name);
    auto* p = static_cast<float*>(alloc(static_cast<size_t>(t.numel()) * 4));
    upload(t, DType::kF32, p);
    return p;
  };
  embed_ = matrix("model.embed_tokens.weight");
  lm_head_ = c.tie_word_embeddings ? embed_ : matrix("lm_head.weight");
  final_norm_ = vec_f32("model.norm.weight");
  layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& l = layers_[static_cast<size_t>(i)];
    l.input_norm = vec_f32(p + "input_layernorm.weight");
    l.post_norm = vec_f32(p + "post_attention_layernorm.weight");
    auto* qkv = static_cast<std::byte*>(alloc(static_cast<size_t>(qkv_dim_ * hidden * as)));
    float* bias =
        c.qkv_bias ? static_cast<float*>(alloc(static_cast<size_t>(qkv_dim_) * 4)) : nullptr;
    int64_t row = 0;
    for (const char* m : {"q_proj", "k_proj", "v_proj"}) {
      const model::TensorView& t = w.get(p + "self_attn." + m + ".weight");
      upload(t, act_, qkv + row * hidden * as);
      if (bias != nullptr) upload(w.get(p + "self_attn." + m + ".bias"), DType::kF32, bias + row);
      row += t.shape[0];
    }
    l.qkv = qkv;
    l.qkv_bias = bias;
    l.o = matrix(p + "self_attn.o_proj.weight");
    auto* gate_up = static_cast<std::byte*>(alloc(static_cast<size_t>(2 * inter * hidden * as)));
    upload(w.get(p + "mlp.gate_proj.weight"), act_, gate_up);
    upload(w.get(p + "mlp.up_proj.weight"), act_, gate_up + inter * hidden * as);
    l.gate_up = gate_up;
    l.down = matrix(p + "mlp.down_proj.weight");
  }
  S4KV_CUDA_CHECK(cudaDeviceSynchronize());
}

void CudaBackend::submit(const ForwardBatch& in) {
  S4KV_CHECK(initialized_, "cuda backend: a step before init_kv_cache()");
  S4KV_CHECK(in_flight_ < kMaxInFlight, "cuda backend: more than ", kMaxInFlight,
             " steps submitted without wait()");
  check_forward_batch(in, kv_, config_.vocab_size, last_num_samples_);
  const int64_t num_seqs = in.num_seqs(), num_logits = in.num_logits();
  S4KV_CHECK(in.num_tokens() <= opt_.max_num_tokens && num_seqs <= opt_.max_num_seqs &&
                 num_seqs * in.max_num_blocks_per_seq <= opt_.max_num_seqs * max_blocks_per_seq_,
             "cuda forward: batch of ", in.num_tokens(), " tokens, ", num_seqs,
             " sequences beyond the limits");
  S4KV_CHECK(num_logits <= sizes_.logit_rows, "cuda forward: ", num_logits,
             " rows of logits in one step, beyond the backend's ", sizes_.logit_rows,
             " (BackendLimits::max_num_logits)");
  for (int32_t len : in.seq_lens) {
    S4KV_CHECK(len <= opt_.max_model_len, "cuda forward: sequence of ", len, " > max_model_len");
  }
  const int64_t size = graph_size(in);
  const ForwardBatch& b = size > 0 ? padded(in, size) : in;
  stage(b, size);
  // Deferred tokens take the previous step's sampled ids on the device, before the embedding
  // reads them (a graph reads the arena's token ids too, so replays need nothing else).
  if (std::any_of(in.token_ids.begin(), in.token_ids.end(), [](int32_t id) { return id < 0; })) {
    sampler_.resolve_deferred(const_cast<int32_t*>(step_.token_ids), b.num_tokens(), stream_);
  }
  if (size > 0) {
    const auto i =
        static_cast<size_t>(std::lower_bound(capture_sizes_.begin(), capture_sizes_.end(), size) -
                            capture_sizes_.begin());
    S4KV_CHECK(std::memcmp(&step_, &graph_arrays_[i], sizeof(StepArrays)) == 0,
               "cuda forward: the arena moved under the graph of size ", size);
    const bool commit = graphs_no_commit_.empty() || !fills_.fills.empty();
    S4KV_CUDA_CHECK(cudaGraphLaunch(commit ? graphs_[i] : graphs_no_commit_[i], stream_));
    ++graph_replays_;
  } else {
    launch_forward(b.num_tokens(), b.num_logits());
  }
  // The logits leave the device only when asked for (eval, tests); sampling reads them there
  // and returns the token ids (and logprobs asked for). A padded step's rows past the batch's
  // are the padding's, never read.
  Pending p;
  p.slot = next_slot_;
  next_slot_ ^= 1;
  p.sampling = !in.sampling.empty();
  if (!p.sampling || in.return_logits) p.logits = copy_logits_out(num_logits);
  if (p.sampling) sampler_.submit(logits_, in.sampling, stream_, p.slot);
  S4KV_CUDA_CHECK(cudaEventRecord(done_[p.slot], stream_));
  last_num_samples_ = p.sampling ? num_logits : 0;
  pending_[in_flight_++] = p;
}

std::span<const float> CudaBackend::copy_logits_out(int64_t num_logits) {
  for (int k = 0; k < in_flight_; ++k) {
    Pending& earlier = pending_[k];
    if (earlier.logits.empty() ||
        earlier.logits.data() != reinterpret_cast<const float*>(logits_host_.data())) {
      continue;
    }
    // Its copy into logits_host_ must land before this step's overwrites it: keep it aside.
    S4KV_CUDA_CHECK(cudaEventSynchronize(done_[earlier.slot]));
    next_kept_ ^= 1;
    kept_logits_[next_kept_].assign(earlier.logits.begin(), earlier.logits.end());
    earlier.logits = kept_logits_[next_kept_];
  }
  const auto count = static_cast<size_t>(num_logits * config_.vocab_size);
  if (count > 0) {
    S4KV_CUDA_CHECK(
        cudaMemcpyAsync(logits_host_.data(), logits_, count * 4, cudaMemcpyDeviceToHost, stream_));
  }
  return {reinterpret_cast<const float*>(logits_host_.data()), count};
}

StepOutput CudaBackend::wait() {
  S4KV_CHECK(in_flight_ > 0, "cuda backend: wait() without a submitted step");
  const Pending p = pending_[0];
  for (int k = 1; k < in_flight_; ++k) pending_[k - 1] = pending_[k];
  --in_flight_;
  S4KV_CUDA_CHECK(cudaEventSynchronize(done_[p.slot]));
  StepOutput out;
  out.logits = p.logits;
  if (p.sampling) {
    sampler_.collect(p.slot, samples_[p.slot]);
    out.samples = samples_[p.slot];
  }
  return out;
}

// The host's part of a step: plans, then the step's arrays in the arena and their upload. With
// a graph size every array gets the room that size can need, so that its addresses are the
// ones the graph captured whatever this step's counts.
void CudaBackend::stage(const ForwardBatch& b, int64_t size) {
  const int64_t n = b.num_tokens(), num_seqs = b.num_seqs();
  const bool int4 = kv_.dtype == kv::KvCacheDtype::kInt4Kivi;
  const int64_t B = kv_.block_size, nkv = config_.num_key_value_heads;
  graph_size_ = size;

  token_seq_host_.resize(static_cast<size_t>(n));
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int32_t t = b.query_start_loc[s]; t < b.query_start_loc[s + 1]; ++t) {
      token_seq_host_[static_cast<size_t>(t)] = static_cast<int32_t>(s);
    }
  }
  if (int4) {
    check_distinct_seats(b.seats, kv_.dummy_seat(), slot_used_);
    plan_int4_fills(b, kv_.num_blocks, B, nkv, fills_);
    S4KV_CHECK(static_cast<int64_t>(fills_.fills.size()) <= max_fills_,
               "cuda forward: ", fills_.fills.size(), " blocks fill in one step (limit ",
               max_fills_, ")");
  }

  decode_shape_ = decode_shape(config_, kv_, num_sms_);
  plan_attention(b, decode_shape_, decode_kernels_, attention_plan_);
  prefill_tiles_.clear();
  prefill_merges_.clear();
  if (prefill_kernels_ && !attention_plan_.other_tokens.empty()) {
    plan_prefill(b, 2, prefill_tiles_);
    split_prefill(b, static_cast<int>(config_.num_attention_heads), prefill_wave_, prefill_tiles_,
                  prefill_merges_);
    remove_prefill_rows(b, 2, attention_plan_.other_tokens);
  }
  // int4_kivi: the prefilling sequences' pool tiles made once a KV head and layer, as many as
  // the rows hold (the rest dequantized in the prefill kernel).
  pool_rows_plan_.clear();
  if (pool_rows_k_ != nullptr && !prefill_tiles_.empty()) {
    plan_int4_pool_rows(b, prefill_tiles_, attention_plan_.pool_ends, kv_.num_blocks,
                        static_cast<int>(B), sizes_.pool_rows_capacity, pool_rows_plan_);
  }
  const DecodePlan& plan = attention_plan_;
  S4KV_CHECK(static_cast<int64_t>(plan.items.size()) <= sizes_.decode_items,
             "cuda forward: ", plan.items.size(), " attention items (limit ", sizes_.decode_items,
             ")");
  // Rooms: a captured size's capacities, or this step's counts.
  size_t fill_room = fills_.fills.size(), quant_room = fills_.first_position.size();
  size_t item_room = plan.items.size();
  if (size > 0) {
    const DecodeCapacity cap = decode_capacity(size, decode_shape_);
    S4KV_CHECK(static_cast<int64_t>(fills_.fills.size()) <= size &&
                   plan.num_int4_items <= cap.int4_items &&
                   static_cast<int64_t>(plan.items.size()) - plan.num_int4_items <= cap.row_items,
               "cuda forward: a decode step beyond its graph's capacity");
    fill_room = static_cast<size_t>(size);
    quant_room = static_cast<size_t>(size * nkv);
    item_room = static_cast<size_t>(cap.int4_items + cap.row_items);
  }
  step_merge_in_items_ = merge_counts_ != nullptr && merge_in_items(plan);
  const int32_t live[kStepLiveWords] = {
      plan.num_int4_items, static_cast<int32_t>(plan.items.size()),
      static_cast<int32_t>(fills_.fills.size()), static_cast<int32_t>(fills_.first_position.size()),
      step_merge_in_items_ ? 1 : 0};

  arena_.clear();
  step_.token_ids = arena_.put(b.token_ids.data(), b.token_ids.size());
  step_.positions = arena_.put(b.positions.data(), b.positions.size());
  step_.token_seq = arena_.put(token_seq_host_.data(), token_seq_host_.size());
  step_.qsl = arena_.put(b.query_start_loc.data(), b.query_start_loc.size());
  step_.seq_lens = arena_.put(b.seq_lens.data(), b.seq_lens.size());
  step_.tables = arena_.put(b.block_tables.data(), b.block_tables.size());
  step_max_blocks_ = b.max_num_blocks_per_seq;
  step_.logits_rows = arena_.put(b.logits_indices.data(), b.logits_indices.size());
  step_.slots = arena_.put(b.slot_mapping.data(), b.slot_mapping.size());
  step_.res_slots = arena_.put(b.seats.data(), b.seats.size());
  step_.res_starts = arena_.put(b.seat_starts.data(), b.seat_starts.size());
  step_.fills = arena_.put(fills_.fills.data(), fills_.fills.size(), fill_room);
  step_num_fills_ = static_cast<int64_t>(fills_.fills.size());
  step_.first_pos =
      arena_.put(fills_.first_position.data(), fills_.first_position.size(), quant_room);
  step_.out_index = arena_.put(fills_.out_index.data(), fills_.out_index.size(), quant_room);
  step_num_quantized_ = fills_.num_quantized;
  step_.other_tokens = arena_.put(plan.other_tokens.data(), plan.other_tokens.size());
  step_.pool_ends = arena_.put(plan.pool_ends.data(), plan.pool_ends.size());
  step_.items = arena_.put(plan.items.data(), plan.items.size(), item_room);
  step_.decode_seqs = arena_.put(plan.seqs.data(), plan.seqs.size());
  step_.live = arena_.put(live, kStepLiveWords);
  step_.prefill_tiles = arena_.put(prefill_tiles_.data(), prefill_tiles_.size());
  step_.prefill_merges = arena_.put(prefill_merges_.data(), prefill_merges_.size());
  step_.pool_row_base = arena_.put(pool_rows_plan_.base.data(), pool_rows_plan_.base.size());
  step_.pool_row_tiles = arena_.put(pool_rows_plan_.tiles.data(), pool_rows_plan_.tiles.size());
  step_.pool_row_seqs = arena_.put(pool_rows_plan_.seqs.data(), pool_rows_plan_.seqs.size());
  arena_.upload(stream_);
}

// A decode-only step (one token per sequence, every row's logits in row order) of at most the
// largest capture size replays the graph of the smallest size that holds it.
int64_t CudaBackend::graph_size(const ForwardBatch& b) const {
  if (capture_sizes_.empty()) return 0;
  const int64_t n = b.num_tokens();
  if (n != b.num_seqs() || n > capture_sizes_.back() || b.num_logits() != n) return 0;
  for (int64_t i = 0; i < n; ++i) {
    if (b.logits_indices[static_cast<size_t>(i)] != i) return 0;
  }
  return *std::lower_bound(capture_sizes_.begin(), capture_sizes_.end(), n);
}

// The batch, block tables at the full stride (max_blocks_per_seq_), then padding sequences
// (one token at position 0 on the dummy block and seat, backend.h) up to `size`.
// Every sequence gets a seat (the dummy seat where the batch gives none: only int4_kivi reads
// seats), so that the arena's layout is the capture's.
const ForwardBatch& CudaBackend::padded(const ForwardBatch& b, int64_t size) {
  pad_builder_.clear();
  const bool seats = !b.seats.empty();
  const auto dummy_seat = static_cast<int32_t>(kv_.dummy_seat());
  for (int64_t s = 0; s < b.num_seqs(); ++s) {
    const int64_t len = b.seq_lens[s];
    pad_builder_.add({b.token_ids.data() + s, 1}, len - 1,
                     {b.block_tables.data() + s * b.max_num_blocks_per_seq,
                      static_cast<size_t>(ceil_div(len, kv_.block_size))},
                     seats ? b.seats[s] : dummy_seat, seats ? b.seat_starts[s] : 0);
  }
  const int32_t token = 0, dummy = static_cast<int32_t>(kv_.dummy_block());
  for (int64_t s = b.num_seqs(); s < size; ++s)
    pad_builder_.add({&token, 1}, 0, {&dummy, 1}, dummy_seat, 0);
  pad_builder_.want_all_logits();
  padded_ = pad_builder_.batch();
  return padded_;
}

// At start-up (after the cache exists; --enforce-eager skips it): per capture size, one eager
// step of padding sequences in the graph's arena layout (kernel attributes, GEMM plans), the
// same kernels captured into a graph, and one replay. Padding writes only the dummy block and
// seat.
void CudaBackend::capture_graphs() {
  if (opt_.enforce_eager) return;
  const auto start = std::chrono::steady_clock::now();
  size_t free_before = 0, free_after = 0, total = 0;
  S4KV_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  const std::vector<int64_t> sizes =
      cuda_graph_sizes(std::min(opt_.max_num_seqs, opt_.max_num_tokens));
  const bool int4 = kv_.dtype == kv::KvCacheDtype::kInt4Kivi;
  graphs_.assign(sizes.size(), nullptr);
  graphs_no_commit_.assign(int4 ? sizes.size() : 0, nullptr);
  graph_arrays_.assign(sizes.size(), StepArrays{});
  const ForwardBatch none;
  for (size_t i = sizes.size(); i-- > 0;) {
    const int64_t size = sizes[i];
    const ForwardBatch& b = padded(none, size);
    stage(b, size);
    launch_forward(size, size);
    S4KV_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (const bool commit : {true, false}) {
      if (!commit && !int4) break;
      cudaGraphExec_t& exec = commit ? graphs_[i] : graphs_no_commit_[i];
      graph_commit_ = commit;
      cudaGraph_t graph = nullptr;
      S4KV_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      launch_forward(size, size);
      S4KV_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
      S4KV_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      S4KV_CUDA_CHECK(cudaGraphDestroy(graph));
      S4KV_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
      S4KV_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    graph_commit_ = true;
    graph_arrays_[i] = step_;
  }
  graph_size_ = 0;
  capture_sizes_ = sizes;
  S4KV_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char line[160];
  std::snprintf(line, sizeof(line),
                "CUDA graphs: %zu decode batch sizes (1 .. %lld) captured in %.1f s, %lld MiB",
                sizes.size(), static_cast<long long>(sizes.back()), seconds,
                static_cast<long long>(
                    (static_cast<int64_t>(free_before) - static_cast<int64_t>(free_after)) >> 20));
  log_info("cuda", line);
}

}  // namespace impl

using impl::CudaBackend;

int64_t cuda_graph_replays(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  return cuda != nullptr ? cuda->graph_replays() : -1;
}

Status check_device(cudaDeviceProp& prop) {
  if (device_count() == 0) return unsupported("--device cuda: no CUDA device is visible");
  S4KV_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major < 8) {
    return unsupported("--device cuda: " + std::string(prop.name) + " has compute capability " +
                       std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                       " (S4 KV needs 8.0 or later)");
  }
  return Status::ok();
}

Result<std::unique_ptr<Backend>> make_cuda_backend(const model::ModelConfig& config,
                                                   const model::ModelWeights& weights,
                                                   const KvCacheConfig& kv,
                                                   const CudaBackendOptions& options) {
  cudaDeviceProp prop{};
  S4KV_RETURN_IF_ERROR(check_device(prop));
  if (config.head_dim != kHeadDim) {
    return unsupported("cuda backend: head_dim=" + std::to_string(config.head_dim) +
                       " (supported: 128)");
  }
  if (options.compute_dtype != DType::kBF16 && options.compute_dtype != DType::kF16 &&
      options.compute_dtype != DType::kF32) {
    return invalid_argument("cuda backend: --dtype must be bfloat16, float16 or float32");
  }
  if (options.max_num_tokens <= 0 || options.max_num_seqs <= 0 || options.max_model_len <= 0 ||
      options.max_num_logits < 0) {
    return invalid_argument("cuda backend: limits must be positive");
  }
  if (!(options.gpu_memory_utilization > 0.0 && options.gpu_memory_utilization <= 1.0)) {
    return invalid_argument("--gpu-memory-utilization must be in (0, 1]");
  }
  if (const auto reasons = unsupported_reasons(kv); !reasons.empty()) {
    return unsupported(reasons.front());
  }
  kv::Int4KiviLayout layout;
  if (kv.dtype == kv::KvCacheDtype::kInt4Kivi) {
    layout =
        *kv::Int4KiviLayout::create(static_cast<int>(kv.block_size), static_cast<int>(kHeadDim),
                                    static_cast<int>(kv.value_group_size));
  }
  size_t free_bytes = 0, total_bytes = 0;
  S4KV_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t weights_bytes = weight_bytes(config, options.compute_dtype);
  const int64_t activations = Sizes(config, kv, options).total();
  if (weights_bytes + activations > static_cast<int64_t>(free_bytes)) {
    return Status(StatusCode::kResourceExhausted,
                  "the weights do not fit: " + std::to_string(weights_bytes >> 20) + " MiB in " +
                      std::string(dtype_name(options.compute_dtype)) + " and " +
                      std::to_string(activations >> 20) + " MiB of activations, " +
                      std::to_string(free_bytes >> 20) + " MiB free on " + prop.name);
  }
  auto backend =
      std::make_unique<CudaBackend>(config, kv, options, cpu::rope_inv_freq(config), layout);
  backend->load_weights(weights);
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace s4kv::backend::cuda
