// One GEMM as a grid of tiles, each a libxsmm JIT kernel call followed by the epilogue on
// the tile while it is in cache; the tiles are spread over the calling thread's OpenMP
// team (the kernel's thread count). Column-major, as libxsmm (and BLAS) see matrices:
//   C (m x n, ldc) = A (m x k, lda) * B (k x n, ldb),  batch times with fixed strides.
// A row-major product is the same call with the operands swapped (see libxsmm_backend.cc).
#pragma once

#include <cstdint>

#include <libxsmm.h>

#include "backends/libxsmm/epilogue.h"

namespace collage::xsmm {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1;
  int64_t a_stride = 0, b_stride = 0, c_stride = 0;  // between batches (0: shared)
};

// The epilogue's channel runs along C's columns (n: a conv's output channels) or rows (m: a
// MatMul's output columns).
enum class ChannelAxis { kColumns, kRows };

class TiledGemm {
 public:
  // Generates the kernels (at most four tile shapes: full, and the m / n / both remainders).
  // Throws Error(kUnsupported) when libxsmm's JIT refuses one (no JIT for this CPU).
  TiledGemm(const GemmShape& shape, Epilogue epilogue, ChannelAxis axis);

  void run(const float* a, const float* b, float* c) const;

 private:
  libxsmm_smmfunction kernel(int64_t m, int64_t n) const;

  GemmShape s_;
  Epilogue epilogue_;
  ChannelAxis axis_;
  int64_t tile_m_, tile_n_;
  libxsmm_smmfunction kernels_[2][2] = {};  // [m remainder][n remainder]
};

// libxsmm's JIT target for this CPU ("cpx", "skx", "hsw", ...) and whether it has one.
const char* jit_target();
bool has_jit();

}  // namespace collage::xsmm
