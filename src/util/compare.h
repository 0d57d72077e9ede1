// Comparing computed tensors with expected ones: one rule for the whole project (a backend
// against reference while tuning, `run --verify`, the conformance suite, the tests), so a
// kernel that computes NaN or garbage fails everywhere alike.
#pragma once

#include <functional>
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

// A computation's own sensitivity. Some models are chaotic in float32: random weights with
// random BatchNorm statistics make deep nets amplify any rounding (torchvision's
// EfficientNet-B3 and RegNetY-1.6GF exported so: logits ~1e4 that the reference backend moves
// by 5.6 % and 34 % of their scale when the inputs change by 1e-6, ONNX Runtime 4.5 % and
// 12 % away from PyTorch, collage's whole-model region 4.1 % and 17 % away from reference).
// No float32 kernel that sums in another order can match such outputs within `Tolerance`,
// and a check that asked it to failed every large candidate of those models: their tuned
// plans were fragments (EfficientNet-B3 12.0 ms against 7.6 for the region that failed).
// So a float output that misses the tolerance still matches where it differs from the
// expected one by at most kSensitivityAllowance times as much as the expected computation's
// own output moves when its float inputs are scaled by (1 + kSensitivityInputChange); a
// wrong kernel of a well-conditioned model misses by orders of magnitude more than that.
inline constexpr double kSensitivityInputChange = 1e-6;
inline constexpr double kSensitivityAllowance = 4;

// Copies of `inputs` with every float32 and float64 element scaled by (1 + change); other
// dtypes (ids, masks, shapes; 16-bit floats, which would round such a change away) as they
// are.
std::vector<Tensor> scaled_inputs(const std::vector<Tensor>& inputs, double change);

// max |actual - expected| / max |expected| over a float tensor's finite elements: 0 when they
// are equal; infinite when the shapes or dtypes differ, when a non-finite element differs
// (NaN matches only NaN, inf only the same inf), or when expected is all zeros and actual not.
double scaled_difference(const Tensor& actual, const Tensor& expected);

struct SensitivityCheck {
  std::string mismatch;  // empty when the outputs match
  // When they match only by the sensitivity rule: which outputs, by how much, against how far
  // the expected ones moved. Empty otherwise.
  std::string note;
};

// compare_outputs, where a float output that misses `tol` still matches within
// kSensitivityAllowance x scaled_difference(moved, expected) of its scale (`moved`: the
// expected computation run on scaled_inputs(inputs, kSensitivityInputChange)). A mismatch says
// how far the expected outputs moved too.
SensitivityCheck compare_within_sensitivity(const std::vector<Tensor>& actual,
                                            const std::vector<Tensor>& expected,
                                            const std::vector<Tensor>& moved, const Tolerance& tol);

// The check the tuner and `run --verify` make: compare_outputs, and only where that misses,
// compare_within_sensitivity with the moved outputs `run_expected` computes from
// scaled_inputs(inputs, kSensitivityInputChange) (the expected computation run once more).
using ExpectedRun = std::function<const std::vector<Tensor>&(const std::vector<Tensor>& inputs)>;
SensitivityCheck compare_allowing_sensitivity(const std::vector<Tensor>& actual,
                                              const std::vector<Tensor>& expected,
                                              const std::vector<Tensor>& inputs,
                                              const ExpectedRun& run_expected,
                                              const Tolerance& tol);

}  // namespace collage
