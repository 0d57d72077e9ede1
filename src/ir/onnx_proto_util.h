// Shared by the ONNX importer and the TensorProto file IO: the one place that turns
// protobuf bytes and TensorProtos into collage objects with every size and path checked.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "collage/tensor.h"

namespace google::protobuf {
class MessageLite;
}

namespace collage::onnx_util {

// A whole file's bytes, read-only: mapped where the file can be (a regular file), read into
// memory where not (a pipe). Error(kIo) naming it when it cannot be read. Mapped, not copied:
// a copy into fresh memory pays the first touch of every page it fills (docs/DESIGN.md,
// "Loading a model": Inception-v3's `collage info` 1.72 -> 1.00 s).
class FileBytes {
 public:
  explicit FileBytes(const std::string& path);
  ~FileBytes();
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  std::string_view view() const { return view_; }

 private:
  void* mapping_ = nullptr;  // with mapped_bytes_, where mapped
  size_t mapped_bytes_ = 0;
  std::string read_;  // where not
  std::string_view view_;
};

// Parses `bytes` into `message` with a byte limit sized to the input and protobuf's
// recursion guard; Error(kParse) naming `what` on truncated or corrupt bytes.
void parse_message(std::string_view bytes, google::protobuf::MessageLite& message,
                   const std::string& what);

// Maps an ONNX TensorProto.DataType to a DType collage can store; Error(kUnsupported)
// naming `what` otherwise.
DType dtype_from_onnx(int32_t data_type, const std::string& what);

// Converts a TensorProto (raw_data, typed fields or external data) into an owning Tensor.
// External data is read from below `base_dir` ("" forbids external data).
Tensor tensor_from_proto(const onnx::TensorProto& proto, const std::string& base_dir,
                         int64_t max_tensor_bytes);
// The same, but raw_data is moved into the tensor instead of copied (`proto` is left without
// it): each copy of a model's weights into fresh memory pays the first touch of its pages
// (docs/DESIGN.md, "Loading a model").
Tensor take_tensor_from_proto(onnx::TensorProto& proto, const std::string& base_dir,
                              int64_t max_tensor_bytes);

onnx::TensorProto tensor_to_proto(const Tensor& tensor, const std::string& name);

}  // namespace collage::onnx_util
