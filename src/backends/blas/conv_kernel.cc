#include "backends/blas/conv_kernel.h"

#include <cblas.h>

#include <algorithm>

#include "backends/blas/conv_geometry.h"

namespace collage::blas {
namespace {

using ops::nn::Range;
using ops::nn::valid_range;
using ops::nn::Window;

// Below this many column-matrix elements im2col runs on the calling thread only.
constexpr int64_t kParallelIm2col = 1 << 16;

// With a unit window the input itself is the column matrix.
using ConvPlan = ConvGeometry;

// Column matrix of one image's group: row (c, kz, ky, kx) holds, for every output
// position, the input element that tap reads (0 in the padding).
void im2col(const ConvPlan& p, const float* x, float* col, int threads) {
  const Window& w = p.win;
  const int64_t rows = p.channels / p.group * p.taps;
  const bool parallel = threads > 1 && rows * p.out_plane >= kParallelIm2col;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t c = row / p.taps, t = row % p.taps;
    const int64_t kz = t / (w.kernel[1] * w.kernel[2]), ky = t / w.kernel[2] % w.kernel[1],
                  kx = t % w.kernel[2];
    const float* xp = x + c * p.in_plane;
    float* dst = col + row * p.out_plane;
    const int64_t z_off = kz * w.dilation[0] - w.pad_begin[0];
    const int64_t y_off = ky * w.dilation[1] - w.pad_begin[1];
    const int64_t x_off = kx * w.dilation[2] - w.pad_begin[2];
    const Range zr = valid_range(z_off, w.stride[0], w.in[0], w.out[0]);
    const Range yr = valid_range(y_off, w.stride[1], w.in[1], w.out[1]);
    const Range xr = valid_range(x_off, w.stride[2], w.in[2], w.out[2]);
    const int64_t sx = w.stride[2];
    for (int64_t oz = 0; oz < w.out[0]; ++oz) {
      for (int64_t oy = 0; oy < w.out[1]; ++oy) {
        float* drow = dst + (oz * w.out[1] + oy) * w.out[2];
        if (oz < zr.lo || oz >= zr.hi || oy < yr.lo || oy >= yr.hi) {
          std::fill(drow, drow + w.out[2], 0.0f);
          continue;
        }
        const float* srow =
            xp + ((oz * w.stride[0] + z_off) * w.in[1] + oy * w.stride[1] + y_off) * w.in[2] +
            x_off;
        std::fill(drow, drow + xr.lo, 0.0f);
        if (sx == 1) {
          std::copy(srow + xr.lo, srow + xr.hi, drow + xr.lo);
        } else {
          for (int64_t ox = xr.lo; ox < xr.hi; ++ox) drow[ox] = srow[ox * sx];
        }
        std::fill(drow + xr.hi, drow + w.out[2], 0.0f);
      }
    }
  }
}

class ConvKernel : public Kernel {
 public:
  ConvKernel(ConvPlan plan, Epilogue epilogue, int threads)
      : plan_(std::move(plan)), epilogue_(std::move(epilogue)), threads_(threads) {
    // Allocated and touched once here: run() must not fault fresh pages in.
    if (!plan_.unit_window)
      col_.assign(plan_.channels / plan_.group * plan_.taps * plan_.out_plane, 0.0f);
  }

  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    const ConvPlan& p = plan_;
    const float* x = p.x.data(inputs);
    const float* w = p.w.data(inputs);
    float* y = epilogue_.head_buffer(outputs);
    const int64_t cg = p.channels / p.group, mg = p.filters / p.group, depth = cg * p.taps;
    for (int64_t n = 0; n < p.batch; ++n) {
      for (int64_t g = 0; g < p.group; ++g) {
        const float* xg = x + (n * p.channels + g * cg) * p.in_plane;
        if (!p.unit_window) im2col(p, xg, col_.data(), threads_);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mg, p.out_plane, depth, 1.0f,
                    w + g * mg * depth, depth, p.unit_window ? xg : col_.data(), p.out_plane, 0.0f,
                    y + (n * p.filters + g * mg) * p.out_plane, p.out_plane);
      }
      epilogue_.apply(n, inputs, outputs);
    }
  }

 private:
  ConvPlan plan_;
  Epilogue epilogue_;
  int threads_;
  std::vector<float> col_;
};

}  // namespace

std::unique_ptr<Kernel> compile_conv(const Graph& g, NodeId head, int threads) {
  const Node& node = g.node(head);
  ConvPlan p = parse_conv_operands(g, node);
  const Shape& x = g.value(node.input(0)).shape;
  const Shape& w = g.value(node.input(1)).shape;
  p.filters = w[0];
  if (p.filters % p.group || w[1] * p.group != p.channels)
    fail(ErrorKind::kUnsupported, "blas: Conv '{}' has inconsistent groups", node.name);
  if (p.group > 1 && w[1] == 1)
    fail(ErrorKind::kUnsupported,
         "blas: depthwise Conv '{}' (one channel per group) is slow as im2col + sgemm", node.name);
  std::vector<int64_t> kernel(w.begin() + 2, w.end());
  set_conv_window(p, ops::nn::forward_window(node, Shape(x.begin() + 2, x.end()), kernel, false), g,
                  node);
  std::vector<HeadAddend> addends = conv_bias_addends(g, node, p);
  Epilogue epilogue = Epilogue::build(g, head, {p.batch, p.filters, p.out_plane}, addends, threads);
  return std::make_unique<ConvKernel>(std::move(p), std::move(epilogue), threads);
}

}  // namespace collage::blas
