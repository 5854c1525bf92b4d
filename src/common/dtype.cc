#include "common/dtype.h"

#include <array>
#include <utility>

namespace s4kv {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view safetensors;
  size_t size;
};

constexpr std::array<DTypeInfo, 12> kDTypes{{
    {DType::kF32, "F32", 4},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kF64, "F64", 8},
    {DType::kI64, "I64", 8},
    {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},
    {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kF8E5M2, "F8_E5M2", 1},
}};

const DTypeInfo& info(DType t) {
  for (const auto& i : kDTypes) {
    if (i.type == t) return i;
  }
  return kDTypes[0];  // unreachable: every enumerator is in the table
}

}  // namespace

size_t dtype_size(DType t) { return info(t).size; }
std::string_view dtype_name(DType t) { return info(t).safetensors; }

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& i : kDTypes) {
    if (i.safetensors == name) return i.type;
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_torch_name(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  if (name == "bfloat16") return DType::kBF16;
  if (name == "float16" || name == "half") return DType::kF16;
  if (name == "float32" || name == "float") return DType::kF32;
  return std::nullopt;
}

std::string_view dtype_torch_name(DType t) {
  switch (t) {
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    case DType::kF32:
      return "float32";
    default:
      return dtype_name(t);
  }
}

}  // namespace s4kv
