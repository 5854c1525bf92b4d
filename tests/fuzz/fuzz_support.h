// What several fuzz targets share: the bundled model's tokenizer files compiled into the binary
// (fuzz_support.cc), so that a binary runs on another machine with only its corpus directory, and
// the tokenizer, chat template and model context built from them once per process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "server/api_error.h"
#include "server/openai_protocol.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace s4kv::fuzz {

// models/s4kv-tiny/tokenizer.json and tokenizer_config.json, as bytes.
std::string_view tokenizer_json();
std::string_view tokenizer_config_json();
std::string_view generation_config_json();

// Built from the embedded files on first use; abort (S4KV_CHECK) if they do not load.
const tokenizer::Tokenizer& bundled_tokenizer();
const tokenizer::ChatTemplate& bundled_chat_template();
// What the server knows of the model: names, vocabulary, --max-model-len 1024, its
// generation_config.json.
const server::ModelContext& bundled_model_context();

// The fuzzer's bytes as text.
inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A refusal's checks: a 4xx/5xx status, a message, an error body that is JSON. Returns 0 (what
// LLVMFuzzerTestOneInput returns).
int refuse(const server::ApiError& e);

// The fuzzer's bytes parsed as a request body (the server's JSON limits); nullopt when refused
// (the refusal checked by refuse()) or not an object.
std::optional<OrderedJson> request_body(const uint8_t* data, size_t size);

// True when text is well-formed UTF-8 (no surrogates, no overlong forms, at most U+10FFFF).
bool is_valid_utf8(std::string_view text);

}  // namespace s4kv::fuzz
