#pragma once

#include "collage/error.h"

namespace collage {

template <typename F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat64:
      return f(double{});
    case DType::kInt8:
      return f(int8_t{});
    case DType::kUInt8:
      return f(uint8_t{});
    case DType::kInt16:
      return f(int16_t{});
    case DType::kUInt16:
      return f(uint16_t{});
    case DType::kInt32:
      return f(int32_t{});
    case DType::kUInt32:
      return f(uint32_t{});
    case DType::kInt64:
      return f(int64_t{});
    case DType::kUInt64:
      return f(uint64_t{});
    case DType::kBool:
      return f(bool{});
    default:
      break;
  }
  fail(ErrorKind::kUnsupported, "element type {} is not supported here", dtype_name(t));
}

}  // namespace collage
