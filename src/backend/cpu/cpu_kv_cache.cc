// The 16-bit and fp8_e4m3 caches (paged, one element per channel) and the dtype switch; the
// int4_kivi cache lives in int4_kivi_kv_cache.{h,cc}.
#include "backend/cpu/cpu_kv_cache.h"

#include <array>
#include <string>
#include <vector>

#include "backend/cpu/int4_kivi_kv_cache.h"
#include "backend/cpu/kv_write.h"
#include "backend/cpu/paged_kv_cache.h"
#include "common/check.h"
#include "kv/fp8_e4m3.h"

namespace s4kv::backend::cpu {
namespace {

const int32_t* table_of(const ForwardBatch& batch, int64_t seq) {
  return batch.block_tables.data() + seq * batch.max_num_blocks_per_seq;
}

// K (after RoPE) and V in the model's 16-bit dtype: what the golden logits model.
class Paged16BitKvCache final : public CpuKvCache {
 public:
  Paged16BitKvCache(const KvCacheConfig& config, const CpuKvCacheShape& s)
      : cache_(KvCacheShape{s.num_layers, config.num_blocks + 1 /* dummy */, config.block_size,
                            s.num_kv_heads, s.head_dim, s.dtype}) {}

  void write(int64_t layer, const ForwardBatch& batch, std::span<const float> k,
             std::span<const float> v, int64_t row_stride) override {
    kv_write_ref(k, v, row_stride, cache_.shape().slot_elems(), batch.slot_mapping, cache_.k(layer),
                 cache_.v(layer), cache_.shape().dtype);
  }

  RotatedValues gather_range(int64_t layer, const ForwardBatch& batch, int64_t seq, int64_t kv_head,
                             int64_t begin, int64_t end, float* keys,
                             float* values) const override {
    const KvCacheShape& s = cache_.shape();
    gather_paged_16bit(cache_.k(layer), cache_.v(layer), s.dtype, s.block_size, s.slot_elems(),
                       table_of(batch, seq), kv_head * s.head_dim, s.head_dim, begin, end, keys,
                       values);
    return {};
  }

  Paged16BitRun paged16_run(int64_t layer, const ForwardBatch& batch, int64_t seq,
                            int64_t kv_head) const override {
    const KvCacheShape& s = cache_.shape();
    S4KV_CHECK(layer >= 0 && layer < s.num_layers && kv_head >= 0 && kv_head < s.num_kv_heads,
               "16-bit paged16_run: layer ", layer, " head ", kv_head);
    const int32_t* table = table_of(batch, seq);
    const int64_t num_blocks_used = (batch.seq_lens[seq] + s.block_size - 1) / s.block_size;
    S4KV_CHECK(num_blocks_used <= batch.max_num_blocks_per_seq, "16-bit paged16_run: seq ", seq);
    for (int64_t i = 0; i < num_blocks_used; ++i) {
      S4KV_CHECK(table[i] >= 0 && table[i] < s.num_blocks, "16-bit paged16_run: block id ",
                 table[i]);
    }
    return {.k = cache_.k(layer).data() + kv_head * s.head_dim,
            .v = cache_.v(layer).data() + kv_head * s.head_dim,
            .slot_elems = s.slot_elems(),
            .block_size = s.block_size,
            .table = table,
            .dtype = s.dtype};
  }

  int64_t num_bytes() const override { return cache_.num_bytes(); }
  KvStorageView storage(int64_t layer) const override {
    return {.k = std::as_bytes(cache_.k(layer)), .v = std::as_bytes(cache_.v(layer))};
  }

 private:
  PagedKvCache cache_;
};

// vLLM's default fp8 cache, per-tensor scale 1.0: the 16-bit K/V (as the model would hold them
// on a GPU) converted to E4M3 with saturation (kv/fp8_e4m3.h), widened exactly on read.
class PagedFp8KvCache final : public CpuKvCache {
 public:
  PagedFp8KvCache(const KvCacheConfig& config, const CpuKvCacheShape& s)
      : block_size_(config.block_size),
        head_dim_(s.head_dim),
        slot_elems_(s.num_kv_heads * s.head_dim),
        layer_elems_((config.num_blocks + 1 /* dummy */) * config.block_size * slot_elems_),
        dtype_(s.dtype),
        data_(static_cast<size_t>(s.num_layers * 2 * layer_elems_), 0) {
    for (int i = 0; i < 256; ++i) decode_[i] = kv::fp8_e4m3_to_float(static_cast<uint8_t>(i));
  }

  void write(int64_t layer, const ForwardBatch& batch, std::span<const float> k,
             std::span<const float> v, int64_t row_stride) override {
    uint8_t* kc = data_.data() + layer * 2 * layer_elems_;
    uint8_t* vc = kc + layer_elems_;
    const int64_t num_slots = layer_elems_ / slot_elems_;
    for (int64_t t = 0; t < batch.num_tokens(); ++t) {
      const int64_t slot = batch.slot_mapping[t];
      S4KV_CHECK(slot >= 0 && slot < num_slots, "fp8 kv_write: slot ", slot);
      for (int64_t i = 0; i < slot_elems_; ++i) {
        kc[slot * slot_elems_ + i] = encode(k[t * row_stride + i]);
        vc[slot * slot_elems_ + i] = encode(v[t * row_stride + i]);
      }
    }
  }

  RotatedValues gather_range(int64_t layer, const ForwardBatch& batch, int64_t seq, int64_t kv_head,
                             int64_t begin, int64_t end, float* keys,
                             float* values) const override {
    const auto k = std::span<const uint8_t>(data_).subspan(
        static_cast<size_t>(layer * 2 * layer_elems_), static_cast<size_t>(layer_elems_));
    const auto v = std::span<const uint8_t>(data_).subspan(
        static_cast<size_t>((layer * 2 + 1) * layer_elems_), static_cast<size_t>(layer_elems_));
    gather_paged(k, v, block_size_, slot_elems_, table_of(batch, seq), kv_head * head_dim_,
                 head_dim_, begin, end, keys, values,
                 [this](const uint8_t* src, float* dst, int64_t count) {
                   for (int64_t i = 0; i < count; ++i) dst[i] = decode_[src[i]];
                 });
    return {};
  }

  int64_t num_bytes() const override { return static_cast<int64_t>(data_.size()); }
  KvStorageView storage(int64_t layer) const override {
    const auto all = std::as_bytes(std::span<const uint8_t>(data_));
    const auto n = static_cast<size_t>(layer_elems_);
    return {.k = all.subspan(static_cast<size_t>(layer) * 2 * n, n),
            .v = all.subspan((static_cast<size_t>(layer) * 2 + 1) * n, n)};
  }

 private:
  uint8_t encode(float x) const {
    return kv::float_to_fp8_e4m3(kv_decode(kv_encode(x, dtype_), dtype_));
  }

  int64_t block_size_, head_dim_, slot_elems_, layer_elems_;
  DType dtype_;
  std::vector<uint8_t> data_;      // [num_layers, 2 (K, V), num_slots, num_kv_heads, head_dim]
  std::array<float, 256> decode_;  // fp8_e4m3_to_float of every code (exact)
};

}  // namespace

Result<std::unique_ptr<CpuKvCache>> make_cpu_kv_cache(const KvCacheConfig& config,
                                                      const CpuKvCacheShape& shape,
                                                      std::span<const float> inv_freq) {
  S4KV_RETURN_IF_ERROR(check_kv_cache_shape(config, shape.head_dim));
  switch (config.dtype) {
    case kv::KvCacheDtype::k16Bit:
      return std::unique_ptr<CpuKvCache>(std::make_unique<Paged16BitKvCache>(config, shape));
    case kv::KvCacheDtype::kFp8E4M3:
      return std::unique_ptr<CpuKvCache>(std::make_unique<PagedFp8KvCache>(config, shape));
    case kv::KvCacheDtype::kInt4Kivi: {
      auto layout = kv::Int4KiviLayout::create(static_cast<int>(config.block_size),
                                               static_cast<int>(shape.head_dim),
                                               static_cast<int>(config.value_group_size));
      S4KV_CHECK(layout.is_ok(), layout.status().message());  // checked above
      return std::unique_ptr<CpuKvCache>(
          std::make_unique<Int4KiviKvCache>(config, shape, *layout, inv_freq));
    }
  }
  return unsupported("unknown kv_cache_dtype");
}

}  // namespace s4kv::backend::cpu
