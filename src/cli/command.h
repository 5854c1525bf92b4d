// The exit code of the subcommand that ran. Subcommand callbacks (run by CLI11 after
// parsing) store their result here; main() returns it.
#pragma once

namespace s4kv::cli {

inline int& exit_code() {
  static int code = 0;
  return code;
}

}  // namespace s4kv::cli
