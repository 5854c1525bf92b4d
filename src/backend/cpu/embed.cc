#include "backend/cpu/embed.h"

#include <algorithm>

#include "backend/cpu/cpu_weights.h"
#include "common/check.h"

namespace s4kv::backend::cpu {

void embed_ref(std::span<const float> table, int64_t hidden_size,
               std::span<const int32_t> token_ids, std::span<float> out) {
  const auto h = static_cast<size_t>(hidden_size);
  const auto vocab_size = static_cast<int64_t>(table.size() / h);
  S4KV_CHECK(out.size() == token_ids.size() * h, "embed_ref: out size");
  for (size_t t = 0; t < token_ids.size(); ++t) {
    const int32_t id = token_ids[t];
    S4KV_CHECK(id >= 0 && id < vocab_size, "embed_ref: token id ", id);
    std::copy_n(table.data() + static_cast<size_t>(id) * h, h, out.data() + t * h);
  }
}

void embed(const WeightMatrix& table, std::span<const int32_t> token_ids, std::span<float> out) {
  const auto h = static_cast<size_t>(table.cols);
  S4KV_CHECK(out.size() == token_ids.size() * h, "embed: out size");
  for (size_t t = 0; t < token_ids.size(); ++t) {
    const int32_t id = token_ids[t];
    S4KV_CHECK(id >= 0 && id < table.rows, "embed: token id ", id);
    table.row_as_f32(id, out.data() + t * h);
  }
}

}  // namespace s4kv::backend::cpu
