#include "collage/dtype.h"

namespace collage {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32:
      return 4;
    case DType::kUInt8:
      return 1;
    case DType::kInt8:
      return 1;
    case DType::kUInt16:
      return 2;
    case DType::kInt16:
      return 2;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kBool:
      return 1;
    case DType::kFloat16:
      return 2;
    case DType::kFloat64:
      return 8;
    case DType::kUInt32:
      return 4;
    case DType::kUInt64:
      return 8;
    case DType::kBFloat16:
      return 2;
    case DType::kString:
    case DType::kUndefined:
      return 0;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "float32";
    case DType::kUInt8:
      return "uint8";
    case DType::kInt8:
      return "int8";
    case DType::kUInt16:
      return "uint16";
    case DType::kInt16:
      return "int16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kBool:
      return "bool";
    case DType::kFloat16:
      return "float16";
    case DType::kFloat64:
      return "float64";
    case DType::kUInt32:
      return "uint32";
    case DType::kUInt64:
      return "uint64";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kString:
      return "string";
    case DType::kUndefined:
      return "undefined";
  }
  return "unknown";
}

bool dtype_is_supported(DType t) {
  // float16/bfloat16 can be stored (initializers) but no kernel computes in them yet.
  return dtype_size(t) != 0 && t != DType::kFloat16 && t != DType::kBFloat16;
}

bool dtype_is_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 ||
         t == DType::kBFloat16;
}

bool dtype_is_integer(DType t) {
  switch (t) {
    case DType::kUInt8:
    case DType::kInt8:
    case DType::kUInt16:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUInt32:
    case DType::kUInt64:
      return true;
    default:
      return false;
  }
}

}  // namespace collage
