#include "backends/blas/conv_transpose_kernel.h"

#include <cblas.h>

#include <algorithm>

#include "backends/blas/conv_geometry.h"

namespace collage::blas {
namespace {

using ops::nn::Range;
using ops::nn::valid_range;
using ops::nn::Window;

constexpr int64_t kParallelCol2im = 1 << 16;

// With a unit window the GEMM writes the output itself.
using ConvTransposePlan = ConvGeometry;

// Pads and output size per the ONNX spec: output_shape wins over pads; with auto_pad SAME
// the odd unit of padding goes to the end for SAME_UPPER, else to the start.
Window transpose_window(const Node& node, const Shape& in, const std::vector<int64_t>& kernel) {
  const size_t nd = in.size();
  auto ints = [&](const char* key, int64_t def) {
    std::vector<int64_t> v = node.attr_ints(key, std::vector<int64_t>(nd, def));
    if (v.size() != nd)
      fail(ErrorKind::kUnsupported, "blas: ConvTranspose '{}': {} has {} values", node.name, key,
           v.size());
    return v;
  };
  Window w;
  w.in = in;
  w.kernel = kernel;
  w.stride = ints("strides", 1);
  w.dilation = ints("dilations", 1);
  const std::vector<int64_t> out_pad = ints("output_padding", 0);
  w.pad_begin.assign(nd, 0);
  w.pad_end.assign(nd, 0);
  w.out.assign(nd, 0);
  const ops::nn::AutoPad auto_pad = ops::nn::parse_auto_pad(node);
  auto split = [&](size_t i, int64_t total) {
    const int64_t half = ops::nn::floor_div(total, 2);
    w.pad_begin[i] = auto_pad == ops::nn::AutoPad::kSameUpper ? half : total - half;
    w.pad_end[i] = total - w.pad_begin[i];
  };
  std::vector<int64_t> natural(nd);
  for (size_t i = 0; i < nd; ++i) natural[i] = w.stride[i] * (w.in[i] - 1) + out_pad[i] + w.span(i);
  if (node.has_attr("output_shape")) {
    std::vector<int64_t> os = node.attr_ints("output_shape");
    if (os.size() == nd + 2) os.erase(os.begin(), os.begin() + 2);
    if (os.size() != nd)
      fail(ErrorKind::kUnsupported, "blas: ConvTranspose '{}': bad output_shape", node.name);
    for (size_t i = 0; i < nd; ++i) split(i, natural[i] - os[i]);
  } else if (auto_pad == ops::nn::AutoPad::kSameUpper || auto_pad == ops::nn::AutoPad::kSameLower) {
    for (size_t i = 0; i < nd; ++i) split(i, natural[i] - w.in[i] * w.stride[i]);
  } else if (auto_pad == ops::nn::AutoPad::kNotSet && node.has_attr("pads")) {
    const std::vector<int64_t> all = node.attr_ints("pads");
    if (all.size() != 2 * nd)
      fail(ErrorKind::kUnsupported, "blas: ConvTranspose '{}': bad pads", node.name);
    for (size_t i = 0; i < nd; ++i) {
      w.pad_begin[i] = all[i];
      w.pad_end[i] = all[i + nd];
    }
  }
  for (size_t i = 0; i < nd; ++i) w.out[i] = natural[i] - w.pad_begin[i] - w.pad_end[i];
  return w;
}

// Adds every tap row of `col` ([mg * taps][in_plane]) into the output planes of y
// ([mg][out_plane]), which start zeroed: output o = i * stride + k * dilation - pad_begin.
void col2im(const ConvTransposePlan& p, const float* col, float* y, int64_t mg, int threads) {
  const Window& w = p.win;
  const bool parallel = threads > 1 && mg * p.out_plane >= kParallelCol2im;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
  for (int64_t m = 0; m < mg; ++m) {
    float* yp = y + m * p.out_plane;
    std::fill(yp, yp + p.out_plane, 0.0f);
    for (int64_t t = 0; t < p.taps; ++t) {
      const int64_t kz = t / (w.kernel[1] * w.kernel[2]), ky = t / w.kernel[2] % w.kernel[1],
                    kx = t % w.kernel[2];
      const float* crow = col + (m * p.taps + t) * p.in_plane;
      const int64_t z_off = kz * w.dilation[0] - w.pad_begin[0];
      const int64_t y_off = ky * w.dilation[1] - w.pad_begin[1];
      const int64_t x_off = kx * w.dilation[2] - w.pad_begin[2];
      const Range zr = valid_range(z_off, w.stride[0], w.out[0], w.in[0]);
      const Range yr = valid_range(y_off, w.stride[1], w.out[1], w.in[1]);
      const Range xr = valid_range(x_off, w.stride[2], w.out[2], w.in[2]);
      const int64_t sx = w.stride[2];
      for (int64_t iz = zr.lo; iz < zr.hi; ++iz) {
        const int64_t oz = iz * w.stride[0] + z_off;
        for (int64_t iy = yr.lo; iy < yr.hi; ++iy) {
          const int64_t oy = iy * w.stride[1] + y_off;
          float* orow = yp + (oz * w.out[1] + oy) * w.out[2] + x_off;
          const float* irow = crow + (iz * w.in[1] + iy) * w.in[2];
          if (sx == 1) {
            for (int64_t ix = xr.lo; ix < xr.hi; ++ix) orow[ix] += irow[ix];
          } else {
            for (int64_t ix = xr.lo; ix < xr.hi; ++ix) orow[ix * sx] += irow[ix];
          }
        }
      }
    }
  }
}

class ConvTransposeKernel : public Kernel {
 public:
  ConvTransposeKernel(ConvTransposePlan plan, Epilogue epilogue, int threads)
      : plan_(std::move(plan)), epilogue_(std::move(epilogue)), threads_(threads) {
    if (!plan_.unit_window)
      col_.assign(plan_.filters / plan_.group * plan_.taps * plan_.in_plane, 0.0f);
  }

  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    const ConvTransposePlan& p = plan_;
    const float* x = p.x.data(inputs);
    const float* w = p.w.data(inputs);
    float* y = epilogue_.head_buffer(outputs);
    const int64_t cg = p.channels / p.group, mg = p.filters / p.group, rows = mg * p.taps;
    for (int64_t n = 0; n < p.batch; ++n) {
      for (int64_t g = 0; g < p.group; ++g) {
        // W's rows for this group are [cg][mg * taps]: transposed, they map input channels
        // to every (output channel, tap) pair.
        float* yg = y + (n * p.filters + g * mg) * p.out_plane;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, p.in_plane, cg, 1.0f,
                    w + g * cg * rows, rows, x + (n * p.channels + g * cg) * p.in_plane, p.in_plane,
                    0.0f, p.unit_window ? yg : col_.data(), p.in_plane);
        if (!p.unit_window) col2im(p, col_.data(), yg, mg, threads_);
      }
      epilogue_.apply(n, inputs, outputs);
    }
  }

 private:
  ConvTransposePlan plan_;
  Epilogue epilogue_;
  int threads_;
  std::vector<float> col_;
};

}  // namespace

std::unique_ptr<Kernel> compile_conv_transpose(const Graph& g, NodeId head, int threads) {
  const Node& node = g.node(head);
  ConvTransposePlan p = parse_conv_operands(g, node);
  const Shape& x = g.value(node.input(0)).shape;
  const Shape& w = g.value(node.input(1)).shape;
  if (w[0] != p.channels)
    fail(ErrorKind::kUnsupported, "blas: ConvTranspose '{}' has inconsistent groups", node.name);
  p.filters = w[1] * p.group;
  const std::vector<int64_t> kernel(w.begin() + 2, w.end());
  set_conv_window(p, transpose_window(node, Shape(x.begin() + 2, x.end()), kernel), g, node);
  std::vector<HeadAddend> addends = conv_bias_addends(g, node, p);
  Epilogue epilogue = Epilogue::build(g, head, {p.batch, p.filters, p.out_plane}, addends, threads);
  return std::make_unique<ConvTransposeKernel>(std::move(p), std::move(epilogue), threads);
}

}  // namespace collage::blas
