// Element types of tensors in checkpoints and in memory.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace s4kv {

enum class DType { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool, kF8E4M3, kF8E5M2 };

// Bytes per element.
size_t dtype_size(DType t);
// The safetensors name ("F32", "BF16" ...).
std::string_view dtype_name(DType t);
// From a safetensors dtype name; nullopt when unknown.
std::optional<DType> dtype_from_safetensors(std::string_view name);
// From a config.json dtype ("bfloat16", "float16", "float32", "half" ...); nullopt when unknown.
std::optional<DType> dtype_from_torch_name(std::string_view name);
// The torch name ("bfloat16" ...) of the three float types; dtype_name otherwise.
std::string_view dtype_torch_name(DType t);

}  // namespace s4kv
