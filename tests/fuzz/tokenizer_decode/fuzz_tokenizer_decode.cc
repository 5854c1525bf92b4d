// libFuzzer target for decoding arbitrary ids with the bundled model's tokenizer: Tokenizer::
// decode and the streaming IncrementalDetokenizer (what every response is built with). The
// input is read as little-endian int16 values, so that in-vocabulary ids, negative ids and ids
// past the vocabulary all occur; 0x8000 stands for INT32_MIN and 0x7fff for INT32_MAX. Both
// skip_special_tokens modes: the output is valid UTF-8 and the streamed pieces plus finish()
// equal decode, never holding a partial character back once the stream ends.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/check.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& tok = s4kv::fuzz::bundled_tokenizer();
  std::vector<int32_t> ids;
  ids.reserve(size / 2);
  for (size_t i = 0; i + 1 < size; i += 2) {
    const auto v = static_cast<int16_t>(static_cast<uint16_t>(data[i] | (data[i + 1] << 8)));
    if (v == std::numeric_limits<int16_t>::min()) {
      ids.push_back(std::numeric_limits<int32_t>::min());
    } else if (v == std::numeric_limits<int16_t>::max()) {
      ids.push_back(std::numeric_limits<int32_t>::max());
    } else {
      ids.push_back(v);
    }
  }
  for (bool skip_special : {false, true}) {
    const std::string text = tok.decode(ids, skip_special);
    S4KV_CHECK(s4kv::fuzz::is_valid_utf8(text), "decode is not valid UTF-8");
    s4kv::tokenizer::IncrementalDetokenizer detok(tok, skip_special);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = detok.add(id);
      S4KV_CHECK(s4kv::fuzz::is_valid_utf8(piece), "a streamed piece is not valid UTF-8");
      streamed += piece;
    }
    streamed += detok.finish();
    S4KV_CHECK(!detok.has_pending(), "bytes still pending after finish()");
    S4KV_CHECK(streamed == text, "streamed pieces differ from decode");
  }
  return 0;
}
