// Element types. The numbering is ONNX's TensorProto.DataType so conversion is a cast.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace collage {

enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
};

// Bytes per element; 0 for kUndefined and kString (strings are not runnable tensors).
size_t dtype_size(DType t);
const char* dtype_name(DType t);
// True for dtypes collage can hold in a Tensor (all fixed-size numeric types and bool).
bool dtype_is_supported(DType t);
bool dtype_is_float(DType t);
bool dtype_is_integer(DType t);

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kFloat64;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::kInt8;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kUInt8;
};
template <>
struct DTypeOf<int16_t> {
  static constexpr DType value = DType::kInt16;
};
template <>
struct DTypeOf<uint16_t> {
  static constexpr DType value = DType::kUInt16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kInt32;
};
template <>
struct DTypeOf<uint32_t> {
  static constexpr DType value = DType::kUInt32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kInt64;
};
template <>
struct DTypeOf<uint64_t> {
  static constexpr DType value = DType::kUInt64;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};

// Calls f(T{}) with T the C++ type of `t` for the numeric dtypes and bool; throws
// Error(kUnsupported) for the others. Lets a kernel be written once as a template.
template <typename F>
decltype(auto) dispatch_dtype(DType t, F&& f);

}  // namespace collage

#include "collage/detail/dtype_dispatch.h"
