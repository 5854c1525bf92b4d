// config.json validation: the five promised models parse with the right values; every config
// in tests/model/configs/ is refused with the exact first message listed in
// tests/model/configs/expected_errors.json (shared with tests/cli/test_check_model.py).
#include "model/model_config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "model/weight_map.h"

namespace s4kv::model {
namespace {

namespace fs = std::filesystem;

const std::string kFixtures = "tests/fixtures/configs/";
const std::string kBattery = "tests/model/configs/";

ModelConfig parse_fixture(const std::string& name) {
  const std::string path = kFixtures + name + ".json";
  auto doc = read_json_file(path);
  S4KV_CHECK(doc.is_ok(), doc.status().message());
  ConfigParse p = parse_model_config(*doc, path);
  EXPECT_TRUE(p.errors.empty()) << name << ": " << (p.errors.empty() ? "" : p.errors[0]);
  S4KV_CHECK(p.config.has_value(), name);
  return *p.config;
}

TEST(ModelConfig, Qwen25_7B) {
  ModelConfig c = parse_fixture("qwen2.5-7b-instruct");
  EXPECT_EQ(c.model_type, ModelType::kQwen2);
  EXPECT_EQ(c.model_type_name, "qwen2");
  EXPECT_EQ(c.hidden_size, 3584);
  EXPECT_EQ(c.intermediate_size, 18944);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 28);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 152064);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_FALSE(c.rope_scaling.llama3);
  EXPECT_EQ(c.dtype, DType::kBF16);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
  EXPECT_EQ(count_parameters(c), 7615616512);
}

TEST(ModelConfig, Qwen25SmallerModels) {
  ModelConfig c15 = parse_fixture("qwen2.5-1.5b-instruct");
  EXPECT_EQ(c15.num_hidden_layers, 28);
  EXPECT_EQ(c15.num_key_value_heads, 2);
  EXPECT_EQ(c15.head_dim, 128);
  EXPECT_TRUE(c15.tie_word_embeddings);
  EXPECT_EQ(count_parameters(c15), 1543714304);
  ModelConfig c3 = parse_fixture("qwen2.5-3b-instruct");
  EXPECT_EQ(c3.num_hidden_layers, 36);
  EXPECT_EQ(c3.num_attention_heads, 16);
  EXPECT_EQ(c3.num_key_value_heads, 2);
  EXPECT_EQ(c3.head_dim, 128);
  EXPECT_EQ(count_parameters(c3), 3085938688);
}

TEST(ModelConfig, Llama31_8B) {
  ModelConfig c = parse_fixture("llama-3.1-8b-instruct");
  EXPECT_EQ(c.model_type, ModelType::kLlama);
  EXPECT_EQ(c.model_type_name, "llama");
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_TRUE(c.rope_scaling.llama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(count_parameters(c), 8030261248);
}

TEST(ModelConfig, Llama32_3B) {
  ModelConfig c = parse_fixture("llama-3.2-3b-instruct");
  EXPECT_EQ(c.hidden_size, 3072);
  EXPECT_EQ(c.num_attention_heads, 24);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);  // explicit head_dim
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(count_parameters(c), 3212749824);
}

// count_parameters (used when no weights are present) agrees with the tensor list the loader
// checks checkpoints against.
TEST(ModelConfig, CountParametersMatchesExpectedTensors) {
  for (const char* name : {"qwen2.5-1.5b-instruct", "qwen2.5-3b-instruct", "qwen2.5-7b-instruct",
                           "llama-3.2-3b-instruct", "llama-3.1-8b-instruct"}) {
    const ModelConfig c = parse_fixture(name);
    int64_t sum = 0;
    for (const ExpectedTensor& t : expected_tensors(c)) {
      if (t.optional) continue;
      int64_t numel = 1;
      for (int64_t d : t.shape) numel *= d;
      sum += numel;
    }
    EXPECT_EQ(count_parameters(c), sum) << name;
  }
}

Json fixture_json(const std::string& name) {
  auto doc = read_json_file(kFixtures + name + ".json");
  S4KV_CHECK(doc.is_ok(), doc.status().message());
  return *doc;
}

// Newer transformers write rope_parameters {rope_type, rope_theta, ...} and "dtype".
TEST(ModelConfig, RopeParametersEqualsRopeScaling) {
  Json doc = fixture_json("llama-3.1-8b-instruct");
  Json params = doc["rope_scaling"];
  params["rope_theta"] = doc["rope_theta"];
  doc.erase("rope_scaling");
  doc.erase("rope_theta");
  doc["rope_parameters"] = params;
  doc["dtype"] = doc["torch_dtype"];
  doc.erase("torch_dtype");
  ConfigParse p = parse_model_config(doc, "x");
  ASSERT_TRUE(p.config) << p.errors[0];
  EXPECT_TRUE(p.config->rope_scaling.llama3);
  EXPECT_DOUBLE_EQ(p.config->rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(p.config->rope_theta, 500000.0);
  EXPECT_EQ(p.config->dtype, DType::kBF16);
}

TEST(ModelConfig, RopeParametersDefaultAndDisagreement) {
  Json doc = fixture_json("qwen2.5-7b-instruct");
  doc["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  ConfigParse p = parse_model_config(doc, "x");
  ASSERT_TRUE(p.config) << p.errors[0];
  EXPECT_FALSE(p.config->rope_scaling.llama3);
  doc["rope_parameters"]["rope_theta"] = 10000.0;
  p = parse_model_config(doc, "x");
  ASSERT_FALSE(p.errors.empty());
  EXPECT_EQ(p.errors[0],
            "invalid model config x: rope_theta=1000000.0 disagrees with "
            "rope_parameters.rope_theta=10000.0");
}

TEST(ModelConfig, Defaults) {
  Json doc = fixture_json("qwen2.5-7b-instruct");
  for (const char* key :
       {"num_key_value_heads", "rope_theta", "tie_word_embeddings", "bos_token_id", "eos_token_id",
        "rms_norm_eps", "architectures", "use_sliding_window", "hidden_act"}) {
    doc.erase(key);
  }
  doc["rope_scaling"] = nullptr;
  ConfigParse p = parse_model_config(doc, "x");
  ASSERT_TRUE(p.config) << p.errors[0];
  EXPECT_EQ(p.config->num_key_value_heads, 28);  // multi-head attention
  EXPECT_DOUBLE_EQ(p.config->rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(p.config->rms_norm_eps, 1e-6);
  EXPECT_FALSE(p.config->tie_word_embeddings);
  EXPECT_FALSE(p.config->bos_token_id);
  EXPECT_TRUE(p.config->eos_token_ids.empty());
}

// Reads tests/model/configs/expected_errors.json: file name -> first error, where {path}
// stands for the file and a trailing "..." makes the rest a prefix.
Json expected_errors() {
  auto doc = read_json_file(kBattery + "expected_errors.json");
  S4KV_CHECK(doc.is_ok(), doc.status().message());
  return *doc;
}

std::string substitute_path(std::string text, const std::string& path) {
  if (auto pos = text.find("{path}"); pos != std::string::npos) text.replace(pos, 6, path);
  return text;
}

void expect_message(const std::string& got, const std::string& want, const std::string& file) {
  if (want.ends_with("...")) {
    EXPECT_TRUE(got.starts_with(want.substr(0, want.size() - 3))) << file << ": " << got;
  } else {
    EXPECT_EQ(got, want) << file;
  }
}

TEST(ModelConfigBattery, EveryConfigIsRefusedWithItsMessage) {
  const Json expected = expected_errors();
  ASSERT_GE(expected.size(), 40u);
  for (const auto& [file, want] : expected.items()) {
    const std::string path = kBattery + file;
    auto doc = read_json_file(path);
    std::string first;
    StatusCode code = StatusCode::kOk;
    if (!doc.is_ok()) {
      first = doc.status().message();
      code = doc.status().code();
    } else {
      ConfigParse p = parse_model_config(*doc, path);
      ASSERT_FALSE(p.errors.empty()) << file << " was accepted";
      EXPECT_FALSE(p.config) << file;
      first = p.errors[0];
      code = p.code;
    }
    const std::string text = substitute_path(want.get<std::string>(), path);
    expect_message(first, text, file);
    EXPECT_EQ(code, text.starts_with("unsupported model:") ? StatusCode::kUnsupported
                                                           : StatusCode::kInvalidArgument)
        << file;
  }
}

TEST(ModelConfigBattery, EveryFileHasAnExpectation) {
  const Json expected = expected_errors();
  for (const auto& entry : fs::directory_iterator(kBattery)) {
    const std::string name = entry.path().filename().string();
    if (name == "expected_errors.json") continue;
    EXPECT_TRUE(expected.contains(name)) << name << " has no entry in expected_errors.json";
  }
}

// All problems are listed, not just the first.
TEST(ModelConfigBattery, CollectsAllErrors) {
  const std::string path = kBattery + "deepseek-v2-lite.json";
  auto doc = read_json_file(path);
  ASSERT_TRUE(doc.is_ok());
  ConfigParse p = parse_model_config(*doc, path);
  const std::vector<std::string> want = {
      "unsupported model: model_type=\"deepseek_v2\" (supported: \"qwen2\", \"llama\")",
      "unsupported model: architectures=[\"DeepseekV2ForCausalLM\"] (supported: "
      "\"Qwen2ForCausalLM\", \"LlamaForCausalLM\")",
      "unsupported model: kv_lora_rank=512 (supported: absent; multi-head latent attention is "
      "not served)",
      "unsupported model: rope_scaling.type=\"yarn\" (supported: \"llama3\", \"default\")",
  };
  EXPECT_EQ(p.errors, want);

  Json two = fixture_json("qwen2.5-7b-instruct");
  two["hidden_size"] = "3584";
  two["num_hidden_layers"] = 0;
  two["hidden_act"] = "relu";
  p = parse_model_config(two, "c.json");
  EXPECT_EQ(p.errors, (std::vector<std::string>{
                          "invalid model config c.json: hidden_size: expected integer, found "
                          "string \"3584\"",
                          "invalid model config c.json: num_hidden_layers=0 out of range (1..1024)",
                          "unsupported model: hidden_act=\"relu\" (supported: \"silu\")"}));
}

// A fresh directory under $S4KV_TEST_TMP (ctest sets it; /tmp otherwise).
std::string temp_dir(const std::string& name) {
  const char* root = std::getenv("S4KV_TEST_TMP");
  fs::path dir = fs::path(root != nullptr ? root : "/tmp") / ("model_config_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

TEST(LoadModelConfig, ReadsDirectory) {
  const std::string dir = temp_dir("ok");
  fs::copy_file(kFixtures + "qwen2.5-3b-instruct.json", dir + "/config.json");
  auto c = load_model_config(dir);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->num_hidden_layers, 36);
}

TEST(LoadModelConfig, MissingFilesAreNotFound) {
  auto none = load_model_config("/nonexistent/model");
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(none.status().message(), "/nonexistent/model: no such model directory");
  const std::string dir = temp_dir("empty");
  auto empty = load_model_config(dir);
  EXPECT_EQ(empty.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(empty.status().message(),
            dir + "/config.json: no such file (a model directory holds config.json)");
}

TEST(LoadModelConfig, BadJsonNamesTheFile) {
  const std::string dir = temp_dir("bad");
  std::ofstream(dir + "/config.json") << "{\"model_type\": \"qwen2\",";
  auto c = load_model_config(dir);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(c.status().message().starts_with(dir + "/config.json is not valid JSON: "))
      << c.status().message();
}

TEST(LoadModelConfig, UnsupportedKeepsItsCode) {
  const std::string dir = temp_dir("unsupported");
  fs::copy_file(kBattery + "qwen2.5-0.5b-instruct.json", dir + "/config.json");
  auto c = load_model_config(dir);
  EXPECT_EQ(c.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(c.status().message(), "unsupported model: head_dim=64 (supported: 128)");
}

}  // namespace
}  // namespace s4kv::model
