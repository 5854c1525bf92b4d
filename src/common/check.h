// S4KV_CHECK: the error tier for bugs and broken invariants. Always on (release builds
// too); prints file:line and the message, then aborts. Never used for user input: files
// and requests are validated with Status (status.h).
#pragma once

#include <sstream>
#include <string>

namespace s4kv::detail {

[[noreturn]] void check_failed(const char* file, int line, const char* cond,
                               const std::string& msg);

template <typename... Args>
std::string check_message(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace s4kv::detail

#define S4KV_CHECK(cond, ...)                                                                     \
  do {                                                                                            \
    if (!(cond)) [[unlikely]] {                                                                   \
      ::s4kv::detail::check_failed(__FILE__, __LINE__, #cond,                                     \
                                   ::s4kv::detail::check_message("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                             \
  } while (0)
