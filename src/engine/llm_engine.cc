#include "engine/llm_engine.h"

#include <algorithm>
#include <utility>

#include "backend/registry.h"
#include "common/file.h"
#include "engine/generation_config.h"
#include "kv/kv_capacity.h"
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
  // A test's backend factory stands for the device: sized as on cpu.
  S4KV_ASSIGN_OR_RETURN(e.device, args.backend_factory ? Result<std::string>(std::string("cpu"))
                                                       : backend::resolve_device(args.device));
  S4KV_ASSIGN_OR_RETURN(const DType compute_dtype,
                        backend::resolve_dtype(args.dtype, e.device, mc));
  EngineConfig config = args.config;
  if (config.max_num_seqs == 0 || config.max_num_batched_tokens == 0) {
    const backend::DeviceInfo info = backend::device_info(e.device);
    if (config.max_num_seqs == 0) {
      config.max_num_seqs = default_max_num_seqs(e.device, info.total_memory_bytes, info.name);
      config.max_num_seqs_is_default = true;
    }
    if (config.max_num_batched_tokens == 0) {
      config.max_num_batched_tokens = default_max_num_batched_tokens(
          e.device, config.offline, info.total_memory_bytes, info.name);
    }
  }
  const bool auto_memory = config.kv_cache_memory_bytes == 0;
  // The flags resolved once before anything is loaded (errors come first): with --kv-cache-memory
  // auto the budget stands in (1 GiB; on cuda a placeholder until the backend's profile()), and
  // the cache's shape and the limits come from it.
  EngineConfig provisional = config;
  if (auto_memory) provisional.kv_cache_memory_bytes = kv::kDefaultKvCacheMemoryBytes;
  if (auto_memory && e.device == "cuda") provisional.kv_cache_memory_bytes = int64_t{1} << 40;
  S4KV_ASSIGN_OR_RETURN(ResolvedEngineConfig resolved, resolve_engine_config(provisional, mc));
  S4KV_ASSIGN_OR_RETURN(e.tokenizer, load_tokenizer(e.model_dir));
  S4KV_ASSIGN_OR_RETURN(e.generation_config, read_generation_config(e.model_dir, mc.vocab_size));
  std::unique_ptr<backend::Backend> backend;
  std::string memory_line;
  if (args.backend_factory) {
    S4KV_ASSIGN_OR_RETURN(backend, args.backend_factory(mc, resolved.kv));
  } else {
    // The backend converts the weights to its own format; the file maps go with this scope.
    S4KV_ASSIGN_OR_RETURN(const model::ModelWeights weights,
                          model::load_weights(e.model_dir, mc, args.load_format, args.config.seed));
    // Start-up in the backend's order (backend.h): limits -> unsupported -> profile -> init.
    // One logits row a sampling sequence (ModelRunner::add_sequence), as vLLM's profile run.
    const backend::BackendLimits limits{
        resolved.scheduler.max_num_batched_tokens, resolved.scheduler.max_num_seqs,
        resolved.scheduler.max_model_len,
        std::min<int64_t>(resolved.scheduler.max_num_seqs,
                          resolved.scheduler.max_num_batched_tokens)};
    S4KV_ASSIGN_OR_RETURN(
        backend,
        backend::make_backend(e.device, compute_dtype, mc, weights, resolved.kv, limits,
                              backend::DeviceOptions{config.gpu_memory_utilization,
                                                     config.cpu_threads, config.enforce_eager}));
    if (const auto reasons = backend->unsupported(resolved.kv); !reasons.empty()) {
      return unsupported(reasons.front());
    }
    S4KV_ASSIGN_OR_RETURN(const backend::MemoryProfile profile, backend->profile());
    if (auto_memory && profile.kv_cache_bytes && *profile.kv_cache_bytes <= 0) {
      return Status(StatusCode::kResourceExhausted,
                    "no memory is left for the KV cache on " + profile.line +
                        "; raise --gpu-memory-utilization, lower --max-num-batched-tokens, or "
                        "give --kv-cache-memory");
    }
    if (auto_memory && profile.kv_cache_bytes) {
      config.kv_cache_memory_bytes = *profile.kv_cache_bytes;
      memory_line = "; " + profile.line;
      S4KV_ASSIGN_OR_RETURN(resolved, resolve_engine_config(config, mc));
      // The backend was sized for the provisional max_model_len, never below this one.
      S4KV_CHECK(resolved.scheduler.max_model_len <= limits.max_model_len,
                 "engine: max_model_len grew after profiling");
    }
    S4KV_RETURN_IF_ERROR(backend->init_kv_cache(resolved.kv));
  }
  std::vector<int32_t> eos = resolve_eos_token_ids(e.generation_config, mc.eos_token_ids);
  for (int32_t id : eos) {
    if (id < 0 || id >= mc.vocab_size) {
      return invalid_argument("eos_token_id=" + std::to_string(id) + " in " + e.model_dir +
                              "/config.json is outside the vocabulary (vocab_size=" +
                              std::to_string(mc.vocab_size) + ")");
    }
  }
  e.capacity_line = describe_capacity(resolved) + " (device " + e.device + memory_line + ")";
  e.engine =
      std::make_unique<EngineCore>(resolved, std::move(backend), *e.tokenizer, std::move(eos));
  return e;
}

}  // namespace s4kv::engine
