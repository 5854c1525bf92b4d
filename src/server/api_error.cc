#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace s4kv::server {

std::string error_type_for_status(int status) {
  switch (status) {
    case 400:
      return "BadRequestError";
    case 401:
      return "AuthenticationError";
    case 403:
      return "PermissionDeniedError";
    case 404:
      return "NotFoundError";
    case 405:
      return "MethodNotAllowedError";
    case 408:
      return "RequestTimeoutError";
    case 413:
      return "RequestTooLargeError";
    case 422:
      return "UnprocessableEntityError";
    case 429:
      return "RateLimitError";
    case 431:
      return "RequestHeaderFieldsTooLargeError";
    case 500:
      return "InternalServerError";
    case 501:
      return "NotImplementedError";
    case 503:
      return "ServiceUnavailableError";
    default:
      return "Error";
  }
}

ApiError api_error(int status, std::string message, std::optional<std::string> param,
                   std::optional<std::string> code) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = error_type_for_status(status);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

ApiError from_status(const Status& status, std::optional<std::string> param) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnsupported:
      return api_error(400, status.message(), std::move(param));
    case StatusCode::kNotFound:
      return api_error(404, status.message(), std::move(param));
    case StatusCode::kResourceExhausted: {
      ApiError e = api_error(503, status.message(), std::move(param));
      e.headers.emplace_back("Retry-After", "1");
      return e;
    }
    case StatusCode::kUnavailable: {  // not serving: the drain
      ApiError e = api_error(503, status.message(), std::move(param));
      e.close = true;
      return e;
    }
    default:
      return api_error(500, status.message(), std::move(param));
  }
}

std::string error_body(const ApiError& error) {
  nlohmann::ordered_json inner;
  inner["message"] = error.message;
  inner["type"] = error.type;
  inner["param"] = error.param ? nlohmann::ordered_json(*error.param) : nullptr;
  inner["code"] =
      error.code ? nlohmann::ordered_json(*error.code) : nlohmann::ordered_json(error.status);
  nlohmann::ordered_json body;
  body["error"] = std::move(inner);
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace s4kv::server
