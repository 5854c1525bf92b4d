// StopChecker: one sequence's finish conditions and the text it may release. Fed each new
// token id with the text the incremental detokenizer produced for it, it decides whether the
// sequence ends and what text the client gets now:
//  - EOS (unless ignore_eos) and stop_token_ids end it with "stop"; the token's own text is
//    dropped unless include_stop_str_in_output (as vLLM).
//  - Stop strings are matched on the accumulated output, across token boundaries. Text that
//    could still be the start of a stop string is withheld, so streamed text never holds part
//    of a stop string; on a match the output ends just before it (or just after it with
//    include_stop_str_in_output), finish "stop" with the string.
//  - max_tokens (already resolved against the context length) ends it with "length".
// None of EOS, stop_token_ids and stop strings counts until more than min_tokens tokens
// exist (the sampler masks EOS and stop ids for the first min_tokens, so the earliest stop is
// token min_tokens + 1, as vLLM). Text is bytes: stop strings and pieces are UTF-8, so a cut
// or a withheld suffix always falls on a character boundary. Engine thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/finish_reason.h"
#include "engine/sampling_params.h"

namespace s4kv::engine {

struct StopUpdate {
  std::string text;  // newly released output text (the streaming delta); may be empty
  std::optional<FinishReason> finish_reason;
  std::optional<std::string> stop_str;   // the stop string that matched
  std::optional<int32_t> stop_token_id;  // the stop_token_ids entry that matched (not EOS)
  bool finished() const { return finish_reason.has_value(); }
};

class StopChecker {
 public:
  // params must have passed validate(). eos_token_ids: the model's EOS ids. max_tokens: from
  // resolve_max_tokens().
  StopChecker(const SamplingParams& params, std::span<const int32_t> eos_token_ids,
              int64_t max_tokens);

  // The sequence generated token_id, whose detokenized text is `piece`. Not after finish.
  StopUpdate append(int32_t token_id, std::string_view piece);

  // Text released so far; at finish, the whole output text.
  std::string_view output_text() const { return std::string_view(text_).substr(0, released_); }
  int64_t num_output_tokens() const { return num_output_tokens_; }
  bool finished() const { return finished_; }

 private:
  struct Match {
    size_t begin;
    size_t end;
    size_t stop_index;
  };
  std::optional<Match> find_stop_string(size_t old_size) const;
  size_t withheld_suffix() const;
  StopUpdate release_to(size_t end);
  StopUpdate finish(FinishReason reason, size_t text_end);

  std::vector<std::string> stop_;
  std::vector<int32_t> eos_token_ids_;  // empty when ignore_eos
  std::vector<int32_t> stop_token_ids_;
  int64_t min_tokens_;
  int64_t max_tokens_;
  bool include_stop_str_;
  int64_t num_output_tokens_ = 0;
  std::string text_;     // output text so far, released or withheld
  size_t released_ = 0;  // text_[0, released_) was handed out
  bool finished_ = false;
};

}  // namespace s4kv::engine
