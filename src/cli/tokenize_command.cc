#include "cli/tokenize_command.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "common/file.h"
#include "common/json.h"
#include "model/model_path.h"
#include "tokenizer/tokenizer.h"

namespace s4kv::cli {
namespace {

using tokenizer::Tokenizer;

Result<std::string> tokenizer_file(const TokenizeOptions& o) {
  if (!o.tokenizer.empty()) return o.tokenizer;
  S4KV_ASSIGN_OR_RETURN(std::string dir, model::resolve_model_path(o.model));
  const std::string path = dir + "/tokenizer.json";
  if (!is_regular_file(path))
    return not_found(path + ": no such file (the model has no tokenizer.json)");
  return path;
}

// One output line for one input line, or the reason the input line is refused.
Result<std::string> encode_line(const Tokenizer& tok, const Json& in, bool add_special) {
  if (!in.is_string()) {
    return invalid_argument("expected a JSON string, got " + std::string(json_type_name(in)));
  }
  S4KV_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                        tok.encode(in.get_ref<const std::string&>(), add_special));
  return Json(ids).dump();
}

Result<std::string> decode_line(const Tokenizer& tok, const Json& in, bool skip_special) {
  if (!in.is_array()) {
    return invalid_argument("expected a JSON array of token ids, got " +
                            std::string(json_type_name(in)));
  }
  std::vector<int32_t> ids;
  ids.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const Json& v = in[i];
    const bool integer = v.is_number_integer() || v.is_number_unsigned();
    const bool in_range = integer && (v.is_number_unsigned() || v.get<int64_t>() >= 0) &&
                          v.get<uint64_t>() < static_cast<uint64_t>(tok.vocab_size());
    if (!in_range || !tok.id_to_token(static_cast<int32_t>(v.get<uint64_t>()))) {
      return invalid_argument("element " + std::to_string(i) + " (" + json_brief(v) +
                              ") is not a token id of this tokenizer (0.." +
                              std::to_string(tok.vocab_size() - 1) + ")");
    }
    ids.push_back(static_cast<int32_t>(v.get<uint64_t>()));
  }
  // decode's output is valid UTF-8, so dump cannot throw.
  return Json(tok.decode(ids, skip_special)).dump(-1, ' ', /*ensure_ascii=*/false);
}

}  // namespace

int run_tokenize(const TokenizeOptions& o) {
  try {
    if (o.model.empty() == o.tokenizer.empty())
      return fail("give exactly one of --model and --tokenizer");
    auto path = tokenizer_file(o);
    if (!path.is_ok()) return fail(path.status().message());
    auto tok = Tokenizer::from_file(*path);
    if (!tok.is_ok()) return fail(tok.status().message());
    std::string line;
    for (size_t n = 1; std::getline(std::cin, line); ++n) {
      auto in = parse_json(line, "line " + std::to_string(n));
      if (!in.is_ok()) return fail(in.status().message());
      auto out = o.decode ? decode_line(*tok, *in, o.skip_special_tokens)
                          : encode_line(*tok, *in, o.add_special_tokens);
      if (!out.is_ok()) return fail("line " + std::to_string(n) + ": " + out.status().message());
      std::fwrite(out->data(), 1, out->size(), stdout);
      std::fputc('\n', stdout);
    }
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    return fail(std::string("tokenize failed: ") + e.what());
  }
}

void add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* sub = app.add_subcommand(
      "tokenize", "Tokenize JSON Lines of strings from stdin (or --decode arrays of ids)");
  sub->add_option("--model", o->model, "model directory (its tokenizer.json), or ORG/NAME");
  sub->add_option("--tokenizer", o->tokenizer, "a tokenizer.json file");
  sub->add_flag("--decode", o->decode, "read arrays of ids, write strings");
  sub->add_flag("--add-special-tokens", o->add_special_tokens,
                "apply the post-processor template (e.g. Llama-3's BOS) when encoding");
  sub->add_flag("--skip-special-tokens", o->skip_special_tokens,
                "leave special tokens out when decoding");
  sub->callback([o] { exit_code() = run_tokenize(*o); });
}

}  // namespace s4kv::cli
