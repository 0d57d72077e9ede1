// TensorProto <-> Tensor, external data, and the TensorProto files of the ONNX test data.
#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "collage/model.h"
#include "ir/onnx_proto_util.h"

namespace collage {
namespace onnx_util {
namespace {

namespace fs = std::filesystem;

// Protobuf's own default, stated so the guard is visible: nested attribute graphs are
// the only deep structures, and 100 levels keep the parser's recursion far from the stack
// limit.
constexpr int kRecursionLimit = 100;

// Size checks shared by every data source: the byte count the dims call for.
int64_t expected_bytes(const onnx::TensorProto& proto, DType dtype, const Shape& shape,
                       int64_t max_tensor_bytes) {
  int64_t numel = shape_numel(shape);
  auto size = static_cast<int64_t>(dtype_size(dtype));
  if (numel > 0 && numel > max_tensor_bytes / size)
    fail(ErrorKind::kLimit, "tensor '{}' of shape {} ({}) exceeds the limit of {} bytes",
         proto.name(), shape_to_string(shape), dtype_name(dtype), max_tensor_bytes);
  return numel * size;
}

template <typename Dst, typename Field>
void copy_field(const Field& field, const Tensor& t) {
  Dst* dst = static_cast<Dst*>(t.raw());
  for (int i = 0; i < field.size(); ++i) dst[i] = static_cast<Dst>(field.Get(i));
}

// The typed repeated field that holds `dtype` when raw_data is not used, and its length.
int typed_field_size(const onnx::TensorProto& p, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return p.float_data_size();
    case DType::kFloat64:
      return p.double_data_size();
    case DType::kInt64:
      return p.int64_data_size();
    case DType::kUInt32:
    case DType::kUInt64:
      return p.uint64_data_size();
    default:
      return p.int32_data_size();  // int8/16/32, uint8/16, bool, float16, bfloat16
  }
}

void copy_typed_fields(const onnx::TensorProto& p, const Tensor& t) {
  switch (t.dtype()) {
    case DType::kFloat32:
      copy_field<float>(p.float_data(), t);
      break;
    case DType::kFloat64:
      copy_field<double>(p.double_data(), t);
      break;
    case DType::kInt64:
      copy_field<int64_t>(p.int64_data(), t);
      break;
    case DType::kUInt32:
      copy_field<uint32_t>(p.uint64_data(), t);
      break;
    case DType::kUInt64:
      copy_field<uint64_t>(p.uint64_data(), t);
      break;
    case DType::kInt32:
      copy_field<int32_t>(p.int32_data(), t);
      break;
    case DType::kInt16:
      copy_field<int16_t>(p.int32_data(), t);
      break;
    case DType::kInt8:
      copy_field<int8_t>(p.int32_data(), t);
      break;
    case DType::kUInt16:
    case DType::kFloat16:
    case DType::kBFloat16:  // the 16 bits of a half float sit in the low half of an int32
      copy_field<uint16_t>(p.int32_data(), t);
      break;
    case DType::kUInt8:
      copy_field<uint8_t>(p.int32_data(), t);
      break;
    case DType::kBool: {
      auto* dst = static_cast<uint8_t*>(t.raw());
      for (int i = 0; i < p.int32_data_size(); ++i) dst[i] = p.int32_data(i) != 0;
      break;
    }
    default:
      fail(ErrorKind::kUnsupported, "tensor '{}': element type {} is not supported", p.name(),
           dtype_name(t.dtype()));
  }
}

int64_t parse_external_int(const onnx::TensorProto& p, const std::string& key,
                           const std::string& text) {
  size_t used = 0;
  int64_t v = -1;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v < 0)
    fail(ErrorKind::kInvalidModel, "tensor '{}': external data {} '{}' is not a valid number",
         p.name(), key, text);
  return v;
}

bool is_within(const fs::path& base, const fs::path& path) {
  auto [b, q] = std::mismatch(base.begin(), base.end(), path.begin(), path.end());
  return b == base.end();
}

// Resolves an external-data location, refusing anything that could leave `base_dir`.
fs::path resolve_external_path(const onnx::TensorProto& p, const std::string& location,
                               const std::string& base_dir) {
  if (base_dir.empty())
    fail(ErrorKind::kPathViolation,
         "tensor '{}' uses external data '{}', which is not allowed for models loaded from "
         "memory",
         p.name(), location);
  fs::path rel(location);
  if (location.empty() || rel.has_root_path())
    fail(ErrorKind::kPathViolation,
         "tensor '{}': external data location '{}' must be a relative path inside the model's "
         "folder",
         p.name(), location);
  for (const auto& part : rel)
    if (part == "..")
      fail(ErrorKind::kPathViolation,
           "tensor '{}': external data location '{}' may not contain '..'", p.name(), location);
  std::error_code ec;
  fs::path base = fs::canonical(base_dir, ec);
  if (ec) fail(ErrorKind::kIo, "cannot resolve the model folder '{}': {}", base_dir, ec.message());
  fs::path full = base / rel;
  if (!fs::exists(full, ec))
    fail(ErrorKind::kIo, "tensor '{}': external data file '{}' does not exist", p.name(),
         full.string());
  // Symlinks are followed here: what counts is where the bytes really are.
  fs::path real = fs::canonical(full, ec);
  if (ec) fail(ErrorKind::kIo, "cannot resolve '{}': {}", full.string(), ec.message());
  if (!is_within(base, real))
    fail(ErrorKind::kPathViolation,
         "tensor '{}': external data '{}' resolves to '{}', outside the model's folder", p.name(),
         location, real.string());
  if (!fs::is_regular_file(real, ec))
    fail(ErrorKind::kIo, "tensor '{}': external data '{}' is not a regular file", p.name(),
         real.string());
  return real;
}

void read_external(const onnx::TensorProto& p, const std::string& base_dir, const Tensor& t) {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;
  for (const auto& entry : p.external_data()) {
    if (entry.key() == "location") location = entry.value();
    if (entry.key() == "offset") offset = parse_external_int(p, "offset", entry.value());
    if (entry.key() == "length") length = parse_external_int(p, "length", entry.value());
  }
  fs::path path = resolve_external_path(p, location, base_dir);
  auto bytes = static_cast<int64_t>(t.nbytes());
  if (length >= 0 && length != bytes)
    fail(ErrorKind::kInvalidModel, "tensor '{}': external data length {} but its shape needs {}",
         p.name(), length, bytes);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::kIo, "cannot open '{}'", path.string());
  in.seekg(offset);
  in.read(static_cast<char*>(t.raw()), bytes);
  if (!in || in.gcount() != bytes)
    fail(ErrorKind::kIo, "tensor '{}': short read of {} bytes at offset {} from '{}'", p.name(),
         bytes, offset, path.string());
}

}  // namespace

FileBytes::FileBytes(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail(ErrorKind::kIo, "'{}' is a directory, not a file", path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ErrorKind::kIo, "cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    // MAP_POPULATE: the pages are mapped in one call instead of one fault each.
    void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ,
                     MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (p != MAP_FAILED) {
      ::close(fd);
      mapping_ = p;
      mapped_bytes_ = static_cast<size_t>(st.st_size);
      view_ = std::string_view(static_cast<const char*>(p), mapped_bytes_);
      return;
    }
  }
  // A pipe, an empty file, or a file that cannot be mapped: read in chunks.
  std::array<char, 1 << 16> chunk;
  for (;;) {
    const ssize_t n = ::read(fd, chunk.data(), chunk.size());
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      fail(ErrorKind::kIo, "error reading '{}': {}", path, std::strerror(error));
    }
    read_.append(chunk.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  view_ = read_;
}

FileBytes::~FileBytes() {
  if (mapping_) ::munmap(mapping_, mapped_bytes_);
}

void parse_message(std::string_view bytes, google::protobuf::MessageLite& message,
                   const std::string& what) {
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    fail(ErrorKind::kLimit, "{} is {} bytes; protobuf files are limited to 2 GiB", what,
         bytes.size());
  const auto size = static_cast<int>(bytes.size());
  google::protobuf::io::CodedInputStream stream(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                size);
  stream.SetTotalBytesLimit(size);
  stream.SetRecursionLimit(kRecursionLimit);
  if (!message.ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage())
    fail(ErrorKind::kParse, "{} is not a valid {} (truncated or corrupt protobuf)", what,
         message.GetTypeName());
}

DType dtype_from_onnx(int32_t data_type, const std::string& what) {
  auto t = static_cast<DType>(data_type);
  switch (t) {
    case DType::kFloat32:
    case DType::kUInt8:
    case DType::kInt8:
    case DType::kUInt16:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kBool:
    case DType::kFloat16:
    case DType::kFloat64:
    case DType::kUInt32:
    case DType::kUInt64:
    case DType::kBFloat16:
      return t;
    case DType::kString:
      fail(ErrorKind::kUnsupported, "{}: string tensors are not supported", what);
    default:
      fail(ErrorKind::kUnsupported, "{}: ONNX element type {} is not supported", what, data_type);
  }
}

namespace {

// What a TensorProto declares, checked: its element type, shape and byte count.
struct DeclaredTensor {
  std::string what;
  DType dtype;
  Shape shape;
  int64_t bytes;
};

DeclaredTensor declared_tensor(const onnx::TensorProto& p, int64_t max_tensor_bytes) {
  DeclaredTensor d;
  d.what = fmt::format("tensor '{}'", p.name());
  d.dtype = dtype_from_onnx(p.data_type(), d.what);
  if (p.has_segment())
    fail(ErrorKind::kUnsupported, "{}: segmented tensors are not supported", d.what);
  d.shape.assign(p.dims().begin(), p.dims().end());
  for (int64_t dim : d.shape)
    if (dim < 0)
      fail(ErrorKind::kInvalidModel, "{} has a negative dimension: {}", d.what,
           shape_to_string(d.shape));
  d.bytes = expected_bytes(p, d.dtype, d.shape, max_tensor_bytes);
  return d;
}

void check_raw_data_size(const onnx::TensorProto& p, const DeclaredTensor& d) {
  if (static_cast<int64_t>(p.raw_data().size()) != d.bytes)
    fail(ErrorKind::kInvalidModel, "{} has {} bytes of raw data but shape {} ({}) needs {}", d.what,
         p.raw_data().size(), shape_to_string(d.shape), dtype_name(d.dtype), d.bytes);
}

}  // namespace

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir,
                         int64_t max_tensor_bytes) {
  const DeclaredTensor d = declared_tensor(p, max_tensor_bytes);
  Tensor t(d.dtype, d.shape);
  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    read_external(p, base_dir, t);
  } else if (p.has_raw_data()) {
    check_raw_data_size(p, d);
    if (d.bytes) std::memcpy(t.raw(), p.raw_data().data(), d.bytes);
  } else {
    int count = typed_field_size(p, d.dtype);
    if (count != t.numel())
      fail(ErrorKind::kInvalidModel, "{} has {} elements of data but shape {} needs {}", d.what,
           count, shape_to_string(d.shape), t.numel());
    copy_typed_fields(p, t);
  }
  return t;
}

Tensor take_tensor_from_proto(onnx::TensorProto& p, const std::string& base_dir,
                              int64_t max_tensor_bytes) {
  if (p.data_location() == onnx::TensorProto::EXTERNAL || !p.has_raw_data())
    return tensor_from_proto(p, base_dir, max_tensor_bytes);
  const DeclaredTensor d = declared_tensor(p, max_tensor_bytes);
  check_raw_data_size(p, d);
  // The tensor's elements are read in place: the string's buffer (from operator new, or
  // inside the string object, itself from operator new) is 16-byte aligned, enough for any
  // element type. Tensor's own storage is 64 (util/tensor.cc), for kernels' vector stores;
  // a model's constants are only read.
  std::string* raw = p.release_raw_data();
  std::shared_ptr<std::byte[]> storage(reinterpret_cast<std::byte*>(raw->data()),
                                       [raw](std::byte*) { delete raw; });
  return Tensor::adopt(d.dtype, d.shape, std::move(storage));
}

onnx::TensorProto tensor_to_proto(const Tensor& tensor, const std::string& name) {
  if (!tensor.defined())
    fail(ErrorKind::kInvalidArgument, "cannot write undefined tensor '{}'", name);
  onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(static_cast<int32_t>(tensor.dtype()));
  for (int64_t d : tensor.shape()) p.add_dims(d);
  p.set_raw_data(tensor.raw(), tensor.nbytes());
  return p;
}

}  // namespace onnx_util

Tensor read_tensor_file(const std::string& path, int64_t max_tensor_bytes) {
  onnx::TensorProto proto;
  onnx_util::parse_message(onnx_util::FileBytes(path).view(), proto, "'" + path + "'");
  try {
    return onnx_util::tensor_from_proto(proto, "", max_tensor_bytes);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("'{}': {}", path, e.what()));
  }
}

void write_tensor_file(const std::string& path, const Tensor& tensor, const std::string& name) {
  onnx::TensorProto proto = onnx_util::tensor_to_proto(tensor, name);
  std::string bytes;
  if (!proto.SerializeToString(&bytes))
    fail(ErrorKind::kLimit, "tensor '{}' is too large to serialize", name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(ErrorKind::kIo, "cannot create '{}': {}", path, std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) fail(ErrorKind::kIo, "error writing '{}'", path);
}

}  // namespace collage
