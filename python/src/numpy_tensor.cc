#include "numpy_tensor.h"

#include <cstdint>

namespace collage::python {
namespace {

struct DTypeName {
  DType dtype;
  const char* numpy;
  const char* ort;
};

constexpr DTypeName kDTypes[] = {
    {DType::kFloat32, "float32", "tensor(float)"},   {DType::kFloat64, "float64", "tensor(double)"},
    {DType::kFloat16, "float16", "tensor(float16)"}, {DType::kInt8, "int8", "tensor(int8)"},
    {DType::kInt16, "int16", "tensor(int16)"},       {DType::kInt32, "int32", "tensor(int32)"},
    {DType::kInt64, "int64", "tensor(int64)"},       {DType::kUInt8, "uint8", "tensor(uint8)"},
    {DType::kUInt16, "uint16", "tensor(uint16)"},    {DType::kUInt32, "uint32", "tensor(uint32)"},
    {DType::kUInt64, "uint64", "tensor(uint64)"},    {DType::kBool, "bool", "tensor(bool)"},
};

}  // namespace

std::optional<DType> dtype_from_numpy(const py::dtype& dtype) {
  for (const DTypeName& d : kDTypes)
    // equal(): PyArray_EquivTypes, which tells '<f4' from '>f4'.
    if (dtype.equal(py::dtype(d.numpy))) return d.dtype;
  return std::nullopt;
}

py::dtype numpy_dtype(DType dtype) {
  for (const DTypeName& d : kDTypes)
    if (d.dtype == dtype) return py::dtype(d.numpy);
  fail(ErrorKind::kUnsupported, "numpy has no dtype for collage's {}", dtype_name(dtype));
}

std::string ort_type_name(DType dtype) {
  for (const DTypeName& d : kDTypes)
    if (d.dtype == dtype) return d.ort;
  if (dtype == DType::kBFloat16) return "tensor(bfloat16)";
  if (dtype == DType::kString) return "tensor(string)";
  return "tensor(undefined)";
}

Tensor view_of(const py::array& array, DType dtype) {
  Shape shape(array.shape(), array.shape() + array.ndim());
  // The runtime only reads inputs (it copies them into its arena), so read-only arrays are fine.
  return Tensor::view(dtype, std::move(shape), const_cast<void*>(array.data()));
}

py::array to_numpy(const Tensor& tensor) {
  py::dtype dtype = numpy_dtype(tensor.dtype());
  auto* owner = new Tensor(tensor);
  py::capsule keep_alive(owner, [](void* p) { delete static_cast<Tensor*>(p); });
  std::vector<py::ssize_t> shape(tensor.shape().begin(), tensor.shape().end());
  std::vector<py::ssize_t> strides;
  for (int64_t s : shape_strides(tensor.shape()))
    strides.push_back(static_cast<py::ssize_t>(s * dtype_size(tensor.dtype())));
  return py::array(dtype, shape, strides, tensor.raw(), keep_alive);
}

}  // namespace collage::python
