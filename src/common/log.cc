#include "common/log.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

namespace s4kv {
namespace {

void log_line(std::string_view level, std::string_view component, std::string_view message) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[64];
  std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02d %02d:%02d:%02d.%03d", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  std::string line;
  line.reserve(message.size() + component.size() + 48);
  line.append(level).append(" ").append(stamp).append(" [").append(component).append("] ");
  for (char c : message) line.push_back(c == '\n' ? ' ' : c);
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace

void log_info(std::string_view component, std::string_view message) {
  log_line("INFO", component, message);
}
void log_warn(std::string_view component, std::string_view message) {
  log_line("WARN", component, message);
}
void log_error(std::string_view component, std::string_view message) {
  log_line("ERROR", component, message);
}

}  // namespace s4kv
