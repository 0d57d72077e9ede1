// Depthwise 3-D convolutions, channels-last (depthwise_conv3d.h says why and what is taken).
#include "backends/onednn/depthwise_conv3d.h"

#include <omp.h>

#include <algorithm>

#include "backends/onednn/kernels.h"
#include "collage/error.h"

namespace collage::onednn {

bool depthwise_conv3d_takes(const Graph& g, const Node& n) {
  if (!depthwise_conv_node(g, n, 5)) return false;
  const Value& x = g.value(n.input(0));
  const Value& w = g.value(n.input(1));
  const Value& y = g.value(n.outputs[0]);
  // Only where oneDNN's own is no jit kernel (its gemm-based convolution, or reference loops).
  const std::string impl = forward_conv_implementation(n, x.shape, w.shape, y.shape);
  return impl.empty() || is_gemm_impl(impl) || is_reference_impl(impl);
}

DepthwiseConv3d::DepthwiseConv3d(const Shape& x, const Shape& y, const Tensor& weights,
                                 std::vector<float> bias, std::vector<int64_t> strides,
                                 std::vector<int64_t> dilations, std::vector<int64_t> pads_begin)
    : n_(x[0]),
      c_(x[1]),
      strides_(std::move(strides)),
      dilations_(std::move(dilations)),
      pads_(std::move(pads_begin)),
      bias_(std::move(bias)) {
  const Shape& ws = weights.shape();
  for (int i = 0; i < 3; ++i) {
    in_[i] = x[2 + i];
    out_[i] = y[2 + i];
    k_[i] = ws[2 + i];
  }
  if (bias_.empty()) bias_.assign(c_, 0.0f);
  // [C, 1, KD, KH, KW] -> [KD * KH * KW, C]: a tap's weights for every channel side by side.
  const int64_t taps = k_[0] * k_[1] * k_[2];
  const float* w = weights.data<float>();
  taps_.resize(taps * c_);
  for (int64_t ch = 0; ch < c_; ++ch)
    for (int64_t t = 0; t < taps; ++t) taps_[t * c_ + ch] = w[ch * taps + t];
}

void DepthwiseConv3d::run(const float* x, float* y) const {
  const int64_t c = c_, rows = n_ * out_[0] * out_[1];
  const int64_t taps = k_[0] * k_[1] * k_[2];
  // A lane is one thread.
  const int team = omp_in_parallel() ? 1 : omp_get_max_threads();
#pragma omp parallel num_threads(team)
  {
    // One output pixel's taps inside the input: where each reads x and its weights (in floats).
    std::vector<int64_t> reads(taps), weights(taps);
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t n = row / (out_[0] * out_[1]);
      const int64_t od = row / out_[1] % out_[0], oh = row % out_[1];
      for (int64_t ow = 0; ow < out_[2]; ++ow) {
        int64_t m = 0;
        for (int64_t kd = 0; kd < k_[0]; ++kd) {
          const int64_t id = od * strides_[0] - pads_[0] + kd * dilations_[0];
          if (id < 0 || id >= in_[0]) continue;
          for (int64_t kh = 0; kh < k_[1]; ++kh) {
            const int64_t ih = oh * strides_[1] - pads_[1] + kh * dilations_[1];
            if (ih < 0 || ih >= in_[1]) continue;
            for (int64_t kw = 0; kw < k_[2]; ++kw) {
              const int64_t iw = ow * strides_[2] - pads_[2] + kw * dilations_[2];
              if (iw < 0 || iw >= in_[2]) continue;
              reads[m] = (((n * in_[0] + id) * in_[1] + ih) * in_[2] + iw) * c;
              weights[m++] = ((kd * k_[1] + kh) * k_[2] + kw) * c;
            }
          }
        }
        float* __restrict acc = y + (row * out_[2] + ow) * c;
        std::copy_n(bias_.data(), c, acc);
        for (int64_t t = 0; t < m; ++t) {
          const float* __restrict in = x + reads[t];
          const float* __restrict w = taps_.data() + weights[t];
          for (int64_t ch = 0; ch < c; ++ch) acc[ch] += in[ch] * w[ch];
        }
      }
    }
  }
}

}  // namespace collage::onednn
