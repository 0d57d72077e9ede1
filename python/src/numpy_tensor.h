// numpy <-> collage::Tensor without copies: an input array becomes a Tensor view of its
// buffer; an output Tensor's owning storage becomes the array's buffer (the array holds the
// Tensor alive through a capsule).
#pragma once

#include <pybind11/numpy.h>

#include <optional>
#include <string>

#include "collage/tensor.h"

namespace collage::python {

namespace py = pybind11;

// The collage dtype of a numpy dtype in native byte order; nullopt when there is none
// (complex, object, strings, a byte-swapped dtype...).
std::optional<DType> dtype_from_numpy(const py::dtype& dtype);
// The numpy dtype of a collage dtype; Error(kUnsupported) for those numpy lacks (bfloat16).
py::dtype numpy_dtype(DType dtype);
// ONNX Runtime's type text: "tensor(float)", "tensor(int64)"...
std::string ort_type_name(DType dtype);

// A view of `array`'s buffer; `array` must be C-contiguous and outlive the view.
Tensor view_of(const py::array& array, DType dtype);
// An array over `tensor`'s storage (shared, not copied).
py::array to_numpy(const Tensor& tensor);

}  // namespace collage::python
