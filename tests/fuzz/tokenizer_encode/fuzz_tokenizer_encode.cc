// libFuzzer target for Tokenizer::encode with the bundled model's tokenizer.json (NFC,
// the Qwen2-style split regex on PCRE2, byte-level BPE, added tokens): any bytes give either
// a Status (ill-formed UTF-8, or the regex engine's limits) or in-vocabulary ids whose decode
// is valid UTF-8 and encodes back to the same ids (NFC is idempotent; byte-level BPE is
// lossless).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/check.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& tok = s4kv::fuzz::bundled_tokenizer();
  const std::string_view text = s4kv::fuzz::as_text(data, size);
  const bool valid = s4kv::fuzz::is_valid_utf8(text);
  for (bool add_special : {false, true}) {
    auto ids = tok.encode(text, add_special);
    if (!ids.is_ok()) {
      S4KV_CHECK(!ids.status().message().empty());
      continue;
    }
    S4KV_CHECK(valid, "ill-formed UTF-8 encoded without an error");
    for (int32_t id : *ids) S4KV_CHECK(id >= 0 && id < tok.vocab_size(), "token id ", id);
    S4KV_CHECK(text.empty() == ids->empty() || add_special, "empty/non-empty mismatch");
    const std::string decoded = tok.decode(*ids, /*skip_special_tokens=*/false);
    S4KV_CHECK(s4kv::fuzz::is_valid_utf8(decoded), "decode is not valid UTF-8");
    if (add_special) continue;
    auto again = tok.encode(decoded, false);
    S4KV_CHECK(again.is_ok(), "decoded text does not encode: ", again.status().message());
    S4KV_CHECK(*again == *ids, "encode(decode(encode(text))) != encode(text)");
  }
  return 0;
}
