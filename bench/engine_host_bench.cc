// The engine's own host time per decode step, without a model: EngineCore (scheduler, KV cache
// manager, model runner, batch building, detokenization, stop checks, outputs) over a backend
// that answers every step at once with a sampled token a row. What a GPU step spends on the
// host outside the backend's submit is this; `s4kv bench latency` on the GPU reports the sum of
// both ("Decode step host time"). Runs on any machine.
//
//   build/bench/engine_host_bench --batch-size 256 --input-len 1024 --output-len 128
//       [--kv-cache-dtype int4_kivi|16bit] [--async-scheduling] [--model models/s4kv-tiny]
//       [--max-num-seqs N (default: the batch size; 1024, vLLM's on a large GPU, leaves seats
//       and sinks idle)]
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "backend/backend.h"
#include "cli/bench_workload.h"
#include "common/check.h"
#include "engine/engine_config.h"
#include "engine/llm_engine.h"
#include "engine/sampling_params.h"

namespace s4kv {
namespace {

// Samples a token per sampling row, an ordinary id (from `pool`, as `s4kv bench`'s random
// prompts draw theirs) chosen by the row's position: no logits, no arithmetic over the
// vocabulary, so that the step's time is the engine's.
class InstantBackend final : public backend::SynchronousBackend {
 public:
  InstantBackend(const backend::KvCacheConfig& kv, int64_t vocab_size,
                 std::shared_ptr<const std::vector<int32_t>> pool)
      : kv_(kv), vocab_size_(vocab_size), pool_(std::move(pool)) {}
  std::string_view name() const override { return "instant"; }
  int64_t vocab_size() const override { return vocab_size_; }
  const backend::KvCacheConfig& kv_cache_config() const override { return kv_; }
  Status init_kv_cache(const backend::KvCacheConfig& kv) override {
    kv_ = kv;
    return Status::ok();
  }

 protected:
  backend::StepOutput run(const backend::ForwardBatch& batch) override {
    samples_.resize(batch.sampling.size());
    for (size_t i = 0; i < samples_.size(); ++i) {
      const int32_t row = batch.logits_indices[i];
      const auto pos = static_cast<size_t>(batch.positions[static_cast<size_t>(row)]);
      samples_[i].token_id = (*pool_)[(pos * 7919 + 17) % pool_->size()];
    }
    backend::StepOutput out;
    out.samples = samples_;
    return out;
  }

 private:
  backend::KvCacheConfig kv_;
  int64_t vocab_size_;
  std::shared_ptr<const std::vector<int32_t>> pool_;  // set once the tokenizer is loaded
  std::vector<backend::SampleOutput> samples_;
};

int run(int argc, char** argv) {
  CLI::App app{"EngineCore's host time per decode step over an instant backend"};
  std::string model = "models/s4kv-tiny", kv_dtype = "int4_kivi";
  int64_t batch = 256, input_len = 1024, output_len = 128, max_num_seqs = 0;
  bool async = false;
  app.add_option("--model", model, "config.json and tokenizer.json (no weights are read)");
  app.add_option("--kv-cache-dtype", kv_dtype);
  app.add_option("--batch-size", batch);
  app.add_option("--max-num-seqs", max_num_seqs, "seats (default: the batch size)");
  app.add_option("--input-len", input_len);
  app.add_option("--output-len", output_len);
  app.add_flag("--async-scheduling", async);
  CLI11_PARSE(app, argc, argv);

  engine::EngineArgs a;
  a.model = model;
  a.device = "cpu";
  auto dtype = engine::parse_kv_cache_dtype(kv_dtype);
  S4KV_CHECK(dtype.is_ok(), dtype.status().message());
  a.config.kv_cache_dtype = *dtype;
  a.config.max_num_seqs = static_cast<int>(max_num_seqs > 0 ? max_num_seqs : batch);
  a.config.max_num_batched_tokens = 16384;
  a.config.max_model_len = input_len + output_len + 64;
  // Room for every sequence whole (as a large GPU's cache would have), whatever the format.
  a.config.kv_cache_memory_bytes = int64_t{8} << 30;
  a.config.async_scheduling = async;
  // The ids prompts and samples draw from, known once the engine has loaded the tokenizer
  // (the backend samples only after that).
  auto pool = std::make_shared<std::vector<int32_t>>();
  a.backend_factory =
      [pool](const model::ModelConfig& m,
             const backend::KvCacheConfig& kv) -> Result<std::unique_ptr<backend::Backend>> {
    return std::unique_ptr<backend::Backend>(
        std::make_unique<InstantBackend>(kv, m.vocab_size, pool));
  };
  auto loaded = engine::load_llm_engine(a);
  S4KV_CHECK(loaded.is_ok(), loaded.status().message());
  engine::EngineCore& core = *loaded->engine;
  *pool = cli::prompt_token_pool(*loaded->tokenizer, core.vocab_size());

  engine::SamplingParams params;
  params.max_tokens = output_len;
  params.ignore_eos = true;
  for (std::vector<int32_t>& prompt : cli::random_prompts(*pool, batch, input_len, 0)) {
    auto id = core.add_request(std::move(prompt), params);
    S4KV_CHECK(id.is_ok(), id.status().message());
  }
  // Decode steps: those after every request has its first token (the prefill's steps first).
  std::vector<double> decode_ms;
  std::unordered_set<engine::RequestId> started;
  int64_t steps = 0, tokens = 0, text_bytes = 0;
  while (core.has_unfinished()) {
    const bool decoding = static_cast<int64_t>(started.size()) == batch;
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<engine::RequestOutput> outs = core.step();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (const engine::RequestOutput& o : outs) {
      for (const engine::CompletionOutput& c : o.outputs) {
        tokens += static_cast<int64_t>(c.token_ids.size());
        text_bytes += static_cast<int64_t>(c.text.size());
        if (!c.token_ids.empty()) started.insert(o.request_id);
      }
    }
    if (decoding) decode_ms.push_back(ms);
    ++steps;
  }
  std::printf(
      "engine host time, %s, batch %lld, input %lld, output %lld%s: median %.1f us a decode "
      "step over %zu steps (%lld steps, %lld tokens, %lld bytes of text)\n",
      kv_dtype.c_str(), static_cast<long long>(batch), static_cast<long long>(input_len),
      static_cast<long long>(output_len), async ? ", async scheduling" : "",
      1000.0 * cli::percentile(decode_ms, 50), decode_ms.size(), static_cast<long long>(steps),
      static_cast<long long>(tokens), static_cast<long long>(text_bytes));
  return 0;
}

}  // namespace
}  // namespace s4kv

int main(int argc, char** argv) { return s4kv::run(argc, argv); }
