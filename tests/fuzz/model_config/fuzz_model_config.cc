// libFuzzer target for a model directory's JSON files: the bytes read as config.json
// (parse_model_config: fail-fast validation) and as generation_config.json. Either every
// problem is reported as a one-line message, or the config is inside the supported family
// (head_dim 128, heads dividing, positive sizes) and its parameter count is computed without
// overflow (UBSan).
#include <cstddef>
#include <cstdint>

#include "common/check.h"
#include "common/json.h"
#include "engine/generation_config.h"
#include "fuzz_support.h"
#include "model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto doc = s4kv::parse_json(s4kv::fuzz::as_text(data, size), "config.json");
  if (!doc.is_ok()) return 0;
  const s4kv::model::ConfigParse parsed = s4kv::model::parse_model_config(*doc, "config.json");
  S4KV_CHECK(parsed.config.has_value() == parsed.errors.empty(), "config and errors disagree");
  for (const std::string& e : parsed.errors) {
    S4KV_CHECK(!e.empty() && e.find('\n') == std::string::npos, "not one line: ", e);
  }
  if (parsed.config) {
    const auto& c = *parsed.config;
    S4KV_CHECK(c.head_dim == 128, "head_dim ", c.head_dim);
    S4KV_CHECK(c.hidden_size > 0 && c.intermediate_size > 0 && c.num_hidden_layers > 0 &&
               c.vocab_size > 0 && c.max_position_embeddings > 0);
    S4KV_CHECK(c.num_key_value_heads > 0 && c.num_attention_heads % c.num_key_value_heads == 0,
               "heads ", c.num_attention_heads, "/", c.num_key_value_heads);
    S4KV_CHECK(s4kv::model::count_parameters(c) > 0);
    for (int64_t id : c.eos_token_ids) S4KV_CHECK(id >= 0 && id < c.vocab_size, "eos ", id);
  }
  for (int64_t vocab : {int64_t{8192}, int64_t{1}}) {
    auto gen = s4kv::engine::parse_generation_config(*doc, "generation_config.json", vocab);
    if (!gen.is_ok()) {
      S4KV_CHECK(!gen.status().message().empty());
      continue;
    }
    for (int32_t id : gen->eos_token_ids) S4KV_CHECK(id >= 0 && id < vocab, "eos ", id);
  }
  return 0;
}
