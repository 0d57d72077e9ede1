// Float32 math for generated kernels. Halide's exp/tanh/erf-free intrinsics call libm one
// lane at a time (exp_f32 -> expf), which serialises every vector; these are polynomial
// forms that vectorise to straight-line AVX-512 code.
#pragma once

#include <Halide.h>

namespace collage::halide_backend {

// exp(x), ~1 ulp on [-87, 88]; 0 below -104, +inf above 88.72, NaN stays NaN.
Halide::Expr exp_f32(const Halide::Expr& x);
// erf(x), absolute error < 1e-6 (a rational minimax form on [-4, 4], +-1 beyond).
Halide::Expr erf_f32(const Halide::Expr& x);
// tanh(x): a Taylor polynomial near 0 (where 1 - e cancels), the exp form elsewhere.
Halide::Expr tanh_f32(const Halide::Expr& x);
// 1 / (1 + exp(-x)), saturating to 0 and 1.
Halide::Expr sigmoid_f32(const Halide::Expr& x);

}  // namespace collage::halide_backend
