// generation_config.json: the checkpoint's EOS ids (which end generation) and its suggested
// sampling defaults. vLLM stops on generation_config's eos_token_id (an integer or a list:
// Llama-3 instruct lists <|eot_id|> there, not in config.json), so the engine takes EOS ids
// from here as well as from config.json. Read once at start-up; immutable after.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace s4kv::engine {

struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;  // empty when the file does not name any
  // Defaults vLLM applies to requests that leave them unset (the server's business).
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
};

// Parses a generation_config.json document; eos ids must lie in [0, vocab_size). Unknown
// keys are ignored (transformers writes many); a wrongly typed known key is an error naming
// the field. `source` names the file in messages.
Result<GenerationConfig> parse_generation_config(const Json& doc, const std::string& source,
                                                 int64_t vocab_size);

// Reads <model_dir>/generation_config.json; a missing file is an empty config.
Result<GenerationConfig> read_generation_config(const std::string& model_dir, int64_t vocab_size);

// The EOS ids the engine stops on: generation_config's and config.json's together (vLLM stops
// on the tokenizer's EOS and every generation_config id; config.json's stands in for the
// former here, the caller may add the tokenizer's). No duplicates, generation_config's first.
std::vector<int32_t> resolve_eos_token_ids(const GenerationConfig& gen,
                                           std::span<const int64_t> config_eos_token_ids);

}  // namespace s4kv::engine
