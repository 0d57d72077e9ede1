// What collage's own conv steps over channel blocks (the depthwise and grouped steps) share: how
// their output rows are shared out over the threads, and how such a step enters a program.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/value_memories.h"
#include "collage/tensor.h"

namespace collage::onednn {

// What such a step walks: input [n, c, h, w], output [n, c, oh, ow], one stride on both axes,
// the top and left pads.
struct ConvRowGeometry {
  ConvRowGeometry(const Shape& x, const Shape& y, int64_t stride, int64_t pad_t, int64_t pad_l)
      : n(x[0]),
        c(x[1]),
        h(x[2]),
        w(x[3]),
        oh(y[2]),
        ow(y[3]),
        stride(stride),
        pad_t(pad_t),
        pad_l(pad_l) {}
  // The output columns [first, last) whose k taps at stride s read only columns inside the
  // image.
  std::pair<int64_t, int64_t> columns_inside(int64_t k, int64_t s) const {
    const int64_t first = std::min(ow, (pad_l + s - 1) / s);
    return {first, w - k + pad_l < 0 ? first : std::clamp((w - k + pad_l) / s + 1, first, ow)};
  }
  int64_t n, c, h, w, oh, ow, stride, pad_t, pad_l;
};

// 16 floats as one value (one zmm register with AVX-512; GCC splits it elsewhere), loaded and
// stored at any float's alignment.
typedef float Vec16 __attribute__((vector_size(16 * sizeof(float))));
typedef float UnalignedVec16
    __attribute__((vector_size(16 * sizeof(float)), aligned(sizeof(float)), may_alias));
inline Vec16 load16(const float* p) {
  return *reinterpret_cast<const UnalignedVec16*>(p);
}
inline void store16(float* p, Vec16 v) {
  *reinterpret_cast<UnalignedVec16*>(p) = v;
}

// Calls rows(plane, oy0, oy1) over `planes` planes (image and channel block) of `height` output
// rows each, every thread an equal contiguous share of all the rows in (plane, row) order: a
// plane's rows stay together, and no thread waits for another at the end (split by plane,
// MobileNetV2's 9 blocks of 144 channels left one thread a block more). On this thread alone
// inside a parallel region (a lane of a concurrent stage).
template <class Rows>
void for_each_row_share(int64_t planes, int64_t height, const Rows& rows) {
  const int64_t threads = omp_in_parallel() ? 1 : std::max(1, omp_get_max_threads());
  const int64_t all = planes * height;
  const int64_t shares = std::min(threads, all);
  for_each_item(shares, [&](int64_t share) {
    const int64_t end = all * (share + 1) / shares;
    for (int64_t row = all * share / shares; row < end;) {
      const int64_t plane = row / height, oy = row % height;
      const int64_t stop = std::min(height, oy + end - row);
      rows(plane, oy, stop);
      row += stop - oy;
    }
  });
}

// Adds `step` (a const object with run(const float* x, float* y)) to the program as the custom
// step `name` reading `src` and writing `dst`, which becomes value `out`.
template <class Step>
void add_conv_row_step(const char* name, std::shared_ptr<const Step> step, const dnnl::memory& src,
                       const dnnl::memory& dst, ValueId out, ValueMemories& values) {
  values.program().add_unary_custom(
      name,
      [step](const float* x, float* y) {
        step->run(x, y);
        return dnnl_success;
      },
      src, dst, dnnl::primitive::kind::convolution);
  values.produced(out, dst);
}

}  // namespace collage::onednn
