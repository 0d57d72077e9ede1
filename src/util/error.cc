#include "collage/error.h"

namespace collage {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kParse:
      return "parse error";
    case ErrorKind::kInvalidModel:
      return "invalid model";
    case ErrorKind::kUnsupported:
      return "unsupported";
    case ErrorKind::kShape:
      return "shape error";
    case ErrorKind::kLimit:
      return "limit exceeded";
    case ErrorKind::kPathViolation:
      return "path violation";
    case ErrorKind::kIo:
      return "I/O error";
    case ErrorKind::kBackend:
      return "backend error";
    case ErrorKind::kInvalidArgument:
      return "invalid argument";
    case ErrorKind::kInternal:
      return "internal error";
  }
  return "error";
}

}  // namespace collage
