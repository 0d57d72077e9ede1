// Branch-free float approximations of exp, sigmoid, tanh, erf, sin and cos that GCC
// vectorizes (the libm calls it would otherwise make per element dominate a fused GEMM
// epilogue, a fused attention's softmax, or a SIREN's Sin: 15.8 ms a layer of 4.2 M elements
// with std::sin, 2 threads). Shared by the backends that write their own loops (blas's
// epilogue, onednn's attention and elementwise steps); Halide kernels have their own in
// backends/halide. Accuracy: a few ulp for exp/sigmoid/tanh, ~2e-7 absolute for erf, ~1e-7
// absolute for sin and cos.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace collage {

// Cephes-style: exp(x) = 2^n * exp(r), |r| <= ln2/2, exp(r) by a degree-6 polynomial. `T` is
// float, or a GCC vector of floats (float __attribute__((vector_size(64))): 16 lanes, one
// AVX-512 register) computed lane by lane with the same arithmetic, for kernels that keep
// channels in vector values (onednn's depthwise conv step).
template <class T>
inline T fast_exp(T x) {
  if constexpr (std::is_same_v<T, float>) {
    x = std::clamp(x, -87.0f, 88.0f);
  } else {
    x = x < -87.0f ? T{} - 87.0f : x;
    x = x > 88.0f ? T{} + 88.0f : x;
  }
  // Adding 1.5 * 2^23 rounds to an integer in the float unit (vectorizes, unlike rint calls).
  const T n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const T r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  T p = T{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  if constexpr (std::is_same_v<T, float>) {
    return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  } else {
    typedef int32_t Int __attribute__((vector_size(sizeof(T))));
    return p * reinterpret_cast<T>((__builtin_convertvector(n, Int) + 127) << 23);
  }
}

template <class T>
inline T fast_sigmoid(T x) {
  return 1.0f / (1.0f + fast_exp(-x));
}

// Odd polynomial near 0 (where 1 - 2/(e^2x + 1) cancels), the exp form elsewhere.
inline float fast_tanh(float x) {
  const float ax = std::fabs(x);
  const float z = x * x;
  float small = -5.70498872745e-3f;
  small = small * z + 2.06390887954e-2f;
  small = small * z - 5.37397155531e-2f;
  small = small * z + 1.33314422036e-1f;
  small = small * z - 3.33332819422e-1f;
  small = small * z * x + x;
  const float large = std::copysign(1.0f - 2.0f / (fast_exp(2.0f * ax) + 1.0f), x);
  return ax < 0.625f ? small : large;
}

// Taylor series near 0 (relative accuracy), Abramowitz & Stegun 7.1.26 elsewhere.
inline float fast_erf(float x) {
  const float ax = std::fabs(x);
  const float z = x * x;
  float small = -1.0f / 1320;
  small = small * z + 1.0f / 216;
  small = small * z - 1.0f / 42;
  small = small * z + 1.0f / 10;
  small = small * z - 1.0f / 3;
  small = (small * z + 1.0f) * x * 1.12837916709551257f;
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float large = std::copysign(1.0f - p * t * fast_exp(-z), x);
  return ax < 0.5f ? small : large;
}

// sin (or cos, `cosine`) of |x| <= kFastTrigMax: x reduced by the nearest multiple n of pi/2
// (Cody-Waite, pi/2 in three parts whose products with n are exact over that range: Cephes'
// constants), then Cephes' polynomials for sin and cos on [-pi/4, pi/4], picked and signed by
// n's quadrant. Larger or non-finite arguments give garbage: callers compute those with
// std::sin/std::cos (a second pass over the few of them keeps this loop vectorized).
inline constexpr float kFastTrigMax = 8192.0f;
inline float fast_sin_or_cos(float x, bool cosine) {
  const float n = (x * 0.636619772367581343f + 12582912.0f) - 12582912.0f;
  const float r =
      ((x - n * 1.5703125f) - n * 4.837512969970703125e-4f) - n * 7.54978995489188216e-8f;
  const float z = r * r;
  const float sin_r =
      ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f) * z * r + r;
  const float cos_r =
      ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f) * z * z -
      0.5f * z + 1.0f;
  // sin(x) by quadrant n mod 4: sin r, cos r, -sin r, -cos r; cos(x) is sin(x + pi/2).
  const int32_t quadrant = static_cast<int32_t>(n) + (cosine ? 1 : 0);
  const float y = (quadrant & 1) ? cos_r : sin_r;
  return (quadrant & 2) ? -y : y;
}

}  // namespace collage
