// libFuzzer target for the safetensors header parser: any bytes must yield either a Status
// or tensors whose views lie inside the input with exactly numel * dtype_size bytes. Built and
// run by `bash scripts/fuzz.sh` (tests/fuzz/CMakeLists.txt); dictionary safetensors.dict.
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/check.h"
#include "common/dtype.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto bytes = std::as_bytes(std::span<const uint8_t>(data, size));
  auto file = s4kv::model::SafetensorsFile::parse(bytes, "fuzz.safetensors");
  if (!file.is_ok()) {
    S4KV_CHECK(!file.status().message().empty());
    return 0;
  }
  const std::byte* lo = bytes.data();
  const std::byte* hi = bytes.data() + bytes.size();
  for (const auto& [name, view] : file->tensors()) {
    S4KV_CHECK(
        view.data.empty() || (view.data.data() >= lo && view.data.data() + view.data.size() <= hi),
        "tensor ", name, " outside the input");
    S4KV_CHECK(
        static_cast<uint64_t>(view.numel()) * s4kv::dtype_size(view.dtype) == view.data.size(),
        "tensor ", name, " byte length mismatch");
    // Touch both ends so ASan sees any out-of-bounds view.
    if (!view.data.empty()) {
      volatile std::byte first = view.data.front();
      volatile std::byte last = view.data.back();
      (void)first;
      (void)last;
    }
  }
  return 0;
}
