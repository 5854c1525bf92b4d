// Tokenizer throughput: encode and decode MB/s on one thread, over a JSON Lines file of
// strings (each string one encode call, as requests arrive). Prints one JSON object with the
// figures and a checksum of the ids (count and sum) so that bench/tokenizer_bench.py can
// confirm that S4 KV and Hugging Face produced the same ids before comparing speed.
//
//   tokenizer_bench --tokenizer FILE --input STRINGS.jsonl [--reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/json.h"
#include "tokenizer/tokenizer.h"

namespace {

using s4kv::tokenizer::Tokenizer;
using Clock = std::chrono::steady_clock;

template <typename F>
double median_seconds(int reps, F&& f) {
  f();  // warm-up (also fills the word cache, as a running server's is)
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int usage() {
  std::fprintf(stderr,
               "usage: tokenizer_bench --tokenizer FILE --input STRINGS.jsonl [--reps N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path, input_path;
  int reps = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokenizer"))
      tokenizer_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--input"))
      input_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--reps"))
      reps = std::max(1, std::atoi(argv[i + 1]));
    else
      return usage();
  }
  if (tokenizer_path.empty() || input_path.empty()) return usage();
  const auto load_start = Clock::now();
  auto tok = Tokenizer::from_file(tokenizer_path);
  const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
  if (!tok.is_ok()) {
    std::fprintf(stderr, "error: %s\n", tok.status().message().c_str());
    return 2;
  }
  std::vector<std::string> texts;
  std::ifstream in(input_path);
  size_t text_bytes = 0;
  for (std::string line; std::getline(in, line);) {
    auto j = s4kv::parse_json(line, input_path);
    if (!j.is_ok() || !j->is_string()) {
      std::fprintf(stderr, "error: %s: each line must be a JSON string\n", input_path.c_str());
      return 2;
    }
    texts.push_back(j->get<std::string>());
    text_bytes += texts.back().size();
  }
  std::vector<std::vector<int32_t>> ids(texts.size());
  const double encode_s = median_seconds(reps, [&] {
    for (size_t i = 0; i < texts.size(); ++i)
      ids[i] = std::move(tok->encode(texts[i], false)).value();
  });
  uint64_t num_tokens = 0, id_sum = 0;
  for (const auto& v : ids) {
    num_tokens += v.size();
    for (int32_t id : v) id_sum += static_cast<uint64_t>(id);
  }
  size_t decoded_bytes = 0;
  const double decode_s = median_seconds(reps, [&] {
    decoded_bytes = 0;
    for (const auto& v : ids) decoded_bytes += tok->decode(v, false).size();
  });
  s4kv::Json out = {{"implementation", "s4kv"},
                    {"tokenizer", tokenizer_path},
                    {"num_strings", texts.size()},
                    {"text_bytes", text_bytes},
                    {"num_tokens", num_tokens},
                    {"id_sum", id_sum},
                    {"reps", reps},
                    {"load_s", load_s},
                    {"encode_s", encode_s},
                    {"decode_s", decode_s},
                    {"encode_mb_s", text_bytes / encode_s / 1e6},
                    {"decode_mb_s", decoded_bytes / decode_s / 1e6}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
