// Normalizations: BatchNormalization (inference statistics, optional fused Relu),
// InstanceNormalization and LRN (any layout, inside regions too),
// LayerNormalization (the op, and the ReduceMean/Sub/Pow/... decomposition opset-13
// exporters emit), the exported RMSNorm (one step of collage's code), Softmax and
// LogSoftmax. All on row-major data.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <span>

#include "backends/onednn/epilogue.h"
#include "backends/onednn/group_norm.h"
#include "backends/onednn/kernels.h"

namespace collage::onednn {
namespace {

using flags = dnnl::normalization_flags;

int64_t product(const Shape& s, size_t begin, size_t end) {
  return std::accumulate(s.begin() + begin, s.begin() + end, int64_t{1}, std::multiplies<>());
}

int kernel_input(const Graph& sub, ValueId v, const char* what) {
  const int i = input_index(sub, v);
  if (i < 0) fail(ErrorKind::kUnsupported, "onednn: {} is not a kernel input", what);
  return i;
}

// A per-channel parameter: packed now when constant, else bound to its kernel input (or
// read from `values`, for an emitter).
dnnl::memory channel_param(const Graph& sub, ValueId v, int64_t channels, Program& program,
                           ValueMemories* values = nullptr) {
  require_f32(sub, v, "normalization parameter");
  if (sub.value(v).constant.defined() ? sub.value(v).constant.numel() != channels
                                      : shape_numel(sub.value(v).shape) != channels)
    fail(ErrorKind::kUnsupported, "onednn: parameter of {} values for {} channels",
         shape_numel(sub.value(v).shape), channels);
  const dnnl::memory::desc md({channels}, dt::f32, tag::a);
  if (sub.value(v).is_constant()) return program.constant(sub.value(v).constant, md, md);
  if (values) return values->view(v, md);
  return program.input(kernel_input(sub, v, "parameter"), md);
}

// oneDNN 2.6's batch normalization in a jit kernel. Its ncsp one (every plain layout) and
// its nspc one for some channel counts (6, 22) are plain C++ loops: NASNet-A-Mobile's
// BatchNorm of 22 channels at 56x56 (channels-last, in its region) took 0.85 ms a run, 7 % of
// the model (ONEDNN_VERBOSE, 2026-12-05); the same as a binary Mul with an Add post-op: see
// emit_batch_norm.
bool batch_norm_runs_jit(const std::string& impl) {
  return impl.rfind("bnorm_jit", 0) == 0 || impl.rfind("bnorm_tbb_jit", 0) == 0 ||
         impl.rfind("jit", 0) == 0;
}

bool constant_params(const Graph& sub, const Node& bn) {
  for (size_t i = 1; i <= 4; ++i)
    if (bn.input(i) == kNoValue || !sub.value(bn.input(i)).is_constant()) return false;
  return true;
}

// Inference BatchNormalization with constant statistics as post-op steps: x * a + b per
// channel (a = scale / sqrt(var + eps), b = shift - mean * a), then the fused Relu.
std::vector<PostOp> affine_of_batch_norm(const Graph& sub, const Node& bn, bool relu) {
  const size_t rank = sub.value(bn.input(0)).shape.size();
  const int64_t c = sub.value(bn.input(0)).shape[1];
  const float eps = bn.attr_float("epsilon", 1e-5f);
  auto param = [&](int i) { return sub.value(bn.input(i)).constant.to_float_vector(); };
  const std::vector<float> scale = param(1), shift = param(2), mean = param(3), var = param(4);
  Shape per_channel(rank, 1);
  per_channel[1] = c;
  Tensor a(DType::kFloat32, per_channel), b(DType::kFloat32, per_channel);
  float* pa = a.data<float>();
  float* pb = b.data<float>();
  for (int64_t k = 0; k < c; ++k) {
    pa[k] = scale[k] / std::sqrt(var[k] + eps);
    pb[k] = shift[k] - mean[k] * pa[k];
  }
  auto per_channel_op = [&](dnnl::algorithm alg, Tensor operand) {
    PostOp op;
    op.kind = PostOp::Kind::kBinary;
    op.alg = alg;
    op.constant = std::move(operand);
    op.operand_shape = per_channel;
    return op;
  };
  std::vector<PostOp> ops = {per_channel_op(dnnl::algorithm::binary_mul, std::move(a)),
                             per_channel_op(dnnl::algorithm::binary_add, std::move(b))};
  if (relu) {
    PostOp r;
    r.alg = dnnl::algorithm::eltwise_relu;
    ops.push_back(r);
  }
  return ops;
}

}  // namespace

void emit_batch_norm(const Graph& sub, ValueMemories& values) {
  const Node& node = sub.node(0);
  const ValueId x = node.input(0), y = node.outputs[0];
  require_f32(sub, x, "BatchNormalization input");
  for (size_t i = 1; i < node.outputs.size(); ++i)
    if (node.outputs[i] != kNoValue || node.attr_int("training_mode", 0) != 0)
      fail(ErrorKind::kUnsupported, "onednn: BatchNormalization in training mode");
  const Shape& xs = sub.value(x).shape;
  if (xs.size() < 2) fail(ErrorKind::kUnsupported, "onednn: BatchNormalization of rank < 2");
  bool relu = false;
  if (sub.num_nodes() == 2 && sub.node(1).op_type == "Relu" && sub.node(1).input(0) == y) {
    relu = true;
  } else if (sub.num_nodes() != 1) {
    fail(ErrorKind::kUnsupported, "onednn: BatchNormalization fuses only a Relu");
  }
  const ValueId out = relu ? sub.node(1).outputs[0] : y;
  if (sub.outputs != std::vector<ValueId>{out})
    fail(ErrorKind::kUnsupported, "onednn: BatchNormalization's interior value is read outside");
  const int64_t c = xs[1];
  Program& program = values.program();
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: BatchNormalization input");
  // In the layout x already has (blocked inside a region).
  dnnl::memory x_mem = values.as_is(x, xs);
  flags f = flags::use_global_stats | flags::use_scale | flags::use_shift;
  if (relu) f = f | flags::fuse_norm_relu;
  dnnl::primitive_attr attr = base_attr();
  auto pd = create_pd("batch normalization", [&] {
    return dnnl::batch_normalization_forward::primitive_desc(
        dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_inference,
                                                x_mem.get_desc(), node.attr_float("epsilon", 1e-5f),
                                                f),
        attr, cpu_engine());
  });
  if (!batch_norm_runs_jit(pd.impl_info_str()) && constant_params(sub, node)) {
    emit_post_op_chain(affine_of_batch_norm(sub, node, relu), x, out, /*refuse_reference=*/false,
                       sub, values);
    return;
  }
  dnnl::memory y_mem = values.destination(out, x_mem.get_desc());
  dnnl::memory scale = channel_param(sub, node.input(1), c, program, &values);
  dnnl::memory shift = channel_param(sub, node.input(2), c, program, &values);
  dnnl::memory mean = channel_param(sub, node.input(3), c, program, &values);
  dnnl::memory var = channel_param(sub, node.input(4), c, program, &values);
  program.add(dnnl::batch_normalization_forward(pd), pd,
              {{DNNL_ARG_SRC, x_mem},
               {DNNL_ARG_DST, y_mem},
               {DNNL_ARG_SCALE, scale},
               {DNNL_ARG_SHIFT, shift},
               {DNNL_ARG_MEAN, mean},
               {DNNL_ARG_VARIANCE, var}});
  values.produced(out, y_mem);
}

namespace {

// A float32 input of rank 3-5 and known shape.
bool spatial_f32_input(const Graph& g, const Node& n) {
  if (n.inputs.empty() || n.input(0) == kNoValue || n.outputs.empty()) return false;
  const Value& x = g.value(n.input(0));
  return x.dtype == DType::kFloat32 && x.shape_known && x.shape.size() >= 3 && x.shape.size() <= 5;
}

}  // namespace

bool instance_norm_takes(const Graph& g, const Node& n) {
  return n.op_type == "InstanceNormalization" && spatial_f32_input(g, n) &&
         n.input(1) != kNoValue && n.input(2) != kNoValue && g.value(n.input(1)).is_constant() &&
         g.value(n.input(2)).is_constant();
}

bool lrn_takes(const Graph& g, const Node& n) {
  return n.op_type == "LRN" && spatial_f32_input(g, n) && n.attr_int("size", 0) > 0 &&
         n.attr_int("size", 0) % 2 == 1;
}

void emit_instance_norm(const Graph& sub, ValueMemories& values) {
  // oneDNN's batch normalization computing its own statistics per channel over batch and
  // space: with one image those are each (n, c) plane's own, as InstanceNormalization defines
  // them (population variance, like oneDNN's). It runs jit on blocked and channels-last data
  // only; elsewhere, and for N images (whose planes a batch normalization would pool), the
  // group norm step (group_norm.h).
  const Node& node = sub.node(0);
  if (sub.num_nodes() != 1)
    fail(ErrorKind::kUnsupported, "onednn: InstanceNormalization fuses nothing");
  const ValueId x = node.input(0), y = node.outputs[0];
  const Shape& xs = sub.value(x).shape;
  if (!instance_norm_takes(sub, node))
    fail(ErrorKind::kUnsupported,
         "onednn: InstanceNormalization of {} (rank 3-5, constant scale and bias)",
         shape_to_string(xs));
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: InstanceNormalization input");
  if (xs[0] != 1) return emit_instance_norm_step(sub, node, values);
  Program& program = values.program();
  const dnnl::memory x_mem = values.as_is(x, xs);
  auto pd = create_pd("instance normalization", [&] {
    return dnnl::batch_normalization_forward::primitive_desc(
        dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_inference,
                                                x_mem.get_desc(), node.attr_float("epsilon", 1e-5f),
                                                flags::use_scale | flags::use_shift),
        base_attr(), cpu_engine());
  });
  // Its plain-layout form is C++ loops, 9x slower than the reference backend (group_norm.h).
  if (!batch_norm_runs_jit(pd.impl_info_str())) return emit_instance_norm_step(sub, node, values);
  const dnnl::memory scale = channel_param(sub, node.input(1), xs[1], program, &values);
  const dnnl::memory shift = channel_param(sub, node.input(2), xs[1], program, &values);
  const dnnl::memory y_mem = values.destination(y, x_mem.get_desc());
  std::vector<std::pair<int, dnnl::memory>> args = {{DNNL_ARG_SRC, x_mem},
                                                    {DNNL_ARG_DST, y_mem},
                                                    {DNNL_ARG_SCALE, scale},
                                                    {DNNL_ARG_SHIFT, shift}};
  // The statistics it computes, where it writes them out: buffers the program owns.
  for (int arg : {DNNL_ARG_MEAN, DNNL_ARG_VARIANCE}) {
    const dnnl::memory::desc md = pd.query_md(dnnl::query::exec_arg_md, arg);
    if (md.get_size() != 0) args.emplace_back(arg, program.buffer(md));
  }
  program.add(dnnl::batch_normalization_forward(pd), pd, std::move(args));
  values.produced(y, y_mem);
}

void emit_lrn(const Graph& sub, ValueMemories& values) {
  // Across channels, in the layout the input has. oneDNN's window is symmetric, ONNX's
  // too for an odd size (floor and ceil of (size - 1) / 2 agree): even sizes are refused.
  const Node& node = sub.node(0);
  if (sub.num_nodes() != 1) fail(ErrorKind::kUnsupported, "onednn: LRN fuses nothing");
  const ValueId x = node.input(0), y = node.outputs[0];
  const Shape& xs = sub.value(x).shape;
  const int64_t size = node.attr_int("size", 0);
  if (!lrn_takes(sub, node))
    fail(ErrorKind::kUnsupported, "onednn: LRN of size {} over rank {}", size, xs.size());
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: LRN input");
  dnnl::memory x_mem = values.as_is(x, xs);
  auto pd = create_pd("lrn", [&] {
    return dnnl::lrn_forward::primitive_desc(
        dnnl::lrn_forward::desc(dnnl::prop_kind::forward_inference,
                                dnnl::algorithm::lrn_across_channels, x_mem.get_desc(), size,
                                node.attr_float("alpha", 1e-4f), node.attr_float("beta", 0.75f),
                                node.attr_float("bias", 1.0f)),
        base_attr(), cpu_engine());
  });
  Program& program = values.program();
  dnnl::memory y_mem = values.destination(y, pd.dst_desc());
  std::vector<std::pair<int, dnnl::memory>> args = {{DNNL_ARG_SRC, x_mem}, {DNNL_ARG_DST, y_mem}};
  if (pd.workspace_desc().get_size() != 0)
    args.emplace_back(DNNL_ARG_WORKSPACE, program.buffer(pd.workspace_desc()));
  program.add(dnnl::lrn_forward(pd), pd, std::move(args));
  values.produced(y, y_mem);
}

namespace {

// A per-channel vector of `n` values from a gamma/beta constant (a broadcast scalar too).
Tensor expand_channels(const Tensor& t, int64_t n) {
  if (t.numel() == n) return t;
  std::vector<float> v(n, t.data<float>()[0]);
  return Tensor::from_vector<float>({n}, v);
}

// Layer normalization of `x` over the trailing `norm_size` elements of each row, into `y`;
// `gamma`/`beta` (kNoValue: none) constants of `norm_size` values or one, or computed values
// of `norm_size`.
void emit_layer_norm(const Graph& sub, ValueMemories& values, ValueId x, ValueId y, ValueId gamma,
                     ValueId beta, float epsilon, int64_t norm_size) {
  const Shape& xs = sub.value(x).shape;
  const dnnl::memory::desc rows = plain_md({shape_numel(xs) / norm_size, norm_size});
  Program& program = values.program();
  std::vector<std::pair<int, dnnl::memory>> args = {{DNNL_ARG_SRC, values.view(x, rows)}};
  flags f = flags::none;
  const dnnl::memory::desc channels({norm_size}, dt::f32, tag::a);
  auto param = [&](ValueId v, flags flag, int arg) {
    if (v == kNoValue) return;
    f = f | flag;
    if (!sub.value(v).is_constant()) {
      // A computed scale or shift (the op's inputs): read as it is, when it has one value
      // per normalized element.
      args.emplace_back(arg, channel_param(sub, v, norm_size, program, &values));
      return;
    }
    require_f32(sub, v, "layer normalization parameter");
    const Tensor t = expand_channels(sub.value(v).constant, norm_size);
    if (t.numel() != norm_size)
      fail(ErrorKind::kUnsupported, "onednn: parameter of {} values for {} channels", t.numel(),
           norm_size);
    args.emplace_back(arg, program.constant(t, channels, channels));
  };
  param(gamma, flags::use_scale, DNNL_ARG_SCALE);
  param(beta, flags::use_shift, DNNL_ARG_SHIFT);
  auto pd = create_pd("layer normalization", [&] {
    return dnnl::layer_normalization_forward::primitive_desc(
        dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_inference, rows, epsilon,
                                                f),
        base_attr(), cpu_engine());
  });
  const dnnl::memory dst = values.destination(y, rows);
  args.emplace_back(DNNL_ARG_DST, dst);
  program.add(dnnl::layer_normalization_forward(pd), pd, std::move(args));
  values.produced(y, dst);
}

void emit_layer_norm_op(const Graph& sub, ValueMemories& values) {
  const Node& node = sub.node(0);
  if (sub.num_nodes() != 1)
    fail(ErrorKind::kUnsupported, "onednn: LayerNormalization fuses nothing");
  for (size_t i = 1; i < node.outputs.size(); ++i)
    if (node.outputs[i] != kNoValue)
      fail(ErrorKind::kUnsupported, "onednn: LayerNormalization's Mean/InvStdDev outputs");
  const ValueId x = node.input(0);
  require_f32(sub, x, "LayerNormalization input");
  const Shape& xs = sub.value(x).shape;
  int64_t axis = node.attr_int("axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(xs.size());
  if (axis < 0 || axis >= static_cast<int64_t>(xs.size()))
    fail(ErrorKind::kUnsupported, "onednn: LayerNormalization axis out of range");
  emit_layer_norm(sub, values, x, node.outputs[0], node.input(1), node.input(2),
                  node.attr_float("epsilon", 1e-5f), product(xs, axis, xs.size()));
}

void emit_softmax(const Graph& sub, ValueMemories& values) {
  const Node& node = sub.node(0);
  if (sub.num_nodes() != 1) fail(ErrorKind::kUnsupported, "onednn: Softmax fuses nothing");
  const ValueId x = node.input(0), y = node.outputs[0];
  require_f32(sub, x, "Softmax input");
  const Shape& xs = sub.value(x).shape;
  const int64_t rank = static_cast<int64_t>(xs.size());
  if (rank == 0) fail(ErrorKind::kUnsupported, "onednn: Softmax of a scalar");
  const bool legacy = sub.opset < 13;
  int64_t axis = node.attr_int("axis", legacy ? 1 : -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) fail(ErrorKind::kUnsupported, "onednn: Softmax axis out of range");
  // Before opset 13 the input is coerced to 2-D at `axis`.
  dnnl::memory::desc md =
      plain_md(legacy ? Shape{product(xs, 0, axis), product(xs, axis, rank)} : xs);
  const int softmax_axis = legacy ? 1 : static_cast<int>(axis);
  const auto inference = dnnl::prop_kind::forward_inference;
  // oneDNN 2.6's jit softmax needs the axis innermost in memory; over another axis it runs
  // its reference loops: a softmax over the channels of 1x21x160x160 (a segmentation head's)
  // took 35.8 ms, reference's 2.3. There the value is read with the axis innermost (for NCHW
  // and axis 1: NHWC), and the output follows. (Before opset 13 the axis is innermost.)
  dnnl::memory src;
  if (!legacy && product(xs, axis + 1, rank) > 1) {
    md = axis_innermost_md(to_dims(xs), softmax_axis);
    src = values.read(x, md);
  } else {
    src = values.view(x, md);
  }
  Program& program = values.program();
  // The softmax and logsoftmax primitives differ in type only.
  auto add = [&](auto pd, auto primitive) {
    const dnnl::memory dst = values.destination(y, md);
    program.add(primitive, pd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
    values.produced(y, dst);
  };
  if (node.op_type == "LogSoftmax") {
    auto pd = create_pd("logsoftmax", [&] {
      return dnnl::logsoftmax_forward::primitive_desc(
          dnnl::logsoftmax_forward::desc(inference, md, softmax_axis), base_attr(), cpu_engine());
    });
    add(pd, dnnl::logsoftmax_forward(pd));
  } else {
    auto pd = create_pd("softmax", [&] {
      return dnnl::softmax_forward::primitive_desc(
          dnnl::softmax_forward::desc(inference, md, softmax_axis), base_attr(), cpu_engine());
    });
    add(pd, dnnl::softmax_forward(pd));
  }
}

std::optional<float> scalar(const Graph& g, ValueId v) {
  if (v == kNoValue || !g.value(v).is_constant() || g.value(v).constant.numel() != 1)
    return std::nullopt;
  return static_cast<float>(g.value(v).constant.get_as_double(0));
}

// The producer of `v` when it is one of `nodes` with type `type`.
const Node* producer_in(const Graph& g, const std::vector<NodeId>& nodes, ValueId v,
                        const char* type) {
  if (v == kNoValue || g.value(v).producer < 0) return nullptr;
  const NodeId p = g.value(v).producer;
  if (!std::binary_search(nodes.begin(), nodes.end(), p)) return nullptr;
  const Node& n = g.node(p);
  return n.op_type == type && n.domain.empty() ? &n : nullptr;
}

// ReduceMean over the last axis only, keeping dims.
bool mean_over_last_axis(const Graph& g, const Node& n) {
  if (n.attr_int("keepdims", 1) == 0 || n.input(0) == kNoValue) return false;
  const int64_t rank = static_cast<int64_t>(g.value(n.input(0)).shape.size());
  std::vector<int64_t> axes = n.attr_ints("axes", {});
  if (n.input(1) != kNoValue) {
    if (!g.value(n.input(1)).is_constant()) return false;
    axes = g.value(n.input(1)).constant.to_int_vector();
  }
  return axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
}

// A constant that varies along the last axis only (or not at all): gamma/beta.
bool last_axis_constant(const Graph& g, ValueId v, const Shape& xs) {
  if (v == kNoValue || !g.value(v).is_constant() || g.value(v).dtype != DType::kFloat32)
    return false;
  const Shape& s = g.value(v).shape;
  if (s.size() > xs.size()) return false;
  const Shape p = pad_rank(s, xs.size());
  for (size_t i = 0; i + 1 < p.size(); ++i)
    if (p[i] != 1) return false;
  return p.empty() || p.back() == xs.back() || p.back() == 1;
}

// Every node of `sub`, in order: an emitter's group is all of its subgraph.
std::vector<NodeId> all_nodes(const Graph& sub) {
  std::vector<NodeId> all(sub.num_nodes());
  std::iota(all.begin(), all.end(), 0);
  return all;
}

// An RMSNorm over rows of `n` floats: y = x / sqrt(mean(x^2) + eps) [* gamma], each row in
// two passes while it is in cache (the sum of squares, then the scaling).
class RmsNormStep {
 public:
  RmsNormStep(int64_t rows, int64_t n, float epsilon, std::vector<float> gamma)
      : rows_(rows), n_(n), epsilon_(epsilon), gamma_(std::move(gamma)) {}

  dnnl_status_t run(const float* x, float* y) const {
    // On the calling thread alone inside a team (a lane of a concurrent stage) and for small
    // tensors: a fork/join of the OpenMP team (2-4 us here) costs more than a 32 x 128
    // RMSNorm's arithmetic (~1 us).
    const int team =
        omp_in_parallel() || rows_ * n_ < kParallelFloats ? 1 : std::max(1, omp_get_max_threads());
    if (team == 1) {
      for (int64_t r = 0; r < rows_; ++r) row(x + r * n_, y + r * n_);
      return dnnl_success;
    }
#pragma omp parallel for num_threads(team) schedule(static)
    for (int64_t r = 0; r < rows_; ++r) row(x + r * n_, y + r * n_);
    return dnnl_success;
  }

 private:
  static constexpr int64_t kParallelFloats = 32 * 1024;
  static constexpr int kLanes = 16;  // partial sums GCC keeps in one AVX-512 register

  void row(const float* x, float* y) const {
    float part[kLanes] = {};
    const int64_t body = n_ - n_ % kLanes;
    for (int64_t j = 0; j < body; j += kLanes)
      for (int l = 0; l < kLanes; ++l) part[l] += x[j + l] * x[j + l];
    float sum = 0;
    for (int l = 0; l < kLanes; ++l) sum += part[l];
    for (int64_t j = body; j < n_; ++j) sum += x[j] * x[j];
    const float scale = 1.0f / std::sqrt(sum / static_cast<float>(n_) + epsilon_);
    if (gamma_.empty()) {
      for (int64_t j = 0; j < n_; ++j) y[j] = x[j] * scale;
    } else {
      const float* g = gamma_.data();
      for (int64_t j = 0; j < n_; ++j) y[j] = x[j] * scale * g[j];
    }
  }

  int64_t rows_, n_;
  float epsilon_;
  std::vector<float> gamma_;  // n values, or empty
};

void emit_layer_norm_decomposition(const Graph& sub, ValueMemories& values) {
  std::optional<LayerNormSpec> spec = match_layer_norm(sub, all_nodes(sub));
  if (!spec) fail(ErrorKind::kUnsupported, "onednn: not a LayerNorm decomposition it knows");
  if (sub.outputs != std::vector<ValueId>{spec->out})
    fail(ErrorKind::kUnsupported, "onednn: LayerNorm's interior values are read outside");
  emit_layer_norm(sub, values, spec->x, spec->out, spec->gamma, spec->beta, spec->epsilon,
                  sub.value(spec->x).shape.back());
}

}  // namespace

std::optional<LayerNormSpec> match_layer_norm(const Graph& g, const std::vector<NodeId>& nodes) {
  std::vector<NodeId> sorted = nodes;
  std::sort(sorted.begin(), sorted.end());
  // Walk back from the last node: [Add beta] <- [Mul gamma] <- Div.
  const Node& last = g.node(sorted.back());
  if (last.outputs.empty()) return std::nullopt;
  LayerNormSpec spec;
  spec.out = last.outputs[0];
  ValueId v = spec.out;
  const Node* div = producer_in(g, sorted, v, "Div");
  size_t count = 7;
  auto take_affine = [&](const char* type, ValueId* param) {
    const Node* n = producer_in(g, sorted, v, type);
    if (!n || n->inputs.size() != 2) return;
    const bool first = g.value(n->inputs[0]).is_constant();
    *param = n->inputs[first ? 0 : 1];
    v = n->inputs[first ? 1 : 0];
    ++count;
  };
  if (!div) {
    take_affine("Add", &spec.beta);
    if (!(div = producer_in(g, sorted, v, "Div"))) {
      take_affine("Mul", &spec.gamma);
      div = producer_in(g, sorted, v, "Div");
    }
  }
  if (!div || sorted.size() != count) return std::nullopt;
  const Node* sub = producer_in(g, sorted, div->input(0), "Sub");
  const Node* sqrt = producer_in(g, sorted, div->input(1), "Sqrt");
  if (!sub || !sqrt) return std::nullopt;
  const Node* add = producer_in(g, sorted, sqrt->input(0), "Add");
  if (!add || add->inputs.size() != 2) return std::nullopt;
  const bool eps_first = g.value(add->inputs[0]).is_constant();
  std::optional<float> eps = scalar(g, add->inputs[eps_first ? 0 : 1]);
  const Node* var = producer_in(g, sorted, add->inputs[eps_first ? 1 : 0], "ReduceMean");
  if (!eps || !var) return std::nullopt;
  const Node* pow = producer_in(g, sorted, var->input(0), "Pow");
  if (!pow || pow->input(0) != sub->outputs[0] || scalar(g, pow->input(1)) != 2.0f)
    return std::nullopt;
  const Node* mean = producer_in(g, sorted, sub->input(1), "ReduceMean");
  if (!mean || mean->input(0) != sub->input(0)) return std::nullopt;
  if (!mean_over_last_axis(g, *mean) || !mean_over_last_axis(g, *var)) return std::nullopt;
  spec.x = sub->input(0);
  spec.epsilon = *eps;
  const Shape& xs = g.value(spec.x).shape;
  if (xs.empty() || g.value(spec.x).dtype != DType::kFloat32 || g.value(spec.out).shape != xs)
    return std::nullopt;
  if ((spec.gamma != kNoValue && !last_axis_constant(g, spec.gamma, xs)) ||
      (spec.beta != kNoValue && !last_axis_constant(g, spec.beta, xs)))
    return std::nullopt;
  return spec;
}

std::optional<RmsNormSpec> match_rms_norm(const Graph& g, const std::vector<NodeId>& nodes) {
  if (nodes.empty()) return std::nullopt;
  std::vector<NodeId> sorted = nodes;
  std::sort(sorted.begin(), sorted.end());
  const Node& last = g.node(sorted.back());
  if (last.outputs.empty()) return std::nullopt;
  RmsNormSpec spec;
  spec.out = last.outputs[0];
  ValueId v = spec.out;
  size_t count = 5;  // Pow, ReduceMean, Add, Sqrt, and the Div that divides x or inverts
  // Walk back from the last node: [Mul gamma] <- Div(x, sqrt) or Mul(x, inverse of sqrt).
  if (const Node* mul = producer_in(g, sorted, v, "Mul"); mul && mul->inputs.size() == 2) {
    const bool first = g.value(mul->input(0)).is_constant();
    if (first || g.value(mul->input(1)).is_constant()) {
      spec.gamma = mul->inputs[first ? 0 : 1];
      v = mul->inputs[first ? 1 : 0];
      ++count;
    }
  }
  const Node* sqrt = nullptr;
  if (const Node* div = producer_in(g, sorted, v, "Div")) {
    spec.x = div->input(0);
    sqrt = producer_in(g, sorted, div->input(1), "Sqrt");
  } else if (const Node* mul = producer_in(g, sorted, v, "Mul"); mul && mul->inputs.size() == 2) {
    ++count;
    for (size_t i = 0; i < 2 && !sqrt; ++i) {
      const Node* inverse = producer_in(g, sorted, mul->inputs[i], "Reciprocal");
      ValueId root = inverse ? inverse->input(0) : kNoValue;
      if (const Node* div = producer_in(g, sorted, mul->inputs[i], "Div");
          div && scalar(g, div->input(0)) == 1.0f) {
        inverse = div;
        root = div->input(1);
      }
      if (!inverse) continue;
      spec.x = mul->inputs[1 - i];
      sqrt = producer_in(g, sorted, root, "Sqrt");
    }
  }
  if (!sqrt || sorted.size() != count) return std::nullopt;
  const Node* add = producer_in(g, sorted, sqrt->input(0), "Add");
  if (!add || add->inputs.size() != 2) return std::nullopt;
  const bool eps_first = g.value(add->inputs[0]).is_constant();
  const std::optional<float> eps = scalar(g, add->inputs[eps_first ? 0 : 1]);
  const Node* mean = producer_in(g, sorted, add->inputs[eps_first ? 1 : 0], "ReduceMean");
  if (!eps || !mean || !mean_over_last_axis(g, *mean)) return std::nullopt;
  const Node* pow = producer_in(g, sorted, mean->input(0), "Pow");
  if (!pow || pow->input(0) != spec.x || scalar(g, pow->input(1)) != 2.0f) return std::nullopt;
  spec.epsilon = *eps;
  const Shape& xs = g.value(spec.x).shape;
  if (xs.empty() || xs.back() <= 0 || g.value(spec.x).dtype != DType::kFloat32 ||
      g.value(spec.out).shape != xs)
    return std::nullopt;
  if (spec.gamma != kNoValue && !last_axis_constant(g, spec.gamma, xs)) return std::nullopt;
  return spec;
}

bool rms_norm_group(const Graph& sub) {
  const std::optional<RmsNormSpec> spec = match_rms_norm(sub, all_nodes(sub));
  return spec && sub.outputs == std::vector<ValueId>{spec->out};
}

void emit_rms_norm(const Graph& sub, ValueMemories& values) {
  const std::optional<RmsNormSpec> spec = match_rms_norm(sub, all_nodes(sub));
  if (!spec) fail(ErrorKind::kUnsupported, "onednn: not an RMSNorm decomposition it knows");
  if (sub.outputs != std::vector<ValueId>{spec->out})
    fail(ErrorKind::kUnsupported, "onednn: RMSNorm's interior values are read outside");
  const Shape& xs = sub.value(spec->x).shape;
  const int64_t n = xs.back();
  std::vector<float> gamma;
  if (spec->gamma != kNoValue) {
    const std::span<const float> g = sub.value(spec->gamma).constant.span<float>();
    if (static_cast<int64_t>(g.size()) == n)
      gamma.assign(g.begin(), g.end());
    else
      gamma.assign(n, g[0]);  // one value for the whole row (last_axis_constant)
  }
  const dnnl::memory::desc md = plain_md(xs);
  const dnnl::memory src = values.read(spec->x, md);
  const dnnl::memory dst = values.destination(spec->out, md);
  auto step =
      std::make_shared<const RmsNormStep>(shape_numel(xs) / n, n, spec->epsilon, std::move(gamma));
  values.program().add_unary_custom(
      kRmsNormStep, [step](const float* x, float* y) { return step->run(x, y); }, src, dst);
  values.produced(spec->out, dst);
}

void emit_norm(const Graph& sub, ValueMemories& values) {
  const std::string& type = sub.node(0).op_type;
  if (type == "LayerNormalization") return emit_layer_norm_op(sub, values);
  if (type == "Softmax" || type == "LogSoftmax") return emit_softmax(sub, values);
  if (type == "ReduceMean") return emit_layer_norm_decomposition(sub, values);
  fail(ErrorKind::kUnsupported, "onednn: no normalization kernel for {}", type);
}

std::optional<std::vector<NodeId>> layer_norm_nodes(
    const Graph& g, const std::vector<std::vector<NodeId>>& consumers, NodeId mean) {
  // Forward from the first ReduceMean: Sub(x, mean) -> Pow 2 -> ReduceMean -> Add eps -> Sqrt
  // -> Div(centered, .) [-> Mul gamma] [-> Add beta], each value read only where it goes next.
  auto only_reader = [&](ValueId v, const char* type) -> NodeId {
    const NodeId r = sole_reader(g, consumers, v);
    return r >= 0 && g.node(r).op_type == type ? r : -1;
  };
  const Node& m = g.node(mean);
  if (m.op_type != "ReduceMean" || m.outputs.empty() || !mean_over_last_axis(g, m))
    return std::nullopt;
  const NodeId sub = only_reader(m.outputs[0], "Sub");
  if (sub < 0 || g.node(sub).input(0) != m.input(0)) return std::nullopt;
  const ValueId centered = g.node(sub).outputs[0];
  if (consumers[centered].size() != 2 || is_graph_output(g, centered)) return std::nullopt;
  NodeId pow = -1, div = -1;
  for (NodeId r : consumers[centered]) {
    if (g.node(r).op_type == "Pow") pow = r;
    if (g.node(r).op_type == "Div") div = r;
  }
  if (pow < 0 || div < 0) return std::nullopt;
  const NodeId var = only_reader(g.node(pow).outputs[0], "ReduceMean");
  const NodeId eps = var < 0 ? -1 : only_reader(g.node(var).outputs[0], "Add");
  const NodeId sqrt = eps < 0 ? -1 : only_reader(g.node(eps).outputs[0], "Sqrt");
  if (sqrt < 0 || only_reader(g.node(sqrt).outputs[0], "Div") != div) return std::nullopt;
  std::vector<NodeId> nodes = {mean, sub, pow, var, eps, sqrt, div};
  std::vector<std::vector<NodeId>> tries = {nodes};
  ValueId out = g.node(div).outputs[0];
  for (const char* affine : {"Mul", "Add"}) {
    const NodeId n = only_reader(out, affine);
    if (n < 0) continue;
    nodes.push_back(n);
    tries.push_back(nodes);
    out = g.node(n).outputs[0];
  }
  for (auto it = tries.rbegin(); it != tries.rend(); ++it) {
    std::vector<NodeId> sorted = *it;
    std::sort(sorted.begin(), sorted.end());
    if (match_layer_norm(g, sorted)) return sorted;
  }
  return std::nullopt;
}

std::optional<std::vector<NodeId>> rms_norm_nodes(const Graph& g,
                                                  const std::vector<std::vector<NodeId>>& consumers,
                                                  NodeId pow) {
  // Forward from the Pow: ReduceMean -> Add eps -> Sqrt -> Div(x, .), or Div(1, .) or
  // Reciprocal -> Mul with x; [-> Mul gamma]; each value read only where it goes next.
  auto next = [&](NodeId n) {
    return n < 0 ? -1 : sole_reader(g, consumers, g.node(n).outputs[0]);
  };
  if (g.node(pow).op_type != "Pow" || g.node(pow).outputs.empty()) return std::nullopt;
  std::vector<NodeId> nodes = {pow};
  for (NodeId n = next(pow); n >= 0 && nodes.size() < 7; n = next(n)) nodes.push_back(n);
  // The longest prefix that is an RMSNorm: with its scale, without, or none.
  for (size_t size = nodes.size(); size >= 5; --size) {
    std::vector<NodeId> prefix(nodes.begin(), nodes.begin() + static_cast<std::ptrdiff_t>(size));
    std::sort(prefix.begin(), prefix.end());
    if (match_rms_norm(g, prefix)) return prefix;
  }
  return std::nullopt;
}

bool in_layer_norm(const Graph& g, const std::vector<std::vector<NodeId>>& consumers,
                   NodeId reduce_mean) {
  // The head itself, or the variance: a mean of Pow(Sub(x, head's mean)).
  auto producer = [&](ValueId v, const char* type) -> NodeId {
    const NodeId p = v == kNoValue ? -1 : g.value(v).producer;
    return p >= 0 && g.node(p).op_type == type ? p : -1;
  };
  NodeId head = reduce_mean;
  if (const NodeId pow = producer(g.node(reduce_mean).input(0), "Pow"); pow >= 0)
    if (const NodeId sub = producer(g.node(pow).input(0), "Sub"); sub >= 0)
      head = producer(g.node(sub).input(1), "ReduceMean");
  if (head < 0) return false;
  const std::optional<std::vector<NodeId>> nodes = layer_norm_nodes(g, consumers, head);
  return nodes && std::binary_search(nodes->begin(), nodes->end(), reduce_mean);
}

std::unique_ptr<Kernel> compile_norm(const Graph& sub) {
  const std::string& type = sub.node(0).op_type;
  if (type == "BatchNormalization") return compile_group(sub, emit_batch_norm);
  if (type == "InstanceNormalization") return compile_group(sub, emit_instance_norm);
  if (type == "LRN") return compile_group(sub, emit_lrn);
  return compile_group(sub, emit_norm);
}

}  // namespace collage::onednn
