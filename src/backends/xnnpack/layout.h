// NCHW <-> NHWC conversion at the kernel boundary (XNNPACK computes channels-last; collage
// hands kernels ONNX's row-major NCHW).
#pragma once

#include <pthreadpool.h>

#include <cstddef>
#include <vector>

#include "collage/tensor.h"

namespace collage::xnnpack {

// dst[b][j][i] = src[b][i][j] for a batch of rows x cols matrices, in cache-sized tiles
// spread over `pool` (nullptr: the caller's thread).
void transpose_batched(const float* src, float* dst, size_t batch, size_t rows, size_t cols,
                       pthreadpool_t pool);

// `nchw` is the NCHW shape of the data on both sides.
void nchw_to_nhwc(const float* src, float* dst, const Shape& nchw, pthreadpool_t pool);
void nhwc_to_nchw(const float* src, float* dst, const Shape& nchw, pthreadpool_t pool);

// [N, C, H, W] -> [N, H, W, C].
Shape nhwc_shape(const Shape& nchw);

// Row-major data of a tensor with NCHW shape, reordered to NHWC (e.g. OIHW conv weights to
// XNNPACK's OHWI).
std::vector<float> to_nhwc(const Tensor& nchw);

}  // namespace collage::xnnpack
