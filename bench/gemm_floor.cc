// A model's GEMM floor: its matrix products, each distinct shape timed alone and hot at the
// fastest library form collage builds it with, summed over the nodes.
// - MatMul and Gemm nodes: oneDNN's matmul (constant weights in its own layout, packed once)
//   and OpenBLAS's sgemm. oneDNN is the fastest fp32 GEMM among collage's CPU backends on
//   transformer shapes here (it is what the tuned plans pick).
// - Conv nodes (implicit GEMMs; 1-D to 3-D, any groups, strides, dilations and pads): oneDNN's
//   convolution with its bias and no other post-op, in each activation layout a plan's
//   onednn-graph region runs it in: the layout oneDNN picks (format_tag::any: channels-last
//   brgconv on AVX-512), channel-blocked (nChw16c: its jit, jit_1x1 and jit_dw kernels), and
//   its Winograd kernel where it applies (2-D 3x3 stride 1, one group). The fastest form per
//   shape counts. CNN plans run their convolutions as oneDNN primitives (bench/results/cnn:
//   every zoo model's tuned plan is one onednn-graph region), and the other CPU backends'
//   convolutions are slower here (XNNPACK's whole-model region 1.2x oneDNN's on
//   MobileNetV2, libxsmm's, Halide's and libtorch's further behind); collage's own
//   channels-last Winograd (winograd_conv.h) is not counted, so on a model with stride-1
//   3x3 convs the floor is no bound on collage's plans.
// A plan runs its products no faster than the library does alone with the operands in
// cache; everything else the model does (Softmax, LayerNorm, GELU, pools, the convs' tails,
// copies) comes on top. So a speed target that needs less time than this sum is out of reach
// for any plan built from these libraries in fp32 on this machine, and a plan's distance from
// it is what its other work and its kernels' in-model losses cost (issue 16's ViT-B/16,
// issue 15's MobileNetV2; docs/DESIGN.md, "Transformers (issue 16)" and "MobileNetV2 against
// its kernels alone").
//
//   build/bench/gemm_floor MODEL.onnx [--threads 2] [--repeat 50]
//
// Prints one line per distinct shape and the sum; run it beside ORT and `collage run` in the
// same minutes (this shared machine's speed drifts 10-20 % over an hour).
#include <cblas.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <dnnl.hpp>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/kernels.h"
#include "collage/model.h"
#include "runtime/interleaved_timing.h"
#include "runtime/threads.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;

// One matrix product: `batch` independent [m, k] x [k, n] products.
struct GemmShape {
  int64_t batch, m, k, n;
  bool constant_b;  // B is a weight (packed once) rather than an activation
  auto tie() const { return std::tie(batch, m, k, n, constant_b); }
  bool operator<(const GemmShape& o) const { return tie() < o.tie(); }
  double flops() const { return 2.0 * static_cast<double>(batch * m * k * n); }
};

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

// MatMul with both operands of rank >= 2 (batch dims broadcast to the output's) and Gemm
// (transA/transB: the product's sizes are the same). Other forms (rank-1 operands) are
// skipped: the zoo's transformers have none.
std::map<GemmShape, int> gemm_shapes(const Graph& graph) {
  std::map<GemmShape, int> count;
  for (const Node& node : graph.nodes()) {
    if (node.op_type != "MatMul" && node.op_type != "Gemm") continue;
    const Value& a = graph.value(node.inputs[0]);
    const Value& b = graph.value(node.inputs[1]);
    const Shape& out = graph.value(node.outputs[0]).shape;
    if (a.shape.size() < 2 || b.shape.size() < 2) continue;
    const bool trans_a = node.op_type == "Gemm" && node.attr_int("transA", 0) != 0;
    const int64_t k = trans_a ? a.shape[0] : a.shape.back();
    // A B without batch dims is one matrix for all of A's rows: one [rows, k] x [k, n].
    const bool one_b = b.shape.size() == 2;
    GemmShape s{one_b ? 1 : product(out, 0, out.size() - 2),
                one_b ? product(out, 0, out.size() - 1) : out[out.size() - 2], k, out.back(),
                one_b && b.is_constant()};
    ++count[s];
  }
  return count;
}

// A shape's median and fastest sample: the floor from the medians is the typical one; the
// one from the fastest samples (every product at its least disturbed run on this shared
// machine, all at once) is the most optimistic.
struct Timing {
  double median_ms, min_ms;
};

template <typename Run>
Timing time_ms(int repeat, Run run) {
  for (int i = 0; i < 5; ++i) run();  // JIT, first touch, caches
  std::vector<double> samples;
  for (int i = 0; i < repeat; ++i) {
    auto t0 = Clock::now();
    run();
    samples.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return {median_of(samples), *std::min_element(samples.begin(), samples.end())};
}

Timing onednn_ms(const GemmShape& s, int repeat) {
  using dnnl::memory;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  // One product as a 2-D matmul, as the onednn backend folds it (matmul_kernel.cc): oneDNN
  // 2.6 runs [1, m, k] x [1, k, n] as a batch of one 15-20 % slower than [m, k] x [k, n]
  // (197 x 3072 x 768: 3.09 vs 2.56 ms, same brg:avx512_core implementation).
  auto dims = [&](int64_t rows, int64_t cols) {
    return s.batch == 1 ? memory::dims{rows, cols} : memory::dims{s.batch, rows, cols};
  };
  const memory::format_tag plain = s.batch == 1 ? memory::format_tag::ab : memory::format_tag::abc;
  const memory::desc a_desc(dims(s.m, s.k), memory::data_type::f32, plain);
  const memory::desc c_desc(dims(s.m, s.n), memory::data_type::f32, plain);
  // Weights in the layout the primitive prefers (a plan packs them once at compile).
  const memory::desc b_desc(dims(s.k, s.n), memory::data_type::f32,
                            s.constant_b ? memory::format_tag::any : plain);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, b_desc, c_desc), engine);
  memory a(a_desc, engine), b(pd.weights_desc(), engine), c(c_desc, engine);
  std::fill_n(static_cast<float*>(a.get_data_handle()), a_desc.get_size() / sizeof(float), 0.5f);
  std::fill_n(static_cast<float*>(b.get_data_handle()),
              pd.weights_desc().get_size() / sizeof(float), 0.25f);
  dnnl::matmul matmul(pd);
  return time_ms(repeat, [&] {
    matmul.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
  });
}

Timing openblas_ms(const GemmShape& s, int repeat) {
  std::vector<float> a(s.batch * s.m * s.k, 0.5f), b(s.batch * s.k * s.n, 0.25f),
      c(s.batch * s.m * s.n);
  return time_ms(repeat, [&] {
    for (int64_t i = 0; i < s.batch; ++i)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, s.n, s.k, 1.0f,
                  a.data() + i * s.m * s.k, s.k, b.data() + i * s.k * s.n, s.n, 0.0f,
                  c.data() + i * s.m * s.n, s.n);
  });
}

// One convolution as oneDNN takes it: channels, spatial sizes, filter, strides, dilations (0 =
// none, oneDNN's convention) and begin/end pads per spatial axis.
struct ConvShape {
  int64_t ic = 0, oc = 0, group = 1;
  std::vector<int64_t> in, out, kernel, strides, dilations, pad_begin, pad_end;
  auto tie() const {
    return std::tie(ic, oc, group, in, out, kernel, strides, dilations, pad_begin, pad_end);
  }
  bool operator<(const ConvShape& o) const { return tie() < o.tie(); }
  double flops() const {
    double f = 2.0 * static_cast<double>(oc * (ic / group));
    for (size_t i = 0; i < out.size(); ++i) f *= static_cast<double>(out[i] * kernel[i]);
    return f;
  }
  std::string name() const {
    auto joined = [](const std::vector<int64_t>& v) {
      return fmt::format("{}", fmt::join(v, "x"));
    };
    return fmt::format("{}{}->{} {} k{} s{}", group > 1 ? fmt::format("g{} ", group) : "", ic, oc,
                       joined(in), joined(kernel), joined(strides));
  }
};

// A float32 Conv node with constant weights and known shapes at batch 1 (the forms the onednn
// backend builds as one convolution primitive); none for another Conv.
std::optional<ConvShape> conv_shape(const Graph& graph, const Node& node) {
  if (node.op_type != "Conv" || !node.domain.empty()) return std::nullopt;
  const Value& x = graph.value(node.inputs[0]);
  const Value& w = graph.value(node.inputs[1]);
  const Value& y = graph.value(node.outputs[0]);
  const size_t rank = x.shape.size();
  if (x.dtype != DType::kFloat32 || !x.shape_known || !y.shape_known || !w.is_constant() ||
      rank < 3 || rank > 5 || x.shape[0] != 1)
    return std::nullopt;
  const size_t axes = rank - 2;
  ConvShape c;
  c.ic = x.shape[1];
  c.oc = y.shape[1];
  c.group = node.attr_int("group", 1);
  c.in.assign(x.shape.begin() + 2, x.shape.end());
  c.out.assign(y.shape.begin() + 2, y.shape.end());
  c.kernel.assign(w.shape.begin() + 2, w.shape.end());
  c.strides = node.attr_ints("strides", std::vector<int64_t>(axes, 1));
  const std::vector<int64_t> dilations = node.attr_ints("dilations", std::vector<int64_t>(axes, 1));
  const std::vector<int64_t> pads = node.attr_ints("pads", std::vector<int64_t>(2 * axes, 0));
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  for (size_t i = 0; i < axes; ++i) {
    c.dilations.push_back(dilations[i] - 1);
    const int64_t span = (c.kernel[i] - 1) * dilations[i] + 1;
    // SAME_*: the total pad the output size needs, split as ONNX says; the end pad oneDNN
    // wants is then what the output size implies (ONNX allows more).
    const int64_t total = std::max<int64_t>(0, (c.out[i] - 1) * c.strides[i] + span - c.in[i]);
    int64_t begin = pads[i];
    if (auto_pad == "SAME_UPPER") begin = total / 2;
    if (auto_pad == "SAME_LOWER") begin = total - total / 2;
    if (auto_pad == "VALID") begin = 0;
    c.pad_begin.push_back(begin);
    c.pad_end.push_back((c.out[i] - 1) * c.strides[i] + span - c.in[i] - begin);
  }
  return c;
}

// Every Conv node conv_shape takes, by shape; `skipped` counts the other Conv nodes.
std::map<ConvShape, int> conv_shapes(const Graph& graph, int& skipped) {
  std::map<ConvShape, int> count;
  for (const Node& node : graph.nodes()) {
    if (node.op_type != "Conv") continue;
    if (std::optional<ConvShape> c = conv_shape(graph, node))
      ++count[*c];
    else
      ++skipped;
  }
  return count;
}

// A 1x1 conv, its elementwise tail and the 3x3 depthwise conv reading it: oneDNN runs the
// two convs as one primitive (the depthwise conv a post-op, append_dw), which the onednn
// backends build where it is faster (docs/DESIGN.md, "Cross-op fusion: 1x1 conv + depthwise
// conv"). Found by the backend's own rule (grow_conv_dw); the floor takes the faster of the
// pair as one primitive and its two convs alone.
struct ConvPair {
  ConvShape pointwise, depthwise;
  auto tie() const { return std::tie(pointwise, depthwise); }
  bool operator<(const ConvPair& o) const { return tie() < o.tie(); }
};

std::map<ConvPair, int> conv_pairs(const Graph& graph) {
  std::map<ConvPair, int> count;
  std::set<NodeId> heads;  // grow_conv_dw proposes each pair once per prefix of its tail
  for (const Match& match : onednn::grow_conv_dw(graph)) {
    std::vector<NodeId> convs;
    for (NodeId n : match.nodes)
      if (graph.node(n).op_type == "Conv") convs.push_back(n);
    if (convs.size() != 2 || !heads.insert(convs[0]).second) continue;
    const std::optional<ConvShape> pw = conv_shape(graph, graph.node(convs[0])),
                                   dw = conv_shape(graph, graph.node(convs[1]));
    if (pw && dw) ++count[ConvPair{*pw, *dw}];
  }
  return count;
}

// A single convolution's implementation the onednn backends run in a region: not oneDNN's
// reference loops.
bool jit_conv(const std::string& implementation) {
  return !onednn::is_reference_impl(implementation);
}

// The fastest form of a convolution, and which it was.
struct ConvTiming {
  Timing timing{std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  std::string implementation;
};

// A convolution primitive built from `desc` with `post` (a depthwise post-op or none) and a
// scratchpad of the caller's, as collage builds them (onednn::base_attr; with a
// library-owned one, MobileNetV2's one-pass 16 -> 96 1x1 + depthwise kernel ran 0.17 ms a
// run against 0.125: measured here), timed alone and hot with every argument it takes; none
// where oneDNN has no such primitive or only an implementation the onednn backends refuse
// (`acceptable` says which they take).
std::optional<ConvTiming> time_conv_primitive(const dnnl::convolution_forward::desc& desc,
                                              const dnnl::post_ops& post,
                                              bool (*acceptable)(const std::string&), int repeat) {
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::primitive_attr attr = onednn::base_attr();
  attr.set_post_ops(post);
  std::optional<dnnl::convolution_forward::primitive_desc> pd;
  try {
    pd.emplace(desc, attr, engine);
  } catch (const dnnl::error&) {
    return std::nullopt;  // no such form for this shape (a blocked layout, Winograd)
  }
  const std::string impl = pd->impl_info_str();
  if (!acceptable(impl)) return std::nullopt;
  std::unordered_map<int, dnnl::memory> args;
  for (int arg :
       {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD,
        DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS, DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS}) {
    const dnnl::memory::desc md = pd->query_md(dnnl::query::exec_arg_md, arg);
    if (md.get_size() == 0) continue;
    dnnl::memory m(md, engine);
    std::fill_n(static_cast<float*>(m.get_data_handle()), md.get_size() / sizeof(float), 0.25f);
    args.emplace(arg, m);
  }
  dnnl::stream stream(engine);
  dnnl::convolution_forward conv(*pd);
  return ConvTiming{time_ms(repeat,
                            [&] {
                              conv.execute(stream, args);
                              stream.wait();
                            }),
                    impl};
}

// The fastest of a convolution's forms; none where oneDNN builds only reference loops.
std::optional<ConvTiming> onednn_conv_ms(const ConvShape& c, int repeat) {
  using dnnl::memory;
  memory::dims src{1, c.ic}, dst{1, c.oc}, weights;
  src.insert(src.end(), c.in.begin(), c.in.end());
  dst.insert(dst.end(), c.out.begin(), c.out.end());
  if (c.group > 1)
    weights = {c.group, c.oc / c.group, c.ic / c.group};
  else
    weights = {c.oc, c.ic};
  weights.insert(weights.end(), c.kernel.begin(), c.kernel.end());
  // The layout oneDNN picks, and channel-blocked; a few input channels (an image's 3) are
  // read plain into a blocked output, as a region reads its input tensor.
  const memory::desc any_src(src, memory::data_type::f32, memory::format_tag::any),
      any_dst(dst, memory::data_type::f32, memory::format_tag::any),
      blocked_src = onednn::channel_blocked_md(src), blocked_dst = onednn::channel_blocked_md(dst);
  struct Form {
    memory::desc src, dst;
    dnnl::algorithm algorithm;
  };
  std::vector<Form> forms = {
      {any_src, any_dst, dnnl::algorithm::convolution_direct},
      {c.ic < 16 ? onednn::plain_md(Shape(src.begin(), src.end())) : blocked_src, blocked_dst,
       dnnl::algorithm::convolution_direct}};
  const bool winograd_shape =
      c.in.size() == 2 && c.group == 1 && c.kernel == std::vector<int64_t>{3, 3} &&
      c.strides == std::vector<int64_t>{1, 1} && c.dilations == std::vector<int64_t>{0, 0};
  if (winograd_shape)
    forms.push_back({blocked_src, blocked_dst, dnnl::algorithm::convolution_winograd});
  ConvTiming best;
  for (const Form& form : forms) {
    const std::optional<ConvTiming> t = time_conv_primitive(
        dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_inference, form.algorithm, form.src,
            memory::desc(weights, memory::data_type::f32, memory::format_tag::any),
            memory::desc({c.oc}, memory::data_type::f32, memory::format_tag::a), form.dst,
            c.strides, c.dilations, c.pad_begin, c.pad_end),
        dnnl::post_ops(), jit_conv, repeat);
    if (t && t->timing.median_ms < best.timing.median_ms) best = *t;
  }
  if (best.implementation.empty()) return std::nullopt;
  return best;
}

// The pair as one primitive: the pointwise conv with the depthwise one as its post-op, in
// the layout oneDNN picks and channel-blocked (where its one-pass jit_1x1 form is); +inf
// where oneDNN builds neither as jit kernels.
Timing onednn_pair_ms(const ConvPair& p, int repeat) {
  using dnnl::memory;
  const ConvShape& c = p.pointwise;
  const memory::dims src{1, c.ic, c.in[0], c.in[1]}, mid{1, c.oc, c.out[0], c.out[1]};
  Timing best{std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  for (bool blocked : {false, true}) {
    auto activations = [&](const memory::dims& dims) {
      return blocked ? onednn::channel_blocked_md(dims)
                     : memory::desc(dims, memory::data_type::f32, memory::format_tag::any);
    };
    dnnl::post_ops post;
    post.append_dw(memory::data_type::f32, memory::data_type::f32, memory::data_type::f32, 3,
                   p.depthwise.strides[0], 1, 0, {});
    const std::optional<ConvTiming> t = time_conv_primitive(
        dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
            activations(src),
            memory::desc({c.oc, c.ic, 1, 1}, memory::data_type::f32, memory::format_tag::any),
            memory::desc({c.oc}, memory::data_type::f32, memory::format_tag::a), activations(mid),
            {1, 1}, {0, 0}, {0, 0}, {0, 0}),
        post, onednn::jit_fused, repeat);
    if (t && t->timing.median_ms < best.median_ms) best = t->timing;
  }
  return best;
}

int run(int argc, char** argv) {
  CLI::App app{
      "a model's GEMM floor: its MatMul/Gemm and Conv nodes timed alone, hot, fastest form"};
  std::string path;
  int threads = 2, repeat = 50;
  app.add_option("model", path, "ONNX model")->required()->check(CLI::ExistingFile);
  app.add_option("--threads", threads, "threads for both libraries")->check(CLI::PositiveNumber);
  app.add_option("--repeat", repeat, "timed runs per shape")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  const Graph graph = load_model(path);
  int skipped_convs = 0;
  const std::map<GemmShape, int> shapes = gemm_shapes(graph);
  const std::map<ConvShape, int> convs = conv_shapes(graph, skipped_convs);
  if (shapes.empty() && convs.empty()) {
    std::fprintf(stderr,
                 "%s has no MatMul or Gemm node with operands of rank >= 2 and no float32 Conv "
                 "with constant weights at batch 1\n",
                 path.c_str());
    return 1;
  }
  use_threads_on_this_thread(threads);  // oneDNN's OpenMP team
  openblas_set_num_threads(threads);
  double median_floor_ms = 0, min_floor_ms = 0, gflops = 0;
  if (!shapes.empty())
    std::printf("%-30s %5s %21s %21s\n", "batch x m x k x n", "nodes", "onednn ms (min)",
                "openblas ms (min)");
  for (const auto& [shape, nodes] : shapes) {
    const Timing dnnl = onednn_ms(shape, repeat), blas = openblas_ms(shape, repeat);
    const std::string name = fmt::format("{} x {} x {} x {}{}", shape.batch, shape.m, shape.k,
                                         shape.n, shape.constant_b ? " (weights)" : "");
    std::printf("%-30s %5d %10.3f (%8.3f) %10.3f (%8.3f)\n", name.c_str(), nodes, dnnl.median_ms,
                dnnl.min_ms, blas.median_ms, blas.min_ms);
    median_floor_ms += nodes * std::min(dnnl.median_ms, blas.median_ms);
    min_floor_ms += nodes * std::min(dnnl.min_ms, blas.min_ms);
    gflops += nodes * shape.flops() / 1e9;
  }
  if (!convs.empty())
    std::printf("%-36s %5s %21s %8s  %s\n", "conv", "nodes", "onednn ms (min)", "GFLOP/s",
                "fastest form");
  std::map<ConvShape, Timing> conv_ms;
  for (const auto& [shape, nodes] : convs) {
    const std::optional<ConvTiming> t = onednn_conv_ms(shape, repeat);
    if (!t) {
      std::printf("%-36s %5d %21s %8s  not counted: oneDNN has only reference loops for it\n",
                  shape.name().c_str(), nodes, "-", "-");
      skipped_convs += nodes;
      continue;
    }
    conv_ms[shape] = t->timing;
    std::printf("%-36s %5d %10.4f (%8.4f) %8.0f  %s\n", shape.name().c_str(), nodes,
                t->timing.median_ms, t->timing.min_ms, shape.flops() / t->timing.median_ms / 1e6,
                t->implementation.c_str());
    median_floor_ms += nodes * t->timing.median_ms;
    min_floor_ms += nodes * t->timing.min_ms;
    gflops += nodes * shape.flops() / 1e9;
  }
  for (const auto& [pair, nodes] : conv_pairs(graph)) {
    if (!conv_ms.count(pair.pointwise) || !conv_ms.count(pair.depthwise)) continue;
    const Timing fused = onednn_pair_ms(pair, repeat);
    const Timing &pw = conv_ms.at(pair.pointwise), &dw = conv_ms.at(pair.depthwise);
    const double alone_ms = pw.median_ms + dw.median_ms;
    std::printf(
        "%-36s %5d %10.4f (%8.4f) as one primitive, %.4f as two\n",
        (pair.pointwise.name() + " + dw s" + std::to_string(pair.depthwise.strides[0])).c_str(),
        nodes, fused.median_ms, fused.min_ms, alone_ms);
    median_floor_ms -= nodes * std::max(0.0, alone_ms - fused.median_ms);
    min_floor_ms -= nodes * std::max(0.0, pw.min_ms + dw.min_ms - fused.min_ms);
  }
  if (skipped_convs > 0)
    std::printf(
        "%d Conv nodes not counted (not float32 with constant weights at batch 1, or only "
        "reference loops in oneDNN)\n",
        skipped_convs);
  std::printf(
      "GEMM floor: %.3f GFLOP in %.2f ms (medians; %.0f GFLOP/s), %.2f ms (fastest samples; %.0f "
      "GFLOP/s), %d threads\n",
      gflops, median_floor_ms, gflops / median_floor_ms * 1e3, min_floor_ms,
      gflops / min_floor_ms * 1e3, threads);
  return 0;
}

}  // namespace
}  // namespace collage

int main(int argc, char** argv) {
  try {
    return collage::run(argc, argv);
  } catch (const std::exception& e) {  // a model that does not load, a shape oneDNN refuses
    std::fprintf(stderr, "gemm_floor: %s\n", e.what());
    return 1;
  }
}
