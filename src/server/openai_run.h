// One OpenAI request in flight: its engine requests (one per prompt, n sequences each), the
// channels their progress arrives on, and the answer written through the HttpExchange: one
// JSON body when every sequence has finished, or SSE chunks as tokens come ("data: [DONE]"
// last). Choice index = prompt index * n + sequence index.
//
// Threads: start() runs on the exchange's strand; a channel's notify (engine thread) posts
// one drain onto the strand (coalesced by an atomic flag); the drain and the disconnect
// callback run on the strand too, so all state is touched on the strand only and nothing
// blocks it. Lifetime: each channel's notify holds the run (so it lives while the engine
// holds a request); the run lets go of its channels when it ends, which breaks that cycle.
//
// Errors: a refused submission -> an error response (nothing was queued); an engine
// error event before the stream has begun -> an error response; after -> an SSE error event
// and "data: [DONE]". A client disconnect aborts every unfinished engine request.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "common/status.h"
#include "engine/sampling_params.h"
#include "server/async_engine.h"
#include "server/http_server.h"
#include "server/openai_protocol.h"
#include "server/openai_response.h"
#include "tokenizer/tokenizer.h"

namespace s4kv::server {

// The engine as a run sees it: AsyncEngine's submit_all and abort (tests script them).
struct EngineLink {
  // All of a run's engine requests at once, all or none (admission counts their sequences).
  std::function<Result<std::vector<uint64_t>>(std::vector<EngineRequest>)> submit;
  std::function<void(uint64_t)> abort;
};
EngineLink engine_link(AsyncEngine& engine);

struct RunOptions {
  bool chat = true;  // chat.completion shapes; else text_completion
  bool stream = false;
  StreamOptions stream_options;
  // Logprobs are returned when set: this many top alternatives per token.
  std::optional<int64_t> top_logprobs;
  bool echo = false;  // completions: the prompt text leads each choice's text
  int64_t n = 1;
};

// One engine request to make: its prompt and its params (max_tokens resolved, validated).
struct PromptRun {
  TokenizedPrompt prompt;
  engine::SamplingParams params;
};

// Submits the prompts and answers `exchange` exactly once (or streams to it) from there on.
// The tokenizer must outlive the run (it is the engine's).
void start_openai_run(EngineLink engine, const tokenizer::Tokenizer& tokenizer,
                      std::shared_ptr<HttpExchange> exchange, ResponseMeta meta, RunOptions options,
                      std::vector<PromptRun> prompts);

// An error body through the exchange (status, Retry-After and the like from the ApiError).
void respond_error(HttpExchange& exchange, const ApiError& error);

}  // namespace s4kv::server
