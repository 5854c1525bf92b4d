#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_kv_cache.h"
#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/embed.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/mlp.h"
#include "backend/cpu/rmsnorm.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/thread_pool.h"

namespace s4kv::backend::cpu {
namespace {

// Per-step activations, grown to the largest batch seen (no allocation once warm).
struct Activations {
  std::vector<float> x;        // [num_tokens, hidden] residual stream
  std::vector<float> h;        // [num_tokens, hidden] normed input of a sublayer
  std::vector<float> qkv;      // [num_tokens, (num_heads + 2 * num_kv_heads) * head_dim]
  std::vector<float> attn;     // [num_tokens, num_heads * head_dim]
  std::vector<float> gate_up;  // [num_tokens, 2 * intermediate]
  std::vector<float> act;      // [num_tokens, intermediate]
  std::vector<float> rows;     // [num_logits, hidden] final-normed rows that need logits
  std::vector<float> logits;   // [num_logits, vocab]
};

std::span<float> sized(std::vector<float>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return std::span<float>(v).first(static_cast<size_t>(n));
}

class CpuBackend final : public HostSamplingBackend {
 public:
  CpuBackend(const model::ModelConfig& config, const model::ModelWeights& weights,
             const CpuBackendOptions& options)
      : HostSamplingBackend(config.vocab_size),
        config_(config),
        weights_(convert_weights(config, weights)),
        inv_freq_(rope_inv_freq(config)),
        rope_table_(inv_freq_),
        pool_(options.num_threads) {
    use_own_threads_for_blas();  // GEMMs run on pool_ too: one set of threads, never two
  }

  std::string_view name() const override { return "cpu"; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  std::vector<std::string> unsupported(const KvCacheConfig& kv) const override;
  Status init_kv_cache(const KvCacheConfig& kv) override;
  const KvCacheConfig& kv_cache_config() const override {
    S4KV_CHECK(cache_ != nullptr, "cpu backend: kv_cache_config() before init_kv_cache()");
    return kv_config_;
  }
  int64_t weight_bytes() const override { return weights_.num_bytes(); }
  double measure_copy_bandwidth() override;

 protected:
  std::span<const float> run_logits(const ForwardBatch& batch) override;

 private:
  void attention_block(const ForwardBatch& batch, int64_t layer);
  void mlp_block(int64_t num_tokens, int64_t layer);

  model::ModelConfig config_;
  KvCacheConfig kv_config_;
  CpuWeights weights_;
  std::vector<float> inv_freq_;        // [head_dim / 2]
  RopeTable rope_table_;               // q/k cos/sin; grown in run_logits, before the layers
  std::unique_ptr<CpuKvCache> cache_;  // the --kv-cache-dtype's store (cpu_kv_cache.h)
  ThreadPool pool_;
  Activations a_;
};

// rmsnorm -> qkv (+bias) -> rope -> kv_write -> attention -> kv_commit -> o_proj (+ residual).
void CpuBackend::attention_block(const ForwardBatch& batch, int64_t layer) {
  const CpuLayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  const int64_t n = batch.num_tokens();
  const int64_t hidden = config_.hidden_size;
  const int64_t d = config_.head_dim;
  const int64_t q_dim = config_.num_attention_heads * d;
  const int64_t kv_dim = config_.num_key_value_heads * d;
  const int64_t qkv_dim = q_dim + 2 * kv_dim;
  const auto eps = static_cast<float>(config_.rms_norm_eps);

  auto x = sized(a_.x, n * hidden);
  auto h = sized(a_.h, n * hidden);
  rmsnorm_ref(x, w.input_layernorm, eps, n, hidden, h);

  auto qkv = sized(a_.qkv, n * qkv_dim);
  linear(h, w.qkv_proj, w.qkv_bias, qkv, false, &pool_);

  // q heads, then k heads: adjacent in a qkv row, so one call rotates both.
  rope(qkv, qkv_dim, config_.num_attention_heads + config_.num_key_value_heads, d, batch.positions,
       rope_table_, &pool_);

  cache_->write(layer, batch, qkv.subspan(static_cast<size_t>(q_dim)),
                qkv.subspan(static_cast<size_t>(q_dim + kv_dim)), qkv_dim);

  auto attn = sized(a_.attn, n * q_dim);
  AttentionArgs args;
  args.q = qkv;
  args.q_stride = qkv_dim;
  args.num_heads = config_.num_attention_heads;
  args.num_kv_heads = config_.num_key_value_heads;
  args.head_dim = d;
  args.scale = 1.0f / std::sqrt(static_cast<float>(d));
  args.query_start_loc = batch.query_start_loc;
  args.seq_lens = batch.seq_lens;
  args.out = attn;
  const KvGatherFn gather = [&](int64_t seq, int64_t kv_head, int64_t begin, int64_t end, float* k,
                                float* v) {
    return cache_->gather_range(layer, batch, seq, kv_head, begin, end, k, v);
  };
  const KvInPlaceRunFn in_place = [&](int64_t seq, int64_t kv_head) {
    return KvInPlaceRun{cache_->int4_run(layer, batch, seq, kv_head),
                        cache_->paged16_run(layer, batch, seq, kv_head)};
  };
  context_attention(args, gather, in_place, &pool_);
  cache_->commit(layer, batch, &pool_);

  linear(attn, w.o_proj, {}, x, /*accumulate=*/true, &pool_);
}

// rmsnorm -> gate_up -> silu_mul -> down (+ residual).
void CpuBackend::mlp_block(int64_t n, int64_t layer) {
  const CpuLayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  const int64_t hidden = config_.hidden_size;
  const int64_t inter = config_.intermediate_size;
  auto x = sized(a_.x, n * hidden);
  auto h = sized(a_.h, n * hidden);
  rmsnorm_ref(x, w.post_attention_layernorm, static_cast<float>(config_.rms_norm_eps), n, hidden,
              h);
  auto gate_up = sized(a_.gate_up, n * 2 * inter);
  linear(h, w.gate_up_proj, {}, gate_up, false, &pool_);
  auto act = sized(a_.act, n * inter);
  silu_mul_ref(gate_up, inter, act, &pool_);
  linear(act, w.down_proj, {}, x, /*accumulate=*/true, &pool_);
}

std::span<const float> CpuBackend::run_logits(const ForwardBatch& batch) {
  S4KV_CHECK(cache_ != nullptr, "cpu backend: a step before init_kv_cache()");
  check_forward_batch(batch, kv_config_, config_.vocab_size);
  const int64_t n = batch.num_tokens();
  const int64_t hidden = config_.hidden_size;
  const int64_t vocab = config_.vocab_size;

  cache_->begin_step(batch);
  // Grown here, on this thread alone, before rope() hands rows to the pool.
  rope_table_.ensure(*std::max_element(batch.positions.begin(), batch.positions.end()) + 1);
  embed(weights_.embed_tokens, batch.token_ids, sized(a_.x, n * hidden));
  for (int64_t layer = 0; layer < config_.num_hidden_layers; ++layer) {
    attention_block(batch, layer);
    mlp_block(n, layer);
  }

  // final_norm and lm_head only on the rows that need logits (RMSNorm is per row).
  const int64_t num_logits = batch.num_logits();
  auto rows = sized(a_.rows, num_logits * hidden);
  for (int64_t i = 0; i < num_logits; ++i) {
    const float* src = a_.x.data() + static_cast<int64_t>(batch.logits_indices[i]) * hidden;
    std::copy_n(src, hidden, rows.data() + i * hidden);
  }
  rmsnorm_ref(rows, weights_.norm, static_cast<float>(config_.rms_norm_eps), num_logits, hidden,
              rows);
  auto logits = sized(a_.logits, num_logits * vocab);
  linear(rows, weights_.lm_head_matrix(), {}, logits, false, &pool_);
  return logits;
}

// memcpy of a 256 MiB buffer (far beyond any cache) in one slice per thread of the forward
// pass, which streams the weights through the same threads; best of 5, read plus written bytes.
double CpuBackend::measure_copy_bandwidth() {
  constexpr size_t kBytes = size_t{256} << 20;
  constexpr int kReps = 5;
  // Filled before timing, so that every page is mapped.
  const std::vector<char> src(kBytes, 1);
  std::vector<char> dst(kBytes, 0);
  const int64_t n = pool_.num_threads();
  const size_t slice = (kBytes / static_cast<size_t>(n) + 63) / 64 * 64;
  double best = 0.0;
  for (int rep = 0; rep < kReps; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    pool_.parallel_for(n, [&](int64_t i) {
      const size_t begin = std::min(kBytes, static_cast<size_t>(i) * slice);
      const size_t end = std::min(kBytes, begin + slice);
      std::memcpy(dst.data() + begin, src.data() + begin, end - begin);
    });
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > 0.0) best = std::max(best, 2.0 * static_cast<double>(kBytes) / seconds);
  }
  return best;
}

CpuKvCacheShape cache_shape(const model::ModelConfig& config) {
  return {config.num_hidden_layers, config.num_key_value_heads, config.head_dim,
          config.dtype == DType::kF16 ? DType::kF16 : DType::kBF16};
}

// The CPU caches run every shape the format allows.
std::vector<std::string> CpuBackend::unsupported(const KvCacheConfig& kv) const {
  if (Status s = check_kv_cache_shape(kv, config_.head_dim); !s.is_ok()) return {s.message()};
  return {};
}

Status CpuBackend::init_kv_cache(const KvCacheConfig& kv) {
  if (cache_ != nullptr) return invalid_argument("cpu backend: init_kv_cache() called twice");
  if (kv.num_blocks <= 0 || kv.block_size <= 0) {
    return invalid_argument("cpu backend: num_blocks and block_size must be positive (got " +
                            std::to_string(kv.num_blocks) + ", " + std::to_string(kv.block_size) +
                            ")");
  }
  auto cache = make_cpu_kv_cache(kv, cache_shape(config_), inv_freq_);
  if (!cache.is_ok()) return cache.status();
  cache_ = std::move(cache).value();
  kv_config_ = kv;
  return Status::ok();
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const model::ModelConfig& config,
                                          const model::ModelWeights& weights,
                                          CpuBackendOptions options) {
  return std::make_unique<CpuBackend>(config, weights, options);
}

Result<std::unique_ptr<Backend>> make_cpu_backend(const model::ModelConfig& config,
                                                  const model::ModelWeights& weights,
                                                  const KvCacheConfig& kv_config,
                                                  CpuBackendOptions options) {
  auto backend = make_cpu_backend(config, weights, options);
  S4KV_RETURN_IF_ERROR(backend->init_kv_cache(kv_config));
  return backend;
}

}  // namespace s4kv::backend::cpu
