#include "tokenizer/pre_tokenizer.h"

#include "tokenizer/json_fields.h"

namespace s4kv::tokenizer {
namespace {

// GPT-2's pattern, which ByteLevel applies when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Result<SplitBehavior> parse_behavior(const std::string& b, std::string_view where) {
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return invalid_argument("tokenizer.json " + std::string(where) + ".behavior \"" + b +
                          "\" is not one of Removed, Isolated, MergedWithPrevious, "
                          "MergedWithNext, Contiguous");
}

struct Span {
  size_t start;
  size_t end;
  bool is_match;
};

// Hugging Face's NormalizedString::split: turns the matched/unmatched spans into pieces
// according to the behavior. Returns spans to keep (is_match == true means "remove").
void apply_behavior(SplitBehavior behavior, std::vector<Span>& spans) {
  if (behavior == SplitBehavior::kRemoved) return;  // matches are the removed ones
  std::vector<Span> out;
  out.reserve(spans.size());
  bool previous_match = false;
  if (behavior == SplitBehavior::kMergedWithNext) {
    for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
      if (it->is_match && !previous_match && !out.empty()) {
        out.back().start = it->start;
      } else {
        out.push_back({it->start, it->end, false});
      }
      previous_match = it->is_match;
    }
    spans.assign(out.rbegin(), out.rend());
    return;
  }
  for (const Span& s : spans) {
    bool merge = false;
    if (behavior == SplitBehavior::kMergedWithPrevious) merge = s.is_match && !previous_match;
    if (behavior == SplitBehavior::kContiguous) merge = s.is_match == previous_match;
    if (merge && !out.empty()) {
      out.back().end = s.end;
    } else {
      out.push_back({s.start, s.end, false});
    }
    previous_match = s.is_match;
  }
  spans = std::move(out);
}

}  // namespace

Result<PreTokenizer::Step> PreTokenizer::parse_split(const Json& j, std::string_view where) {
  Step step;
  S4KV_ASSIGN_OR_RETURN(const Json* pattern, json_member(j, "pattern", where));
  const std::string pwhere = std::string(where) + ".pattern";
  if (pattern->is_object() && pattern->contains("Regex") && (*pattern)["Regex"].is_string()) {
    S4KV_ASSIGN_OR_RETURN(step.regex, Regex::compile((*pattern)["Regex"].get<std::string>()));
  } else if (pattern->is_object() && pattern->contains("String") &&
             (*pattern)["String"].is_string()) {
    S4KV_ASSIGN_OR_RETURN(step.regex,
                          Regex::compile((*pattern)["String"].get<std::string>(), true));
  } else {
    return invalid_argument("tokenizer.json " + pwhere +
                            " must be {\"Regex\": string} or {\"String\": string}, got " +
                            json_brief(*pattern));
  }
  S4KV_ASSIGN_OR_RETURN(std::string behavior, json_required_string(j, "behavior", where));
  S4KV_ASSIGN_OR_RETURN(step.behavior, parse_behavior(behavior, where));
  S4KV_ASSIGN_OR_RETURN(step.invert, json_bool(j, "invert", false, where));
  return step;
}

Result<PreTokenizer::Step> PreTokenizer::parse_byte_level(const Json& j, std::string_view where) {
  Step step;
  step.is_byte_level = true;
  S4KV_ASSIGN_OR_RETURN(step.add_prefix_space, json_bool(j, "add_prefix_space", true, where));
  S4KV_ASSIGN_OR_RETURN(step.use_regex, json_bool(j, "use_regex", true, where));
  if (step.use_regex) {
    S4KV_ASSIGN_OR_RETURN(step.regex, Regex::compile(kGpt2Pattern));
  }
  return step;
}

Result<PreTokenizer> PreTokenizer::from_json(const Json& j) {
  if (j.is_null()) {
    return unsupported(
        "tokenizer.json pre_tokenizer is null; S4 KV serves byte-level BPE "
        "only (a pre_tokenizer ending in ByteLevel)");
  }
  std::vector<std::pair<const Json*, std::string>> items;
  S4KV_ASSIGN_OR_RETURN(std::string type, json_required_string(j, "type", "pre_tokenizer"));
  if (type == "Sequence") {
    S4KV_ASSIGN_OR_RETURN(const Json* list, json_member(j, "pretokenizers", "pre_tokenizer"));
    if (!list->is_array()) {
      return invalid_argument("tokenizer.json pre_tokenizer.pretokenizers must be an array");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      items.emplace_back(&(*list)[i], "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]");
    }
  } else {
    items.emplace_back(&j, "pre_tokenizer");
  }
  PreTokenizer p;
  for (const auto& [item, where] : items) {
    S4KV_ASSIGN_OR_RETURN(std::string t, json_required_string(*item, "type", where));
    if (!p.steps_.empty() && p.steps_.back().is_byte_level) {
      return unsupported("tokenizer.json " + where + " (" + t +
                         ") follows ByteLevel; S4 KV supports ByteLevel only as the last step");
    }
    if (t == "Split") {
      S4KV_ASSIGN_OR_RETURN(Step s, parse_split(*item, where));
      p.steps_.push_back(std::move(s));
    } else if (t == "ByteLevel") {
      S4KV_ASSIGN_OR_RETURN(Step s, parse_byte_level(*item, where));
      p.steps_.push_back(std::move(s));
    } else {
      return unsupported("unsupported tokenizer.json " + where + " type \"" + t +
                         "\" (supported: Split, ByteLevel, Sequence of these)");
    }
  }
  if (p.steps_.empty() || !p.steps_.back().is_byte_level) {
    return unsupported(
        "tokenizer.json pre_tokenizer has no ByteLevel step; S4 KV serves "
        "byte-level BPE only");
  }
  return p;
}

Status PreTokenizer::apply(const Step& step, std::string_view piece, PreTokenizeScratch& s) const {
  if (step.is_byte_level && step.add_prefix_space && piece.front() != ' ') {
    s.prefixed.push_back(" " + std::string(piece));
    piece = s.prefixed.back();
  }
  if (step.is_byte_level && !step.use_regex) {
    s.next.push_back(piece);
    return Status::ok();
  }
  s.matches.clear();
  S4KV_RETURN_IF_ERROR(step.regex.find_all(piece, s.matches));
  const bool isolated = step.is_byte_level || step.behavior == SplitBehavior::kIsolated;
  if (isolated && !step.invert) {
    // The common case (Qwen, Llama-3): every match and every gap becomes a word.
    size_t prev = 0;
    for (const auto& [start, end] : s.matches) {
      if (start > prev) s.next.push_back(piece.substr(prev, start - prev));
      if (end > start) s.next.push_back(piece.substr(start, end - start));
      prev = end;
    }
    if (prev < piece.size()) s.next.push_back(piece.substr(prev));
    return Status::ok();
  }
  std::vector<Span> spans;
  size_t prev = 0;
  for (const auto& [start, end] : s.matches) {
    if (start > prev) spans.push_back({prev, start, step.invert});
    spans.push_back({start, end, !step.invert});
    prev = end;
  }
  if (prev < piece.size()) spans.push_back({prev, piece.size(), step.invert});
  apply_behavior(step.behavior, spans);
  for (const Span& sp : spans) {
    if (!sp.is_match && sp.end > sp.start)
      s.next.push_back(piece.substr(sp.start, sp.end - sp.start));
  }
  return Status::ok();
}

Status PreTokenizer::split(std::string_view text, PreTokenizeScratch& s) const {
  s.pieces.clear();
  s.prefixed.clear();
  if (text.empty()) return Status::ok();
  s.pieces.push_back(text);
  for (const Step& step : steps_) {
    s.next.clear();
    for (std::string_view piece : s.pieces) S4KV_RETURN_IF_ERROR(apply(step, piece, s));
    s.pieces.swap(s.next);
  }
  return Status::ok();
}

}  // namespace s4kv::tokenizer
