// s4kv: the command-line entry point. Each subcommand lives in its own file and registers
// itself here; this file only parses arguments and maps usage errors to exit code 2.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cli/bench_command.h"
#include "cli/check_model.h"
#include "cli/command.h"
#include "cli/eval_command.h"
#include "cli/generate_command.h"
#include "cli/render_chat_command.h"
#include "cli/serve_command.h"
#include "cli/tokenize_command.h"

namespace {

constexpr const char* kVersion = "0.1.0";

// vllm serve's two-letter short options, which CLI11 cannot name: spelled out before parsing.
std::string expand_short_alias(const std::string& arg) {
  for (const auto& [alias, name] :
       {std::pair{"-tp", "--tensor-parallel-size"}, std::pair{"-pp", "--pipeline-parallel-size"}}) {
    const std::string a(alias);
    if (arg == a) return name;
    if (arg.rfind(a + "=", 0) == 0) return std::string(name) + arg.substr(a.size());
  }
  return arg;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"S4 KV: an OpenAI-compatible LLM server with an int4 (KIVI) KV cache", "s4kv"};
  app.require_subcommand(1);
  app.set_version_flag("--version", kVersion);
  std::string command_line;  // recorded by the benchmarks
  for (int i = 0; i < argc; ++i) command_line += (i > 0 ? " " : "") + std::string(argv[i]);
  s4kv::cli::add_bench_command(app, command_line);
  s4kv::cli::add_check_model_command(app);
  s4kv::cli::add_eval_command(app);
  s4kv::cli::add_generate_command(app);
  s4kv::cli::add_render_chat_command(app);
  s4kv::cli::add_serve_command(app);
  s4kv::cli::add_tokenize_command(app);
  // CLI11 reports an unknown first word as "a subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->get_name() == argv[1];
    }
    if (!known) {
      std::fprintf(stderr, "error: unknown command '%s' (commands: %s)\n", argv[1], names.c_str());
      return 2;
    }
  }
  std::vector<std::string> args(argv, argv + argc);
  std::vector<char*> expanded;
  for (std::string& a : args) {
    a = expand_short_alias(a);
    expanded.push_back(a.data());
  }
  try {
    app.parse(argc, expanded.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line on stderr, exit code 2, as for every other refusal.
    std::fprintf(stderr, "error: %s (see s4kv --help)\n", e.what());
    return 2;
  }
  return s4kv::cli::exit_code();
}
