// ApiError: the one error shape every HTTP reply uses, OpenAI's (and vLLM's)
//   {"error": {"message": "...", "type": "BadRequestError", "param": "top_p" | null,
//              "code": 400 | "context_length_exceeded" | ...}}
// with its HTTP status. Errors from the engine and tokenizer arrive as Status and are turned
// into ApiError here, at the HTTP edge, and nowhere else. Plain data; no state.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace s4kv::server {

struct ApiError {
  int status = 400;                  // HTTP status
  std::string message;               // one human-readable line
  std::string type;                  // "BadRequestError", "NotFoundError", ...
  std::optional<std::string> param;  // the request field at fault; null when none
  std::optional<std::string> code;   // a string code ("context_length_exceeded"); else the status
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (Retry-After)
  // The server is shutting down: the connection closes after this answer ("Connection: close"),
  // whatever the HTTP layer has learnt of the drain yet.
  bool close = false;
};

// The OpenAI type name for an HTTP status: 400 BadRequestError, 401 AuthenticationError,
// 403 PermissionDeniedError, 404 NotFoundError, 405 MethodNotAllowedError, 408
// RequestTimeoutError, 413 RequestTooLargeError, 422 UnprocessableEntityError, 429
// RateLimitError, 431 RequestHeaderFieldsTooLargeError, 500 InternalServerError, 503
// ServiceUnavailableError; other statuses: "Error".
std::string error_type_for_status(int status);

// Builds an ApiError with the type for its status.
ApiError api_error(int status, std::string message, std::optional<std::string> param = std::nullopt,
                   std::optional<std::string> code = std::nullopt);

inline ApiError bad_request(std::string message, std::optional<std::string> param = std::nullopt) {
  return api_error(400, std::move(message), std::move(param));
}

// A Status from the engine or tokenizer as an ApiError: kInvalidArgument and kUnsupported 400,
// kNotFound 404, kResourceExhausted 503 with Retry-After, kUnavailable 503, others 500.
// `param` names the request field when the caller knows it.
ApiError from_status(const Status& status, std::optional<std::string> param = std::nullopt);

// The JSON body: {"error": {"message", "type", "param", "code"}}; code is the string code
// when set, else the HTTP status as a number (as vLLM sends it). Never throws (invalid UTF-8
// in a message is replaced).
std::string error_body(const ApiError& error);

}  // namespace s4kv::server
