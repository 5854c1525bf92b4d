// Why a sequence finished: the OpenAI finish_reason "stop" / "length", or an abort. One enum
// shared by the scheduler (which finishes requests at max_model_len or on abort) and the stop
// checker (EOS, stop strings, max_tokens), so the engine passes one value between them.
#pragma once

#include <string_view>

namespace s4kv::engine {

enum class FinishReason { kStop, kLength, kAbort };

// OpenAI's names: "stop", "length"; "abort" as vLLM reports an aborted request.
constexpr std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
  }
  return "abort";
}

}  // namespace s4kv::engine
