#include "backend/cpu/rope.h"

#include <cmath>
#include <numbers>

#include "backend/cpu/thread_pool.h"
#include "backend/rope_table.h"
#include "common/check.h"

namespace s4kv::backend::cpu {
namespace {

// S4KV_CHECKs the shapes rope_ref and rope share; returns num_tokens.
int64_t checked_tokens(const char* op, std::span<const float> x, int64_t row_stride,
                       int64_t num_heads, int64_t head_dim, std::span<const int32_t> positions) {
  const auto num_tokens = static_cast<int64_t>(positions.size());
  S4KV_CHECK(head_dim > 0 && head_dim % 2 == 0 && num_heads >= 0, op, ": head_dim ", head_dim,
             ", num_heads ", num_heads);
  S4KV_CHECK(row_stride >= num_heads * head_dim, op, ": row_stride");
  S4KV_CHECK(num_tokens == 0 || static_cast<int64_t>(x.size()) >=
                                    (num_tokens - 1) * row_stride + num_heads * head_dim,
             op, ": x too small");
  return num_tokens;
}

}  // namespace

std::vector<float> rope_inv_freq(const model::ModelConfig& config) {
  return rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling);
}

// transformers, _compute_default_rope_parameters:
//   inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
// arange and the division are fp32; base ** t is torch.pow(scalar, fp32 tensor) (fp32
// result, within 1 ulp of the exact power, which double pow rounded to float gives); and
// `1.0 / tensor` is Tensor.__rtruediv__, i.e. reciprocal() * 1.0, an fp32 reciprocal.
//
// _compute_llama3_parameters then works on that fp32 tensor with Python scalars (converted to
// fp32 by torch), again with scalar / tensor evaluated as reciprocal(tensor) * scalar:
//   wavelen = 2 * math.pi / inv_freq
//   inv_freq_llama = where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
//   smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
//   smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
//   medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen)
//   inv_freq_llama = where(medium, smoothed, inv_freq_llama)
// with low/high_freq_wavelen = old_context_len / low/high_freq_factor (Python doubles,
// compared against the fp32 tensor after conversion to fp32).
std::vector<float> rope_inv_freq(int64_t head_dim, double rope_theta,
                                 const model::RopeScaling& scaling) {
  S4KV_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope_inv_freq: head_dim ", head_dim);
  const auto half = static_cast<size_t>(head_dim / 2);
  const auto base = static_cast<float>(rope_theta);
  const auto dim = static_cast<float>(head_dim);
  std::vector<float> inv_freq(half);
  for (size_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / dim;
    const auto power = static_cast<float>(std::pow(static_cast<double>(base), double{exponent}));
    inv_freq[i] = 1.0f / power;
  }
  if (!scaling.llama3) return inv_freq;

  const auto factor = static_cast<float>(scaling.factor);
  const auto low_freq_factor = static_cast<float>(scaling.low_freq_factor);
  const auto high_freq_factor = static_cast<float>(scaling.high_freq_factor);
  const auto old_context_len = static_cast<double>(scaling.original_max_position_embeddings);
  const auto low_freq_wavelen = static_cast<float>(old_context_len / scaling.low_freq_factor);
  const auto high_freq_wavelen = static_cast<float>(old_context_len / scaling.high_freq_factor);
  const auto two_pi = static_cast<float>(2.0 * std::numbers::pi);
  const auto old_len_f = static_cast<float>(old_context_len);
  for (size_t i = 0; i < half; ++i) {
    const float f = inv_freq[i];
    const float wavelen = (1.0f / f) * two_pi;
    float llama = wavelen > low_freq_wavelen ? f / factor : f;
    const float smooth =
        ((1.0f / wavelen) * old_len_f - low_freq_factor) / (high_freq_factor - low_freq_factor);
    const float a = (1.0f - smooth) * llama;
    const float smoothed = a / factor + smooth * llama;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) llama = smoothed;
    inv_freq[i] = llama;
  }
  return inv_freq;
}

void rope_ref(std::span<float> x, int64_t row_stride, int64_t num_heads, int64_t head_dim,
              std::span<const int32_t> positions, std::span<const float> inv_freq) {
  const int64_t num_tokens =
      checked_tokens("rope_ref", x, row_stride, num_heads, head_dim, positions);
  const int64_t half = head_dim / 2;
  S4KV_CHECK(static_cast<int64_t>(inv_freq.size()) == half, "rope_ref: inv_freq size");
  std::vector<float> cos(static_cast<size_t>(half)), sin(static_cast<size_t>(half));
  for (int64_t t = 0; t < num_tokens; ++t) {
    // As transformers: freqs = inv_freq * position in fp32, then cos/sin of that fp32 angle.
    const auto pos = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = inv_freq[i] * pos;
      cos[i] = static_cast<float>(std::cos(double{angle}));
      sin[i] = static_cast<float>(std::sin(double{angle}));
    }
    for (int64_t h = 0; h < num_heads; ++h) {
      float* v = x.data() + t * row_stride + h * head_dim;
      rope_rotate(v, v, cos.data(), sin.data(), head_dim);  // in place: reads a pair, then writes
    }
  }
}

void rope(std::span<float> x, int64_t row_stride, int64_t num_heads, int64_t head_dim,
          std::span<const int32_t> positions, const RopeTable& table, ThreadPool* pool) {
  const int64_t num_tokens = checked_tokens("rope", x, row_stride, num_heads, head_dim, positions);
  S4KV_CHECK(table.half_dim() == head_dim / 2, "rope: table for head_dim ", 2 * table.half_dim(),
             ", rows of head_dim ", head_dim);
  if (num_heads == 0) return;
  // Tokens [begin, end): table.cos/sin check each position against the rows the table holds.
  parallel_for_rows(pool, num_tokens, num_heads * head_dim, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t pos = positions[static_cast<size_t>(t)];
      const float* cos = table.cos(pos);
      const float* sin = table.sin(pos);
      for (int64_t h = 0; h < num_heads; ++h) {
        float* v = x.data() + t * row_stride + h * head_dim;
        rope_rotate(v, v, cos, sin, head_dim);
      }
    }
  });
}

}  // namespace s4kv::backend::cpu
