#include "backends/blas/conv_transpose_kernel.h"

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

constexpr int64_t kParallelCol2im = 1 << 16;

struct ConvTransposePlan {
  Operand x, w;
  int64_t batch = 0, channels = 0, filters = 0, group = 1;
  Window win;  // 3-D; `in` and `out` are the op's input and output sizes
  int64_t in_plane = 0, out_plane = 0, taps = 0;
  bool direct = false;  // 1x1, stride 1, no padding: the GEMM writes the output itself
};

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
    if (!plan_.direct) col_.assign(plan_.filters / plan_.group * plan_.taps * plan_.in_plane, 0.0f);
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
                    0.0f, p.direct ? yg : col_.data(), p.in_plane);
        if (!p.direct) col2im(p, col_.data(), yg, mg, threads_);
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
  ConvTransposePlan p;
  p.x = Operand::of(g, node.input(0), "ConvTranspose X");
  p.w = Operand::of(g, node.input(1), "ConvTranspose W");
  const Shape& x = g.value(node.input(0)).shape;
  const Shape& w = g.value(node.input(1)).shape;
  const Shape& y = g.value(node.outputs.at(0)).shape;
  if (x.size() < 3 || x.size() > 5 || w.size() != x.size())
    fail(ErrorKind::kUnsupported, "blas: ConvTranspose '{}' of rank {} (1-D to 3-D only)",
         node.name, x.size());
  p.batch = x[0];
  p.channels = x[1];
  p.group = node.attr_int("group", 1);
  if (p.group <= 0 || w[0] != p.channels || p.channels % p.group)
    fail(ErrorKind::kUnsupported, "blas: ConvTranspose '{}' has inconsistent groups", node.name);
  p.filters = w[1] * p.group;
  const std::vector<int64_t> kernel(w.begin() + 2, w.end());
  const Window win = transpose_window(node, Shape(x.begin() + 2, x.end()), kernel);
  p.direct = true;
  for (size_t i = 0; i < win.rank(); ++i)
    p.direct = p.direct && win.kernel[i] == 1 && win.stride[i] == 1 && win.pad_begin[i] == 0 &&
               win.pad_end[i] == 0 && win.out[i] == win.in[i];
  p.win = win.as_3d();
  p.in_plane = p.win.in[0] * p.win.in[1] * p.win.in[2];
  p.out_plane = p.win.out[0] * p.win.out[1] * p.win.out[2];
  p.taps = p.win.kernel[0] * p.win.kernel[1] * p.win.kernel[2];
  Shape expected = {p.batch, p.filters};
  expected.insert(expected.end(), win.out.begin(), win.out.end());
  if (expected != y)
    fail(ErrorKind::kInternal, "blas: ConvTranspose '{}' geometry gives {}, shape inference {}",
         node.name, shape_to_string(expected), shape_to_string(y));
  if (shape_numel(y) == 0 || shape_numel(x) == 0)
    fail(ErrorKind::kUnsupported, "blas: empty ConvTranspose '{}'", node.name);

  std::vector<HeadAddend> addends;
  if (node.input(2) != kNoValue) {
    const Value& bias = g.value(node.input(2));
    if (!bias.is_constant())
      fail(ErrorKind::kUnsupported, "blas: ConvTranspose '{}' has a computed bias", node.name);
    Shape per_channel(x.size() - 1, 1);
    per_channel[0] = p.filters;
    addends.push_back({bias.constant.reshaped(per_channel), -1});
  }
  Epilogue epilogue = Epilogue::build(g, head, {p.batch, p.filters, p.out_plane}, addends, threads);
  return std::make_unique<ConvTransposeKernel>(std::move(p), std::move(epilogue), threads);
}

}  // namespace collage::blas
