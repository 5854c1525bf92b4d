// Weight loading: a safetensors checkpoint checked tensor by tensor against weight_map's
// expectations (all-or-nothing), or deterministic dummy weights. Real tensors stay in the
// file maps; ModelWeights keeps the maps alive. Dtypes are only checked to be float
// (F32/F16/BF16): converting to the compute dtype is the backend's job.
#include "model/weights.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <set>
#include <system_error>
#include <thread>

#include "common/file.h"
#include "common/half.h"
#include "common/json.h"
#include "model/safetensors.h"
#include "model/weight_map.h"

namespace s4kv::model {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const TensorView& ModelWeights::get(const std::string& name) const {
  auto it = tensors_.find(name);
  S4KV_CHECK(it != tensors_.end(), "no tensor \"", name, "\" in the loaded weights");
  return it->second;
}

int64_t ModelWeights::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, view] : tensors_) n += view.numel();
  return n;
}

// The only writer of ModelWeights' private state (it is a friend).
class WeightsBuilder {
 public:
  static void add(ModelWeights* w, const std::string& name, TensorView view) {
    w->tensors_.insert_or_assign(name, std::move(view));
  }
  static void keep(ModelWeights* w, std::shared_ptr<const void> owner) {
    w->storage_.push_back(std::move(owner));
  }
};

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr size_t kMaxReportedProblems = 3;

std::string quoted(const std::string& s) { return json_brief(Json(s)); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// A single model.safetensors wins over an index when both exist, as in transformers.
Result<SafetensorsCheckpoint> open_checkpoint(const std::string& dir) {
  if (is_regular_file(dir + "/" + kSingleFile)) {
    return SafetensorsCheckpoint::open_single(dir + "/" + kSingleFile);
  }
  if (is_regular_file(dir + "/" + kIndexFile)) {
    return SafetensorsCheckpoint::open_index(dir + "/" + kIndexFile);
  }
  return not_found(dir + ": no weight files (expected " + kSingleFile + " or " + kIndexFile +
                   "; use --load-format dummy for random weights)");
}

// One line per problem with one expected tensor; empty when it is fine or optional and absent.
std::string check_tensor(const SafetensorsCheckpoint& ckpt, const ExpectedTensor& want) {
  const TensorView* view = ckpt.find(want.name);
  if (view == nullptr) return want.optional ? "" : "missing tensor " + quoted(want.name);
  const std::string where =
      ckpt.files().size() > 1 ? " (in " + base_name(ckpt.file_of(want.name)) + ")" : "";
  if (view->shape != want.shape) {
    return "tensor " + quoted(want.name) + " has shape " + shape_text(view->shape) + ", expected " +
           shape_text(want.shape) + where;
  }
  if (!is_float(view->dtype)) {
    return "tensor " + quoted(want.name) + " has wrong dtype " +
           std::string(dtype_name(view->dtype)) + ", expected F32, F16 or BF16" + where;
  }
  return "";
}

// Every problem, in forward order, then tensors the model does not use.
std::vector<std::string> find_problems(const SafetensorsCheckpoint& ckpt,
                                       const std::vector<ExpectedTensor>& expected) {
  std::vector<std::string> problems;
  std::set<std::string> known;
  for (const ExpectedTensor& want : expected) {
    known.insert(want.name);
    if (std::string p = check_tensor(ckpt, want); !p.empty()) problems.push_back(std::move(p));
  }
  for (const auto& [name, file_index] : ckpt.tensors()) {
    if (known.count(name) || is_ignorable_tensor(name)) continue;
    std::string where =
        ckpt.files().size() > 1 ? " (in " + base_name(ckpt.files()[file_index].name()) + ")" : "";
    problems.push_back("unexpected tensor " + quoted(name) + where);
  }
  return problems;
}

Status summarize(const std::string& source, const std::vector<std::string>& problems) {
  std::string msg = source + ": ";
  for (size_t i = 0; i < problems.size() && i < kMaxReportedProblems; ++i) {
    msg += (i ? "; " : "") + problems[i];
  }
  if (problems.size() > kMaxReportedProblems) {
    msg += " (and " + std::to_string(problems.size() - kMaxReportedProblems) + " more)";
  }
  return invalid_argument(msg);
}

Result<ModelWeights> load_safetensors(const std::string& dir, const ModelConfig& config) {
  S4KV_ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, open_checkpoint(dir));
  const std::vector<ExpectedTensor> expected = expected_tensors(config);
  if (auto problems = find_problems(ckpt, expected); !problems.empty()) {
    return summarize(ckpt.name(), problems);
  }
  ModelWeights weights;
  for (const ExpectedTensor& want : expected) {
    // A tied model's LM head is the embedding; a stored lm_head.weight is checked, not used.
    if (want.optional) continue;
    WeightsBuilder::add(&weights, want.name, *ckpt.find(want.name));
  }
  for (const SafetensorsFile& file : ckpt.files()) {
    if (file.mapping()) WeightsBuilder::keep(&weights, file.mapping());
  }
  return weights;
}

// --- dummy weights -------------------------------------------------------------------------

uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

// Uniform in [-bound, bound) from 24 random bits. Every step is exact or one IEEE rounding,
// so the values are the same on every machine (no fast-math in this file).
inline float uniform_from_bits(uint32_t bits, float bound) {
  const float u = static_cast<float>(bits >> 8) * 0x1p-24f;
  return (2.0f * u - 1.0f) * bound;
}

template <typename T, typename Convert>
void fill(std::byte* out, int64_t numel, uint64_t state, float bound, Convert convert) {
  // Two values per draw (low half first); this loop is the whole cost of dummy loading.
  T* dst = reinterpret_cast<T*>(out);  // buffers come from operator new: aligned for T
  int64_t i = 0;
  for (; i + 1 < numel; i += 2) {
    const uint64_t r = splitmix64(&state);
    dst[i] = convert(uniform_from_bits(static_cast<uint32_t>(r), bound));
    dst[i + 1] = convert(uniform_from_bits(static_cast<uint32_t>(r >> 32), bound));
  }
  if (i < numel)
    dst[i] = convert(uniform_from_bits(static_cast<uint32_t>(splitmix64(&state)), bound));
}

void fill_uniform(std::byte* out, DType dtype, int64_t numel, uint64_t state, float bound) {
  switch (dtype) {
    case DType::kF32:
      fill<float>(out, numel, state, bound, [](float v) { return v; });
      break;
    case DType::kBF16:
      fill<uint16_t>(out, numel, state, bound, [](float v) { return float_to_bf16(v); });
      break;
    case DType::kF16:
      fill<uint16_t>(out, numel, state, bound, [](float v) { return float_to_fp16(v); });
      break;
    default:
      S4KV_CHECK(false, "dummy weights in non-float dtype ", dtype_name(dtype));
  }
}

void fill_ones(std::byte* out, DType dtype, int64_t numel) {
  const float f32 = 1.0f;
  const uint16_t bf16 = float_to_bf16(1.0f);
  const uint16_t f16 = float_to_fp16(1.0f);
  const void* one = dtype == DType::kF32    ? static_cast<const void*>(&f32)
                    : dtype == DType::kBF16 ? static_cast<const void*>(&bf16)
                                            : static_cast<const void*>(&f16);
  const size_t size = dtype_size(dtype);
  for (int64_t i = 0; i < numel; ++i) std::memcpy(out + i * size, one, size);
}

struct DummyJob {
  std::byte* out;
  int64_t numel;
  bool ones;
  uint64_t state;
};

// Fills every tensor, one thread per core pulling whole tensors: each tensor's values depend
// only on (seed, name), so the bytes are the same whatever the thread count or order.
// Measured on the 16-core H200 host, Qwen2.5-1.5B shapes in bf16: 5-6 s on one thread,
// 0.9 s on 16 (the work is the generator and first-touch page faults).
void run_dummy_jobs(const std::vector<DummyJob>& jobs, DType dtype) {
  constexpr float kBound = 1e-3f;
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      const DummyJob& j = jobs[i];
      if (j.ones) {
        fill_ones(j.out, dtype, j.numel);
      } else {
        fill_uniform(j.out, dtype, j.numel, j.state, kBound);
      }
    }
  };
  const size_t num_threads =
      std::min<size_t>({std::max(1u, std::thread::hardware_concurrency()), 16, jobs.size()});
  std::vector<std::thread> threads;
  for (size_t t = 1; t < num_threads; ++t) {
    try {
      threads.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // fewer threads only means slower
    }
  }
  worker();
  for (std::thread& t : threads) t.join();
}

// vLLM's dummy loader draws every parameter from U(-1e-3, 1e-3). RMSNorm weights are 1.0
// here instead: norms of 1e-3 would shrink every layer's activations a thousandfold (fp16
// underflow within a few layers), while 1.0 keeps a dummy forward pass numerically alive.
Result<ModelWeights> make_dummy(const ModelConfig& config, uint64_t seed) {
  if (!is_float(config.dtype)) {
    return unsupported("dummy weights: dtype " + std::string(dtype_name(config.dtype)) +
                       " (supported: float32, float16, bfloat16)");
  }
  ModelWeights weights;
  std::vector<DummyJob> jobs;
  for (const ExpectedTensor& want : expected_tensors(config)) {
    if (want.optional) continue;
    TensorView view;
    view.dtype = config.dtype;
    view.shape = want.shape;
    const int64_t numel = view.numel();
    const size_t bytes = static_cast<size_t>(numel) * dtype_size(config.dtype);
    std::shared_ptr<std::byte[]> buffer(new (std::nothrow) std::byte[bytes]);
    if (!buffer) {
      return Status(StatusCode::kResourceExhausted, "dummy weights: cannot allocate " +
                                                        std::to_string(bytes) +
                                                        " bytes for tensor " + quoted(want.name));
    }
    // The stream depends only on (seed, name): values never shift when tensors are added.
    uint64_t seed_state = seed;
    jobs.push_back({buffer.get(), numel, want.role == TensorRole::kNorm,
                    splitmix64(&seed_state) ^ fnv1a64(want.name)});
    view.data = {buffer.get(), bytes};
    WeightsBuilder::add(&weights, want.name, std::move(view));
    WeightsBuilder::keep(&weights, std::move(buffer));
  }
  run_dummy_jobs(jobs, config.dtype);
  return weights;
}

}  // namespace

bool has_weight_files(const std::string& model_dir) {
  return is_regular_file(model_dir + "/" + kSingleFile) ||
         is_regular_file(model_dir + "/" + kIndexFile);
}

Result<ModelWeights> load_weights(const std::string& model_dir, const ModelConfig& config,
                                  LoadFormat format, uint64_t seed) {
  if (format == LoadFormat::kDummy) return make_dummy(config, seed);
  return load_safetensors(model_dir, config);
}

}  // namespace s4kv::model
