// Embeds models/s4kv-tiny's tokenizer.json, tokenizer_config.json and generation_config.json
// with the assembler's .incbin (S4KV_FUZZ_MODEL_DIR is the directory's absolute path at build time;
// CMake lists the files as dependencies of this object).
#include "fuzz_support.h"

#include "common/check.h"
#include "common/json.h"
#include "engine/generation_config.h"

#ifndef S4KV_FUZZ_MODEL_DIR
#error "S4KV_FUZZ_MODEL_DIR must name the bundled model's directory"
#endif

#define S4KV_FUZZ_EMBED(symbol, file)           \
  __asm__(                                      \
      ".pushsection .rodata\n"                  \
      ".balign 16\n"                            \
      ".globl " #symbol "_begin\n" #symbol      \
      "_begin:\n"                               \
      ".incbin \"" S4KV_FUZZ_MODEL_DIR "/" file \
      "\"\n"                                    \
      ".globl " #symbol "_end\n" #symbol        \
      "_end:\n"                                 \
      ".byte 0\n"                               \
      ".popsection\n");                         \
  extern "C" const char symbol##_begin[];       \
  extern "C" const char symbol##_end[];

S4KV_FUZZ_EMBED(s4kv_fuzz_tokenizer_json, "tokenizer.json")
S4KV_FUZZ_EMBED(s4kv_fuzz_tokenizer_config_json, "tokenizer_config.json")
S4KV_FUZZ_EMBED(s4kv_fuzz_generation_config_json, "generation_config.json")

namespace s4kv::fuzz {

std::string_view tokenizer_json() {
  return {s4kv_fuzz_tokenizer_json_begin,
          static_cast<size_t>(s4kv_fuzz_tokenizer_json_end - s4kv_fuzz_tokenizer_json_begin)};
}

std::string_view tokenizer_config_json() {
  return {s4kv_fuzz_tokenizer_config_json_begin,
          static_cast<size_t>(s4kv_fuzz_tokenizer_config_json_end -
                              s4kv_fuzz_tokenizer_config_json_begin)};
}

std::string_view generation_config_json() {
  return {s4kv_fuzz_generation_config_json_begin,
          static_cast<size_t>(s4kv_fuzz_generation_config_json_end -
                              s4kv_fuzz_generation_config_json_begin)};
}

const tokenizer::Tokenizer& bundled_tokenizer() {
  static const tokenizer::Tokenizer* t = [] {
    auto j = parse_json(tokenizer_json(), "tokenizer.json");
    S4KV_CHECK(j.is_ok(), j.status().message());
    auto tok = tokenizer::Tokenizer::from_json(*j);
    S4KV_CHECK(tok.is_ok(), tok.status().message());
    return new tokenizer::Tokenizer(std::move(*tok));
  }();
  return *t;
}

const tokenizer::ChatTemplate& bundled_chat_template() {
  static const tokenizer::ChatTemplate* t = [] {
    auto j = parse_json(tokenizer_config_json(), "tokenizer_config.json");
    S4KV_CHECK(j.is_ok(), j.status().message());
    auto tmpl = tokenizer::ChatTemplate::from_tokenizer_config(*j, "tokenizer_config.json");
    S4KV_CHECK(tmpl.is_ok(), tmpl.status().message());
    return new tokenizer::ChatTemplate(std::move(*tmpl));
  }();
  return *t;
}

const server::ModelContext& bundled_model_context() {
  static const server::ModelContext* m = [] {
    auto* ctx = new server::ModelContext;
    ctx->served_model_names = {"models/s4kv-tiny", "tiny"};
    ctx->vocab_size = bundled_tokenizer().vocab_size();
    ctx->max_model_len = 1024;
    auto j = parse_json(generation_config_json(), "generation_config.json");
    S4KV_CHECK(j.is_ok(), j.status().message());
    auto gen = engine::parse_generation_config(*j, "generation_config.json", ctx->vocab_size);
    S4KV_CHECK(gen.is_ok(), gen.status().message());
    ctx->generation_config = std::move(*gen);
    return ctx;
  }();
  return *m;
}

bool is_valid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (b < 0x80) {
      ++i;
      continue;
    } else if ((b & 0xE0) == 0xC0) {
      n = 1, cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      n = 2, cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      n = 3, cp = b & 0x07;
    } else {
      return false;
    }
    if (i + n >= text.size()) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto c = static_cast<unsigned char>(text[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

int refuse(const server::ApiError& e) {
  S4KV_CHECK(e.status >= 400 && e.status <= 599, "error status ", e.status);
  S4KV_CHECK(!e.message.empty(), "error without a message");
  auto body = parse_json(server::error_body(e), "error body");
  S4KV_CHECK(body.is_ok(), "error body is not JSON: ", body.status().message());
  return 0;
}

std::optional<OrderedJson> request_body(const uint8_t* data, size_t size) {
  auto body = parse_ordered_json(as_text(data, size), "request body", server::kRequestJsonLimits);
  if (!body.is_ok()) {
    refuse(server::bad_request(body.status().message()));
    return std::nullopt;
  }
  if (!body->is_object()) return std::nullopt;
  return std::move(body).value();
}

}  // namespace s4kv::fuzz
