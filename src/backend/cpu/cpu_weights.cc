#include "backend/cpu/cpu_weights.h"

#include <cstring>
#include <string>

#include "backend/cpu/gemm16.h"
#include "common/check.h"
#include "common/half.h"

namespace s4kv::backend::cpu {

void WeightMatrix::append(const model::TensorView& t) {
  const int64_t c = t.shape.empty() ? 0 : t.shape.back();
  const int64_t r = c == 0 ? 0 : t.numel() / c;
  S4KV_CHECK(c > 0 && r * c == t.numel(), "WeightMatrix: tensor shape");
  S4KV_CHECK(rows == 0 || c == cols, "WeightMatrix: ", c, " columns appended to ", cols);
  const bool t16 = t.dtype == DType::kBF16 || t.dtype == DType::kF16;
  if (rows == 0) dtype = t16 ? t.dtype : DType::kF32;
  if (is_16bit() && t.dtype != dtype) {  // mixed dtypes: the whole matrix in fp32
    f32.resize(h16.size());
    for (int64_t i = 0; i < rows; ++i) row_as_f32(i, f32.data() + i * cols);
    h16.clear();
    h16.shrink_to_fit();
    dtype = DType::kF32;
  }
  if (is_16bit()) {
    S4KV_CHECK(t.data.size() == static_cast<size_t>(t.numel()) * 2, "WeightMatrix: size");
    const size_t base = h16.size();
    h16.resize(base + t.data.size() / 2);
    std::memcpy(h16.data() + base, t.data.data(), t.data.size());
  } else {
    append_as_f32(t, f32);
  }
  rows += r;
  cols = c;
}

void WeightMatrix::row_as_f32(int64_t r, float* out) const {
  S4KV_CHECK(r >= 0 && r < rows, "WeightMatrix: row ", r);
  if (!is_16bit()) {
    std::memcpy(out, f32.data() + r * cols, static_cast<size_t>(cols) * sizeof(float));
    return;
  }
  widen16(cpu_isa(), h16.data() + r * cols, dtype == DType::kBF16, cols, out);
}

int64_t WeightMatrix::num_bytes() const {
  return static_cast<int64_t>(h16.size() * sizeof(uint16_t) + f32.size() * sizeof(float));
}

int64_t CpuWeights::num_bytes() const {
  int64_t n = embed_tokens.num_bytes() + lm_head.num_bytes() +
              static_cast<int64_t>(norm.size() * sizeof(float));
  for (const auto& l : layers) {
    n += l.qkv_proj.num_bytes() + l.o_proj.num_bytes() + l.gate_up_proj.num_bytes() +
         l.down_proj.num_bytes() +
         static_cast<int64_t>(
             (l.input_layernorm.size() + l.qkv_bias.size() + l.post_attention_layernorm.size()) *
             sizeof(float));
  }
  return n;
}

void append_as_f32(const model::TensorView& t, std::vector<float>& out) {
  const auto n = static_cast<size_t>(t.numel());
  const size_t base = out.size();
  out.resize(base + n);
  float* dst = out.data() + base;
  const std::byte* src = t.data.data();
  switch (t.dtype) {
    case DType::kF32:
      S4KV_CHECK(t.data.size() == n * 4, "append_as_f32: size");
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kBF16:
    case DType::kF16: {
      S4KV_CHECK(t.data.size() == n * 2, "append_as_f32: size");
      const bool bf16 = t.dtype == DType::kBF16;
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);  // the mapped data may be unaligned
        dst[i] = bf16 ? bf16_to_float(h) : fp16_to_float(h);
      }
      return;
    }
    default:
      S4KV_CHECK(false, "append_as_f32: unsupported weight dtype ", dtype_name(t.dtype));
  }
}

namespace {

std::vector<float> to_f32(const model::ModelWeights& w, const std::string& name) {
  std::vector<float> out;
  append_as_f32(w.get(name), out);
  return out;
}

}  // namespace

CpuWeights convert_weights(const model::ModelConfig& config, const model::ModelWeights& w) {
  CpuWeights out;
  out.embed_tokens.append(w.get("model.embed_tokens.weight"));
  out.norm = to_f32(w, "model.norm.weight");
  if (!config.tie_word_embeddings) out.lm_head.append(w.get("lm_head.weight"));
  out.layers.resize(static_cast<size_t>(config.num_hidden_layers));
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    CpuLayerWeights& l = out.layers[static_cast<size_t>(i)];
    l.input_layernorm = to_f32(w, p + "input_layernorm.weight");
    l.post_attention_layernorm = to_f32(w, p + "post_attention_layernorm.weight");
    for (const char* m : {"q_proj", "k_proj", "v_proj"}) {
      l.qkv_proj.append(w.get(p + "self_attn." + m + ".weight"));
      if (config.qkv_bias) append_as_f32(w.get(p + "self_attn." + m + ".bias"), l.qkv_bias);
    }
    l.o_proj.append(w.get(p + "self_attn.o_proj.weight"));
    l.gate_up_proj.append(w.get(p + "mlp.gate_proj.weight"));
    l.gate_up_proj.append(w.get(p + "mlp.up_proj.weight"));
    l.down_proj.append(w.get(p + "mlp.down_proj.weight"));
  }
  return out;
}

}  // namespace s4kv::backend::cpu
