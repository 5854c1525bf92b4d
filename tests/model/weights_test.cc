// load_weights against a tiny qwen2 config (hidden 256, 2 heads, 1 KV head, head_dim 128,
// 2 layers, vocab 64, intermediate 512, q/k/v bias): good checkpoints load (single file,
// sharded, tied and untied), every wrong tensor is named, dummy weights are deterministic.
#include "model/weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "common/half.h"
#include "model/weight_map.h"
#include "safetensors_writer.h"

namespace s4kv::model {
namespace {

using testing::safetensors_bytes;
using testing::TempDir;
using testing::TestTensor;

ModelConfig tiny_config(bool tied) {
  ModelConfig c;
  c.model_type = ModelType::kQwen2;
  c.model_type_name = "qwen2";
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 128;
  c.vocab_size = 64;
  c.max_position_embeddings = 128;
  c.dtype = DType::kBF16;
  c.qkv_bias = true;
  c.tie_word_embeddings = tied;
  return c;
}

// Hand-counted: embed 64*256; per layer norms 2*256, q 256*256, k/v 2*128*256, biases
// 256+2*128, o 256*256, mlp 3*512*256; final norm 256; LM head 64*256 unless tied.
constexpr int64_t kTiedParams = 16384 + 2 * (512 + 65536 + 65536 + 512 + 65536 + 393216) + 256;
constexpr int64_t kUntiedParams = kTiedParams + 16384;

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Every tensor the config expects (lm_head only when untied), BF16, bytes patterned by index.
std::vector<TestTensor> checkpoint_tensors(const ModelConfig& c) {
  std::vector<TestTensor> out;
  for (const ExpectedTensor& e : expected_tensors(c)) {
    if (e.optional) continue;
    out.push_back(
        {e.name, "BF16", e.shape,
         std::string(static_cast<size_t>(numel(e.shape)) * 2, static_cast<char>(out.size()))});
  }
  return out;
}

std::vector<TestTensor>::iterator find_tensor(std::vector<TestTensor>& ts,
                                              const std::string& name) {
  return std::find_if(ts.begin(), ts.end(), [&](const TestTensor& t) { return t.name == name; });
}

void expect_error(const Result<ModelWeights>& r, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(r.is_ok()) << "expected an error containing " << *parts.begin();
  for (const std::string& p : parts) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "message: " << r.status().message() << "\nmissing: " << p;
  }
}

class WeightsTest : public ::testing::Test {
 protected:
  Result<ModelWeights> load(const std::vector<TestTensor>& tensors, const ModelConfig& c) {
    dir_.write("model.safetensors", safetensors_bytes(tensors));
    return load_weights(dir_.path(), c, LoadFormat::kAuto);
  }
  TempDir dir_;
};

TEST_F(WeightsTest, ExpectedTensorCount) {
  // Per layer: 2 norms, q/k/v/o, 3 MLP matrices, and 3 biases for qwen2.
  EXPECT_EQ(expected_tensors(tiny_config(false)).size(), 1u + 2 * 12 + 2);
  ModelConfig llama = tiny_config(false);
  llama.qkv_bias = false;
  EXPECT_EQ(expected_tensors(llama).size(), 1u + 2 * 9 + 2);
}

TEST_F(WeightsTest, GoodUntiedCheckpointLoads) {
  const ModelConfig c = tiny_config(false);
  auto r = load(checkpoint_tensors(c), c);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->num_parameters(), kUntiedParams);
  EXPECT_EQ(r->tensors().size(), expected_tensors(c).size());
  const TensorView& k = r->get("model.layers.1.self_attn.k_proj.weight");
  EXPECT_EQ(k.shape, (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(k.dtype, DType::kBF16);
  EXPECT_TRUE(r->contains("lm_head.weight"));
  EXPECT_TRUE(r->contains("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_TRUE(has_weight_files(dir_.path()));
}

TEST_F(WeightsTest, TiedCheckpointWithoutLmHeadLoads) {
  const ModelConfig c = tiny_config(true);
  auto r = load(checkpoint_tensors(c), c);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->num_parameters(), kTiedParams);
  EXPECT_FALSE(r->contains("lm_head.weight"));
}

TEST_F(WeightsTest, TiedCheckpointWithLmHeadIsCheckedNotUsed) {
  const ModelConfig c = tiny_config(true);
  auto tensors = checkpoint_tensors(c);
  tensors.push_back({"lm_head.weight", "BF16", {64, 256}, std::string(64 * 256 * 2, 'h')});
  auto r = load(tensors, c);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_FALSE(r->contains("lm_head.weight"));
  EXPECT_EQ(r->num_parameters(), kTiedParams);

  tensors.back() = {"lm_head.weight", "BF16", {65, 256}, std::string(65 * 256 * 2, 'h')};
  expect_error(load(tensors, c),
               {"tensor \"lm_head.weight\" has shape [65, 256], expected [64, 256]"});
}

TEST_F(WeightsTest, RotaryInvFreqIsIgnored) {
  const ModelConfig c = tiny_config(false);
  auto tensors = checkpoint_tensors(c);
  tensors.push_back(
      {"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {64}, std::string(256, 0)});
  auto r = load(tensors, c);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_FALSE(r->contains("model.layers.0.self_attn.rotary_emb.inv_freq"));
}

TEST_F(WeightsTest, MissingTensor) {
  const ModelConfig c = tiny_config(false);
  auto tensors = checkpoint_tensors(c);
  tensors.erase(find_tensor(tensors, "model.layers.1.mlp.up_proj.weight"));
  expect_error(load(tensors, c),
               {"model.safetensors: missing tensor \"model.layers.1.mlp.up_proj.weight\""});
}

TEST_F(WeightsTest, UntiedMissingLmHead) {
  const ModelConfig c = tiny_config(false);
  auto tensors = checkpoint_tensors(c);
  tensors.erase(find_tensor(tensors, "lm_head.weight"));
  expect_error(load(tensors, c), {"missing tensor \"lm_head.weight\""});
}

TEST_F(WeightsTest, ManyProblemsAreSummarized) {
  ModelConfig c = tiny_config(false);
  auto tensors = checkpoint_tensors(c);
  c.num_hidden_layers = 3;  // the whole of layer 2 is missing: 12 tensors
  auto r = load(tensors, c);
  expect_error(r, {"missing tensor \"model.layers.2.input_layernorm.weight\"; missing tensor "
                   "\"model.layers.2.self_attn.q_proj.weight\"; ",
                   "(and 9 more)"});
}

TEST_F(WeightsTest, UnexpectedTensor) {
  const ModelConfig c = tiny_config(false);
  auto tensors = checkpoint_tensors(c);
  tensors.push_back({"model.layers.2.mlp.up_proj.weight", "BF16", {2}, std::string(4, 0)});
  expect_error(load(tensors, c), {"unexpected tensor \"model.layers.2.mlp.up_proj.weight\""});
  // A llama config has no q/k/v bias: the qwen2 biases are unexpected.
  ModelConfig llama = c;
  llama.qkv_bias = false;
  tensors.pop_back();
  expect_error(load(tensors, llama),
               {"unexpected tensor \"model.layers.0.self_attn.k_proj.bias\"", "(and 3 more)"});
}

TEST_F(WeightsTest, WrongShape) {
  const ModelConfig c = tiny_config(false);
  auto tensors = checkpoint_tensors(c);
  auto it = find_tensor(tensors, "model.layers.0.self_attn.o_proj.weight");
  it->shape = {256, 128};
  it->data.resize(256 * 128 * 2);
  expect_error(load(tensors, c), {"tensor \"model.layers.0.self_attn.o_proj.weight\" has shape "
                                  "[256, 128], expected [256, 256]"});
}

TEST_F(WeightsTest, WrongDtype) {
  const ModelConfig c = tiny_config(false);
  auto tensors = checkpoint_tensors(c);
  auto it = find_tensor(tensors, "model.norm.weight");
  it->dtype = "I8";
  it->data.resize(256);
  expect_error(load(tensors, c), {"tensor \"model.norm.weight\" has wrong dtype I8"});
}

TEST_F(WeightsTest, FloatDtypesAreAccepted) {
  const ModelConfig c = tiny_config(false);
  auto tensors = checkpoint_tensors(c);
  auto it = find_tensor(tensors, "model.norm.weight");
  it->dtype = "F32";
  it->data.resize(256 * 4);
  auto r = load(tensors, c);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->get("model.norm.weight").dtype, DType::kF32);
}

TEST_F(WeightsTest, ShardedCheckpointLoads) {
  const ModelConfig c = tiny_config(false);
  auto tensors = checkpoint_tensors(c);
  const size_t half = tensors.size() / 2;
  std::vector<TestTensor> a(tensors.begin(), tensors.begin() + static_cast<ptrdiff_t>(half));
  std::vector<TestTensor> b(tensors.begin() + static_cast<ptrdiff_t>(half), tensors.end());
  dir_.write("model-00001-of-00002.safetensors", safetensors_bytes(a));
  dir_.write("model-00002-of-00002.safetensors", safetensors_bytes(b));
  Json map = Json::object();
  for (const auto& t : a) map[t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : b) map[t.name] = "model-00002-of-00002.safetensors";
  dir_.write("model.safetensors.index.json",
             Json{{"metadata", Json::object()}, {"weight_map", map}}.dump());
  EXPECT_TRUE(has_weight_files(dir_.path()));
  auto r = load_weights(dir_.path(), c, LoadFormat::kAuto);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->num_parameters(), kUntiedParams);
  // Bytes come straight from the second shard's map.
  const TensorView& last = r->get(b.back().name);
  EXPECT_EQ(static_cast<char>(last.data[0]), b.back().data[0]);

  b.back().shape = {1};
  b.back().data.resize(2);
  dir_.write("model-00002-of-00002.safetensors", safetensors_bytes(b));
  expect_error(load_weights(dir_.path(), c, LoadFormat::kAuto),
               {"model.safetensors.index.json: tensor \"lm_head.weight\" has shape [1]",
                "(in model-00002-of-00002.safetensors)"});
}

TEST_F(WeightsTest, NoWeightFiles) {
  EXPECT_FALSE(has_weight_files(dir_.path()));
  auto r = load_weights(dir_.path(), tiny_config(false), LoadFormat::kAuto);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("no weight files"), std::string::npos);
}

// --- dummy weights --------------------------------------------------------------------------

std::string all_bytes(const ModelWeights& w) {
  std::string out;
  for (const auto& [name, view] : w.tensors()) {
    out.append(reinterpret_cast<const char*>(view.data.data()), view.data.size());
  }
  return out;
}

TEST(DummyWeightsTest, CompleteAndShaped) {
  for (bool tied : {false, true}) {
    const ModelConfig c = tiny_config(tied);
    auto r = load_weights("/nonexistent", c, LoadFormat::kDummy, 7);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    for (const ExpectedTensor& e : expected_tensors(c)) {
      ASSERT_EQ(r->contains(e.name), !e.optional) << e.name;
      if (e.optional) continue;
      const TensorView& v = r->get(e.name);
      EXPECT_EQ(v.shape, e.shape) << e.name;
      EXPECT_EQ(v.dtype, DType::kBF16);
      EXPECT_EQ(v.data.size(), static_cast<size_t>(numel(e.shape)) * 2);
    }
    EXPECT_EQ(r->num_parameters(), tied ? kTiedParams : kUntiedParams);
  }
}

TEST(DummyWeightsTest, DeterministicPerSeed) {
  const ModelConfig c = tiny_config(false);
  auto a = load_weights("", c, LoadFormat::kDummy, 1);
  auto b = load_weights("", c, LoadFormat::kDummy, 1);
  auto d = load_weights("", c, LoadFormat::kDummy, 2);
  ASSERT_TRUE(a.is_ok() && b.is_ok() && d.is_ok());
  EXPECT_EQ(all_bytes(*a), all_bytes(*b));
  EXPECT_NE(all_bytes(*a), all_bytes(*d));
  // Tensors of the same shape get different values.
  const TensorView& q0 = a->get("model.layers.0.self_attn.q_proj.weight");
  const TensorView& o0 = a->get("model.layers.0.self_attn.o_proj.weight");
  EXPECT_NE(std::memcmp(q0.data.data(), o0.data.data(), q0.data.size()), 0);
}

TEST(DummyWeightsTest, ValuesInRangeAndNormsOne) {
  const ModelConfig c = tiny_config(false);
  auto r = load_weights("", c, LoadFormat::kDummy, 3);
  ASSERT_TRUE(r.is_ok());
  for (const auto& [name, v] : r->tensors()) {
    const bool norm = name.ends_with("norm.weight");
    float lo = 1e9f, hi = -1e9f;
    for (size_t i = 0; i < v.data.size(); i += 2) {
      uint16_t h;
      std::memcpy(&h, v.data.data() + i, 2);
      lo = std::min(lo, bf16_to_float(h));
      hi = std::max(hi, bf16_to_float(h));
    }
    if (norm) {
      EXPECT_EQ(lo, 1.0f) << name;
      EXPECT_EQ(hi, 1.0f) << name;
    } else {
      EXPECT_GE(lo, -1e-3f) << name;
      EXPECT_LE(hi, 1e-3f) << name;
      EXPECT_LT(lo, -5e-4f) << name;  // actually spread over the range
      EXPECT_GT(hi, 5e-4f) << name;
    }
  }
}

TEST(DummyWeightsTest, OtherFloatDtypes) {
  for (DType t : {DType::kF16, DType::kF32}) {
    ModelConfig c = tiny_config(true);
    c.dtype = t;
    auto r = load_weights("", c, LoadFormat::kDummy, 0);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    const TensorView& norm = r->get("model.norm.weight");
    EXPECT_EQ(norm.dtype, t);
    EXPECT_EQ(norm.data.size(), 256 * dtype_size(t));
    const float one = t == DType::kF32
                          ? *reinterpret_cast<const float*>(norm.data.data())
                          : fp16_to_float(*reinterpret_cast<const uint16_t*>(norm.data.data()));
    EXPECT_EQ(one, 1.0f);
  }
}

// Pins the generator (values checked against an independent numpy re-implementation of
// splitmix64 + fnv1a + fp32 arithmetic): they must not change across runs, machines or
// refactors (a change silently alters every dummy-weight benchmark and comparison).
TEST(DummyWeightsTest, PinnedValues) {
  auto r = load_weights("", tiny_config(false), LoadFormat::kDummy, 0);
  ASSERT_TRUE(r.is_ok());
  const TensorView& e = r->get("model.embed_tokens.weight");
  std::vector<uint16_t> first(4);
  std::memcpy(first.data(), e.data.data(), 8);
  EXPECT_EQ(first, (std::vector<uint16_t>{14848, 47733, 47622, 47685}));

  ModelConfig f32 = tiny_config(false);
  f32.dtype = DType::kF32;
  auto r32 = load_weights("", f32, LoadFormat::kDummy, 12345);
  ASSERT_TRUE(r32.is_ok());
  std::vector<uint32_t> bits(4);
  std::memcpy(bits.data(), r32->get("model.layers.1.mlp.down_proj.weight").data.data(), 16);
  EXPECT_EQ(bits, (std::vector<uint32_t>{966229418, 3121917326, 975392330, 956614853}));
}

}  // namespace
}  // namespace s4kv::model
