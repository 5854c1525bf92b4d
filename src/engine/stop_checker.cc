#include "engine/stop_checker.h"

#include <algorithm>

namespace s4kv::engine {

StopChecker::StopChecker(const SamplingParams& params, std::span<const int32_t> eos_token_ids,
                         int64_t max_tokens)
    : stop_(params.stop),
      min_tokens_(params.min_tokens),
      max_tokens_(max_tokens),
      include_stop_str_(params.include_stop_str_in_output) {
  S4KV_CHECK(max_tokens >= 1, "stop checker: max_tokens ", max_tokens);
  if (!params.ignore_eos) eos_token_ids_.assign(eos_token_ids.begin(), eos_token_ids.end());
  for (int64_t id : params.stop_token_ids) stop_token_ids_.push_back(static_cast<int32_t>(id));
}

StopUpdate StopChecker::append(int32_t token_id, std::string_view piece) {
  S4KV_CHECK(!finished_, "stop checker: token after finish");
  ++num_output_tokens_;
  const bool can_stop = num_output_tokens_ > min_tokens_;
  auto contains = [token_id](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), token_id) != ids.end();
  };
  if (can_stop && (contains(eos_token_ids_) || contains(stop_token_ids_))) {
    if (include_stop_str_) text_.append(piece);
    StopUpdate u = finish(FinishReason::kStop, text_.size());
    if (!contains(eos_token_ids_)) u.stop_token_id = token_id;
    return u;
  }
  const size_t old_size = text_.size();
  text_.append(piece);
  if (can_stop) {
    if (const std::optional<Match> m = find_stop_string(old_size)) {
      StopUpdate u = finish(FinishReason::kStop, include_stop_str_ ? m->end : m->begin);
      u.stop_str = stop_[m->stop_index];
      return u;
    }
  }
  if (num_output_tokens_ >= max_tokens_) return finish(FinishReason::kLength, text_.size());
  return release_to(text_.size() - withheld_suffix());
}

// The earliest-completed occurrence of any stop string that ends in the new text: the one a
// client reading the stream would have seen first. Occurrences lying wholly in older text
// were not stops when they formed (min_tokens) and stay text.
std::optional<StopChecker::Match> StopChecker::find_stop_string(size_t old_size) const {
  std::optional<Match> best;
  for (size_t i = 0; i < stop_.size(); ++i) {
    const std::string& s = stop_[i];
    // A match ending after old_size starts after old_size - s.size(); released text is final
    // unless the stop string is to be kept in the output.
    size_t from = old_size >= s.size() - 1 ? old_size - (s.size() - 1) : 0;
    if (!include_stop_str_) from = std::max(from, released_);
    const size_t pos = text_.find(s, from);
    if (pos == std::string::npos) continue;
    const Match m{pos, pos + s.size(), i};
    if (!best || m.end < best->end || (m.end == best->end && m.begin < best->begin)) best = m;
  }
  return best;
}

// Length of the longest unreleased suffix that is a proper prefix of a stop string: text that
// a later token could turn into a stop. Nothing is withheld when stop strings are kept in the
// output, since a match never takes back text there.
size_t StopChecker::withheld_suffix() const {
  if (include_stop_str_) return 0;
  const std::string_view pending = std::string_view(text_).substr(released_);
  size_t longest = 0;
  for (const std::string& s : stop_) {
    for (size_t len = std::min(s.size() - 1, pending.size()); len > longest; --len) {
      if (pending.ends_with(std::string_view(s).substr(0, len))) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

StopUpdate StopChecker::release_to(size_t end) {
  StopUpdate u;
  if (end > released_) {
    u.text = text_.substr(released_, end - released_);
    released_ = end;
  }
  return u;
}

StopUpdate StopChecker::finish(FinishReason reason, size_t text_end) {
  finished_ = true;
  text_.resize(text_end);
  StopUpdate u = release_to(text_end);
  u.finish_reason = reason;
  return u;
}

}  // namespace s4kv::engine
