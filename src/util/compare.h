// Comparing computed tensors with expected ones: one rule for the whole project (a backend
// against reference while tuning, `run --verify`, the conformance suite, the tests), so a
// kernel that computes NaN or garbage fails everywhere alike.
#pragma once

#include <string>
#include <vector>

#include "collage/tensor.h"

namespace collage {

struct Tolerance {
  double rtol = 1e-3;
  double atol = 1e-5;
  // Added to atol, times the largest |expected| of the tensor: a scale-free absolute slack
  // for sums taken in another order (their error follows the tensor's scale, not each
  // element's).
  double atol_fraction = 0;

  // A backend's kernel against the reference backend on random inputs (the tuner's check,
  // `run --verify`, the backend tests), for float32 math keeping `significand_bits`
  // (Backend::float32_significand_bits): 24 gives the float32 rule; fewer widen rtol and
  // atol_fraction to 16 times that precision's unit roundoff 2^-bits (TF32, 11 bits: 7.8e-3),
  // the error a chain of such layers reaches while a wrong kernel still misses by far more.
  static Tolerance backend_vs_reference(int significand_bits = 24);
};

// Empty when `actual` matches `expected`: same dtype and shape; floats within
// atol + atol_fraction * max|expected| + rtol * |expected| (NaN matches only NaN, inf only
// the same-signed inf); every other dtype exact. Otherwise a one-line description of the
// first problem, with the error statistics a person needs to tell a tolerance issue from a
// wrong kernel.
std::string compare_tensors(const Tensor& actual, const Tensor& expected, const Tolerance& tol);
// The same over lists of outputs ("output K: ..." for the first that differs; a count
// mismatch is a difference too).
std::string compare_outputs(const std::vector<Tensor>& actual, const std::vector<Tensor>& expected,
                            const Tolerance& tol);

}  // namespace collage
