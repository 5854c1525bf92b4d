#include "backend/cpu/cpu_weights.h"

#include <cstring>
#include <string>

#include "common/check.h"
#include "common/half.h"

namespace s4kv::backend::cpu {

int64_t CpuWeights::num_bytes() const {
  size_t n = embed_tokens.size() + norm.size() + lm_head.size();
  for (const auto& l : layers) {
    n += l.input_layernorm.size() + l.qkv_proj.size() + l.qkv_bias.size() + l.o_proj.size() +
         l.post_attention_layernorm.size() + l.gate_up_proj.size() + l.down_proj.size();
  }
  return static_cast<int64_t>(n * sizeof(float));
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
  out.embed_tokens = to_f32(w, "model.embed_tokens.weight");
  out.norm = to_f32(w, "model.norm.weight");
  if (!config.tie_word_embeddings) out.lm_head = to_f32(w, "lm_head.weight");
  out.layers.resize(static_cast<size_t>(config.num_hidden_layers));
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    CpuLayerWeights& l = out.layers[static_cast<size_t>(i)];
    l.input_layernorm = to_f32(w, p + "input_layernorm.weight");
    l.post_attention_layernorm = to_f32(w, p + "post_attention_layernorm.weight");
    for (const char* m : {"q_proj", "k_proj", "v_proj"}) {
      append_as_f32(w.get(p + "self_attn." + m + ".weight"), l.qkv_proj);
      if (config.qkv_bias) append_as_f32(w.get(p + "self_attn." + m + ".bias"), l.qkv_bias);
    }
    l.o_proj = to_f32(w, p + "self_attn.o_proj.weight");
    append_as_f32(w.get(p + "mlp.gate_proj.weight"), l.gate_up_proj);
    append_as_f32(w.get(p + "mlp.up_proj.weight"), l.gate_up_proj);
    l.down_proj = to_f32(w, p + "mlp.down_proj.weight");
  }
  return out;
}

}  // namespace s4kv::backend::cpu
