// EngineCore end to end on s4kv-tiny through the CPU backend: greedy continuations of the
// golden prompts (transformers, 16-bit KV), batching, preemption under memory pressure, seeds,
// n > 1, aborts, stop conditions, request refusals, and the int4_kivi residual-slot path.
//
// Greedy comparisons accept a divergence only at a step whose margin (top-1 minus top-2 logit
// of the run compared against) is below a bound set by what makes the two runs differ, and
// stop there (the continuations differ from then on):
//   - against transformers: the golden contract (cpu_forward_golden_test) lets any logit be
//     off by up to 1e-3 * ||logits row||, so the bound is 2e-3 * the largest golden row norm of
//     the prompt;
//   - batch against alone, or under preemption (a decode row against a recompute prefill):
//     only GEMM shapes differ, so fp32 rounding and the bf16 K/V roundings it can flip;
//     kTinyMargin, 5x twice the largest logprob change measured between such runs (2.2e-2
//     nats, tests/server/test_concurrency.py). Neither depends on one machine's BLAS.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/llm_engine.h"
#include "model/safetensors.h"

namespace s4kv::engine {
namespace {

constexpr const char* kModel = "models/s4kv-tiny";
constexpr const char* kGolden = "tests/golden/s4kv-tiny";
constexpr float kTinyMargin = 0.22f;

// One sequence's whole output, gathered from the step deltas.
struct Seq {
  std::vector<int32_t> ids;
  std::vector<float> margins;  // top-1 minus top-2 logprob per step, when logprobs >= 2
  std::string text;
  std::optional<FinishReason> finish;
  std::optional<std::string> stop_str;
};
using Outputs = std::map<RequestId, std::vector<Seq>>;

EngineArgs args16(int64_t kv_bytes = int64_t{256} << 20) {
  EngineArgs a;
  a.model = kModel;
  a.config.kv_cache_dtype = kv::KvCacheDtype::k16Bit;
  a.config.kv_cache_memory_bytes = kv_bytes;
  a.config.max_num_seqs = 16;
  return a;
}

LlmEngine load(const EngineArgs& a) {
  auto e = load_llm_engine(a);
  S4KV_CHECK(e.is_ok(), e.status().message());
  return std::move(e).value();
}

SamplingParams greedy(int64_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = 2;
  return p;
}

std::vector<int32_t> encode(const LlmEngine& e, const std::string& text) {
  auto ids = e.tokenizer->encode(text, true);
  S4KV_CHECK(ids.is_ok(), ids.status().message());
  return *ids;
}

// Steps until every request has finished, checking the pool after each step.
Outputs run(EngineCore& core, Outputs out = {}) {
  while (core.has_unfinished()) {
    for (const RequestOutput& ro : core.step()) {
      std::vector<Seq>& seqs = out[ro.request_id];
      for (const CompletionOutput& co : ro.outputs) {
        if (seqs.size() <= static_cast<size_t>(co.index)) seqs.resize(co.index + 1);
        Seq& s = seqs[co.index];
        EXPECT_FALSE(s.finish.has_value()) << "output after finish";
        s.ids.insert(s.ids.end(), co.token_ids.begin(), co.token_ids.end());
        s.text += co.text;
        for (const SampleOutput& lp : co.logprobs) {
          if (lp.top_logprobs.size() >= 2) {
            s.margins.push_back(lp.top_logprobs[0].logprob - lp.top_logprobs[1].logprob);
          }
        }
        if (co.finish_reason) s.finish = co.finish_reason;
        if (co.stop_str) s.stop_str = co.stop_str;
      }
    }
    core.scheduler().check_invariants();
  }
  return out;
}

RequestId add(EngineCore& core, std::vector<int32_t> ids, const SamplingParams& p) {
  auto id = core.add_request(std::move(ids), p);
  S4KV_CHECK(id.is_ok(), id.status().message());
  return *id;
}

// Greedy `ours` against `ref` (whose margins decide where a divergence is acceptable).
// Returns the number of steps that agree before the first (accepted) divergence.
size_t expect_same_greedy(const std::vector<int32_t>& ours, const std::vector<int32_t>& ref,
                          const std::vector<float>& ref_margins, const std::string& what,
                          float bound = kTinyMargin) {
  EXPECT_EQ(ours.size(), ref.size()) << what;
  for (size_t s = 0; s < std::min(ours.size(), ref.size()); ++s) {
    if (ours[s] == ref[s]) continue;
    EXPECT_LT(s < ref_margins.size() ? ref_margins[s] : 1e9f, bound)
        << what << ": greedy step " << s << " ours " << ours[s] << " ref " << ref[s];
    return s;
  }
  return ref.size();
}

void expect_pool_empty(const EngineCore& core) {
  const kv::KvCacheManager& kv = core.scheduler().kv_cache_manager();
  EXPECT_EQ(kv.num_requests(), 0);
  EXPECT_EQ(kv.num_available_blocks(), kv.num_usable_blocks());
  EXPECT_EQ(core.scheduler().kv_cache_usage(), 0.0);
}

TEST(EngineCoreGolden, GreedyMatchesTransformersInOneBatch) {
  auto file = model::SafetensorsFile::open(std::string(kGolden) + "/logits.safetensors");
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  LlmEngine e = load(args16());
  std::map<RequestId, int> prompt_of;
  for (int i = 0; i < 6; ++i) {
    const std::string p = "p" + std::to_string(i) + ".";
    prompt_of[add(*e.engine, file->find(p + "ids")->to_vector<int32_t>(), greedy(48))] = i;
  }
  const Outputs out = run(*e.engine);
  for (const auto& [id, seqs] : out) {
    const std::string p = "p" + std::to_string(prompt_of.at(id)) + ".";
    const auto logits = file->find(p + "logits")->to_vector<float>();
    const size_t vocab = static_cast<size_t>(e.model_config.vocab_size);
    double max_norm = 0;
    for (size_t r = 0; r * vocab < logits.size(); ++r) {
      double sq = 0;
      for (size_t v = 0; v < vocab; ++v)
        sq += double{logits[r * vocab + v]} * logits[r * vocab + v];
      max_norm = std::max(max_norm, std::sqrt(sq));
    }
    const size_t matched =
        expect_same_greedy(seqs[0].ids, file->find(p + "greedy")->to_vector<int32_t>(),
                           file->find(p + "greedy_margin")->to_vector<float>(), p,
                           static_cast<float>(2e-3 * max_norm));
    std::printf("[ golden   ] %s greedy %zu/48 as transformers\n", p.c_str(), matched);
    EXPECT_EQ(seqs[0].finish, FinishReason::kLength);
  }
  expect_pool_empty(*e.engine);
}

const std::vector<std::string> kPrompts = {
    "The history of the",
    "In the beginning God created",
    "PostgreSQL supports several index types:",
    "def main():\n    ",
    "The Linux kernel documentation describes how to configure the scheduler, which",
    "Git is a distributed version control system",
    "A dictionary defines the word",
    "<|im_start|>user\nWhat is Debian?<|im_end|>\n<|im_start|>assistant\n",
};

// Each prompt run on its own engine step loop: the reference for batched runs.
std::vector<Seq> run_alone(const EngineArgs& a, const std::vector<SamplingParams>& params) {
  LlmEngine e = load(a);
  std::vector<Seq> out;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    add(*e.engine, encode(e, kPrompts[i]), params[i]);
    out.push_back(run(*e.engine).begin()->second[0]);
  }
  return out;
}

std::vector<Seq> run_batch(const EngineArgs& a, const std::vector<SamplingParams>& params,
                           int64_t* num_preemptions = nullptr) {
  LlmEngine e = load(a);
  std::vector<RequestId> ids;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    ids.push_back(add(*e.engine, encode(e, kPrompts[i]), params[i]));
  }
  const Outputs out = run(*e.engine);
  std::vector<Seq> seqs;
  for (RequestId id : ids) seqs.push_back(out.at(id)[0]);
  if (num_preemptions) *num_preemptions = e.engine->scheduler().num_preemptions_total();
  expect_pool_empty(*e.engine);
  return seqs;
}

TEST(EngineCore, BatchOfEightEqualsEachAlone) {
  const std::vector<SamplingParams> params(kPrompts.size(), greedy(32));
  const std::vector<Seq> alone = run_alone(args16(), params);
  const std::vector<Seq> batch = run_batch(args16(), params);
  for (size_t i = 0; i < alone.size(); ++i) {
    expect_same_greedy(batch[i].ids, alone[i].ids, alone[i].margins, kPrompts[i]);
  }
}

TEST(EngineCore, OutputsUnchangedUnderMemoryPressure) {
  const std::vector<SamplingParams> params(kPrompts.size(), greedy(40));
  const std::vector<Seq> roomy = run_batch(args16(), params);
  // 8 blocks of 32 tokens: each request needs 2-3 blocks, together about 20.
  EngineArgs tight = args16(8 * 32 * 6144);
  tight.config.block_size = 32;
  tight.config.max_model_len = 256;
  int64_t num_preemptions = 0;
  const std::vector<Seq> pressed = run_batch(tight, params, &num_preemptions);
  EXPECT_GT(num_preemptions, 0);
  for (size_t i = 0; i < roomy.size(); ++i) {
    expect_same_greedy(pressed[i].ids, roomy[i].ids, roomy[i].margins, kPrompts[i]);
  }
}

// A seeded sequence's draws depend only on (seed, index, step), so the same requests sample
// the same tokens run for run. Against a run alone, a batch is not bit-identical: different
// GEMM shapes can flip the bf16 rounding of a K/V element, which moves logits by up to about
// 1e-3 (measured), and over 192 draws one may land on the other side of a boundary. So batch
// against alone is asked to agree on most sequences, not all.
TEST(EngineCore, SeededSamplingIsReproducible) {
  std::vector<SamplingParams> params(kPrompts.size());
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].temperature = 0.9;
    params[i].top_p = 0.95;
    params[i].seed = 1000 + static_cast<int64_t>(i);
    params[i].max_tokens = 24;
    params[i].ignore_eos = true;
  }
  const std::vector<Seq> a = run_alone(args16(), params);
  const std::vector<Seq> b = run_alone(args16(), params);
  const std::vector<Seq> batch = run_batch(args16(), params);
  const std::vector<Seq> batch2 = run_batch(args16(), params);
  size_t num_same = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].ids, b[i].ids) << kPrompts[i];
    EXPECT_EQ(batch[i].ids, batch2[i].ids) << kPrompts[i];
    EXPECT_EQ(batch[i].text, batch2[i].text);
    num_same += a[i].ids == batch[i].ids;
  }
  EXPECT_GE(num_same, a.size() - 2);
  params[0].seed = 7;  // another seed, another continuation
  EXPECT_NE(run_alone(args16(), params)[0].ids, a[0].ids);
}

TEST(EngineCore, NTwoGivesTwoSequences) {
  LlmEngine e = load(args16());
  SamplingParams p;
  p.n = 2;
  p.temperature = 1.0;
  p.seed = 3;
  p.max_tokens = 16;
  p.ignore_eos = true;
  const RequestId id = add(*e.engine, encode(e, "The history of the"), p);
  const Outputs out = run(*e.engine);
  ASSERT_EQ(out.at(id).size(), 2u);
  for (const Seq& s : out.at(id)) {
    EXPECT_EQ(s.ids.size(), 16u);
    EXPECT_EQ(s.finish, FinishReason::kLength);
    EXPECT_EQ(s.text, e.tokenizer->decode(s.ids, true));
  }
  EXPECT_NE(out.at(id)[0].ids, out.at(id)[1].ids);
  expect_pool_empty(*e.engine);
}

TEST(EngineCore, NTwoSharesThePromptsFullBlocks) {
  LlmEngine e = load(args16());
  std::vector<int32_t> prompt;
  while (prompt.size() < 150) {  // two full blocks of 64 and a partial one
    const auto more = encode(e, "The history of the dictionary and of the hacker culture. ");
    prompt.insert(prompt.end(), more.begin(), more.end());
  }
  prompt.resize(150);
  SamplingParams p;
  p.n = 3;
  p.temperature = 1.0;
  p.seed = 5;
  p.max_tokens = 4;
  p.ignore_eos = true;
  const RequestId id = add(*e.engine, prompt, p);
  const Outputs out = run(*e.engine);
  ASSERT_EQ(out.at(id).size(), 3u);
  // Sequences 1 and 2 start once sequence 0 has computed the prompt: each hits its 2 full
  // blocks (128 tokens) in the prefix cache.
  const kv::BlockPool& pool = e.engine->scheduler().kv_cache_manager().pool();
  EXPECT_EQ(pool.prefix_cache_hits(), 2 * 128);
  expect_pool_empty(*e.engine);
}

TEST(EngineCore, AbortMidwayFreesAllBlocks) {
  LlmEngine e = load(args16());
  EngineCore& core = *e.engine;
  std::vector<RequestId> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(add(core, encode(e, kPrompts[i]), greedy(100)));
  for (int s = 0; s < 5; ++s) (void)core.step();
  EXPECT_GT(core.scheduler().kv_cache_usage(), 0.0);
  EXPECT_TRUE(core.abort(ids[1]));
  EXPECT_FALSE(core.abort(ids[1]));
  for (int s = 0; s < 3; ++s) {
    for (const RequestOutput& ro : core.step()) EXPECT_NE(ro.request_id, ids[1]);
  }
  EXPECT_TRUE(core.abort(ids[0]));
  EXPECT_TRUE(core.abort(ids[2]));
  EXPECT_FALSE(core.has_unfinished());
  expect_pool_empty(core);
  EXPECT_TRUE(core.step().empty());
}

TEST(EngineCore, StopStringsStopTokensAndMaxTokens) {
  LlmEngine e = load(args16());
  EngineCore& core = *e.engine;
  const std::vector<int32_t> prompt = encode(e, "The history of the");
  // Greedy continues " history is the same as the history of the history."
  SamplingParams stop = greedy(40);
  stop.stop = {" same"};
  SamplingParams length = greedy(5);
  const RequestId by_stop = add(core, prompt, stop);
  const RequestId by_length = add(core, prompt, length);
  Outputs out = run(core);
  EXPECT_EQ(out.at(by_stop)[0].finish, FinishReason::kStop);
  EXPECT_EQ(out.at(by_stop)[0].stop_str, " same");
  EXPECT_EQ(out.at(by_stop)[0].text, " history is the");
  EXPECT_EQ(out.at(by_length)[0].finish, FinishReason::kLength);
  EXPECT_EQ(out.at(by_length)[0].ids.size(), 5u);

  SamplingParams stop_id = greedy(40);
  stop_id.stop_token_ids = {out.at(by_length)[0].ids[2]};
  const RequestId by_id = add(core, prompt, stop_id);
  out = run(core);
  EXPECT_EQ(out.at(by_id)[0].finish, FinishReason::kStop);
  EXPECT_EQ(out.at(by_id)[0].ids.size(), 3u);
  expect_pool_empty(core);
}

TEST(EngineCore, RefusesBadRequestsNamingTheField) {
  EngineArgs a = args16();
  a.config.max_model_len = 64;
  LlmEngine e = load(a);
  EngineCore& core = *e.engine;
  SamplingParams bad_top_p;
  bad_top_p.top_p = 0.0;
  auto r = core.add_request({1, 2, 3}, bad_top_p);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message().rfind("top_p", 0), 0u) << r.status().message();

  r = core.add_request({1, 9000, 3}, SamplingParams{});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("prompt"), std::string::npos) << r.status().message();

  r = core.add_request({}, SamplingParams{});
  EXPECT_FALSE(r.is_ok());

  SamplingParams too_long;
  too_long.max_tokens = 40;
  r = core.add_request(std::vector<int32_t>(30, 5), too_long);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message().rfind("max_tokens", 0), 0u) << r.status().message();
  EXPECT_FALSE(core.has_unfinished());
}

// int4_kivi: residual slots are handed out and returned through preemption and finish, and a
// sequence shorter than one block computes exactly as with the 16-bit cache.
TEST(EngineCore, Int4KiviResidualSlotsUnderPressure) {
  EngineArgs a = args16();
  a.config.kv_cache_dtype = kv::KvCacheDtype::kInt4Kivi;
  a.config.block_size = 32;
  a.config.max_num_seqs = 4;
  a.config.max_model_len = 128;
  // Format v2: per seat a residual ring of 2 blocks in 7 pool blocks of 32 int4_kivi tokens
  // (1776 bytes a token) and per running sequence a 16-bit sink block in a run of 4 pool blocks;
  // pool: 4 seats' rings, the dummy seat's, 5 sink runs (the dummy block's too) and 4 blocks for
  // the sequences (each sequence's first block is a sink block), so all 4 running leave 4 blocks
  // for their tables.
  a.config.kv_cache_memory_bytes = (4 * 7 + 7 + 5 * 4 + 4) * 32 * 1776;
  auto loaded = load_llm_engine(a);
  if (!loaded.is_ok() && loaded.status().code() == StatusCode::kUnsupported) {
    GTEST_SKIP() << loaded.status().message();
  }
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EngineCore& core = *loaded->engine;
  std::vector<RequestId> ids;
  for (const std::string& p : kPrompts) ids.push_back(add(core, encode(*loaded, p), greedy(60)));
  const Outputs out = run(core);
  EXPECT_GT(core.scheduler().num_preemptions_total(), 0);
  for (RequestId id : ids) EXPECT_EQ(out.at(id)[0].ids.size(), 60u);
  (void)core.step();  // reports the last finished ids to the runner
  EXPECT_EQ(core.model_runner().num_seats_in_use(), 0);
  EXPECT_EQ(core.model_runner().num_free_seats(), 4);
  expect_pool_empty(core);

  // Prompt plus outputs within one block: bit-identical to 16-bit, so the same greedy tokens.
  LlmEngine e16 = load(args16());
  const std::vector<int32_t> prompt = encode(e16, "The history of the");
  const RequestId a16 = add(*e16.engine, prompt, greedy(20));
  const RequestId a4 = add(core, prompt, greedy(20));
  EXPECT_EQ(run(core).at(a4)[0].ids, run(*e16.engine).at(a16)[0].ids);
}

}  // namespace
}  // namespace s4kv::engine
