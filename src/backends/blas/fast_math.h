// The float approximations blas's epilogue uses: the shared ones in util/fast_math.h.
#pragma once

#include "util/fast_math.h"

namespace collage::blas {
using collage::fast_erf;
using collage::fast_exp;
using collage::fast_sigmoid;
using collage::fast_tanh;
}  // namespace collage::blas
