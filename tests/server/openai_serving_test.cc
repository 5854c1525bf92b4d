// Responses of the OpenAI routes: body and chunk shapes (openai_response.h), a request in
// flight (openai_run.h) driven by scripted engine events through a fake HttpExchange, and
// OpenAiServing on the real AsyncEngine with the bundled tiny model's config and tokenizer over
// the FakeBackend (streamed text equals non-streamed text exactly: the fake's logits do not
// depend on how the engine thread happens to batch the requests; disconnects abort, with the
// step after the first token held by the backend's latch). The fake exchange runs posted functions
// on the test thread, one at a time, as a strand would; waits poll with deadlines of seconds.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fake_backend.h"
#include "server/openai_response.h"
#include "server/openai_run.h"
#include "server/openai_serving.h"

namespace s4kv::server {
namespace {

using engine::FinishReason;
using engine::SampleOutput;

constexpr const char* kModelDir = "models/s4kv-tiny";
constexpr auto kDeadline = std::chrono::seconds(60);

OrderedJson J(const std::string& text) { return OrderedJson::parse(text); }

const tokenizer::Tokenizer& tiny_tokenizer() {
  static const tokenizer::Tokenizer* t = [] {
    auto r = tokenizer::Tokenizer::from_file(std::string(kModelDir) + "/tokenizer.json");
    S4KV_CHECK(r.is_ok(), r.status().message());
    return new tokenizer::Tokenizer(std::move(r).value());
  }();
  return *t;
}

class FakeExchange : public HttpExchange {
 public:
  void respond(HttpResponse r) override {
    response = std::move(r);
    ended = true;
  }
  void begin_stream(int status, std::string content_type, Headers) override {
    stream_status = status;
    stream_content_type = std::move(content_type);
  }
  void write(std::string data) override { body += data; }
  void end_stream() override { ended = true; }
  void post(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    posted_.push_back(std::move(fn));
    cv_.notify_all();
  }
  void on_disconnect(std::function<void()> fn) override {
    if (disconnected_) {
      post(std::move(fn));
    } else {
      disconnect_fn_ = std::move(fn);
    }
  }
  bool disconnected() const override { return disconnected_; }

  // Test side: the client goes away.
  void disconnect() {
    disconnected_ = true;
    if (disconnect_fn_) post(std::exchange(disconnect_fn_, nullptr));
  }
  // Runs what has been posted until `done` holds or the deadline passes.
  bool run_until(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (!done()) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (!cv_.wait_until(lock, deadline, [&] { return !posted_.empty(); })) return false;
        fn = std::move(posted_.front());
        posted_.pop_front();
      }
      fn();
    }
    return true;
  }
  // Runs what has been posted so far, waiting for nothing.
  void run_pending() {
    for (;;) {
      std::function<void()> fn;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (posted_.empty()) return;
        fn = std::move(posted_.front());
        posted_.pop_front();
      }
      fn();
    }
  }
  bool run_until_ended() {
    return run_until([this] { return ended; });
  }
  // The JSON payloads of the SSE events written ("[DONE]" kept as a string).
  std::vector<OrderedJson> events() const {
    std::vector<OrderedJson> out;
    size_t at = 0;
    while (at < body.size()) {
      const size_t end = body.find("\n\n", at);
      EXPECT_NE(end, std::string::npos) << body;
      if (end == std::string::npos) break;
      const std::string event = body.substr(at, end - at);
      EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
      const std::string payload = event.substr(6);
      out.push_back(payload == "[DONE]" ? OrderedJson(payload) : OrderedJson::parse(payload));
      at = end + 2;
    }
    return out;
  }

  std::optional<HttpResponse> response;
  int stream_status = 0;
  std::string stream_content_type;
  std::string body;  // streamed bytes
  bool ended = false;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> posted_;
  std::function<void()> disconnect_fn_;
  bool disconnected_ = false;
};

// An engine whose requests the test answers by pushing events onto their channels.
struct ScriptedEngine {
  std::vector<EngineRequest> requests;
  std::vector<uint64_t> aborted;
  bool refuse = false;  // submissions refused with kResourceExhausted

  EngineLink link() {
    return EngineLink{[this](std::vector<EngineRequest> group) -> Result<std::vector<uint64_t>> {
                        if (refuse) return Status(StatusCode::kResourceExhausted, "queue full");
                        std::vector<uint64_t> tickets;
                        for (EngineRequest& r : group) {
                          requests.push_back(std::move(r));
                          tickets.push_back(static_cast<uint64_t>(100 + requests.size() - 1));
                        }
                        return tickets;
                      },
                      [this](uint64_t ticket) { aborted.push_back(ticket); }};
  }
  void push(size_t request, engine::RequestOutput output) {
    requests[request].channel->push(EngineEvent{std::move(output), std::nullopt});
  }
  void push_error(size_t request, Status status) {
    requests[request].channel->push(EngineEvent{std::nullopt, std::move(status)});
  }
};

engine::CompletionOutput delta(int index, std::string text, std::vector<int32_t> ids,
                               std::optional<FinishReason> finish = std::nullopt) {
  engine::CompletionOutput c;
  c.index = index;
  c.text = std::move(text);
  c.token_ids = std::move(ids);
  c.finish_reason = finish;
  for (const int32_t id : c.token_ids) c.logprobs.push_back(SampleOutput{id, -1.0f, 1, {}});
  return c;
}

engine::RequestOutput step(std::vector<engine::CompletionOutput> outputs, bool finished = false) {
  engine::RequestOutput r;
  r.num_prompt_tokens = 3;
  r.outputs = std::move(outputs);
  r.finished = finished;
  return r;
}

std::vector<PromptRun> prompts(size_t count, const std::string& text = "") {
  std::vector<PromptRun> out(count);
  for (PromptRun& p : out) {
    p.prompt.token_ids = {1, 2, 3};
    p.prompt.text = text;
  }
  return out;
}

ResponseMeta meta() { return ResponseMeta{"chatcmpl-abc", 1700000000, "s4kv-tiny"}; }

TEST(ResponseTest, ChatCompletionBody) {
  ChoiceResult c;
  c.index = 0;
  c.text = "Hi!";
  c.finish = ChoiceFinish{FinishReason::kStop, std::nullopt, 8191};
  const OrderedJson j = chat_completion_response(meta(), {&c, 1}, Usage{5, 2});
  EXPECT_EQ(j, J(R"({"id": "chatcmpl-abc", "object": "chat.completion", "created": 1700000000,
      "model": "s4kv-tiny", "choices": [{"index": 0, "message": {"role": "assistant",
      "content": "Hi!"}, "logprobs": null, "finish_reason": "stop", "stop_reason": 8191}],
      "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}})"));
}

TEST(ResponseTest, CompletionBodyAndChunks) {
  ChoiceResult c;
  c.index = 1;
  c.text = "abc";
  c.finish = ChoiceFinish{FinishReason::kLength, std::nullopt, std::nullopt};
  ResponseMeta m{"cmpl-x", 7, "tiny"};
  EXPECT_EQ(completion_response(m, {&c, 1}, Usage{1, 3}),
            J(R"({"id": "cmpl-x", "object": "text_completion", "created": 7, "model": "tiny",
                  "choices": [{"index": 1, "text": "abc", "logprobs": null,
                  "finish_reason": "length", "stop_reason": null}],
                  "usage": {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}})"));
  const ChoiceFinish stop{FinishReason::kStop, std::string("END"), std::nullopt};
  const OrderedJson null_usage = nullptr;
  EXPECT_EQ(completion_chunk(m, 0, "x", nullptr, &stop, &null_usage),
            J(R"({"id": "cmpl-x", "object": "text_completion", "created": 7, "model": "tiny",
                  "choices": [{"index": 0, "text": "x", "logprobs": null,
                  "finish_reason": "stop", "stop_reason": "END"}], "usage": null})"));
  EXPECT_EQ(chat_chunk(m, 2, J(R"({"content": "y"})"), nullptr, nullptr, nullptr),
            J(R"({"id": "cmpl-x", "object": "chat.completion.chunk", "created": 7,
                  "model": "tiny", "choices": [{"index": 2, "delta": {"content": "y"},
                  "logprobs": null, "finish_reason": null}]})"));
  EXPECT_EQ(usage_chunk(m, "chat.completion.chunk", Usage{2, 3}),
            J(R"({"id": "cmpl-x", "object": "chat.completion.chunk", "created": 7,
                  "model": "tiny", "choices": [], "usage": {"prompt_tokens": 2,
                  "completion_tokens": 3, "total_tokens": 5}})"));
  EXPECT_EQ(sse_event(J(R"({"a": 1})")), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_error(bad_request("bad", "n")),
            "data: {\"error\":{\"message\":\"bad\",\"type\":\"BadRequestError\","
            "\"param\":\"n\",\"code\":400}}\n\n");
}

TEST(ResponseTest, ChatLogprobsWithInvalidUtf8TokenAndMinusInfinity) {
  const tokenizer::Tokenizer& tok = tiny_tokenizer();
  // Id 160 is the lone byte 0xE4 (the start of a 3-byte character): its text is U+FFFD.
  SampleOutput s;
  s.token_id = 160;
  s.logprob = -std::numeric_limits<float>::infinity();
  s.top_logprobs = {{0, -0.5f}, {160, std::nanf("")}};
  OrderedJson content = OrderedJson::array();
  append_chat_logprobs(tok, {&s, 1}, 2, content);
  EXPECT_EQ(content, J(R"([{"token": "\ufffd", "logprob": -9999.0, "bytes": [228],
      "top_logprobs": [{"token": "!", "logprob": -0.5, "bytes": [33]},
                       {"token": "\ufffd", "logprob": -9999.0, "bytes": [228]}]}])"));
  append_chat_logprobs(tok, {&s, 1}, 1, content);
  EXPECT_EQ(content[1]["top_logprobs"].size(), 1u);
  // Invalid UTF-8 never makes dump throw.
  EXPECT_EQ(dump_json(OrderedJson(std::string("a\xE4"))), "\"a\xEF\xBF\xBD\"");
}

TEST(ResponseTest, CompletionLogprobsSampledTokenFirstAndTextOffsets) {
  const tokenizer::Tokenizer& tok = tiny_tokenizer();
  const std::vector<int32_t> ids = *tok.encode("Hello there", false);
  ASSERT_GE(ids.size(), 2u);
  std::vector<SampleOutput> samples(2);
  samples[0] = SampleOutput{ids[0], -0.25f, 2, {{ids[1], -0.1f}, {ids[0], -0.25f}}};
  samples[1] = SampleOutput{ids[1], -1.5f, 1, {{ids[1], -1.5f}, {ids[0], -3.0f}}};
  OrderedJson lp = empty_completion_logprobs();
  int64_t offset = 4;
  append_completion_logprobs(tok, samples, 1, offset, lp);
  const std::string t0 = token_text(tok, ids[0]);
  const std::string t1 = token_text(tok, ids[1]);
  EXPECT_EQ(lp["tokens"], OrderedJson::array({t0, t1}));
  EXPECT_EQ(lp["token_logprobs"], OrderedJson::array({-0.25, -1.5}));
  EXPECT_EQ(lp["text_offset"], OrderedJson::array({4, 4 + num_code_points(t0)}));
  // The sampled token first, then the top 1 (not repeated when it is the sampled one).
  EXPECT_EQ(lp["top_logprobs"][0].dump(), OrderedJson({{t0, -0.25}, {t1, -0.1}}).dump());
  EXPECT_EQ(lp["top_logprobs"][1].dump(), OrderedJson({{t1, -1.5}}).dump());
  EXPECT_EQ(offset, 4 + num_code_points(t0) + num_code_points(t1));
  EXPECT_EQ(num_code_points("h\xC3\xA9\xE4\xB8\xAD"), 3);
}

TEST(ResponseTest, RequestIdsAreRandomHex) {
  const std::string a = make_request_id("chatcmpl-");
  const std::string b = make_request_id("chatcmpl-");
  ASSERT_EQ(a.size(), 9u + 32u);
  EXPECT_EQ(a.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef", 9), std::string::npos);
  EXPECT_NE(a, b);
}

TEST(RunTest, ChatNonStreamedResponseJoinsTheDeltas) {
  auto ex = std::make_shared<FakeExchange>();
  ScriptedEngine engine;
  start_openai_run(engine.link(), tiny_tokenizer(), ex, meta(), RunOptions{}, prompts(1));
  ASSERT_EQ(engine.requests.size(), 1u);
  EXPECT_EQ(engine.requests[0].id, "chatcmpl-abc");
  EXPECT_EQ(engine.requests[0].prompt_token_ids, (std::vector<int32_t>{1, 2, 3}));
  engine.push(0, step({delta(0, "Hel", {5})}));
  engine::CompletionOutput last = delta(0, "lo", {6}, FinishReason::kStop);
  last.stop_str = "END";
  engine.push(0, step({last}, true));
  ASSERT_TRUE(ex->run_until_ended());
  ASSERT_TRUE(ex->response.has_value());
  EXPECT_EQ(ex->response->status, 200);
  const OrderedJson j = J(ex->response->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["stop_reason"], "END");
  EXPECT_EQ(j["usage"], J(R"({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})"));
  EXPECT_TRUE(engine.aborted.empty());
}

TEST(RunTest, ChatStreamChunksThenUsageThenDone) {
  auto ex = std::make_shared<FakeExchange>();
  ScriptedEngine engine;
  RunOptions o;
  o.stream = true;
  o.stream_options.include_usage = true;
  o.top_logprobs = 0;
  start_openai_run(engine.link(), tiny_tokenizer(), ex, meta(), o, prompts(1));
  engine.push(0, step({delta(0, "Hel", {5})}));
  engine.push(0, step({delta(0, "", {160})}));  // held-back text: the logprobs still go out
  engine.push(0, step({delta(0, "lo", {6}, FinishReason::kLength)}, true));
  ASSERT_TRUE(ex->run_until_ended());
  EXPECT_EQ(ex->stream_status, 200);
  EXPECT_EQ(ex->stream_content_type, "text/event-stream");
  const std::vector<OrderedJson> ev = ex->events();
  ASSERT_EQ(ev.size(), 6u) << ex->body;
  EXPECT_EQ(ev[0]["choices"][0]["delta"], J(R"({"role": "assistant", "content": ""})"));
  EXPECT_TRUE(ev[0]["usage"].is_null());
  EXPECT_TRUE(ev[0].contains("usage"));
  std::string text;
  for (size_t i = 1; i <= 3; ++i) {
    EXPECT_EQ(ev[i]["object"], "chat.completion.chunk");
    EXPECT_TRUE(ev[i]["usage"].is_null());
    EXPECT_EQ(ev[i]["choices"][0]["logprobs"]["content"].size(), 1u);
    text += ev[i]["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, "Hello");
  EXPECT_TRUE(ev[2]["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(ev[3]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(ev[3]["choices"][0]["stop_reason"].is_null());
  EXPECT_EQ(ev[4]["choices"], OrderedJson::array());
  EXPECT_EQ(ev[4]["usage"]["completion_tokens"], 3);
  EXPECT_EQ(ev[5], "[DONE]");
}

TEST(RunTest, CompletionsTwoPromptsTimesTwoSequencesWithEchoAndContinuousUsage) {
  auto ex = std::make_shared<FakeExchange>();
  ScriptedEngine engine;
  ResponseMeta m{"cmpl-xyz", 1, "tiny"};
  RunOptions o;
  o.chat = false;
  o.n = 2;
  o.echo = true;
  o.stream = true;
  o.stream_options = {true, true};
  start_openai_run(engine.link(), tiny_tokenizer(), ex, m, o, prompts(2, "P:"));
  ASSERT_EQ(engine.requests.size(), 2u);
  EXPECT_EQ(engine.requests[1].id, "cmpl-xyz-1");
  engine.push(1, step({delta(1, "b", {7}, FinishReason::kStop)}));
  engine.push(0, step({delta(0, "a", {7}), delta(1, "c", {8}, FinishReason::kStop)}));
  engine.push(1, step({delta(0, "d", {9}, FinishReason::kLength)}, true));
  engine.push(0, step({delta(0, "e", {9}, FinishReason::kStop)}, true));
  ASSERT_TRUE(ex->run_until_ended());
  std::vector<std::string> texts(4);
  int64_t last_completion_tokens = 0;
  const std::vector<OrderedJson> ev = ex->events();
  ASSERT_EQ(ev.size(), 7u) << ex->body;
  for (size_t i = 0; i + 2 < ev.size(); ++i) {
    EXPECT_EQ(ev[i]["object"], "text_completion");
    texts[ev[i]["choices"][0]["index"].get<size_t>()] += ev[i]["choices"][0]["text"];
    const int64_t tokens = ev[i]["usage"]["completion_tokens"].get<int64_t>();
    EXPECT_GE(tokens, last_completion_tokens);
    last_completion_tokens = tokens;
  }
  EXPECT_EQ(texts, (std::vector<std::string>{"P:ae", "P:c", "P:d", "P:b"}));
  EXPECT_EQ(ev[5]["usage"], J(R"({"prompt_tokens": 6, "completion_tokens": 5,
                                  "total_tokens": 11})"));
}

TEST(RunTest, CompletionsNonStreamedLogprobsAccumulate) {
  auto ex = std::make_shared<FakeExchange>();
  ScriptedEngine engine;
  RunOptions o;
  o.chat = false;
  o.top_logprobs = 1;
  start_openai_run(engine.link(), tiny_tokenizer(), ex, meta(), o, prompts(1));
  engine::CompletionOutput a = delta(0, "!", {0});
  a.logprobs = {SampleOutput{0, -0.5f, 1, {{0, -0.5f}}}};
  engine::CompletionOutput b = delta(0, "!", {0}, FinishReason::kLength);
  b.logprobs = {SampleOutput{0, -0.75f, 1, {{0, -0.75f}}}};
  engine.push(0, step({a}));
  engine.push(0, step({b}, true));
  ASSERT_TRUE(ex->run_until_ended());
  const OrderedJson j = J(ex->response->body);
  EXPECT_EQ(j["choices"][0]["text"], "!!");
  EXPECT_EQ(j["choices"][0]["logprobs"],
            J(R"({"text_offset": [0, 1], "token_logprobs": [-0.5, -0.75], "tokens": ["!", "!"],
                  "top_logprobs": [{"!": -0.5}, {"!": -0.75}]})"));
}

TEST(RunTest, EngineErrorBeforeTheStreamIsAnErrorResponse) {
  auto ex = std::make_shared<FakeExchange>();
  ScriptedEngine engine;
  RunOptions o;
  o.stream = true;
  start_openai_run(engine.link(), tiny_tokenizer(), ex, meta(), o, prompts(1));
  engine.push_error(0, Status(StatusCode::kUnavailable, "the server is shutting down"));
  ASSERT_TRUE(ex->run_until_ended());
  ASSERT_TRUE(ex->response.has_value());
  EXPECT_EQ(ex->response->status, 503);
  EXPECT_EQ(J(ex->response->body)["error"]["message"], "the server is shutting down");
  EXPECT_TRUE(ex->body.empty());
}

TEST(RunTest, EngineErrorMidStreamIsAnSseErrorThenDone) {
  auto ex = std::make_shared<FakeExchange>();
  ScriptedEngine engine;
  RunOptions o;
  o.chat = false;
  o.stream = true;
  start_openai_run(engine.link(), tiny_tokenizer(), ex, meta(), o, prompts(2));
  engine.push(0, step({delta(0, "a", {7})}));
  ASSERT_TRUE(ex->run_until([&] { return !ex->body.empty(); }));
  engine.push_error(1, Status(StatusCode::kUnavailable, "the server is shutting down"));
  ASSERT_TRUE(ex->run_until_ended());
  const std::vector<OrderedJson> ev = ex->events();
  ASSERT_EQ(ev.size(), 3u) << ex->body;
  EXPECT_EQ(ev[0]["choices"][0]["text"], "a");
  EXPECT_EQ(ev[1]["error"]["type"], "ServiceUnavailableError");
  EXPECT_EQ(ev[1]["error"]["code"], 503);
  EXPECT_EQ(ev[2], "[DONE]");
  EXPECT_EQ(engine.aborted, std::vector<uint64_t>{100});  // the unfinished other prompt
  EXPECT_FALSE(ex->response.has_value());
}

TEST(RunTest, RefusedSubmissionQueuesNothingAndAnswers503) {
  auto ex = std::make_shared<FakeExchange>();
  ScriptedEngine engine;
  engine.refuse = true;
  RunOptions o;
  o.chat = false;
  start_openai_run(engine.link(), tiny_tokenizer(), ex, meta(), o, prompts(3));
  ASSERT_TRUE(ex->response.has_value());
  EXPECT_EQ(ex->response->status, 503);
  EXPECT_EQ(ex->response->headers, (Headers{{"Retry-After", "1"}}));
  EXPECT_TRUE(engine.requests.empty());  // the prompts are admitted all or none
  EXPECT_TRUE(engine.aborted.empty());
}

TEST(RunTest, DisconnectAbortsUnfinishedRequests) {
  auto ex = std::make_shared<FakeExchange>();
  ScriptedEngine engine;
  RunOptions o;
  o.chat = false;
  o.stream = true;
  start_openai_run(engine.link(), tiny_tokenizer(), ex, meta(), o, prompts(2));
  engine.push(0, step({delta(0, "a", {7}, FinishReason::kStop)}, true));
  ASSERT_TRUE(ex->run_until([&] { return !ex->body.empty(); }));
  ex->disconnect();
  ASSERT_TRUE(ex->run_until([&] { return !engine.aborted.empty(); }));
  EXPECT_EQ(engine.aborted, std::vector<uint64_t>{101});
  engine.push(1, step({delta(0, "late", {7}, FinishReason::kStop)}, true));
  const size_t written = ex->body.size();
  ex->run_pending();
  EXPECT_EQ(ex->body.size(), written);
  EXPECT_FALSE(ex->ended);
}

// OpenAiServing over the real engine thread and the tiny model.
class ServingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine::EngineArgs a;
    a.model = kModelDir;
    a.config.kv_cache_memory_bytes = int64_t{128} << 20;
    a.config.max_model_len = 512;
    a.backend_factory = backend::testing::fake_backend_factory(probe_);
    auto e = engine::load_llm_engine(a);
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    metrics_ = std::make_unique<Metrics>("s4kv-tiny", kv_capacity_info(*e), 512);
    engine_ = std::make_unique<AsyncEngine>(std::move(e).value(), AsyncEngineOptions{}, *metrics_);
    auto t = tokenizer::ChatTemplate::load(kModelDir);
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    template_ = std::make_unique<tokenizer::ChatTemplate>(std::move(t).value());
    serving_ = std::make_unique<OpenAiServing>(*engine_, template_.get(),
                                               std::vector<std::string>{"s4kv-tiny"});
  }
  void TearDown() override {
    probe_->latch.release();
    serving_.reset();
    if (engine_) engine_->shutdown(std::chrono::steady_clock::now() + kDeadline);
  }
  // Runs one request to its end; the exchange holds the answer.
  std::shared_ptr<FakeExchange> run(bool chat, const OrderedJson& body) {
    auto ex = std::make_shared<FakeExchange>();
    if (chat) {
      serving_->chat_completions(body, ex);
    } else {
      serving_->completions(body, ex);
    }
    EXPECT_TRUE(ex->run_until_ended());
    // Drains posted after the end hold the run, which holds this exchange: run them now (they
    // do nothing) so that the test leaks no cycle, as the server's strand would.
    ex->run_pending();
    return ex;
  }
  // Per choice index: the streamed text (and finish reason) of a finished stream.
  static std::vector<std::pair<std::string, std::string>> streamed(const FakeExchange& ex,
                                                                   bool chat) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const OrderedJson& e : ex.events()) {
      if (e.is_string() || e["choices"].empty()) continue;
      const OrderedJson& c = e["choices"][0];
      const size_t i = c["index"].get<size_t>();
      if (out.size() <= i) out.resize(i + 1);
      out[i].first +=
          chat ? c["delta"]["content"].get<std::string>() : c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) out[i].second = c["finish_reason"];
    }
    return out;
  }

  std::shared_ptr<backend::testing::FakeBackendProbe> probe_ =
      std::make_shared<backend::testing::FakeBackendProbe>();
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<AsyncEngine> engine_;
  std::unique_ptr<tokenizer::ChatTemplate> template_;
  std::unique_ptr<OpenAiServing> serving_;
};

TEST_F(ServingTest, ChatStreamedTextEqualsNonStreamedText) {
  OrderedJson body = J(R"({"messages": [{"role": "user", "content": "Tell me a story."}],
      "n": 2, "temperature": 0.9, "seed": 11, "max_tokens": 24, "logprobs": true,
      "top_logprobs": 2})");
  auto whole = run(true, body);
  ASSERT_TRUE(whole->response.has_value());
  ASSERT_EQ(whole->response->status, 200) << whole->response->body;
  const OrderedJson j = J(whole->response->body);
  ASSERT_EQ(j["choices"].size(), 2u);
  body["stream"] = true;
  body["stream_options"] = J(R"({"include_usage": true})");
  auto stream = run(true, body);
  const auto parts = streamed(*stream, true);
  ASSERT_EQ(parts.size(), 2u) << stream->body;
  int64_t tokens = 0;
  for (size_t i = 0; i < 2; ++i) {
    const OrderedJson& c = j["choices"][i];
    EXPECT_EQ(parts[i].first, c["message"]["content"].get<std::string>()) << i;
    EXPECT_EQ(parts[i].second, c["finish_reason"].get<std::string>()) << i;
    tokens += static_cast<int64_t>(c["logprobs"]["content"].size());
    EXPECT_EQ(c["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], tokens);
  const std::vector<OrderedJson> ev = stream->events();
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[ev.size() - 2]["usage"], j["usage"]);
  EXPECT_EQ(ev.back(), "[DONE]");
}

TEST_F(ServingTest, CompletionsStreamedTextEqualsNonStreamedText) {
  OrderedJson body = J(R"({"prompt": ["Once upon a time", "The cat"], "max_tokens": 20,
      "temperature": 0, "logprobs": 1, "ignore_eos": true})");
  auto whole = run(false, body);
  ASSERT_EQ(whole->response->status, 200) << whole->response->body;
  const OrderedJson j = J(whole->response->body);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["usage"]["completion_tokens"], 40);
  EXPECT_EQ(j["choices"][1]["logprobs"]["tokens"].size(), 20u);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  body["stream"] = true;
  const auto parts = streamed(*run(false, body), false);
  ASSERT_EQ(parts.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(parts[i].first, j["choices"][i]["text"]) << i;
}

TEST_F(ServingTest, RefusalsBeforeTheEngine) {
  auto too_long = run(true, J(R"({"messages": [{"role": "user", "content": "Hi"}],
                                  "max_tokens": 512})"));
  ASSERT_TRUE(too_long->response.has_value());
  EXPECT_EQ(too_long->response->status, 400);
  const OrderedJson e = J(too_long->response->body)["error"];
  EXPECT_EQ(e["code"], "context_length_exceeded");
  EXPECT_EQ(e["param"], "messages");
  auto bad = run(false, J(R"({"prompt": "x", "top_p": 2})"));
  EXPECT_EQ(J(bad->response->body)["error"]["param"], "top_p");
}

TEST_F(ServingTest, DisconnectAbortsTheEngineRequest) {
  auto ex = std::make_shared<FakeExchange>();
  probe_->latch.arm();  // hold the prefill step
  serving_->completions(J(R"({"prompt": "Once", "max_tokens": 400, "ignore_eos": true,
                              "stream": true})"),
                        ex);
  ex->run_pending();  // the run starts on the exchange's strand
  ASSERT_TRUE(probe_->latch.wait_held(kDeadline));
  probe_->latch.release();
  probe_->latch.arm();  // and the first decode step: the request cannot finish meanwhile
  ASSERT_TRUE(ex->run_until([&] { return !ex->body.empty(); }));
  ex->disconnect();
  ex->run_pending();  // the abort is queued while the step is held
  probe_->latch.release();
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (engine_->num_unfinished() > 0 && std::chrono::steady_clock::now() < deadline) {
    ex->run_pending();
    std::this_thread::yield();
  }
  EXPECT_EQ(engine_->num_unfinished(), 0);
  EXPECT_FALSE(ex->ended);
  EXPECT_EQ(probe_->num_stale_reads.load(), 0);
}

}  // namespace
}  // namespace s4kv::server
