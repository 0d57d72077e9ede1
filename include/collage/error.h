// Errors that cross the public API. Every failure a user can cause (a bad model,
// an unsupported op, a limit exceeded) is an Error with a kind, so the CLI can map it
// to an exit status and tests can assert the exact kind.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace collage {

enum class ErrorKind {
  kParse,         // bytes that are not a valid ONNX protobuf / TensorProto / JSON
  kInvalidModel,  // well-formed protobuf, but the graph is inconsistent (cycles, dangling names...)
  kUnsupported,   // an op, dtype or attribute value collage cannot run
  kShape,         // shapes that do not agree, or that cannot be made static
  kLimit,         // a tensor or graph beyond --max-tensor-bytes or another guard
  kPathViolation,    // external data that points outside the model's folder
  kIo,               // a file that cannot be read or written
  kBackend,          // a backend failed to compile or run a kernel
  kInvalidArgument,  // a bad command-line / API argument
  kInternal,         // a bug in collage
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  // True for errors caused by what the user handed us (exit status 2 in the CLI).
  bool is_bad_input() const {
    return kind_ != ErrorKind::kInternal && kind_ != ErrorKind::kBackend;
  }

 private:
  ErrorKind kind_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(kind, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace collage
