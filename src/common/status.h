// Status and Result<T>: the error tier for everything that depends on files or requests.
// A Status carries a code and one human-readable line; it is mapped to an exit code at the
// CLI edge and to an OpenAI-shaped error at the HTTP edge. Never used for bugs (see check.h).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "common/check.h"

namespace s4kv {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad input: malformed file, bad request field
  kUnsupported,        // well-formed but outside what S4 KV serves
  kNotFound,           // a file, model or tensor that does not exist
  kIoError,            // the operating system refused a read, open or map
  kResourceExhausted,  // a limit is reached (queue full): retry later
  kUnavailable,        // not serving now (loading, draining, stopped)
  kInternal,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // Lets S4KV_RETURN_IF_ERROR treat Status and Result<T> alike.
  const Status& status() const { return *this; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }

// Holds either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    S4KV_CHECK(!std::get<Status>(v_).is_ok(), "Result constructed from an ok Status");
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    S4KV_CHECK(is_ok(), "value() on error: ", std::get<Status>(v_).message());
    return std::get<T>(v_);
  }
  const T& value() const& {
    S4KV_CHECK(is_ok(), "value() on error: ", std::get<Status>(v_).message());
    return std::get<T>(v_);
  }
  T&& value() && {
    S4KV_CHECK(is_ok(), "value() on error: ", std::get<Status>(v_).message());
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace s4kv

// Returns early from a function returning Status or Result<U> when expr is not ok.
#define S4KV_RETURN_IF_ERROR(expr)                           \
  do {                                                       \
    const auto& s4kv_result_ = (expr);                       \
    if (!s4kv_result_.is_ok()) return s4kv_result_.status(); \
  } while (0)

#define S4KV_CONCAT_INNER_(a, b) a##b
#define S4KV_CONCAT_(a, b) S4KV_CONCAT_INNER_(a, b)
// Binds lhs to the value of a Result<T> expression or returns its error.
#define S4KV_ASSIGN_OR_RETURN(lhs, expr) \
  S4KV_ASSIGN_OR_RETURN_IMPL_(S4KV_CONCAT_(s4kv_result_, __LINE__), lhs, expr)
#define S4KV_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.is_ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
