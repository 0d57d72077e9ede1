#include "backends/cudnn/cudnn_kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "backends/cudnn/cudnn_common.h"
#include "ops/nn_util.h"

namespace collage::cudnn_backend {
namespace {

using cuda::CudaDevice;

// More workspace than this is not worth it for one kernel (cuDNN's FFT algorithms ask for
// GBs on large convolutions); such an algorithm is refused.
constexpr size_t kMaxWorkspace = size_t{1} << 30;

[[noreturn]] void unsupported(const std::string& why) {
  fail(ErrorKind::kUnsupported, "cudnn: {}", why);
}

const Value& constant_input(const Graph& g, const Node& n, size_t i, const char* what) {
  if (n.input(i) == kNoValue || !g.value(n.inputs[i]).is_constant())
    unsupported(fmt::format("{}: {} is not a constant", n.name, what));
  if (g.value(n.inputs[i]).dtype != DType::kFloat32)
    unsupported(fmt::format("{}: {} is not float32", n.name, what));
  return g.value(n.inputs[i]);
}

// 1-D problems get a unit axis in front of their spatial one: cuDNN wants 4-D or 5-D tensors.
std::vector<int> spatial_4d(std::vector<int> dims) {
  if (dims.size() == 3) dims.insert(dims.begin() + 2, 1);
  return dims;
}
std::vector<int> window_2d(std::vector<int> v, int unit) {
  if (v.size() == 1) v.insert(v.begin(), unit);
  return v;
}

std::vector<int> shape_dims(const Shape& s, const char* what) {
  return spatial_4d(to_int(s, what));
}

// Runs `run` once on zeros of the kernel's input and output sizes, waiting for it: cuDNN
// reports what it cannot do for a configuration only when called.
void trial_run(const std::vector<size_t>& input_bytes, const std::vector<size_t>& output_bytes,
               const std::function<void(std::vector<void*>&, std::vector<void*>&)>& run) {
  std::vector<DeviceMemory> memory;
  std::vector<void*> ins, outs;
  for (size_t b : input_bytes) {
    memory.emplace_back(std::max<size_t>(b, 4));
    cuda::check(
        cudaMemsetAsync(memory.back().get(), 0, memory.back().bytes(), CudaDevice::get().stream()),
        "cudaMemsetAsync");
    ins.push_back(memory.back().get());
  }
  for (size_t b : output_bytes) {
    memory.emplace_back(std::max<size_t>(b, 4));
    outs.push_back(memory.back().get());
  }
  run(ins, outs);
  CudaDevice::get().synchronize();
}

size_t bytes_of(const Graph& g, ValueId v) {
  return static_cast<size_t>(shape_numel(g.value(v).shape)) * sizeof(float);
}

// ---- Conv + BatchNormalization + residual Add + Relu -------------------------------------

struct ConvAlgo {
  const char* name;
  cudnnConvolutionFwdAlgo_t algo;
};
const std::vector<ConvAlgo>& conv_algos() {
  static const std::vector<ConvAlgo> algos = {
      {"implicit_gemm", CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM},
      {"implicit_precomp_gemm", CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM},
      {"gemm", CUDNN_CONVOLUTION_FWD_ALGO_GEMM},
      {"direct", CUDNN_CONVOLUTION_FWD_ALGO_DIRECT},
      {"fft", CUDNN_CONVOLUTION_FWD_ALGO_FFT},
      {"fft_tiling", CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING},
      {"winograd", CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD},
      {"winograd_nonfused", CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED}};
  return algos;
}

struct BwdAlgo {
  const char* name;
  cudnnConvolutionBwdDataAlgo_t algo;
};
const std::vector<BwdAlgo>& bwd_algos() {
  static const std::vector<BwdAlgo> algos = {
      {"algo0", CUDNN_CONVOLUTION_BWD_DATA_ALGO_0},
      {"algo1", CUDNN_CONVOLUTION_BWD_DATA_ALGO_1},
      {"fft", CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT},
      {"fft_tiling", CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING},
      {"winograd", CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD},
      {"winograd_nonfused", CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED}};
  return algos;
}

// The nodes of a fused chain: a head, then optional steps, each reading the previous one.
struct Chain {
  const Node* head = nullptr;
  const Node* batch_norm = nullptr;
  const Node* add = nullptr;
  ValueId residual = kNoValue;
  const Node* relu = nullptr;
  ValueId out = kNoValue;
};

Chain parse_chain(const Graph& g, bool allow_bn_and_add) {
  Chain c;
  if (g.num_nodes() == 0) unsupported("empty subgraph");
  c.head = &g.node(0);
  c.out = c.head->outputs.at(0);
  for (size_t i = 1; i < g.num_nodes(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    const bool reads_chain = std::find(n.inputs.begin(), n.inputs.end(), c.out) != n.inputs.end();
    if (!reads_chain) unsupported(fmt::format("{} does not read the previous step", n.name));
    if (n.op_type == "BatchNormalization" && allow_bn_and_add && !c.batch_norm && !c.add &&
        !c.relu && n.inputs[0] == c.out) {
      c.batch_norm = &n;
    } else if (n.op_type == "Add" && allow_bn_and_add && !c.add && !c.relu &&
               n.inputs.size() == 2) {
      c.add = &n;
      c.residual = n.inputs[0] == c.out ? n.inputs[1] : n.inputs[0];
      const Value& r = g.value(c.residual);
      if (r.is_constant() || c.residual == c.out)
        unsupported(n.name + ": the residual is not another tensor");
      if (r.shape != g.value(c.out).shape || r.dtype != DType::kFloat32)
        unsupported(n.name + ": the residual's shape differs from the convolution's");
    } else if (n.op_type == "Relu" && !c.relu) {
      c.relu = &n;
    } else {
      unsupported(fmt::format("{} ({}) cannot follow in a fused chain", n.name, n.op_type));
    }
    c.out = n.outputs.at(0);
  }
  if (g.outputs.size() != 1 || g.outputs[0] != c.out)
    unsupported("a fused chain must have one output, its last step's");
  return c;
}

class ConvKernel : public Kernel {
 public:
  size_t x_index = 0, residual_index = 0;
  bool has_residual = false, has_bias = false, fused = false;
  cudnnConvolutionFwdAlgo_t algo{};
  std::unique_ptr<TensorDesc> x_desc, y_desc, bias_desc;
  std::unique_ptr<FilterDesc> w_desc;
  std::unique_ptr<ConvDesc> conv_desc;
  std::unique_ptr<ActivationDesc> act;
  DeviceMemory w, bias, workspace;

  void launch(const void* x, const void* residual, void* y) const {
    HandleLock h;
    const float one = 1, zero = 0;
    if (fused) {
      check(cudnnConvolutionBiasActivationForward(
                h.get(), &one, x_desc->get(), x, w_desc->get(), w.get(), conv_desc->get(), algo,
                workspace.get(), workspace.bytes(), has_residual ? &one : &zero, y_desc->get(),
                has_residual ? residual : y, bias_desc->get(), bias.get(), act->get(),
                y_desc->get(), y),
            "cudnnConvolutionBiasActivationForward");
      return;
    }
    check(cudnnConvolutionForward(h.get(), &one, x_desc->get(), x, w_desc->get(), w.get(),
                                  conv_desc->get(), algo, workspace.get(), workspace.bytes(), &zero,
                                  y_desc->get(), y),
          "cudnnConvolutionForward");
    if (has_bias)
      check(cudnnAddTensor(h.get(), &one, bias_desc->get(), bias.get(), &one, y_desc->get(), y),
            "cudnnAddTensor (bias)");
    if (has_residual)
      check(cudnnAddTensor(h.get(), &one, y_desc->get(), residual, &one, y_desc->get(), y),
            "cudnnAddTensor (residual)");
  }
  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    launch(inputs[x_index].raw(), has_residual ? inputs[residual_index].raw() : nullptr,
           outputs[0].raw());
  }
};

}  // namespace

const std::vector<std::string>& conv_algorithm_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = {""};
    for (const ConvAlgo& a : conv_algos()) n.push_back(a.name);
    return n;
  }();
  return names;
}

const std::vector<std::string>& conv_transpose_algorithm_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = {""};
    for (const BwdAlgo& a : bwd_algos()) n.push_back(a.name);
    return n;
  }();
  return names;
}

std::unique_ptr<Kernel> compile_conv(const Graph& g, const std::string& variant) {
  const Chain c = parse_chain(g, true);
  const Node& conv = *c.head;
  if (conv.op_type != "Conv") unsupported("not a Conv");
  const Value& xv = g.value(conv.inputs.at(0));
  if (xv.dtype != DType::kFloat32) unsupported("input not float32");
  const size_t rank = xv.shape.size();
  if (rank < 3 || rank > 5) unsupported(fmt::format("a {}-D input", rank));
  const Value& wv = constant_input(g, conv, 1, "the weight");
  if (wv.shape.size() != rank) unsupported("weight rank differs from the input's");
  const int64_t group = conv.attr_int("group", 1);
  const int64_t filters = wv.shape[0], channels = xv.shape[1];
  if (group <= 0 || channels % group || filters % group || wv.shape[1] * group != channels)
    unsupported(conv.name + ": channels do not match the group");
  const Shape in_spatial(xv.shape.begin() + 2, xv.shape.end());
  const std::vector<int64_t> taps(wv.shape.begin() + 2, wv.shape.end());
  ops::nn::Window win = ops::nn::forward_window(conv, in_spatial, taps, false);
  if (win.pad_begin != win.pad_end) unsupported(conv.name + ": asymmetric padding");
  const Shape& conv_out = g.value(conv.outputs[0]).shape;

  auto k = std::make_unique<ConvKernel>();
  // Weights and bias in float32 on the host, BatchNormalization folded in per filter.
  std::vector<float> w(wv.constant.data<float>(), wv.constant.data<float>() + wv.constant.numel());
  std::vector<float> b(static_cast<size_t>(filters), 0.0f);
  k->has_bias = conv.input(2) != kNoValue;
  if (k->has_bias) {
    const Value& bv = constant_input(g, conv, 2, "the bias");
    if (bv.constant.numel() != filters) unsupported(conv.name + ": bias size");
    std::copy_n(bv.constant.data<float>(), filters, b.begin());
  }
  if (c.batch_norm) {
    const Node& bn = *c.batch_norm;
    const float* scale = constant_input(g, bn, 1, "scale").constant.data<float>();
    const float* shift = constant_input(g, bn, 2, "B").constant.data<float>();
    const float* mean = constant_input(g, bn, 3, "mean").constant.data<float>();
    const float* var = constant_input(g, bn, 4, "var").constant.data<float>();
    for (size_t i = 1; i <= 4; ++i)
      if (g.value(bn.inputs[i]).constant.numel() != filters) unsupported(bn.name + ": sizes");
    const double eps = bn.attr_float("epsilon", 1e-5f);
    const size_t per_filter = w.size() / static_cast<size_t>(filters);
    for (int64_t f = 0; f < filters; ++f) {
      const double a = scale[f] / std::sqrt(static_cast<double>(var[f]) + eps);
      for (size_t i = 0; i < per_filter; ++i) w[f * per_filter + i] *= static_cast<float>(a);
      b[f] = static_cast<float>((b[f] - mean[f]) * a + shift[f]);
    }
    k->has_bias = true;
  }

  k->x_index = static_cast<size_t>(std::find(g.inputs.begin(), g.inputs.end(), conv.inputs[0]) -
                                   g.inputs.begin());
  if (k->x_index >= g.inputs.size()) unsupported("the convolution's input is not the kernel's");
  if (c.add) {
    k->has_residual = true;
    k->residual_index = static_cast<size_t>(
        std::find(g.inputs.begin(), g.inputs.end(), c.residual) - g.inputs.begin());
    if (k->residual_index >= g.inputs.size()) unsupported("the residual is not an input");
  }

  const std::vector<int> x_dims = shape_dims(xv.shape, "input dim");
  const std::vector<int> y_dims = shape_dims(conv_out, "output dim");
  const std::vector<int> w_dims = shape_dims(wv.shape, "weight dim");
  std::vector<int> bias_dims(y_dims.size(), 1);
  bias_dims[1] = static_cast<int>(filters);
  k->x_desc = std::make_unique<TensorDesc>(x_dims);
  k->y_desc = std::make_unique<TensorDesc>(y_dims);
  k->bias_desc = std::make_unique<TensorDesc>(bias_dims);
  k->w_desc = std::make_unique<FilterDesc>(w_dims);
  k->conv_desc = std::make_unique<ConvDesc>(
      window_2d(to_int(win.pad_begin, "pad"), 0), window_2d(to_int(win.stride, "stride"), 1),
      window_2d(to_int(win.dilation, "dilation"), 1), static_cast<int>(group));
  // cuDNN's idea of the output must be ONNX's.
  std::vector<int> out(y_dims.size());
  check_supported(
      cudnnGetConvolutionNdForwardOutputDim(k->conv_desc->get(), k->x_desc->get(), k->w_desc->get(),
                                            static_cast<int>(out.size()), out.data()),
      "cudnnGetConvolutionNdForwardOutputDim");
  if (out != y_dims) unsupported(conv.name + ": cuDNN computes another output shape");

  {
    HandleLock h;
    if (variant.empty()) {
      int returned = 0;
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      check_supported(cudnnGetConvolutionForwardAlgorithm_v7(
                          h.get(), k->x_desc->get(), k->w_desc->get(), k->conv_desc->get(),
                          k->y_desc->get(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf),
                      "cudnnGetConvolutionForwardAlgorithm_v7");
      int chosen = -1;
      for (int i = 0; i < returned && chosen < 0; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxWorkspace) chosen = i;
      if (chosen < 0) unsupported(conv.name + ": no forward algorithm");
      k->algo = perf[chosen].algo;
    } else {
      auto it = std::find_if(conv_algos().begin(), conv_algos().end(),
                             [&](const ConvAlgo& a) { return variant == a.name; });
      if (it == conv_algos().end()) unsupported("no variant '" + variant + "'");
      k->algo = it->algo;
    }
    size_t ws = 0;
    check_supported(cudnnGetConvolutionForwardWorkspaceSize(h.get(), k->x_desc->get(),
                                                            k->w_desc->get(), k->conv_desc->get(),
                                                            k->y_desc->get(), k->algo, &ws),
                    "cudnnGetConvolutionForwardWorkspaceSize");
    if (ws > kMaxWorkspace) unsupported(fmt::format("{} bytes of workspace", ws));
    k->workspace = DeviceMemory(ws);
  }
  // One fused call where cuDNN has it: with a Relu, or without activation for
  // IMPLICIT_PRECOMP_GEMM (cuDNN's rule for CUDNN_ACTIVATION_IDENTITY).
  k->fused = c.relu || k->algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  k->act =
      std::make_unique<ActivationDesc>(c.relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY);
  k->w = DeviceMemory(w.data(), w.size() * sizeof(float));
  k->bias = DeviceMemory(b.data(), b.size() * sizeof(float));
  std::vector<size_t> in_bytes;
  for (ValueId v : g.inputs) in_bytes.push_back(bytes_of(g, v));
  ConvKernel* kernel = k.get();
  const size_t xi = k->x_index, ri = k->residual_index;
  const bool res = k->has_residual;
  try {
    trial_run(in_bytes, {bytes_of(g, c.out)},
              [&](std::vector<void*>& ins, std::vector<void*>& outs) {
                kernel->launch(ins[xi], res ? ins[ri] : nullptr, outs[0]);
              });
  } catch (const Error& e) {
    unsupported(fmt::format("{} refused by cuDNN: {}", conv.name, e.what()));
  }
  return k;
}

// ---- ConvTranspose (+ bias, + Relu) ------------------------------------------------------

namespace {

class ConvTransposeKernel : public Kernel {
 public:
  bool has_bias = false, relu = false;
  cudnnConvolutionBwdDataAlgo_t algo{};
  std::unique_ptr<TensorDesc> x_desc, y_desc, bias_desc;
  std::unique_ptr<FilterDesc> w_desc;
  std::unique_ptr<ConvDesc> conv_desc;
  std::unique_ptr<ActivationDesc> act;
  DeviceMemory w, bias, workspace;

  void launch(const void* x, void* y) const {
    HandleLock h;
    const float one = 1, zero = 0;
    check(cudnnConvolutionBackwardData(h.get(), &one, w_desc->get(), w.get(), x_desc->get(), x,
                                       conv_desc->get(), algo, workspace.get(), workspace.bytes(),
                                       &zero, y_desc->get(), y),
          "cudnnConvolutionBackwardData");
    if (has_bias)
      check(cudnnAddTensor(h.get(), &one, bias_desc->get(), bias.get(), &one, y_desc->get(), y),
            "cudnnAddTensor (bias)");
    if (relu)
      check(cudnnActivationForward(h.get(), act->get(), &one, y_desc->get(), y, &zero,
                                   y_desc->get(), y),
            "cudnnActivationForward");
  }
  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    launch(inputs[0].raw(), outputs[0].raw());
  }
};

}  // namespace

std::unique_ptr<Kernel> compile_conv_transpose(const Graph& g, const std::string& variant) {
  const Chain c = parse_chain(g, false);
  const Node& ct = *c.head;
  if (ct.op_type != "ConvTranspose") unsupported("not a ConvTranspose");
  if (g.inputs.size() != 1 || g.inputs[0] != ct.inputs.at(0))
    unsupported("the transposed convolution's input is not the kernel's");
  const Value& xv = g.value(ct.inputs[0]);
  const size_t rank = xv.shape.size();
  if (xv.dtype != DType::kFloat32 || rank < 3 || rank > 5) unsupported("input not float32 1-3D");
  const Value& wv = constant_input(g, ct, 1, "the weight");
  if (wv.shape.size() != rank) unsupported("weight rank differs from the input's");
  const int64_t group = ct.attr_int("group", 1);
  const size_t n = rank - 2;
  const Shape& y_shape = g.value(ct.outputs[0]).shape;
  if (group <= 0 || xv.shape[1] != wv.shape[0] || wv.shape[0] % group ||
      y_shape[1] != wv.shape[1] * group)
    unsupported(ct.name + ": channels do not match the group");
  if (ops::nn::parse_auto_pad(ct) != ops::nn::AutoPad::kNotSet) unsupported(ct.name + ": auto_pad");
  std::vector<int64_t> strides = ct.attr_ints("strides", std::vector<int64_t>(n, 1));
  std::vector<int64_t> dilations = ct.attr_ints("dilations", std::vector<int64_t>(n, 1));
  std::vector<int64_t> pads = ct.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  if (strides.size() != n || dilations.size() != n || pads.size() != 2 * n)
    unsupported(ct.name + ": attribute sizes");
  for (size_t i = 0; i < n; ++i) {
    if (pads[i] != pads[i + n]) unsupported(ct.name + ": asymmetric padding");
    // The output size cuDNN's backward-data convolution gives is the forward convolution's
    // preimage: ONNX's output_padding (or output_shape) must stay below the stride.
    const int64_t span = (wv.shape[2 + i] - 1) * dilations[i] + 1;
    const int64_t extra =
        y_shape[2 + i] - (strides[i] * (xv.shape[2 + i] - 1) + span - 2 * pads[i]);
    if (extra < 0 || extra >= strides[i]) unsupported(ct.name + ": output padding");
  }
  pads.resize(n);

  auto k = std::make_unique<ConvTransposeKernel>();
  k->relu = c.relu != nullptr;
  const int64_t out_channels = y_shape[1];
  std::vector<float> b(static_cast<size_t>(out_channels), 0.0f);
  k->has_bias = ct.input(2) != kNoValue;
  if (k->has_bias) {
    const Value& bv = constant_input(g, ct, 2, "the bias");
    if (bv.constant.numel() != out_channels) unsupported(ct.name + ": bias size");
    std::copy_n(bv.constant.data<float>(), out_channels, b.begin());
  }
  const std::vector<int> x_dims = shape_dims(xv.shape, "input dim");
  const std::vector<int> y_dims = shape_dims(y_shape, "output dim");
  std::vector<int> bias_dims(y_dims.size(), 1);
  bias_dims[1] = static_cast<int>(out_channels);
  k->x_desc = std::make_unique<TensorDesc>(x_dims);
  k->y_desc = std::make_unique<TensorDesc>(y_dims);
  k->bias_desc = std::make_unique<TensorDesc>(bias_dims);
  // The forward convolution this is the transpose of maps y to x: its filter is ONNX's
  // ConvTranspose weight as it is, [C_in, C_out / group, k...].
  k->w_desc = std::make_unique<FilterDesc>(shape_dims(wv.shape, "weight dim"));
  k->conv_desc = std::make_unique<ConvDesc>(
      window_2d(to_int(pads, "pad"), 0), window_2d(to_int(strides, "stride"), 1),
      window_2d(to_int(dilations, "dilation"), 1), static_cast<int>(group));
  std::vector<int> fwd(x_dims.size());
  check_supported(
      cudnnGetConvolutionNdForwardOutputDim(k->conv_desc->get(), k->y_desc->get(), k->w_desc->get(),
                                            static_cast<int>(fwd.size()), fwd.data()),
      "cudnnGetConvolutionNdForwardOutputDim");
  if (fwd != x_dims) unsupported(ct.name + ": cuDNN's geometry differs from ONNX's");
  {
    HandleLock h;
    if (variant.empty()) {
      int returned = 0;
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      check_supported(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                          h.get(), k->w_desc->get(), k->x_desc->get(), k->conv_desc->get(),
                          k->y_desc->get(), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, perf),
                      "cudnnGetConvolutionBackwardDataAlgorithm_v7");
      int chosen = -1;
      for (int i = 0; i < returned && chosen < 0; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxWorkspace) chosen = i;
      if (chosen < 0) unsupported(ct.name + ": no backward-data algorithm");
      k->algo = perf[chosen].algo;
    } else {
      auto it = std::find_if(bwd_algos().begin(), bwd_algos().end(),
                             [&](const BwdAlgo& a) { return variant == a.name; });
      if (it == bwd_algos().end()) unsupported("no variant '" + variant + "'");
      k->algo = it->algo;
    }
    size_t ws = 0;
    check_supported(cudnnGetConvolutionBackwardDataWorkspaceSize(
                        h.get(), k->w_desc->get(), k->x_desc->get(), k->conv_desc->get(),
                        k->y_desc->get(), k->algo, &ws),
                    "cudnnGetConvolutionBackwardDataWorkspaceSize");
    if (ws > kMaxWorkspace) unsupported(fmt::format("{} bytes of workspace", ws));
    k->workspace = DeviceMemory(ws);
  }
  k->act = std::make_unique<ActivationDesc>(CUDNN_ACTIVATION_RELU);
  const Tensor& wt = wv.constant;
  k->w = DeviceMemory(wt.raw(), wt.nbytes());
  k->bias = DeviceMemory(b.data(), b.size() * sizeof(float));
  ConvTransposeKernel* kernel = k.get();
  try {
    trial_run({bytes_of(g, g.inputs[0])}, {bytes_of(g, c.out)},
              [&](std::vector<void*>& ins, std::vector<void*>& outs) {
                kernel->launch(ins[0], outs[0]);
              });
  } catch (const Error& e) {
    unsupported(fmt::format("{} refused by cuDNN: {}", ct.name, e.what()));
  }
  return k;
}

// ---- Pooling -------------------------------------------------------------------------------

namespace {

class PoolKernel : public Kernel {
 public:
  std::unique_ptr<TensorDesc> x_desc, y_desc;
  std::unique_ptr<PoolDesc> pool;
  void launch(const void* x, void* y) const {
    HandleLock h;
    const float one = 1, zero = 0;
    check(
        cudnnPoolingForward(h.get(), pool->get(), &one, x_desc->get(), x, &zero, y_desc->get(), y),
        "cudnnPoolingForward");
  }
  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    launch(inputs[0].raw(), outputs[0].raw());
  }
};

}  // namespace

std::unique_ptr<Kernel> compile_pool(const Graph& g) {
  if (g.num_nodes() != 1 || g.inputs.size() != 1 || g.outputs.size() != 1)
    unsupported("a pool kernel is one node");
  const Node& p = g.node(0);
  if (g.outputs[0] != p.outputs[0]) unsupported(p.name + ": only the pooled output");
  const Value& xv = g.value(p.inputs.at(0));
  const size_t rank = xv.shape.size();
  if (xv.dtype != DType::kFloat32 || rank < 3 || rank > 5) unsupported("input not float32 1-3D");
  const Shape spatial(xv.shape.begin() + 2, xv.shape.end());
  const bool global = p.op_type.rfind("Global", 0) == 0;
  const bool max = p.op_type == "MaxPool" || p.op_type == "GlobalMaxPool";
  std::vector<int64_t> window, pads, strides;
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
  if (global) {
    window = spatial;
    pads.assign(spatial.size(), 0);
    strides.assign(spatial.size(), 1);
  } else {
    std::vector<int64_t> k = ops::nn::pool_kernel_shape(p, spatial.size());
    ops::nn::Window win = ops::nn::forward_window(p, spatial, k, p.attr_int("ceil_mode", 0) != 0);
    if (win.pad_begin != win.pad_end) unsupported(p.name + ": asymmetric padding");
    for (int64_t d : win.dilation)
      if (d != 1) unsupported(p.name + ": dilated pooling");
    window = k;
    pads = win.pad_begin;
    strides = win.stride;
  }
  if (!max)
    mode = p.attr_int("count_include_pad", 0) ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                              : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  auto k = std::make_unique<PoolKernel>();
  const std::vector<int> x_dims = shape_dims(xv.shape, "input dim");
  const std::vector<int> y_dims = shape_dims(g.value(p.outputs[0]).shape, "output dim");
  k->x_desc = std::make_unique<TensorDesc>(x_dims);
  k->y_desc = std::make_unique<TensorDesc>(y_dims);
  k->pool = std::make_unique<PoolDesc>(mode, window_2d(to_int(window, "window"), 1),
                                       window_2d(to_int(pads, "pad"), 0),
                                       window_2d(to_int(strides, "stride"), 1));
  // ceil_mode, or anything else cuDNN rounds differently: its output must be ONNX's.
  std::vector<int> out(y_dims.size());
  check_supported(cudnnGetPoolingNdForwardOutputDim(k->pool->get(), k->x_desc->get(),
                                                    static_cast<int>(out.size()), out.data()),
                  "cudnnGetPoolingNdForwardOutputDim");
  if (out != y_dims) unsupported(p.name + ": cuDNN computes another output shape");
  PoolKernel* kernel = k.get();
  try {
    trial_run({bytes_of(g, g.inputs[0])}, {bytes_of(g, g.outputs[0])},
              [&](std::vector<void*>& ins, std::vector<void*>& outs) {
                kernel->launch(ins[0], outs[0]);
              });
  } catch (const Error& e) {
    unsupported(fmt::format("{} refused by cuDNN: {}", p.name, e.what()));
  }
  return k;
}

}  // namespace collage::cudnn_backend
