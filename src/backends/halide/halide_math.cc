#include "backends/halide/halide_math.h"
#include "backends/halide/jit_cache.h"

#include <limits>

#include "backends/halide/cache_stats.h"

namespace collage::halide_backend {

using Halide::Expr;

namespace {

// 2^k for an integer-valued k in [-126, 127], built from the exponent bits.
Expr pow2i(const Expr& k) {
  Expr bits = (Halide::cast<int32_t>(k) + 127) << 23;
  return Halide::reinterpret<float>(bits);
}

}  // namespace

Expr exp_f32(const Expr& x) {
  // Cody-Waite reduction x = k ln2 + r, |r| <= ln2/2, then Cephes' expf polynomial.
  Expr xc = Halide::clamp(x, -104.0f, 88.75f);
  Expr k = Halide::floor(xc * 1.44269504088896341f + 0.5f);
  Expr r = xc - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  Expr p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  Expr y = p * r * r + r + 1.0f;
  // k can reach -150 (subnormal results) or 128: scale in two halves so each stays a
  // normal power of two.
  Expr k1 = Halide::floor(k * 0.5f);
  Expr scaled = y * pow2i(k1) * pow2i(k - k1);
  const float inf = std::numeric_limits<float>::infinity();
  return Halide::select(x > 88.72283905f, inf, x < -103.972084f, 0.0f, x != x, x, scaled);
}

Expr erf_f32(const Expr& x) {
  // x * P(x^2) / Q(x^2) on [-4, 4] (the single-precision form used by XLA and Eigen);
  // |erf(x)| rounds to 1 in float beyond 4.
  Expr xc = Halide::clamp(x, -4.0f, 4.0f);
  Expr x2 = xc * xc;
  Expr p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  p = p * xc;
  Expr q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return Halide::select(x != x, x, p / q);
}

Expr tanh_f32(const Expr& x) {
  Expr ax = Halide::abs(x);
  // Odd Taylor terms to x^9: relative error < 2e-6 for |x| < 0.4.
  Expr x2 = x * x;
  Expr poly =
      x * (1.0f + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315 + x2 * (62.0f / 2835)))));
  Expr e = exp_f32(-2.0f * ax);
  Expr t = (1.0f - e) / (1.0f + e);
  Expr big = Halide::select(x < 0, -t, t);
  return Halide::select(ax < 0.4f, poly, big);
}

Expr sigmoid_f32(const Expr& x) {
  return 1.0f / (1.0f + exp_f32(-x));
}

std::vector<float> evaluate_math(MathFn fn, const std::vector<float>& xs) {
  const int n = static_cast<int>(xs.size());
  Halide::Buffer<float> in(n), out(n);
  for (int i = 0; i < n; ++i) in(i) = xs[i];
  Halide::Var x("x");
  Halide::Func f("math_probe");
  Expr v = in(x);
  f(x) = fn == MathFn::kExp    ? exp_f32(v)
         : fn == MathFn::kErf  ? erf_f32(v)
         : fn == MathFn::kTanh ? tanh_f32(v)
                               : sigmoid_f32(v);
  if (n >= 16) f.vectorize(x, 16, Halide::TailStrategy::GuardWithIf);
  f.realize(out, host_target());
  return std::vector<float>(out.data(), out.data() + n);
}

}  // namespace collage::halide_backend
