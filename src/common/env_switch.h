// Measurement switches read from the environment (A/B runs of one binary): unset or "1" is on,
// "0" off; any other value stops the process (a switch misspelt would measure the wrong build).
#pragma once

#include <cstdlib>
#include <string_view>

#include "common/check.h"

namespace s4kv {

inline bool env_switch(const char* name) {
  const char* env = std::getenv(name);
  const std::string_view v = env != nullptr ? env : "1";
  S4KV_CHECK(v == "0" || v == "1", name, "=", v, ": expected 0 or 1");
  return v == "1";
}

}  // namespace s4kv
