// The `torch` backend's kernels: one ATen call per matched head (Conv, ConvTranspose,
// MatMul/Linear, Gemm, pools, BatchNormalization, LayerNormalization) plus its fused tail
// (a Linear's bias, a Relu), on collage's buffers wrapped with from_blob.
#include <functional>
#include <limits>

#include "backends/torch/aten_util.h"
#include "backends/torch/support.h"

namespace collage::torch_backend {
namespace {

// A head's input: a kernel input (by index) or a weight prepared at compile.
struct Operand {
  int index = -1;
  at::Tensor constant;
  const at::Tensor& get(const std::vector<at::Tensor>& in) const {
    return index >= 0 ? in[index] : constant;
  }
};

Operand operand(const Graph& g, ValueId v) {
  Operand o;
  if (g.value(v).is_constant()) {
    o.constant = constant_tensor(g, v);
    return o;
  }
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (g.inputs[i] == v) o.index = static_cast<int>(i);
  if (o.index < 0) fail(ErrorKind::kInternal, "torch: value '{}' is not an input", g.value(v).name);
  return o;
}

// Computes the head into `out` (when it can write there directly) or returns its result.
using Head = std::function<at::Tensor(const std::vector<at::Tensor>& in, at::Tensor& out)>;

// Shape (1, C, 1, ...) of rank `rank`: per-channel parameters broadcast over NC...
at::Tensor per_channel(const at::Tensor& v, int64_t rank) {
  std::vector<int64_t> shape(rank, 1);
  shape[1] = v.numel();
  return v.reshape(shape).contiguous();
}

Head conv_head(const Graph& g, const Node& n) {
  const WindowLowering l = conv_lowering(g, n);
  const Operand x = operand(g, n.input(0));
  const at::Tensor w = constant_tensor(g, n.input(1)).contiguous();
  const at::Tensor b = n.input(2) != kNoValue ? constant_tensor(g, n.input(2)) : at::Tensor();
  const int64_t groups = n.attr_int("group", 1);
  const std::vector<int64_t> no_output_padding(l.kernel.size(), 0);
  // 2-D/3-D: oneDNN (mkldnn) with the weights reordered once, here, to its blocked layout.
  // at::convolution would pick ATen's slow_conv3d for small 3-D inputs and reorder the
  // weights on every call otherwise. Refusals fall back to at::convolution (mkldnn_ok below).
  at::Tensor packed;
  if (at::hasMKLDNN() && (l.kernel.size() == 2 || l.kernel.size() == 3)) {
    try {
      packed = l.kernel.size() == 2
                   ? at::mkldnn_reorder_conv2d_weight(w, l.padding, l.stride, l.dilation, groups)
                   : at::mkldnn_reorder_conv3d_weight(w, l.padding, l.stride, l.dilation, groups);
      // mkldnn_ok: one call on zeros; what oneDNN refuses goes to at::convolution instead.
      at::Tensor xz = at::zeros(at::IntArrayRef(g.value(n.input(0)).shape));
      if (!l.pre_pad.empty()) xz = at::constant_pad_nd(xz, l.pre_pad, 0);
      at::Tensor yz =
          at::mkldnn_convolution(xz, packed, b, l.padding, l.stride, l.dilation, groups);
      if (yz.sizes() != at::IntArrayRef(g.value(n.outputs[0]).shape)) packed = at::Tensor();
    } catch (const c10::Error&) {
      packed = at::Tensor();
    }
  }
  return [=](const std::vector<at::Tensor>& in, at::Tensor&) {
    at::Tensor xin = x.get(in);
    if (!l.pre_pad.empty()) xin = at::constant_pad_nd(xin, l.pre_pad, 0);
    if (packed.defined())
      return at::mkldnn_convolution(xin, packed, b, l.padding, l.stride, l.dilation, groups);
    return at::convolution(xin, w, b, l.stride, l.padding, l.dilation, false, no_output_padding,
                           groups);
  };
}

Head conv_transpose_head(const Graph& g, const Node& n) {
  const TransposedLowering l = conv_transpose_lowering(g, n);
  const Operand x = operand(g, n.input(0));
  const at::Tensor w = constant_tensor(g, n.input(1)).contiguous();
  const int64_t rank = static_cast<int64_t>(g.value(n.outputs[0]).shape.size());
  at::Tensor b = n.input(2) != kNoValue ? constant_tensor(g, n.input(2)) : at::Tensor();
  // Cropped outputs get their bias after the crop (zeros added past the end take it too).
  const bool crop = !l.post_pad.empty();
  const at::Tensor late_bias = crop && b.defined() ? per_channel(b, rank) : at::Tensor();
  if (crop) b = at::Tensor();
  return [=](const std::vector<at::Tensor>& in, at::Tensor&) {
    at::Tensor y = at::convolution(x.get(in), w, b, l.stride, l.padding, l.dilation, true,
                                   l.output_padding, l.groups);
    if (!crop) return y;
    y = at::constant_pad_nd(y, l.post_pad, 0);
    if (late_bias.defined()) y.add_(late_bias);
    return y;
  };
}

Head pool_head(const Graph& g, const Node& n) {
  const Operand x = operand(g, n.input(0));
  const Shape& xs = g.value(n.input(0)).shape;
  const int64_t nd = static_cast<int64_t>(xs.size()) - 2;
  if (n.op_type == "GlobalAveragePool" || n.op_type == "GlobalMaxPool") {
    std::vector<int64_t> dims;
    for (int64_t i = 2; i < nd + 2; ++i) dims.push_back(i);
    const bool avg = n.op_type == "GlobalAveragePool";
    return [=](const std::vector<at::Tensor>& in, at::Tensor& out) {
      return avg ? at::mean_out(out, x.get(in), dims, true)
                 : at::amax_out(out, x.get(in), dims, true);
    };
  }
  const PoolLowering p = pool_lowering(g, n);
  const WindowLowering& l = p.window;
  if (n.op_type == "MaxPool") {
    const double pad_value = -std::numeric_limits<double>::infinity();
    return [=](const std::vector<at::Tensor>& in, at::Tensor&) {
      at::Tensor xin = x.get(in);
      if (!l.pre_pad.empty()) xin = at::constant_pad_nd(xin, l.pre_pad, pad_value);
      if (nd == 1) return at::max_pool1d(xin, l.kernel, l.stride, l.padding, l.dilation, false);
      if (nd == 2) return at::max_pool2d(xin, l.kernel, l.stride, l.padding, l.dilation, false);
      return at::max_pool3d(xin, l.kernel, l.stride, l.padding, l.dilation, false);
    };
  }
  at::Tensor scale;
  if (!p.divisor_scale.empty()) {
    std::vector<int64_t> shape = {1, 1};
    shape.insert(shape.end(), p.out_spatial.begin(), p.out_spatial.end());
    scale = at::tensor(at::ArrayRef<float>(p.divisor_scale)).reshape(shape).contiguous();
  }
  // Pre-padded windows lie inside the padded input: ATen divides by the whole window.
  const bool include_pad = l.pre_pad.empty() ? p.count_include_pad : true;
  return [=](const std::vector<at::Tensor>& in, at::Tensor&) {
    at::Tensor xin = x.get(in);
    if (!l.pre_pad.empty()) xin = at::constant_pad_nd(xin, l.pre_pad, 0);
    at::Tensor y;
    if (nd == 1)
      y = at::avg_pool1d(xin, l.kernel, l.stride, l.padding, false, include_pad);
    else if (nd == 2)
      y = at::avg_pool2d(xin, l.kernel, l.stride, l.padding, false, include_pad);
    else
      y = at::avg_pool3d(xin, l.kernel, l.stride, l.padding, false, include_pad);
    if (scale.defined()) y.mul_(scale);
    return y;
  };
}

// Inference BatchNormalization folded into y = x * a + b with per-channel a, b.
Head batch_norm_head(const Graph& g, const Node& n) {
  const Operand x = operand(g, n.input(0));
  const int64_t rank = static_cast<int64_t>(g.value(n.input(0)).shape.size());
  const double eps = n.attr_float("epsilon", 1e-5f);
  const at::Tensor scale = constant_tensor(g, n.input(1)), bias = constant_tensor(g, n.input(2));
  const at::Tensor mean = constant_tensor(g, n.input(3)), var = constant_tensor(g, n.input(4));
  const at::Tensor a = scale / at::sqrt(var + eps);
  const at::Tensor a_c = per_channel(a, rank), b_c = per_channel(bias - mean * a, rank);
  return [=](const std::vector<at::Tensor>& in, at::Tensor& out) {
    return at::addcmul_out(out, b_c, x.get(in), a_c);
  };
}

Head layer_norm_head(const Graph& g, const Node& n) {
  const Operand x = operand(g, n.input(0));
  const std::vector<int64_t> shape = layer_norm_shape(g, n);
  const double eps = n.attr_float("epsilon", 1e-5f);
  auto param = [&](size_t i) {
    if (n.input(i) == kNoValue) return Operand{};
    Operand o = operand(g, n.input(i));
    if (o.constant.defined()) o.constant = o.constant.reshape(shape).contiguous();
    return o;
  };
  const Operand w = param(1), b = param(2);
  const bool has_bias = n.input(2) != kNoValue;
  return [=](const std::vector<at::Tensor>& in, at::Tensor&) {
    const at::Tensor bias = has_bias ? b.get(in).reshape(shape) : at::Tensor();
    return at::layer_norm(x.get(in), shape, w.get(in).reshape(shape), bias, eps, false);
  };
}

// MatMul, or a Linear: MatMul + a bias broadcast along the last axis.
Head matmul_head(const Graph& g, const Node& n, const Node* bias_add) {
  const Operand a = operand(g, n.input(0)), b = operand(g, n.input(1));
  at::Tensor bias;
  if (bias_add) {
    const ValueId bv = bias_add->input(0) == n.outputs[0] ? bias_add->input(1) : bias_add->input(0);
    bias = constant_tensor(g, bv).reshape({-1}).contiguous();
  }
  const Shape& as = g.value(n.input(0)).shape;
  const Shape& bs = g.value(n.input(1)).shape;
  // (..., K) x (K, N): one GEMM over the flattened leading axes, bias fused as addmm's C.
  const bool flat = as.size() >= 2 && bs.size() == 2;
  const int64_t k = as.empty() ? 0 : as.back();
  return [=](const std::vector<at::Tensor>& in, at::Tensor& out) {
    if (flat) {
      at::Tensor a2 = a.get(in).reshape({-1, k});
      at::Tensor out2 = out.view({a2.size(0), out.size(-1)});
      if (bias.defined())
        at::addmm_out(out2, bias.expand({a2.size(0), out.size(-1)}), a2, b.get(in));
      else
        at::mm_out(out2, a2, b.get(in));
      return out;
    }
    // matmul_out would resize `out` for 1-D operands (and warn): copy the result instead.
    at::Tensor y = at::matmul(a.get(in), b.get(in));
    if (bias.defined()) y.add_(bias);
    return y;
  };
}

Head gemm_head(const Graph& g, const Node& n) {
  const bool trans_a = n.attr_int("transA", 0) != 0, trans_b = n.attr_int("transB", 0) != 0;
  const double alpha = n.attr_float("alpha", 1.0f), beta = n.attr_float("beta", 1.0f);
  Operand a = operand(g, n.input(0)), b = operand(g, n.input(1));
  // Constant operands are transposed once here, not per run.
  if (a.constant.defined() && trans_a) a.constant = a.constant.t().contiguous();
  if (b.constant.defined() && trans_b) b.constant = b.constant.t().contiguous();
  const bool ta = trans_a && !a.constant.defined(), tb = trans_b && !b.constant.defined();
  const bool has_c = n.input(2) != kNoValue;
  const Operand c = has_c ? operand(g, n.input(2)) : Operand{};
  const Shape& ys = g.value(n.outputs[0]).shape;
  const std::vector<int64_t> mn = {ys[0], ys[1]};
  return [=](const std::vector<at::Tensor>& in, at::Tensor& out) {
    at::Tensor av = ta ? a.get(in).t() : a.get(in);
    at::Tensor bv = tb ? b.get(in).t() : b.get(in);
    if (has_c) return at::addmm_out(out, c.get(in).expand(mn), av, bv, beta, alpha);
    at::mm_out(out, av, bv);
    if (alpha != 1.0) out.mul_(alpha);
    return out;
  };
}

class OpKernel : public Kernel {
 public:
  OpKernel(Head head, bool relu) : head_(std::move(head)), relu_(relu) {}

  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    try {
      std::vector<at::Tensor> in;
      in.reserve(inputs.size());
      for (const Tensor& t : inputs) in.push_back(wrap(t));
      at::Tensor out = wrap(outputs[0]);
      at::Tensor y = head_(in, out);
      store(y, outputs[0]);
      if (relu_) out.relu_();
    } catch (const c10::Error& e) {
      fail(ErrorKind::kBackend, "torch: {}", e.what_without_backtrace());
    }
  }

 private:
  Head head_;
  bool relu_;
};

std::unique_ptr<Kernel> build(const Graph& g) {
  if (g.num_nodes() == 0) fail(ErrorKind::kUnsupported, "torch: empty subgraph");
  if (g.outputs.size() != 1) fail(ErrorKind::kUnsupported, "torch: kernels have one output");
  const Node& head = g.node(0);
  if (!op_level_head(g, head))
    fail(ErrorKind::kUnsupported, "torch: {} with these inputs/attributes", head.op_type);
  // The tail: an optional bias Add (MatMul only), then an optional Relu, each reading the
  // value before it.
  const Node* bias_add = nullptr;
  bool relu = false;
  ValueId cur = head.outputs[0];
  for (size_t i = 1; i < g.num_nodes(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    const bool reads_cur = n.input(0) == cur || n.input(1) == cur;
    if (n.op_type == "Add" && i == 1 && head.op_type == "MatMul" && reads_cur) {
      bias_add = &n;
    } else if (n.op_type == "Relu" && !relu && n.input(0) == cur) {
      relu = true;
    } else {
      fail(ErrorKind::kUnsupported, "torch: {} cannot follow {} in one kernel", n.op_type,
           head.op_type);
    }
    cur = n.outputs[0];
  }
  if (g.outputs[0] != cur) fail(ErrorKind::kUnsupported, "torch: kernel output is not the tail's");
  const std::string& t = head.op_type;
  Head h;
  if (t == "Conv")
    h = conv_head(g, head);
  else if (t == "ConvTranspose")
    h = conv_transpose_head(g, head);
  else if (t == "MatMul")
    h = matmul_head(g, head, bias_add);
  else if (t == "Gemm")
    h = gemm_head(g, head);
  else if (t == "BatchNormalization")
    h = batch_norm_head(g, head);
  else if (t == "LayerNormalization")
    h = layer_norm_head(g, head);
  else
    h = pool_head(g, head);
  return std::make_unique<OpKernel>(std::move(h), relu);
}

}  // namespace

std::unique_ptr<Kernel> compile_ops(const Graph& subgraph) {
  std::unique_ptr<Kernel> kernel;
  try {
    kernel = build(subgraph);
    // One run on zeros: ATen checks its arguments then, so anything it refuses is refused
    // at compile (kUnsupported) rather than when the plan runs.
    std::vector<Tensor> inputs, outputs;
    for (ValueId v : subgraph.inputs)
      inputs.emplace_back(subgraph.value(v).dtype, subgraph.value(v).shape);
    for (ValueId v : subgraph.outputs)
      outputs.emplace_back(subgraph.value(v).dtype, subgraph.value(v).shape);
    kernel->run(inputs, outputs);
  } catch (const c10::Error& e) {
    fail(ErrorKind::kUnsupported, "torch: {}", e.what_without_backtrace());
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kBackend) fail(ErrorKind::kUnsupported, "{}", e.what());
    throw;
  }
  return kernel;
}

}  // namespace collage::torch_backend
