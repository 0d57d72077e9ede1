// A dense, row-major tensor: dtype + static shape + a pointer to the elements.
// A Tensor either owns its storage (shared, so copies are cheap and alias) or is a view
// into memory owned elsewhere (an executor arena, a caller's buffer).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collage/dtype.h"
#include "collage/error.h"

namespace collage {

using Shape = std::vector<int64_t>;

// Number of elements; throws Error(kLimit) on overflow or a negative dim.
int64_t shape_numel(const Shape& shape);
std::string shape_to_string(const Shape& shape);
// Row-major strides in elements.
std::vector<int64_t> shape_strides(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // Allocates zero-filled owning storage.
  Tensor(DType dtype, Shape shape);
  // A non-owning view; `data` must outlive every use of the view.
  static Tensor view(DType dtype, Shape shape, void* data);
  // An owning tensor over `storage` (at least nbytes() long, kept alive by the tensor): bytes
  // made elsewhere become a tensor without a copy (a model's initializers, onnx_import.cc).
  static Tensor adopt(DType dtype, Shape shape, std::shared_ptr<std::byte[]> storage);
  // Owning tensor from a vector of values (tests, constants).
  template <typename T>
  static Tensor from_vector(Shape shape, const std::vector<T>& values);
  template <typename T>
  static Tensor scalar(T value) {
    return from_vector<T>({}, {value});
  }

  bool defined() const { return dtype_ != DType::kUndefined; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(i < 0 ? i + rank() : i); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }

  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    check_type(DTypeOf<T>::value);
    return static_cast<T*>(data_);
  }
  template <typename T>
  std::span<T> span() const {
    return {data<T>(), static_cast<size_t>(numel_)};
  }

  // Deep copy into new owning storage.
  Tensor clone() const;
  // Same storage, another shape with the same element count.
  Tensor reshaped(Shape shape) const;
  // Reads element i (any numeric dtype) as double / int64: for shape inputs, tests.
  double get_as_double(int64_t i) const;
  int64_t get_as_int(int64_t i) const;
  // Elements as int64 (any integer dtype), e.g. a Reshape's shape input.
  std::vector<int64_t> to_int_vector() const;
  std::vector<float> to_float_vector() const;
  bool owns_storage() const { return owner_ != nullptr; }

 private:
  void check_type(DType wanted) const;

  DType dtype_ = DType::kUndefined;
  Shape shape_;
  int64_t numel_ = 0;
  std::shared_ptr<std::byte[]> owner_;
  void* data_ = nullptr;
};

template <typename T>
Tensor Tensor::from_vector(Shape shape, const std::vector<T>& values) {
  Tensor t(DTypeOf<T>::value, std::move(shape));
  if (static_cast<int64_t>(values.size()) != t.numel())
    fail(ErrorKind::kShape, "from_vector: {} values for shape {}", values.size(),
         shape_to_string(t.shape()));
  T* d = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) d[i] = values[i];
  return t;
}

}  // namespace collage
