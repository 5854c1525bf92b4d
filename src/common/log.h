// One-line logs on stderr: "INFO 2026-12-02 22:30:01.123 [server] message". Each line is
// written with a single fwrite, so lines from different threads never interleave. Levels:
// log_info for what an operator wants to see (start-up, one line per request), log_warn for
// refusals and recoverable trouble, log_error for failures. No global state besides stderr.
#pragma once

#include <string_view>

namespace s4kv {

void log_info(std::string_view component, std::string_view message);
void log_warn(std::string_view component, std::string_view message);
void log_error(std::string_view component, std::string_view message);

}  // namespace s4kv
