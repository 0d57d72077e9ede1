#include "backends/xnnpack/layout.h"

#include <cstring>

#ifdef __AVX__
#include <immintrin.h>
#endif

namespace collage::xnnpack {
namespace {

// 32x32 floats: source and destination tiles (2 x 4 KiB) stay in L1.
constexpr size_t kTile = 32;
// Below this many elements a transpose is cheaper than waking the pool.
constexpr size_t kParallelThreshold = 64 * 1024;

struct TransposeTask {
  const float* src;
  float* dst;
  size_t rows, cols;
};

#ifdef __AVX__
// dst (8 rows of stride dst_stride) = transpose of src (8 rows of stride src_stride).
inline void transpose_8x8(const float* src, size_t src_stride, float* dst, size_t dst_stride) {
  __m256 r[8], t[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(src + k * src_stride);
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    r[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_ps(dst + k * dst_stride, _mm256_permute2f128_ps(r[k], r[k + 4], 0x20));
    _mm256_storeu_ps(dst + (k + 4) * dst_stride, _mm256_permute2f128_ps(r[k], r[k + 4], 0x31));
  }
}
#endif

void transpose_tile(void* context, size_t b, size_t i0, size_t j0, size_t ti, size_t tj) {
  const auto& t = *static_cast<const TransposeTask*>(context);
  const float* src = t.src + b * t.rows * t.cols;
  float* dst = t.dst + b * t.rows * t.cols;
  size_t i_end = i0 + ti, j_end = j0 + tj;
  size_t i_vec = i0, j_vec = j0;
#ifdef __AVX__
  i_vec = i0 + ti / 8 * 8;
  j_vec = j0 + tj / 8 * 8;
  for (size_t i = i0; i < i_vec; i += 8)
    for (size_t j = j0; j < j_vec; j += 8)
      transpose_8x8(src + i * t.cols + j, t.cols, dst + j * t.rows + i, t.rows);
#endif
  // Ragged edges (and everything without AVX) element by element.
  for (size_t j = j0; j < j_end; ++j)
    for (size_t i = (j < j_vec ? i_vec : i0); i < i_end; ++i)
      dst[j * t.rows + i] = src[i * t.cols + j];
}

}  // namespace

void transpose_batched(const float* src, float* dst, size_t batch, size_t rows, size_t cols,
                       pthreadpool_t pool) {
  // With a unit dimension both layouts hold the same sequence.
  if (rows == 1 || cols == 1) {
    std::memcpy(dst, src, batch * rows * cols * sizeof(float));
    return;
  }
  TransposeTask task{src, dst, rows, cols};
  if (batch * rows * cols < kParallelThreshold) pool = nullptr;
  pthreadpool_parallelize_3d_tile_2d(pool, transpose_tile, &task, batch, rows, cols, kTile, kTile,
                                     0);
}

void nchw_to_nhwc(const float* src, float* dst, const Shape& nchw, pthreadpool_t pool) {
  transpose_batched(src, dst, nchw[0], nchw[1], nchw[2] * nchw[3], pool);
}

void nhwc_to_nchw(const float* src, float* dst, const Shape& nchw, pthreadpool_t pool) {
  transpose_batched(src, dst, nchw[0], nchw[2] * nchw[3], nchw[1], pool);
}

Shape nhwc_shape(const Shape& nchw) {
  return {nchw[0], nchw[2], nchw[3], nchw[1]};
}

std::vector<float> to_nhwc(const Tensor& nchw) {
  std::vector<float> out(static_cast<size_t>(nchw.numel()));
  nchw_to_nhwc(nchw.data<float>(), out.data(), nchw.shape(), nullptr);
  return out;
}

}  // namespace collage::xnnpack
