#include "model/weight_map.h"

#include <algorithm>

namespace s4kv::model {
namespace {

void add_layer(const ModelConfig& c, int64_t layer, std::vector<ExpectedTensor>* out) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = c.num_attention_heads * c.head_dim;
  const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  out->push_back({p + "input_layernorm.weight", {hidden}, TensorRole::kNorm});
  out->push_back({p + "self_attn.q_proj.weight", {q_dim, hidden}, TensorRole::kMatrix});
  out->push_back({p + "self_attn.k_proj.weight", {kv_dim, hidden}, TensorRole::kMatrix});
  out->push_back({p + "self_attn.v_proj.weight", {kv_dim, hidden}, TensorRole::kMatrix});
  if (c.qkv_bias) {
    out->push_back({p + "self_attn.q_proj.bias", {q_dim}, TensorRole::kBias});
    out->push_back({p + "self_attn.k_proj.bias", {kv_dim}, TensorRole::kBias});
    out->push_back({p + "self_attn.v_proj.bias", {kv_dim}, TensorRole::kBias});
  }
  out->push_back({p + "self_attn.o_proj.weight", {hidden, q_dim}, TensorRole::kMatrix});
  out->push_back({p + "post_attention_layernorm.weight", {hidden}, TensorRole::kNorm});
  out->push_back({p + "mlp.gate_proj.weight", {inter, hidden}, TensorRole::kMatrix});
  out->push_back({p + "mlp.up_proj.weight", {inter, hidden}, TensorRole::kMatrix});
  out->push_back({p + "mlp.down_proj.weight", {hidden, inter}, TensorRole::kMatrix});
}

}  // namespace

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> out;
  out.reserve(static_cast<size_t>(3 + 14 * std::max<int64_t>(c.num_hidden_layers, 0)));
  out.push_back(
      {"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, TensorRole::kEmbedding});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) add_layer(c, i, &out);
  out.push_back({"model.norm.weight", {c.hidden_size}, TensorRole::kNorm});
  out.push_back({"lm_head.weight",
                 {c.vocab_size, c.hidden_size},
                 TensorRole::kEmbedding,
                 /*optional=*/c.tie_word_embeddings});
  return out;
}

bool is_ignorable_tensor(std::string_view name) {
  return name.ends_with(".rotary_emb.inv_freq") || name == "rotary_emb.inv_freq";
}

}  // namespace s4kv::model
