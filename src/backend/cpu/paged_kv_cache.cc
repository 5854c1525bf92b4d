#include "backend/cpu/paged_kv_cache.h"

#include "common/check.h"

namespace s4kv::backend::cpu {

PagedKvCache::PagedKvCache(const KvCacheShape& shape) : shape_(shape) {
  S4KV_CHECK(shape.num_layers > 0 && shape.num_blocks > 0 && shape.block_size > 0 &&
                 shape.num_kv_heads > 0 && shape.head_dim > 0,
             "PagedKvCache: non-positive dimension");
  S4KV_CHECK(shape.dtype == DType::kBF16 || shape.dtype == DType::kF16,
             "PagedKvCache: 16-bit dtype expected, got ", dtype_name(shape.dtype));
  data_.assign(static_cast<size_t>(shape.num_layers * 2 * shape.layer_elems()), 0);
}

std::span<uint16_t> PagedKvCache::k(int64_t layer) {
  S4KV_CHECK(layer >= 0 && layer < shape_.num_layers, "PagedKvCache: layer ", layer);
  return std::span<uint16_t>(data_).subspan(static_cast<size_t>(layer * 2 * shape_.layer_elems()),
                                            static_cast<size_t>(shape_.layer_elems()));
}

std::span<uint16_t> PagedKvCache::v(int64_t layer) {
  S4KV_CHECK(layer >= 0 && layer < shape_.num_layers, "PagedKvCache: layer ", layer);
  return std::span<uint16_t>(data_).subspan(
      static_cast<size_t>((layer * 2 + 1) * shape_.layer_elems()),
      static_cast<size_t>(shape_.layer_elems()));
}

std::span<const uint16_t> PagedKvCache::k(int64_t layer) const {
  return const_cast<PagedKvCache*>(this)->k(layer);
}

std::span<const uint16_t> PagedKvCache::v(int64_t layer) const {
  return const_cast<PagedKvCache*>(this)->v(layer);
}

}  // namespace s4kv::backend::cpu
