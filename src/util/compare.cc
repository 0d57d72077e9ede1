#include "util/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace collage {
namespace {

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {
    // Subnormal halves are exact in float: mantissa * 2^-24.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Element i as a double, for every float dtype a test output can have. dispatch_dtype
// does not cover the 16-bit floats, so those are decoded here.
double float_element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat32:
      return static_cast<const float*>(t.raw())[i];
    case DType::kFloat64:
      return static_cast<const double*>(t.raw())[i];
    case DType::kFloat16:
      return half_to_float(static_cast<const uint16_t*>(t.raw())[i]);
    case DType::kBFloat16:
      return std::bit_cast<float>(static_cast<uint32_t>(static_cast<const uint16_t*>(t.raw())[i])
                                  << 16);
    default:
      return t.get_as_double(i);
  }
}

std::string element_string(const Tensor& t, int64_t i) {
  if (dtype_is_float(t.dtype())) return fmt::format("{:.9g}", float_element(t, i));
  if (t.dtype() == DType::kUInt64)
    return fmt::format("{}", static_cast<const uint64_t*>(t.raw())[i]);
  try {
    return fmt::format("{}", t.get_as_int(i));
  } catch (const std::exception&) {
    return "?";
  }
}

// `element(t, i)`: t's element i as a double. The float32 case reads the array directly:
// through float_element's per-element switch, comparing a candidate's outputs with
// reference's was 3.5 % of a cold tune of Inception-v3 (perf); 4 M floats 28 -> 17 ms.
template <typename Element>
std::string compare_floats(const Tensor& actual, const Tensor& expected, const Tolerance& tol,
                           Element element) {
  double scale = 0;
  if (tol.atol_fraction > 0)
    for (int64_t i = 0; i < expected.numel(); ++i) {
      const double b = std::fabs(element(expected, i));
      if (std::isfinite(b)) scale = std::max(scale, b);
    }
  const double atol = tol.atol + tol.atol_fraction * scale;
  int64_t mismatches = 0;
  int64_t first = -1;
  double max_abs = 0;
  double max_rel = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double a = element(actual, i);
    const double b = element(expected, i);
    bool ok;
    if (std::isnan(b) || std::isnan(a)) {
      ok = std::isnan(a) && std::isnan(b);
    } else if (std::isinf(b) || std::isinf(a)) {
      ok = a == b;
    } else {
      const double diff = std::fabs(a - b);
      max_abs = std::max(max_abs, diff);
      if (b != 0) max_rel = std::max(max_rel, diff / std::fabs(b));
      ok = diff <= atol + tol.rtol * std::fabs(b);
    }
    if (!ok) {
      ++mismatches;
      if (first < 0) first = i;
    }
  }
  if (mismatches == 0) return "";
  return fmt::format(
      "{} of {} elements differ (max abs err {:.3g}, max rel err {:.3g}); first at index {}: got "
      "{}, expected {}",
      mismatches, expected.numel(), max_abs, max_rel, first, element_string(actual, first),
      element_string(expected, first));
}

// The common case of every check, float32 outputs that all match, in two vectorized passes
// over the arrays (the element loop above, with its NaN and infinity cases, is left for a
// tensor that has an element out of tolerance or not finite, to describe it): that loop
// was 7.4 % of the samples (perf -a) of a cold tune of DeepLabV3-ResNet-50, whose outputs
// run to 26 M floats, and kept the second core idle meanwhile. Returns whether every
// element of `actual` is finite-and-within `tol` of `expected`'s by compare_floats' rule.
bool float32_all_within(const float* actual, const float* expected, int64_t n,
                        const Tolerance& tol) {
  float scale = 0;
  if (tol.atol_fraction > 0) {
#pragma omp simd reduction(max : scale)
    for (int64_t i = 0; i < n; ++i) {
      const float b = std::fabs(expected[i]);
      // A NaN or an infinity fails the comparison: not part of the scale.
      scale = b <= std::numeric_limits<float>::max() ? std::max(scale, b) : scale;
    }
  }
  const double atol = tol.atol + tol.atol_fraction * static_cast<double>(scale);
  const double rtol = tol.rtol;
  int64_t outside = 0;
#pragma omp simd reduction(+ : outside)
  for (int64_t i = 0; i < n; ++i) {
    const double a = actual[i], b = expected[i];
    // False for a NaN or an infinity on either side (an infinite b makes the bound
    // infinite, hence its own test): the element loop decides those.
    const bool within = (std::fabs(a - b) <= atol + rtol * std::fabs(b)) &
                        (std::fabs(b) <= std::numeric_limits<float>::max());
    outside += within ? 0 : 1;
  }
  return outside == 0;
}

std::string compare_exact(const Tensor& actual, const Tensor& expected) {
  const size_t width = dtype_size(expected.dtype());
  const auto* a = static_cast<const unsigned char*>(actual.raw());
  const auto* b = static_cast<const unsigned char*>(expected.raw());
  int64_t mismatches = 0;
  int64_t first = -1;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    // Bool is compared by truth value: any non-zero byte is true.
    const bool same = expected.dtype() == DType::kBool
                          ? (a[i] != 0) == (b[i] != 0)
                          : std::memcmp(a + i * width, b + i * width, width) == 0;
    if (!same) {
      ++mismatches;
      if (first < 0) first = i;
    }
  }
  if (mismatches == 0) return "";
  return fmt::format("{} of {} elements differ; first at index {}: got {}, expected {}", mismatches,
                     expected.numel(), first, element_string(actual, first),
                     element_string(expected, first));
}

}  // namespace

Tolerance Tolerance::backend_vs_reference(int significand_bits) {
  Tolerance tol{1e-3, 1e-6, 1e-4};
  if (significand_bits < 24) {
    const double reduced = 16 * std::ldexp(1.0, -significand_bits);
    tol.rtol = std::max(tol.rtol, reduced);
    tol.atol_fraction = std::max(tol.atol_fraction, reduced);
  }
  return tol;
}

std::string compare_tensors(const Tensor& actual, const Tensor& expected, const Tolerance& tol) {
  if (actual.dtype() != expected.dtype())
    return fmt::format("dtype {}, expected {}", dtype_name(actual.dtype()),
                       dtype_name(expected.dtype()));
  if (actual.shape() != expected.shape())
    return fmt::format("shape {}, expected {}", shape_to_string(actual.shape()),
                       shape_to_string(expected.shape()));
  if (expected.numel() == 0) return "";
  if (actual.raw() == nullptr) return "output has no data";
  if (expected.dtype() == DType::kFloat32) {
    if (float32_all_within(static_cast<const float*>(actual.raw()),
                           static_cast<const float*>(expected.raw()), expected.numel(), tol))
      return "";
    return compare_floats(actual, expected, tol, [](const Tensor& t, int64_t i) -> double {
      return static_cast<const float*>(t.raw())[i];
    });
  }
  if (dtype_is_float(expected.dtype())) return compare_floats(actual, expected, tol, float_element);
  return compare_exact(actual, expected);
}

std::string compare_outputs(const std::vector<Tensor>& actual, const std::vector<Tensor>& expected,
                            const Tolerance& tol) {
  if (actual.size() != expected.size())
    return fmt::format("{} outputs, expected {}", actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    if (std::string diff = compare_tensors(actual[i], expected[i], tol); !diff.empty())
      return fmt::format("output {}: {}", i, diff);
  return "";
}

std::vector<Tensor> scaled_inputs(const std::vector<Tensor>& inputs, double change) {
  std::vector<Tensor> out;
  out.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    if (t.dtype() != DType::kFloat32 && t.dtype() != DType::kFloat64) {
      out.push_back(t);
      continue;
    }
    Tensor scaled = t.clone();
    if (t.dtype() == DType::kFloat32)
      for (float& x : scaled.span<float>()) x = static_cast<float>(x * (1 + change));
    else
      for (double& x : scaled.span<double>()) x *= 1 + change;
    out.push_back(std::move(scaled));
  }
  return out;
}

double scaled_difference(const Tensor& actual, const Tensor& expected) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (actual.dtype() != expected.dtype() || actual.shape() != expected.shape() ||
      !dtype_is_float(expected.dtype()))
    return kInf;
  double scale = 0, diff = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double a = float_element(actual, i), b = float_element(expected, i);
    if (!std::isfinite(a) || !std::isfinite(b)) {
      if (!(std::isnan(a) && std::isnan(b)) && a != b) return kInf;
      continue;
    }
    scale = std::max(scale, std::fabs(b));
    diff = std::max(diff, std::fabs(a - b));
  }
  if (diff == 0) return 0;
  return scale > 0 ? diff / scale : kInf;
}

SensitivityCheck compare_within_sensitivity(const std::vector<Tensor>& actual,
                                            const std::vector<Tensor>& expected,
                                            const std::vector<Tensor>& moved,
                                            const Tolerance& tol) {
  SensitivityCheck check;
  if (actual.size() != expected.size() || moved.size() != expected.size()) {
    check.mismatch = compare_outputs(actual, expected, tol);
    if (check.mismatch.empty()) check.mismatch = "the moved outputs are not the expected ones";
    return check;
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    const std::string diff = compare_tensors(actual[i], expected[i], tol);
    if (diff.empty()) continue;
    const double sensitivity = scaled_difference(moved[i], expected[i]);
    const double error = scaled_difference(actual[i], expected[i]);
    if (std::isfinite(sensitivity) && error <= kSensitivityAllowance * sensitivity) {
      check.note += fmt::format(
          "{}output {} differs by {:.2g} of its scale, the expected one moves {:.2g} under a {:g} "
          "input change",
          check.note.empty() ? "" : "; ", i, error, sensitivity, kSensitivityInputChange);
      continue;
    }
    check.mismatch = fmt::format("output {}: {}", i, diff);
    if (std::isfinite(sensitivity) && sensitivity > 0)
      check.mismatch += fmt::format(
          " ({:.2g} of its scale, over {:g}x the {:.2g} the expected one moves under a {:g} input "
          "change)",
          error, kSensitivityAllowance, sensitivity, kSensitivityInputChange);
    check.note.clear();
    return check;
  }
  return check;
}

SensitivityCheck compare_allowing_sensitivity(const std::vector<Tensor>& actual,
                                              const std::vector<Tensor>& expected,
                                              const std::vector<Tensor>& inputs,
                                              const ExpectedRun& run_expected,
                                              const Tolerance& tol) {
  if (compare_outputs(actual, expected, tol).empty()) return {};
  return compare_within_sensitivity(
      actual, expected, run_expected(scaled_inputs(inputs, kSensitivityInputChange)), tol);
}

}  // namespace collage
