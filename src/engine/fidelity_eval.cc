#include "engine/fidelity_eval.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/forward_batch_builder.h"
#include "common/check.h"

namespace s4kv::engine {
namespace {

// One sequence in a backend's cache: blocks 0..n-1 in order (the first one a sink block when
// the cache has them), residual slot 0.
class SingleSequence {
 public:
  explicit SingleSequence(backend::Backend& b)
      : backend_(b), batch_(b.kv_cache_config().block_size, b.kv_cache_config().num_blocks) {
    const backend::KvCacheConfig& kv = b.kv_cache_config();
    table_.resize(static_cast<size_t>(kv.num_blocks));
    std::iota(table_.begin(), table_.end(), 0);
    if (kv.num_sink_blocks > 0) table_[0] = static_cast<int32_t>(kv.num_blocks);
    residual_slot_ = kv.dtype == kv::KvCacheDtype::kInt4Kivi ? 0 : -1;
  }

  // Appends tokens at the end of the sequence; returns the logits of the last one [vocab].
  std::vector<float> append(std::span<const int32_t> tokens) {
    batch_.clear();
    batch_.add(tokens, len_, table_, residual_slot_);
    batch_.want_logits(batch_.num_tokens() - 1);
    const auto logits = backend_.forward(batch_.batch()).logits;
    len_ += static_cast<int64_t>(tokens.size());
    return {logits.begin(), logits.end()};
  }

 private:
  backend::Backend& backend_;
  backend::ForwardBatchBuilder batch_;
  std::vector<int32_t> table_;
  int32_t residual_slot_ = -1;
  int64_t len_ = 0;
};

// log-softmax in double.
std::vector<double> log_softmax(std::span<const float> logits) {
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(x - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - lse;
  return out;
}

size_t argmax(std::span<const float> v) {
  return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// One window's teacher-forced comparison.
struct WindowStats {
  std::vector<double> kl;  // per position
  int64_t top1 = 0, confident = 0, confident_agree = 0;
  double nll_ref = 0, nll_test = 0;
};

// The metrics that the bootstrap recomputes on a resample of windows.
struct Summary {
  double mean_kl = 0, p99_kl = 0, max_kl = 0, ppl_change = 0, top1 = 0, confident = 0;
};

// Nearest rank: the ceil(q n)-th smallest of sorted values (n > 0).
double percentile(const std::vector<double>& sorted, double q) {
  const auto n = static_cast<double>(sorted.size());
  const auto rank = static_cast<size_t>(std::max(1.0, std::ceil(q * n)));
  return sorted[std::min(rank, sorted.size()) - 1];
}

Summary summarize(const std::vector<const WindowStats*>& windows) {
  std::vector<double> kl;
  int64_t top1 = 0, confident = 0, agree = 0;
  double nll_ref = 0, nll_test = 0;
  for (const WindowStats* w : windows) {
    kl.insert(kl.end(), w->kl.begin(), w->kl.end());
    top1 += w->top1;
    confident += w->confident;
    agree += w->confident_agree;
    nll_ref += w->nll_ref;
    nll_test += w->nll_test;
  }
  Summary r;
  if (kl.empty()) return r;
  const auto n = static_cast<double>(kl.size());
  r.mean_kl = std::accumulate(kl.begin(), kl.end(), 0.0) / n;
  std::sort(kl.begin(), kl.end());
  r.p99_kl = percentile(kl, 0.99);
  r.max_kl = kl.back();
  r.ppl_change = std::exp((nll_test - nll_ref) / n) - 1;
  r.top1 = static_cast<double>(top1) / n;
  r.confident = confident > 0 ? static_cast<double>(agree) / static_cast<double>(confident) : 1;
  return r;
}

struct Accumulator {
  std::vector<WindowStats> windows;
  int64_t greedy_windows = 0, greedy_matches = 0;
  double first_divergence_sum = 0;

  void begin_window() { windows.emplace_back(); }

  void add_step(std::span<const float> ref, std::span<const float> test, int32_t target) {
    WindowStats& w = windows.back();
    const auto lp = log_softmax(ref);
    const auto lq = log_softmax(test);
    double kl = 0;
    for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
    w.kl.push_back(std::max(kl, 0.0));  // rounding can leave -1e-17
    const size_t a = argmax(ref);
    const bool agree = a == argmax(test);
    w.top1 += agree;
    if (std::exp(lp[a]) >= 0.5) {
      ++w.confident;
      w.confident_agree += agree;
    }
    w.nll_ref -= lp[static_cast<size_t>(target)];
    w.nll_test -= lq[static_cast<size_t>(target)];
  }

  void add_greedy(std::span<const int32_t> ref, std::span<const int32_t> test) {
    const auto first = std::mismatch(ref.begin(), ref.end(), test.begin()).first - ref.begin();
    first_divergence_sum += static_cast<double>(first);
    greedy_matches += first == static_cast<std::ptrdiff_t>(ref.size());
    ++greedy_windows;
  }

  FidelityResult result(const FidelityOptions& o) const {
    FidelityResult r;
    std::vector<const WindowStats*> all;
    int64_t positions = 0, top1 = 0, confident = 0, agree = 0;
    double kl_sum = 0, nll_ref = 0, nll_test = 0;
    std::vector<double> kl, window_max;
    for (const WindowStats& w : windows) {
      all.push_back(&w);
      positions += static_cast<int64_t>(w.kl.size());
      top1 += w.top1;
      confident += w.confident;
      agree += w.confident_agree;
      nll_ref += w.nll_ref;
      nll_test += w.nll_test;
      kl_sum += std::accumulate(w.kl.begin(), w.kl.end(), 0.0);
      kl.insert(kl.end(), w.kl.begin(), w.kl.end());
      window_max.push_back(w.kl.empty() ? 0 : *std::max_element(w.kl.begin(), w.kl.end()));
    }
    const auto n = static_cast<double>(std::max<int64_t>(positions, 1));
    r.num_windows = static_cast<int64_t>(windows.size());
    r.num_positions = positions;
    r.top1_agreement = static_cast<double>(top1) / n;
    r.confident_fraction = static_cast<double>(confident) / n;
    r.confident_agreement =
        confident > 0 ? static_cast<double>(agree) / static_cast<double>(confident) : 1;
    r.mean_kl = kl_sum / n;
    r.ppl_reference = std::exp(nll_ref / n);
    r.ppl_test = std::exp(nll_test / n);
    const auto gw = static_cast<double>(std::max<int64_t>(greedy_windows, 1));
    r.greedy_match_rate = static_cast<double>(greedy_matches) / gw;
    r.mean_first_divergence = first_divergence_sum / gw;
    if (kl.empty()) return r;
    std::sort(kl.begin(), kl.end());
    r.max_kl = kl.back();
    r.second_max_kl = kl.size() > 1 ? kl[kl.size() - 2] : 0;
    r.p99_kl = percentile(kl, 0.99);
    std::sort(window_max.begin(), window_max.end());
    r.window_max_kl_min = window_max.front();
    r.window_max_kl_median = percentile(window_max, 0.5);
    bootstrap(o, all, r);
    return r;
  }

  // Resamples windows with replacement; each resample's metrics as on the full sample.
  static void bootstrap(const FidelityOptions& o, const std::vector<const WindowStats*>& all,
                        FidelityResult& r) {
    const int64_t reps = o.bootstrap_resamples;
    r.bootstrap_resamples = reps;
    if (reps <= 0) return;
    std::mt19937_64 rng(o.bootstrap_seed);  // fully specified by the standard: deterministic
    std::vector<std::vector<double>> m(6);
    std::vector<const WindowStats*> pick(all.size());
    for (int64_t i = 0; i < reps; ++i) {
      for (auto& p : pick) p = all[rng() % all.size()];
      const Summary s = summarize(pick);
      for (auto [k, v] : {std::pair{0, s.mean_kl},
                          {1, s.p99_kl},
                          {2, s.max_kl},
                          {3, s.ppl_change},
                          {4, s.top1},
                          {5, s.confident}}) {
        m[static_cast<size_t>(k)].push_back(v);
      }
    }
    Interval* out[] = {&r.mean_kl_ci,    &r.p99_kl_ci, &r.max_kl_ci,
                       &r.ppl_change_ci, &r.top1_ci,   &r.confident_ci};
    for (size_t k = 0; k < m.size(); ++k) {
      std::sort(m[k].begin(), m[k].end());
      *out[k] = {percentile(m[k], 0.025), percentile(m[k], 0.975)};
    }
  }
};

void prefill(SingleSequence& seq, std::span<const int32_t> prefix, int64_t chunk,
             std::vector<float>* last) {
  for (size_t i = 0; i < prefix.size(); i += static_cast<size_t>(chunk)) {
    const size_t n = std::min(prefix.size() - i, static_cast<size_t>(chunk));
    *last = seq.append(prefix.subspan(i, n));
  }
}

// Pass 1: every cache holds the prefix; the continuation is fed one token per step to the
// reference and then to each tested backend, and each step's next-token distributions are
// compared at once (memory O(vocab)).
void teacher_forced(backend::Backend& ref, std::span<backend::Backend* const> tests,
                    std::span<const int32_t> window, const FidelityOptions& o,
                    std::span<Accumulator> accs) {
  const auto prefix = window.first(static_cast<size_t>(o.prefix_len));
  std::vector<float> unused;
  SingleSequence rs(ref);
  prefill(rs, prefix, o.prefill_chunk, &unused);
  std::vector<SingleSequence> ts;
  ts.reserve(tests.size());
  for (size_t i = 0; i < tests.size(); ++i) {
    ts.emplace_back(*tests[i]);
    prefill(ts.back(), prefix, o.prefill_chunk, &unused);
    accs[i].begin_window();
  }
  // Feeding continuation token t predicts token t + 1; the last token predicts nothing known.
  for (int64_t t = 0; t + 1 < o.continuation_len; ++t) {
    const auto at = static_cast<size_t>(o.prefix_len + t);
    const auto tok = window.subspan(at, 1);
    const std::vector<float> ref_logits = rs.append(tok);
    for (size_t i = 0; i < ts.size(); ++i) {
      accs[i].add_step(ref_logits, ts[i].append(tok), window[at + 1]);
    }
  }
}

// Pass 2: greedy continuation of greedy_len tokens from the prefix alone.
std::vector<int32_t> greedy(backend::Backend& b, std::span<const int32_t> prefix,
                            const FidelityOptions& o) {
  SingleSequence seq(b);
  std::vector<float> last;
  prefill(seq, prefix, o.prefill_chunk, &last);
  std::vector<int32_t> out;
  for (int64_t t = 0; t < o.greedy_len; ++t) {
    out.push_back(static_cast<int32_t>(argmax(last)));
    if (t + 1 < o.greedy_len) last = seq.append(std::span<const int32_t>(&out.back(), 1));
  }
  return out;
}

}  // namespace

Result<std::vector<int64_t>> window_starts(int64_t num_tokens, const FidelityOptions& o) {
  if (o.prefix_len < 1 || o.continuation_len < 2 || o.num_windows < 1 || o.greedy_len < 1 ||
      o.prefill_chunk < 1) {
    return invalid_argument(
        "eval: --prefix-len, --num-windows, --greedy-len must be >= 1 and --continuation-len "
        ">= 2");
  }
  const int64_t span = o.prefix_len + o.continuation_len;
  if (num_tokens < span) {
    return invalid_argument("eval: the text has " + std::to_string(num_tokens) +
                            " tokens, fewer than one window of --prefix-len + "
                            "--continuation-len = " +
                            std::to_string(span));
  }
  std::vector<int64_t> starts;
  const int64_t room = num_tokens - span;
  for (int64_t w = 0; w < o.num_windows; ++w) {
    starts.push_back(o.num_windows == 1 ? 0 : room * w / (o.num_windows - 1));
  }
  return starts;
}

Result<std::vector<FidelityResult>> evaluate_fidelity(std::span<const int32_t> tokens,
                                                      const FidelityOptions& o,
                                                      const BackendFactory& reference,
                                                      std::span<const BackendFactory> tests) {
  S4KV_ASSIGN_OR_RETURN(const std::vector<int64_t> starts,
                        window_starts(static_cast<int64_t>(tokens.size()), o));
  const int64_t max_len = o.prefix_len + std::max(o.continuation_len, o.greedy_len);
  S4KV_ASSIGN_OR_RETURN(std::unique_ptr<backend::Backend> ref_backend, reference(max_len));
  std::vector<std::unique_ptr<backend::Backend>> owned;
  std::vector<backend::Backend*> test_backends;
  for (const BackendFactory& f : tests) {
    S4KV_ASSIGN_OR_RETURN(std::unique_ptr<backend::Backend> b, f(max_len));
    test_backends.push_back(b.get());
    owned.push_back(std::move(b));
  }
  std::vector<Accumulator> accs(tests.size());
  std::vector<int32_t> buf;
  for (int64_t start : starts) {
    // [first_token] + text, prefix_len + continuation_len tokens in all.
    const auto span = static_cast<size_t>(o.prefix_len + o.continuation_len);
    buf.clear();
    if (o.first_token >= 0) buf.push_back(o.first_token);
    const auto text = tokens.subspan(static_cast<size_t>(start), span - buf.size());
    buf.insert(buf.end(), text.begin(), text.end());
    const std::span<const int32_t> window(buf);
    teacher_forced(*ref_backend, test_backends, window, o, accs);
    const auto prefix = window.first(static_cast<size_t>(o.prefix_len));
    const std::vector<int32_t> ref_greedy = greedy(*ref_backend, prefix, o);
    for (size_t i = 0; i < accs.size(); ++i) {
      accs[i].add_greedy(ref_greedy, greedy(*test_backends[i], prefix, o));
    }
  }
  std::vector<FidelityResult> results;
  for (const Accumulator& acc : accs) results.push_back(acc.result(o));
  return results;
}

Result<FidelityResult> evaluate_fidelity(std::span<const int32_t> tokens, const FidelityOptions& o,
                                         const BackendFactory& reference,
                                         const BackendFactory& test) {
  S4KV_ASSIGN_OR_RETURN(std::vector<FidelityResult> r,
                        evaluate_fidelity(tokens, o, reference, std::span(&test, 1)));
  return std::move(r.front());
}

namespace {
OrderedJson ci(const Interval& i) { return OrderedJson::array({i.lo, i.hi}); }
}  // namespace

OrderedJson fidelity_to_json(const FidelityResult& r) {
  return OrderedJson{
      {"num_windows", r.num_windows},
      {"num_positions", r.num_positions},
      {"top1_agreement", r.top1_agreement},
      {"confident_agreement", r.confident_agreement},
      {"confident_fraction", r.confident_fraction},
      {"mean_kl", r.mean_kl},
      {"p99_kl", r.p99_kl},
      {"max_kl", r.max_kl},
      {"second_max_kl", r.second_max_kl},
      {"window_max_kl",
       {{"min", r.window_max_kl_min}, {"median", r.window_max_kl_median}, {"max", r.max_kl}}},
      {"ppl_reference", r.ppl_reference},
      {"ppl_test", r.ppl_test},
      {"greedy_match_rate", r.greedy_match_rate},
      {"mean_first_divergence", r.mean_first_divergence},
      {"ppl_change", r.ppl_test / r.ppl_reference - 1},
      {"bootstrap_resamples", r.bootstrap_resamples},
      {"ci95",
       {{"mean_kl", ci(r.mean_kl_ci)},
        {"p99_kl", ci(r.p99_kl_ci)},
        {"max_kl", ci(r.max_kl_ci)},
        {"ppl_change", ci(r.ppl_change_ci)},
        {"top1_agreement", ci(r.top1_ci)},
        {"confident_agreement", ci(r.confident_ci)}}}};
}

}  // namespace s4kv::engine
