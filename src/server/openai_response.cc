// OpenAI response bodies and SSE chunks (see openai_response.h). Field order follows
// OpenAI's documents so that bodies read like theirs; nothing depends on it.
#include "server/openai_response.h"

#include <charconv>
#include <cmath>
#include <random>
#include <utility>

namespace s4kv::server {
namespace {

using engine::SampleOutput;

OrderedJson finish_reason_json(const ChoiceFinish* finish) {
  if (finish == nullptr) return nullptr;
  return std::string(engine::finish_reason_name(finish->reason));
}

// The token's raw bytes (what it contributes to the text, possibly part of a character);
// the UTF-8 of its text when the tokenizer has none for it.
OrderedJson token_bytes_json(const tokenizer::Tokenizer& tokenizer, int32_t id,
                             const std::string& text) {
  const std::string* raw = tokenizer.token_bytes(id, /*skip_special_tokens=*/false);
  const std::string& bytes = raw != nullptr ? *raw : text;
  OrderedJson out = OrderedJson::array();
  for (const char c : bytes) out.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return out;
}

OrderedJson chat_logprob_entry(const tokenizer::Tokenizer& tokenizer, int32_t id, float logprob) {
  const std::string text = token_text(tokenizer, id);
  OrderedJson e;
  e["token"] = text;
  e["logprob"] = clamp_logprob(logprob);
  e["bytes"] = token_bytes_json(tokenizer, id, text);
  return e;
}

OrderedJson base_object(const ResponseMeta& meta, std::string_view object) {
  OrderedJson j;
  j["id"] = meta.id;
  j["object"] = object;
  j["created"] = meta.created;
  j["model"] = meta.model;
  return j;
}

}  // namespace

std::string make_request_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  for (int half = 0; half < 2; ++half) {
    uint64_t bits = rng();
    for (int i = 0; i < 16; ++i, bits >>= 4) id += kHex[bits & 0xf];
  }
  return id;
}

OrderedJson usage_json(const Usage& usage) {
  OrderedJson j;
  j["prompt_tokens"] = usage.prompt_tokens;
  j["completion_tokens"] = usage.completion_tokens;
  j["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  return j;
}

OrderedJson stop_reason_json(const ChoiceFinish& finish) {
  if (finish.stop_str) return *finish.stop_str;
  if (finish.stop_token_id) return *finish.stop_token_id;
  return nullptr;
}

double clamp_logprob(float logprob) {
  if (std::isnan(logprob) || logprob <= kMinLogprob) return kMinLogprob;
  // The double nearest the float's shortest decimal form, so that -0.1f is sent as -0.1 and
  // not as -0.10000000149011612.
  char buf[32];
  const auto printed = std::to_chars(buf, buf + sizeof(buf), logprob);
  double d = logprob;
  std::from_chars(buf, printed.ptr, d);
  return d;
}

std::string token_text(const tokenizer::Tokenizer& tokenizer, int32_t id) {
  const int32_t ids[] = {id};
  return tokenizer.decode(ids, /*skip_special_tokens=*/false);
}

void append_chat_logprobs(const tokenizer::Tokenizer& tokenizer,
                          std::span<const SampleOutput> samples, int64_t top_n,
                          OrderedJson& content) {
  for (const SampleOutput& s : samples) {
    OrderedJson e = chat_logprob_entry(tokenizer, s.token_id, s.logprob);
    OrderedJson top = OrderedJson::array();
    for (size_t i = 0; i < s.top_logprobs.size() && static_cast<int64_t>(i) < top_n; ++i) {
      top.push_back(
          chat_logprob_entry(tokenizer, s.top_logprobs[i].token_id, s.top_logprobs[i].logprob));
    }
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
}

OrderedJson empty_completion_logprobs() {
  OrderedJson j;
  j["text_offset"] = OrderedJson::array();
  j["token_logprobs"] = OrderedJson::array();
  j["tokens"] = OrderedJson::array();
  j["top_logprobs"] = OrderedJson::array();
  return j;
}

int64_t num_code_points(std::string_view text) {
  int64_t n = 0;
  for (const char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

void append_completion_logprobs(const tokenizer::Tokenizer& tokenizer,
                                std::span<const SampleOutput> samples, int64_t top_n,
                                int64_t& text_offset, OrderedJson& logprobs) {
  for (const SampleOutput& s : samples) {
    const std::string text = token_text(tokenizer, s.token_id);
    OrderedJson top = OrderedJson::object();
    top[text] = clamp_logprob(s.logprob);
    for (size_t i = 0; i < s.top_logprobs.size() && static_cast<int64_t>(i) < top_n; ++i) {
      const std::string t = token_text(tokenizer, s.top_logprobs[i].token_id);
      if (!top.contains(t)) top[t] = clamp_logprob(s.top_logprobs[i].logprob);
    }
    logprobs["text_offset"].push_back(text_offset);
    logprobs["token_logprobs"].push_back(clamp_logprob(s.logprob));
    logprobs["tokens"].push_back(text);
    logprobs["top_logprobs"].push_back(std::move(top));
    text_offset += num_code_points(text);
  }
}

namespace {

// A whole (non-streamed) response: chat choices carry a message, completion choices text.
OrderedJson full_response(const ResponseMeta& meta, const char* object, bool chat,
                          std::span<const ChoiceResult> choices, const Usage& usage) {
  OrderedJson j = base_object(meta, object);
  j["choices"] = OrderedJson::array();
  for (const ChoiceResult& c : choices) {
    OrderedJson choice;
    choice["index"] = c.index;
    if (chat) {
      choice["message"]["role"] = "assistant";
      choice["message"]["content"] = c.text;
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = c.logprobs;
    choice["finish_reason"] = finish_reason_json(&c.finish);
    choice["stop_reason"] = stop_reason_json(c.finish);
    j["choices"].push_back(std::move(choice));
  }
  j["usage"] = usage_json(usage);
  return j;
}

}  // namespace

OrderedJson chat_completion_response(const ResponseMeta& meta,
                                     std::span<const ChoiceResult> choices, const Usage& usage) {
  return full_response(meta, "chat.completion", /*chat=*/true, choices, usage);
}

OrderedJson completion_response(const ResponseMeta& meta, std::span<const ChoiceResult> choices,
                                const Usage& usage) {
  return full_response(meta, "text_completion", /*chat=*/false, choices, usage);
}

OrderedJson chat_chunk(const ResponseMeta& meta, int64_t index, OrderedJson delta,
                       OrderedJson logprobs, const ChoiceFinish* finish, const OrderedJson* usage) {
  OrderedJson j = base_object(meta, "chat.completion.chunk");
  OrderedJson choice;
  choice["index"] = index;
  choice["delta"] = std::move(delta);
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_reason_json(finish);
  if (finish != nullptr) choice["stop_reason"] = stop_reason_json(*finish);
  j["choices"] = OrderedJson::array({std::move(choice)});
  if (usage != nullptr) j["usage"] = *usage;
  return j;
}

OrderedJson completion_chunk(const ResponseMeta& meta, int64_t index, std::string text,
                             OrderedJson logprobs, const ChoiceFinish* finish,
                             const OrderedJson* usage) {
  OrderedJson j = base_object(meta, "text_completion");
  OrderedJson choice;
  choice["index"] = index;
  choice["text"] = std::move(text);
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_reason_json(finish);
  choice["stop_reason"] = finish != nullptr ? stop_reason_json(*finish) : OrderedJson(nullptr);
  j["choices"] = OrderedJson::array({std::move(choice)});
  if (usage != nullptr) j["usage"] = *usage;
  return j;
}

OrderedJson usage_chunk(const ResponseMeta& meta, std::string_view object, const Usage& usage) {
  OrderedJson j = base_object(meta, object);
  j["choices"] = OrderedJson::array();
  j["usage"] = usage_json(usage);
  return j;
}

std::string dump_json(const OrderedJson& j) {
  return j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

std::string sse_event(const OrderedJson& j) { return "data: " + dump_json(j) + "\n\n"; }

std::string sse_error(const ApiError& error) { return "data: " + error_body(error) + "\n\n"; }

}  // namespace s4kv::server
