// Comparing a computed tensor with the expected one from ONNX test data.
#pragma once

#include <string>

#include "collage/tensor.h"

namespace collage::conformance {

struct Tolerance {
  double rtol = 1e-3;
  double atol = 1e-5;
};

// Empty when `actual` matches `expected`: same dtype and shape; floats within
// atol + rtol * |expected| (NaN matches NaN, inf matches the same-signed inf); every
// other dtype exact. Otherwise a one-line description of the first problem, with the
// error statistics a person needs to tell a tolerance issue from a wrong kernel.
std::string compare_tensors(const Tensor& actual, const Tensor& expected, const Tolerance& tol);

}  // namespace collage::conformance
