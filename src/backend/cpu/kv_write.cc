#include "backend/cpu/kv_write.h"

#include "backend/cpu/paged_kv_cache.h"
#include "common/check.h"

namespace s4kv::backend::cpu {

void kv_write_ref(std::span<const float> k, std::span<const float> v, int64_t row_stride,
                  int64_t kv_elems, std::span<const int64_t> slot_mapping,
                  std::span<uint16_t> k_cache, std::span<uint16_t> v_cache, DType dtype) {
  const auto num_tokens = static_cast<int64_t>(slot_mapping.size());
  const auto num_slots = static_cast<int64_t>(k_cache.size()) / kv_elems;
  S4KV_CHECK(v_cache.size() == k_cache.size(), "kv_write_ref: cache sizes");
  S4KV_CHECK(num_tokens == 0 ||
                 (static_cast<int64_t>(k.size()) >= (num_tokens - 1) * row_stride + kv_elems &&
                  static_cast<int64_t>(v.size()) >= (num_tokens - 1) * row_stride + kv_elems),
             "kv_write_ref: k/v too small");
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    S4KV_CHECK(slot >= 0 && slot < num_slots, "kv_write_ref: slot ", slot);
    const float* ks = k.data() + t * row_stride;
    const float* vs = v.data() + t * row_stride;
    uint16_t* kd = k_cache.data() + slot * kv_elems;
    uint16_t* vd = v_cache.data() + slot * kv_elems;
    for (int64_t i = 0; i < kv_elems; ++i) {
      kd[i] = kv_encode(ks[i], dtype);
      vd[i] = kv_encode(vs[i], dtype);
    }
  }
}

}  // namespace s4kv::backend::cpu
