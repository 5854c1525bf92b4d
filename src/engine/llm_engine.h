// Building an engine from a model: resolve --model, read config.json, tokenizer.json and
// generation_config.json, resolve the EngineConfig (KV budget -> blocks), load the weights,
// create the backend through its factory, and assemble the EngineCore. The one place that
// picks a backend; what it returns sees the backend only through backend.h. Every failure is
// a Status whose message is the one line start-up prints.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine_config.h"
#include "engine/engine_core.h"
#include "engine/generation_config.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace s4kv::engine {

struct EngineArgs {
  std::string model;  // --model: directory or ORG/NAME in the local Hugging Face cache
  model::LoadFormat load_format = model::LoadFormat::kAuto;
  std::string device = "auto";  // --device: "auto" | "cpu" | "cuda"
  std::string dtype = "auto";   // --dtype (backend/registry.h resolve_dtype)
  EngineConfig config;
  // Tests only (a fake backend for exact engine tests): when set, builds the backend in place
  // of --device's from the model's config and the resolved KV cache; no weights are loaded.
  std::function<Result<std::unique_ptr<backend::Backend>>(const model::ModelConfig&,
                                                          const backend::KvCacheConfig&)>
      backend_factory;
};

// An engine with what its callers need around it. The tokenizer is declared before the
// engine, which refers to it, so it is destroyed after.
struct LlmEngine {
  std::string model_dir;
  std::string device;  // the resolved --device: "cpu" | "cuda"
  model::ModelConfig model_config;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<EngineCore> engine;
  GenerationConfig generation_config;  // the checkpoint's sampling defaults (server's business)
  std::string capacity_line;           // describe_capacity(): log it at start-up
};

Result<LlmEngine> load_llm_engine(const EngineArgs& args);

}  // namespace s4kv::engine
