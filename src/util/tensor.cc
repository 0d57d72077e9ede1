#include "collage/tensor.h"

#include <cstring>
#include <limits>
#include <new>

namespace collage {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      fail(ErrorKind::kShape, "negative dimension {} in shape {}", d, shape_to_string(shape));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      fail(ErrorKind::kLimit, "shape {} has more elements than fit in 64 bits",
           shape_to_string(shape));
    n *= d;
  }
  return n;
}

std::string shape_to_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::vector<int64_t> shape_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

namespace {

// A cache line, and what AVX-512 stores need: oneDNN's jit kernels write a large output with
// non-temporal stores (vmovntps), which fault on a destination that is not 64-byte aligned.
// With operator new[]'s 16 bytes, a linear 8x upsampling's 8.6 MB output (LRASPP's last
// Resize) crashed the measure worker, which writes a candidate's outputs into tensors; the
// executor's arena was already aligned so.
constexpr std::align_val_t kStorageAlignment{64};

}  // namespace

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  if (!dtype_is_supported(dtype) && dtype != DType::kFloat16 && dtype != DType::kBFloat16)
    fail(ErrorKind::kUnsupported, "cannot hold a tensor of element type {}", dtype_name(dtype));
  numel_ = shape_numel(shape_);
  size_t bytes = nbytes();
  // At least one byte so data() of an empty tensor is a valid, distinct pointer.
  owner_ =
      std::shared_ptr<std::byte[]>(new (kStorageAlignment) std::byte[bytes ? bytes : 1](),
                                   [](std::byte* p) { ::operator delete[](p, kStorageAlignment); });
  data_ = owner_.get();
}

Tensor Tensor::view(DType dtype, Shape shape, void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = shape_numel(t.shape_);
  t.data_ = data;
  return t;
}

Tensor Tensor::adopt(DType dtype, Shape shape, std::shared_ptr<std::byte[]> storage) {
  if (!storage) fail(ErrorKind::kInvalidArgument, "Tensor::adopt: no storage");
  Tensor t = view(dtype, std::move(shape), storage.get());
  t.owner_ = std::move(storage);
  return t;
}

Tensor Tensor::clone() const {
  if (!defined()) return {};
  Tensor t(dtype_, shape_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  Tensor t = *this;
  int64_t n = shape_numel(shape);
  if (n != numel_)
    fail(ErrorKind::kShape, "cannot reshape {} to {}", shape_to_string(shape_),
         shape_to_string(shape));
  t.shape_ = std::move(shape);
  return t;
}

void Tensor::check_type(DType wanted) const {
  if (wanted != dtype_)
    fail(ErrorKind::kInternal, "tensor of type {} accessed as {}", dtype_name(dtype_),
         dtype_name(wanted));
}

double Tensor::get_as_double(int64_t i) const {
  if (i < 0 || i >= numel_) fail(ErrorKind::kInternal, "element {} out of range {}", i, numel_);
  return dispatch_dtype(dtype_, [&](auto tag) -> double {
    using T = decltype(tag);
    return static_cast<double>(static_cast<const T*>(data_)[i]);
  });
}

int64_t Tensor::get_as_int(int64_t i) const {
  if (i < 0 || i >= numel_) fail(ErrorKind::kInternal, "element {} out of range {}", i, numel_);
  return dispatch_dtype(dtype_, [&](auto tag) -> int64_t {
    using T = decltype(tag);
    return static_cast<int64_t>(static_cast<const T*>(data_)[i]);
  });
}

std::vector<int64_t> Tensor::to_int_vector() const {
  std::vector<int64_t> v(numel_);
  for (int64_t i = 0; i < numel_; ++i) v[i] = get_as_int(i);
  return v;
}

std::vector<float> Tensor::to_float_vector() const {
  std::vector<float> v(numel_);
  for (int64_t i = 0; i < numel_; ++i) v[i] = static_cast<float>(get_as_double(i));
  return v;
}

}  // namespace collage
