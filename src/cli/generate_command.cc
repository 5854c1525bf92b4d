#include "cli/generate_command.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <unordered_map>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/generate_jsonl.h"
#include "engine/llm_engine.h"
#include "tokenizer/chat_template.h"

namespace s4kv::cli {
namespace {

using engine::SamplingParams;

constexpr size_t kMaxJsonlLines = 100000;

SamplingParams default_params(const GenerateOptions& o) {
  SamplingParams p;
  p.max_tokens = o.max_tokens;
  p.temperature = o.temperature;
  p.top_p = o.top_p;
  p.top_k = o.top_k;
  p.stop = o.stop;
  return p;
}

// The requests to run, as parsed from --prompt or stdin.
Result<std::vector<JsonlRequest>> read_requests(const GenerateOptions& o) {
  if (!o.jsonl) {
    JsonlRequest r;
    r.prompt = *o.prompt;
    r.params = default_params(o);
    return std::vector<JsonlRequest>{std::move(r)};
  }
  std::vector<JsonlRequest> out;
  std::string line;
  for (size_t n = 1; std::getline(std::cin, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
    if (out.size() == kMaxJsonlLines) {
      return invalid_argument("stdin holds more than " + std::to_string(kMaxJsonlLines) +
                              " requests");
    }
    auto r = parse_jsonl_request(line, default_params(o));
    if (!r.is_ok())
      return invalid_argument("line " + std::to_string(n) + ": " + r.status().message());
    out.push_back(std::move(r).value());
  }
  if (out.empty()) return invalid_argument("--jsonl: stdin holds no request");
  return out;
}

// Prompt ids: a plain prompt is tokenized with the tokenizer's special tokens (Llama-3's
// BOS), a rendered conversation without them (the template writes them), as vLLM does.
Result<std::vector<int32_t>> prompt_ids(const JsonlRequest& r, const GenerateOptions& o,
                                        const engine::LlmEngine& e,
                                        const tokenizer::ChatTemplate* tmpl) {
  if (r.prompt && !o.chat) return e.tokenizer->encode(*r.prompt, /*add_special_tokens=*/true);
  S4KV_CHECK(tmpl != nullptr, "generate: no chat template loaded");
  const OrderedJson messages =
      r.messages ? *r.messages
                 : OrderedJson::array({OrderedJson{{"role", "user"}, {"content", *r.prompt}}});
  S4KV_ASSIGN_OR_RETURN(const std::string text,
                        tmpl->render(messages, nullptr, /*add_generation_prompt=*/true));
  return e.tokenizer->encode(text, /*add_special_tokens=*/false);
}

struct Completion {
  int64_t num_prompt_tokens = 0;
  int64_t num_generated_tokens = 0;
  std::vector<std::string> texts;
  std::vector<std::string> finish_reasons;
};

// Adds every request (refusing any before running one), then steps until all are done.
Result<std::vector<Completion>> generate(const std::vector<JsonlRequest>& requests,
                                         const GenerateOptions& o, engine::LlmEngine& e,
                                         const tokenizer::ChatTemplate* tmpl) {
  engine::EngineCore& core = *e.engine;
  std::vector<Completion> done(requests.size());
  std::unordered_map<engine::RequestId, size_t> index_of;
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string where = o.jsonl ? "line " + std::to_string(i + 1) + ": " : "";
    auto ids = prompt_ids(requests[i], o, e, tmpl);
    if (!ids.is_ok()) return invalid_argument(where + ids.status().message());
    done[i].num_prompt_tokens = static_cast<int64_t>(ids->size());
    done[i].texts.resize(static_cast<size_t>(requests[i].params.n));
    done[i].finish_reasons.resize(static_cast<size_t>(requests[i].params.n));
    auto id = core.add_request(std::move(ids).value(), requests[i].params);
    if (!id.is_ok()) return invalid_argument(where + id.status().message());
    index_of[*id] = i;
  }
  while (core.has_unfinished()) {
    for (const engine::RequestOutput& ro : core.step()) {
      Completion& c = done[index_of.at(ro.request_id)];
      for (const engine::CompletionOutput& co : ro.outputs) {
        c.texts[static_cast<size_t>(co.index)] += co.text;
        c.num_generated_tokens += static_cast<int64_t>(co.token_ids.size());
        if (co.finish_reason) {
          c.finish_reasons[static_cast<size_t>(co.index)] =
              engine::finish_reason_name(*co.finish_reason);
        }
        // A single prompt streams its text as it comes.
        if (!o.jsonl) std::fwrite(co.text.data(), 1, co.text.size(), stdout);
      }
      if (!o.jsonl) std::fflush(stdout);
    }
  }
  return done;
}

std::string dump(const OrderedJson& v) {
  return v.dump(-1, ' ', /*ensure_ascii=*/false, OrderedJson::error_handler_t::replace);
}

void print_jsonl(const std::vector<Completion>& done) {
  for (size_t i = 0; i < done.size(); ++i) {
    const Completion& c = done[i];
    OrderedJson j = {{"index", i}};
    if (c.texts.size() == 1) {
      j["text"] = c.texts[0];
      j["finish_reason"] = c.finish_reasons[0];
    } else {
      j["texts"] = c.texts;
      j["finish_reasons"] = c.finish_reasons;
    }
    j["num_prompt_tokens"] = c.num_prompt_tokens;
    j["num_generated_tokens"] = c.num_generated_tokens;
    std::printf("%s\n", dump(j).c_str());
  }
  std::fflush(stdout);
}

Status check_options(const GenerateOptions& o) {
  if (o.jsonl == o.prompt.has_value()) {
    return invalid_argument("give exactly one of --prompt TEXT and --jsonl");
  }
  return Status::ok();
}

bool needs_template(const GenerateOptions& o, const std::vector<JsonlRequest>& requests) {
  return o.chat || std::any_of(requests.begin(), requests.end(),
                               [](const JsonlRequest& r) { return r.messages.has_value(); });
}

int run(const GenerateOptions& o) {
  if (Status s = check_options(o); !s.is_ok()) return fail(s.message());
  auto args = engine_args(o.engine);
  if (!args.is_ok()) return fail(args.status().message());
  args->config.offline = true;  // LLM.generate's defaults
  auto requests = read_requests(o);
  if (!requests.is_ok()) return fail(requests.status().message());
  auto e = engine::load_llm_engine(*args);
  if (!e.is_ok()) return fail(e.status().message());
  std::fprintf(stderr, "INFO %s\n", e->capacity_line.c_str());
  std::optional<tokenizer::ChatTemplate> tmpl;
  if (needs_template(o, *requests)) {
    auto t = tokenizer::ChatTemplate::load(e->model_dir, o.engine.chat_template);
    if (!t.is_ok()) return fail(t.status().message());
    tmpl = std::move(t).value();
  }
  auto done = generate(*requests, o, *e, tmpl ? &*tmpl : nullptr);
  if (!done.is_ok()) return fail(done.status().message());
  if (o.jsonl) {
    print_jsonl(*done);
  } else {
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int run_generate(const GenerateOptions& options) {
  try {
    return run(options);
  } catch (const std::exception& e) {
    return fail(std::string("generate failed: ") + e.what());
  }
}

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* sub = app.add_subcommand("generate", "Generate completions offline (LLM.generate)");
  add_engine_flags(*sub, o->engine, /*model_required=*/true);
  sub->add_option("--prompt", o->prompt, "the prompt to complete");
  sub->add_flag("--chat", o->chat, "render the prompt as one user message (chat template)");
  sub->add_flag("--jsonl", o->jsonl, "read one JSON request per stdin line; run them as a batch");
  sub->add_option("--max-tokens", o->max_tokens, "tokens to generate")->capture_default_str();
  sub->add_option("--temperature", o->temperature, "0: greedy")->capture_default_str();
  sub->add_option("--top-p", o->top_p)->capture_default_str();
  sub->add_option("--top-k", o->top_k, "0 or -1: off")->capture_default_str();
  sub->add_option("--stop", o->stop, "stop string (repeatable)");
  sub->callback([o] { exit_code() = run_generate(*o); });
}

}  // namespace s4kv::cli
