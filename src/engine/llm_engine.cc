#include "engine/llm_engine.h"

#include <utility>

#include "backend/registry.h"
#include "common/file.h"
#include "engine/generation_config.h"
#include "model/model_path.h"

namespace s4kv::engine {
namespace {

Result<std::unique_ptr<tokenizer::Tokenizer>> load_tokenizer(const std::string& model_dir) {
  const std::string path = model_dir + "/tokenizer.json";
  if (!is_regular_file(path))
    return not_found(path + ": no such file (the model has no tokenizer)");
  S4KV_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::from_file(path));
  return std::make_unique<tokenizer::Tokenizer>(std::move(tok));
}

}  // namespace

Result<LlmEngine> load_llm_engine(const EngineArgs& args) {
  LlmEngine e;
  S4KV_ASSIGN_OR_RETURN(e.model_dir, model::resolve_model_path(args.model));
  S4KV_ASSIGN_OR_RETURN(e.model_config, model::load_model_config(e.model_dir));
  const model::ModelConfig& mc = e.model_config;
  S4KV_ASSIGN_OR_RETURN(const ResolvedEngineConfig resolved,
                        resolve_engine_config(args.config, mc));
  S4KV_ASSIGN_OR_RETURN(e.device, backend::resolve_device(args.device));
  S4KV_ASSIGN_OR_RETURN(const DType compute_dtype,
                        backend::resolve_dtype(args.dtype, e.device, mc));
  S4KV_ASSIGN_OR_RETURN(e.tokenizer, load_tokenizer(e.model_dir));
  S4KV_ASSIGN_OR_RETURN(e.generation_config, read_generation_config(e.model_dir, mc.vocab_size));
  std::unique_ptr<backend::Backend> backend;
  if (args.backend_factory) {
    S4KV_ASSIGN_OR_RETURN(backend, args.backend_factory(mc, resolved.kv));
  } else {
    // The backend converts the weights to its own format; the file maps go with this scope.
    S4KV_ASSIGN_OR_RETURN(const model::ModelWeights weights,
                          model::load_weights(e.model_dir, mc, args.load_format, args.config.seed));
    const backend::BackendLimits limits{resolved.scheduler.max_num_batched_tokens,
                                        resolved.scheduler.max_num_seqs,
                                        resolved.scheduler.max_model_len};
    S4KV_ASSIGN_OR_RETURN(
        backend, backend::make_backend(e.device, compute_dtype, mc, weights, resolved.kv, limits));
  }
  std::vector<int32_t> eos = resolve_eos_token_ids(e.generation_config, mc.eos_token_ids);
  for (int32_t id : eos) {
    if (id < 0 || id >= mc.vocab_size) {
      return invalid_argument("eos_token_id=" + std::to_string(id) + " in " + e.model_dir +
                              "/config.json is outside the vocabulary (vocab_size=" +
                              std::to_string(mc.vocab_size) + ")");
    }
  }
  e.capacity_line = describe_capacity(resolved) + " (device " + e.device + ")";
  e.engine =
      std::make_unique<EngineCore>(resolved, std::move(backend), *e.tokenizer, std::move(eos));
  return e;
}

}  // namespace s4kv::engine
