#include "backends/blas/conv_kernel.h"

#include <cblas.h>

#include <algorithm>

#include "backends/blas/epilogue.h"
#include "backends/blas/fused_group.h"
#include "ops/nn_util.h"

namespace collage::blas {
namespace {

using ops::nn::Range;
using ops::nn::valid_range;
using ops::nn::Window;

// Below this many column-matrix elements im2col runs on the calling thread only.
constexpr int64_t kParallelIm2col = 1 << 16;

struct ConvPlan {
  Operand x, w;
  int64_t batch = 0, channels = 0, filters = 0, group = 1;
  Window win;  // 3-D
  int64_t in_plane = 0, out_plane = 0, taps = 0;
  bool pointwise = false;  // 1x1, stride 1, no padding: the input is the column matrix
};

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
    if (!plan_.pointwise)
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
        if (!p.pointwise) im2col(p, xg, col_.data(), threads_);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mg, p.out_plane, depth, 1.0f,
                    w + g * mg * depth, depth, p.pointwise ? xg : col_.data(), p.out_plane, 0.0f,
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
  ConvPlan p;
  p.x = Operand::of(g, node.input(0), "Conv X");
  p.w = Operand::of(g, node.input(1), "Conv W");
  const Shape& x = g.value(node.input(0)).shape;
  const Shape& w = g.value(node.input(1)).shape;
  const Shape& y = g.value(node.outputs.at(0)).shape;
  if (x.size() < 3 || x.size() > 5 || w.size() != x.size())
    fail(ErrorKind::kUnsupported, "blas: Conv '{}' of rank {} (1-D to 3-D only)", node.name,
         x.size());
  p.batch = x[0];
  p.channels = x[1];
  p.filters = w[0];
  p.group = node.attr_int("group", 1);
  if (p.group <= 0 || p.channels % p.group || p.filters % p.group || w[1] * p.group != p.channels)
    fail(ErrorKind::kUnsupported, "blas: Conv '{}' has inconsistent groups", node.name);
  if (p.group > 1 && w[1] == 1)
    fail(ErrorKind::kUnsupported,
         "blas: depthwise Conv '{}' (one channel per group) is slow as im2col + sgemm", node.name);
  std::vector<int64_t> kernel(w.begin() + 2, w.end());
  Window win = ops::nn::forward_window(node, Shape(x.begin() + 2, x.end()), kernel, false);
  p.pointwise = true;
  for (size_t i = 0; i < win.rank(); ++i)
    p.pointwise = p.pointwise && win.kernel[i] == 1 && win.stride[i] == 1 &&
                  win.pad_begin[i] == 0 && win.pad_end[i] == 0;
  p.win = win.as_3d();
  p.in_plane = p.win.in[0] * p.win.in[1] * p.win.in[2];
  p.out_plane = p.win.out[0] * p.win.out[1] * p.win.out[2];
  p.taps = p.win.kernel[0] * p.win.kernel[1] * p.win.kernel[2];
  Shape expected = {p.batch, p.filters};
  expected.insert(expected.end(), win.out.begin(), win.out.end());
  if (expected != y)
    fail(ErrorKind::kInternal, "blas: Conv '{}' geometry gives {}, shape inference {}", node.name,
         shape_to_string(expected), shape_to_string(y));
  if (shape_numel(y) == 0 || shape_numel(x) == 0)
    fail(ErrorKind::kUnsupported, "blas: empty Conv '{}'", node.name);

  std::vector<HeadAddend> addends;
  if (node.input(2) != kNoValue) {
    const Value& bias = g.value(node.input(2));
    if (!bias.is_constant())
      fail(ErrorKind::kUnsupported, "blas: Conv '{}' has a computed bias", node.name);
    // [M] as [M, 1, ...]: one value per output channel, broadcast over the image.
    Shape per_channel(x.size() - 1, 1);
    per_channel[0] = p.filters;
    addends.push_back({bias.constant.reshaped(per_channel), -1});
  }
  Epilogue epilogue = Epilogue::build(g, head, {p.batch, p.filters, p.out_plane}, addends, threads);
  return std::make_unique<ConvKernel>(std::move(p), std::move(epilogue), threads);
}

}  // namespace collage::blas
