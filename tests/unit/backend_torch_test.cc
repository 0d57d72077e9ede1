// The torch and torch-graph backends against the reference backend: every pattern the
// op-level backend claims, on randomized shapes and attributes (rtol 1e-3), TorchScript
// regions, and what both must refuse. Built only when libtorch is (see CMakeLists.txt).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "import_test_util.h"

namespace collage {
namespace {

using testing::attr_f;
using testing::attr_i;
using testing::attr_ints;
using testing::attr_s;
using testing::compile_error;
using testing::expect_like_reference;
using testing::GraphBuilder;
using testing::has_match;
using testing::outputs_match;
using testing::pick;
using testing::run_backend_and_reference;
using Attrs = std::map<std::string, Attribute>;

Backend& torch_ops() {
  return BackendRegistry::global().get("torch");
}
Backend& torch_graph() {
  return BackendRegistry::global().get("torch-graph");
}

// Op-level patterns are TorchScript-able too: every such graph is checked on both.
void expect_both_like_reference(const Graph& g, const std::string& what) {
  expect_like_reference(torch_ops(), g, what);
  expect_like_reference(torch_graph(), g, what);
}

TEST(TorchBackend, Identity) {
  for (Backend* b : {&torch_ops(), &torch_graph()}) {
    EXPECT_EQ(b->version().rfind("libtorch 1.", 0), 0u) << b->version();
    EXPECT_EQ(b->thread_model(), "ATen intra-op (OpenMP)");
    EXPECT_TRUE(b->available()) << b->name();
    EXPECT_FALSE(b->details().empty());
  }
  EXPECT_EQ(torch_ops().kind(), BackendKind::kOpLevel);
  EXPECT_EQ(torch_graph().kind(), BackendKind::kGraphLevel);
}

// ------------------------------------------------------------------------------ Conv

TEST(TorchBackend, ConvRandomized) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 12; ++trial) {
    const int nd = 1 + trial % 3;  // 1-D, 2-D, 3-D
    const int64_t n = pick(rng, 1, 2), c = pick(rng, 1, 3) * 2;
    const int group_kind = trial % 4;  // 0, 3: dense, 1: depthwise, 2: two groups
    const int64_t group = group_kind == 1 ? c : group_kind == 2 ? 2 : 1;
    const int64_t m = group_kind == 1 ? c : pick(rng, 1, 3) * 2;
    Shape xs = {n, c}, ws = {m, c / group};
    std::vector<int64_t> strides, dilations, pads_begin, pads_end;
    for (int i = 0; i < nd; ++i) {
      xs.push_back(pick(rng, nd == 3 ? 4 : 6, nd == 3 ? 7 : 12));
      ws.push_back(pick(rng, 1, 3));
      strides.push_back(pick(rng, 1, 2));
      dilations.push_back(pick(rng, 1, 2));
      pads_begin.push_back(pick(rng, 0, 2));
      pads_end.push_back(pick(rng, 0, 2));  // often asymmetric: constant_pad_nd path
    }
    std::vector<int64_t> pads = pads_begin;
    pads.insert(pads.end(), pads_end.begin(), pads_end.end());
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, xs);
    std::vector<ValueId> in = {x, b.random_constant("w", ws)};
    if (trial % 2 == 0) in.push_back(b.random_constant("b", {m}));
    Attrs attrs = {{"strides", attr_ints(strides)},
                   {"dilations", attr_ints(dilations)},
                   {"pads", attr_ints(pads)},
                   {"group", attr_i(group)}};
    const ValueId conv = b.add1("Conv", in, attrs);
    ValueId y = conv;
    if (trial % 3 != 2) y = b.add1("Relu", {y});
    b.output(y);
    ASSERT_TRUE(has_match(torch_ops(), b.graph(),
                          y == conv ? std::vector<ValueId>{conv} : std::vector<ValueId>{conv, y}));
    expect_both_like_reference(b.graph(), "conv trial " + std::to_string(trial));
  }
}

TEST(TorchBackend, ConvAutoPad) {
  for (const char* pad : {"SAME_UPPER", "SAME_LOWER", "VALID"}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {2, 3, 11, 8});
    b.output(b.add1("Conv", {x, b.random_constant("w", {5, 3, 4, 3})},
                    {{"auto_pad", attr_s(pad)}, {"strides", attr_ints({2, 1})}}));
    expect_both_like_reference(b.graph(), std::string("conv auto_pad ") + pad);
  }
}

// ResNet3D-50's shapes, shrunk: 3x3x3 and 1x1x1 convolutions with bias and Relu.
TEST(TorchBackend, Conv3dResNetBlock) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 8, 4, 10, 10});
  ValueId y = b.add1(
      "Conv", {x, b.random_constant("w1", {8, 8, 3, 3, 3}, 0.2f), b.random_constant("b1", {8})},
      {{"pads", attr_ints({1, 1, 1, 1, 1, 1})}});
  y = b.add1("Relu", {y});
  ValueId z = b.add1("Conv", {y, b.random_constant("w2", {16, 8, 1, 1, 1}, 0.3f)},
                     {{"strides", attr_ints({1, 2, 2})}});
  b.output(z);
  expect_like_reference(torch_graph(), b.graph(), "3-D conv block as one region");
  GraphBuilder single;
  ValueId xs = single.input("x", DType::kFloat32, {1, 8, 4, 10, 10});
  single.output(single.add1(
      "Relu",
      {single.add1("Conv", {xs, single.random_constant("w", {12, 8, 3, 3, 3})},
                   {{"pads", attr_ints({1, 1, 1, 1, 1, 1})}, {"strides", attr_ints({1, 2, 2})}})}));
  expect_like_reference(torch_ops(), single.graph(), "3-D conv + relu");
}

TEST(TorchBackend, ConvTransposeRandomized) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 8; ++trial) {
    const int nd = trial % 4 == 3 ? 1 : 2;
    const int64_t c = pick(rng, 1, 2) * 2, m = pick(rng, 1, 3) * 2, group = trial % 3 == 1 ? 2 : 1;
    Shape xs = {pick(rng, 1, 2), c}, ws = {c, m / group};
    std::vector<int64_t> strides, pads_b, pads_e, out_pad;
    for (int i = 0; i < nd; ++i) {
      xs.push_back(pick(rng, 3, 7));
      ws.push_back(pick(rng, 1, 3));
      strides.push_back(pick(rng, 1, 3));
      pads_b.push_back(pick(rng, 0, 1));
      pads_e.push_back(pick(rng, 0, 1));
      out_pad.push_back(pick(rng, 0, strides.back() - 1));
    }
    std::vector<int64_t> pads = pads_b;
    pads.insert(pads.end(), pads_e.begin(), pads_e.end());
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, xs);
    std::vector<ValueId> in = {x, b.random_constant("w", ws)};
    if (trial % 2 == 0) in.push_back(b.random_constant("b", {m}));
    ValueId y = b.add1("ConvTranspose", in,
                       {{"strides", attr_ints(strides)},
                        {"pads", attr_ints(pads)},
                        {"output_padding", attr_ints(out_pad)},
                        {"group", attr_i(group)}});
    b.output(y);
    expect_both_like_reference(b.graph(), "conv transpose trial " + std::to_string(trial));
  }
}

// ---------------------------------------------------------------------------- MatMul

TEST(TorchBackend, MatMulShapes) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{7, 5}, {5, 3}}, {{2, 7, 5}, {5, 3}}, {{2, 3, 7, 5}, {3, 5, 4}},
      {{5}, {5, 3}},    {{7, 5}, {5}},       {{2, 4, 6}, {2, 6, 3}}};
  for (size_t i = 0; i < cases.size(); ++i) {
    for (bool const_b : {true, false}) {
      GraphBuilder b;
      ValueId a = b.input("a", DType::kFloat32, cases[i].first);
      ValueId w = const_b ? b.random_constant("w", cases[i].second)
                          : b.input("w", DType::kFloat32, cases[i].second);
      ValueId y = b.add1("MatMul", {a, w});
      if (i % 2 == 0) y = b.add1("Relu", {y});
      b.output(y);
      expect_both_like_reference(b.graph(), "matmul case " + std::to_string(i));
    }
  }
}

// BERT's projections: MatMul + Add(bias) (+ Relu) is one ATen addmm.
TEST(TorchBackend, LinearBias) {
  for (int relu = 0; relu < 2; ++relu) {
    for (bool bias_first : {false, true}) {
      GraphBuilder b;
      ValueId x = b.input("x", DType::kFloat32, {2, 9, 16});
      ValueId h = b.add1("MatMul", {x, b.random_constant("w", {16, 24})});
      ValueId bias = b.random_constant("bias", {24});
      ValueId y =
          b.add1("Add", bias_first ? std::vector<ValueId>{bias, h} : std::vector<ValueId>{h, bias});
      if (relu) y = b.add1("Relu", {y});
      b.output(y);
      ASSERT_TRUE(has_match(torch_ops(), b.graph(), {h, y}) ||
                  has_match(torch_ops(), b.graph(),
                            {h, b.graph().node(b.graph().value(y).producer).input(0), y}));
      expect_both_like_reference(b.graph(), "linear relu=" + std::to_string(relu));
    }
  }
  // A bias that also varies along rows is no Linear: not proposed, and refused.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {9, 16});
  ValueId h = b.add1("MatMul", {x, b.random_constant("w", {16, 24})});
  ValueId y = b.add1("Add", {h, b.random_constant("bias", {9, 24})});
  b.output(y);
  EXPECT_FALSE(has_match(torch_ops(), b.graph(), {h, y}));
}

TEST(TorchBackend, GemmVariants) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 8; ++trial) {
    const int64_t m = pick(rng, 1, 9), k = pick(rng, 1, 9), n = pick(rng, 1, 9);
    const bool ta = trial & 1, tb = trial & 2;
    GraphBuilder b;
    ValueId a = b.input("a", DType::kFloat32, ta ? Shape{k, m} : Shape{m, k});
    ValueId w = trial % 3 == 0 ? b.input("w", DType::kFloat32, tb ? Shape{n, k} : Shape{k, n})
                               : b.random_constant("w", tb ? Shape{n, k} : Shape{k, n});
    std::vector<ValueId> in = {a, w};
    const Shape cshapes[] = {{n}, {m, n}, {1, n}, {m, 1}};
    if (trial != 5) in.push_back(b.random_constant("c", cshapes[trial % 4]));
    Attrs attrs = {{"transA", attr_i(ta)}, {"transB", attr_i(tb)}};
    if (trial >= 4) {
      attrs["alpha"] = attr_f(0.5f);
      attrs["beta"] = attr_f(trial == 6 ? 0.0f : 2.0f);
    }
    ValueId y = b.add1("Gemm", in, attrs);
    if (trial % 2) y = b.add1("Relu", {y});
    b.output(y);
    expect_both_like_reference(b.graph(), "gemm trial " + std::to_string(trial));
  }
}

// --------------------------------------------------------------------------- Pooling

TEST(TorchBackend, PoolingRandomized) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 16; ++trial) {
    const bool is_max = trial % 2 == 0;
    const int nd = 1 + (trial / 2) % 3;
    Shape xs = {pick(rng, 1, 2), pick(rng, 1, 3)};
    std::vector<int64_t> kernel, strides, pads_b, pads_e, dilations;
    for (int i = 0; i < nd; ++i) {
      xs.push_back(pick(rng, 5, nd == 3 ? 7 : 11));
      kernel.push_back(pick(rng, 1, 3));
      strides.push_back(pick(rng, 1, 3));
      pads_b.push_back(pick(rng, 0, kernel.back() - 1));
      pads_e.push_back(pick(rng, 0, kernel.back() - 1));
      dilations.push_back(is_max ? pick(rng, 1, 2) : 1);
    }
    std::vector<int64_t> pads = pads_b;
    pads.insert(pads.end(), pads_e.begin(), pads_e.end());
    Attrs attrs = {{"kernel_shape", attr_ints(kernel)},
                   {"strides", attr_ints(strides)},
                   {"pads", attr_ints(pads)},
                   {"ceil_mode", attr_i((trial / 4) % 2)}};
    if (is_max)
      attrs["dilations"] = attr_ints(dilations);
    else
      attrs["count_include_pad"] = attr_i((trial / 8) % 2);
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, xs);
    ValueId y = b.add1(is_max ? "MaxPool" : "AveragePool", {x}, attrs);
    b.output(y);
    ASSERT_TRUE(has_match(torch_ops(), b.graph(), {y})) << "trial " << trial;
    expect_both_like_reference(b.graph(), "pool trial " + std::to_string(trial));
  }
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    for (Shape xs : {Shape{2, 3, 7}, Shape{2, 3, 5, 6}, Shape{1, 4, 3, 4, 5}}) {
      GraphBuilder b;
      b.output(b.add1(op, {b.input("x", DType::kFloat32, xs)}));
      expect_both_like_reference(b.graph(), op);
    }
  }
}

TEST(TorchBackend, AveragePoolDilationIsRefused) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 2, 9, 9});
  ValueId y = b.add1("AveragePool", {x},
                     {{"kernel_shape", attr_ints({3, 3})}, {"dilations", attr_ints({2, 2})}});
  b.output(y);
  EXPECT_FALSE(has_match(torch_ops(), b.graph(), {y}));
  EXPECT_EQ(compile_error(torch_ops(), b.graph()), ErrorKind::kUnsupported);
  EXPECT_EQ(compile_error(torch_graph(), b.graph()), ErrorKind::kUnsupported);
}

// ----------------------------------------------------------------------- Normalization

TEST(TorchBackend, BatchNormalization) {
  for (Shape xs : {Shape{2, 5}, Shape{2, 5, 7}, Shape{1, 5, 6, 7}, Shape{1, 5, 3, 4, 5}}) {
    for (int relu = 0; relu < 2; ++relu) {
      GraphBuilder b;
      ValueId x = b.input("x", DType::kFloat32, xs);
      Tensor var = Tensor::from_vector<float>({5}, {0.5f, 1.0f, 2.0f, 0.1f, 3.0f});
      ValueId y = b.add1("BatchNormalization",
                         {x, b.random_constant("s", {5}), b.random_constant("b", {5}),
                          b.random_constant("m", {5}), b.constant("v", var)},
                         {{"epsilon", attr_f(1e-3f)}});
      if (relu) y = b.add1("Relu", {y});
      b.output(y);
      expect_both_like_reference(b.graph(), "batchnorm rank " + std::to_string(xs.size()));
    }
  }
}

TEST(TorchBackend, LayerNormalization) {
  for (int64_t axis : {-1, -2, 1}) {
    for (bool bias : {true, false}) {
      GraphBuilder b;
      ValueId x = b.input("x", DType::kFloat32, {2, 3, 8});
      const Shape ps = axis == -1 ? Shape{8} : Shape{3, 8};
      std::vector<ValueId> in = {x, b.random_constant("s", ps)};
      if (bias) in.push_back(b.random_constant("b", ps));
      b.output(
          b.add1("LayerNormalization", in, {{"axis", attr_i(axis)}, {"epsilon", attr_f(1e-5f)}}));
      expect_both_like_reference(b.graph(), "layernorm axis " + std::to_string(axis));
    }
  }
}

// ------------------------------------------------------------------------ torch-graph

// Conv+Relu+Conv+Add (a residual block): one TorchScript region, compiled whole.
TEST(TorchGraphBackend, ResidualRegion) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 8, 12, 12});
  ValueId y =
      b.add1("Conv", {x, b.random_constant("w1", {8, 8, 3, 3}, 0.3f), b.random_constant("b1", {8})},
             {{"pads", attr_ints({1, 1, 1, 1})}});
  y = b.add1("Relu", {y});
  y = b.add1("Conv", {y, b.random_constant("w2", {8, 8, 3, 3}, 0.3f)},
             {{"pads", attr_ints({1, 1, 1, 1})}});
  ValueId z = b.add1("Add", {y, x});
  b.output(b.add1("Relu", {z}));
  // The fusion rule proposes the whole block as one region.
  bool whole = false;
  for (const Match& m : find_matches(b.graph(), torch_graph()))
    whole = whole || m.nodes.size() == b.graph().num_nodes();
  EXPECT_TRUE(whole);
  expect_like_reference(torch_graph(), b.graph(), "conv-relu-conv-add-relu");
  // The op-level backend takes it only as pieces.
  EXPECT_EQ(compile_error(torch_ops(), b.graph()), ErrorKind::kUnsupported);
}

// libtorch 1.13's optimize_for_inference dropped the clamp of a Conv + torch.clamp(0, 6)
// (ReLU6, ONNX Clip) from this region: the backend must notice and keep the plain graph.
TEST(TorchGraphBackend, ConvThenReluSixKeepsItsClamp) {
  for (bool concat : {false, true}) {
    GraphBuilder b;
    ValueId a = b.input("a", DType::kFloat32, {1, 8, 12, 12});
    ValueId x = b.input("x", DType::kFloat32, {1, 8, 12, 12});
    ValueId y =
        b.add1("Conv", {x, b.random_constant("w", {8, 8, 3, 3}, 0.3f), b.random_constant("b", {8})},
               {{"pads", attr_ints({1, 1, 1, 1})}});
    y = b.add1("Clip",
               {y, b.constant("lo", Tensor::scalar(0.0f)), b.constant("hi", Tensor::scalar(6.0f))});
    b.output(concat ? b.add1("Concat", {a, y}, {{"axis", attr_i(1)}}) : y);
    expect_like_reference(torch_graph(), b.graph(), concat ? "conv, clip, concat" : "conv, clip");
  }
}

// The second optimize_for_inference miscompile the random CNNs found, in the graph they drew
// (kept as tests/unit/data/torch_graph_clip_cut_at_one.onnx, so that changes to the
// generator do not change it): squeeze-excitation with HardSigmoid, shuffle, SiLU,
// residuals, a head, and two grouped 3x3 convs with channel multipliers over one sum, one
// into Sigmoid and one into Clip(0, 6). The optimised module cut the Clip's outputs above 1
// to 1: 3 of 5184 values on unit-scale inputs, which the check on such inputs alone missed.
// Smaller graphs with the same convs computed right. The check now also compares on inputs
// times 16.
TEST(TorchGraphBackend, OptimisedRegionCheckedWithLargeValuesToo) {
  const Graph g = load_model(testing::test_data("torch_graph_clip_cut_at_one.onnx"));
  ASSERT_EQ(g.num_nodes(), 26u);
  const std::vector<Tensor> inputs = random_inputs(g, 133);
  testing::expect_session_like_reference("torch-graph", g, 2, inputs,
                                         Session(g, SessionOptions{}).run(inputs),
                                         "the random CNN of the Clip cut at 1");
}

// A BERT-like attention core plus elementwise/shape ops, with two outputs.
TEST(TorchGraphBackend, AttentionAndShapeOps) {
  GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, {2, 6, 8});
  ValueId q = b.add1("MatMul", {x, b.random_constant("wq", {8, 8})});
  ValueId k = b.add1("MatMul", {x, b.random_constant("wk", {8, 8})});
  ValueId qh =
      b.add1("Reshape", {q, b.constant("s", Tensor::from_vector<int64_t>({4}, {2, 6, 2, 4}))});
  qh = b.add1("Transpose", {qh}, {{"perm", attr_ints({0, 2, 1, 3})}});
  ValueId kh =
      b.add1("Reshape", {k, b.constant("s2", Tensor::from_vector<int64_t>({4}, {2, 6, 2, 4}))});
  kh = b.add1("Transpose", {kh}, {{"perm", attr_ints({0, 2, 3, 1})}});
  ValueId s = b.add1("Div", {b.add1("MatMul", {qh, kh}), b.constant("d", Tensor::scalar(2.0f))});
  ValueId p = b.add1("Softmax", {s}, {{"axis", attr_i(-1)}});
  ValueId m = b.add1("ReduceMean", {p}, {{"axes", attr_ints({1})}, {"keepdims", attr_i(0)}});
  ValueId e = b.add1("Sigmoid", {b.add1("Erf", {q})});
  ValueId c = b.add1("Concat", {e, b.add1("Tanh", {k})}, {{"axis", attr_i(2)}});
  ValueId cl = b.add1(
      "Clip", {c, b.constant("lo", Tensor::scalar(0.1f)), b.constant("hi", Tensor::scalar(0.9f))});
  b.output(m);
  b.output(cl);
  expect_like_reference(torch_graph(), b.graph(), "attention + shape ops, two outputs");
}

TEST(TorchGraphBackend, OldSoftmaxFlattens) {
  GraphBuilder b(11);
  ValueId x = b.input("x", DType::kFloat32, {2, 3, 4});
  b.output(b.add1("Softmax", {x}, {{"axis", attr_i(1)}}));
  expect_like_reference(torch_graph(), b.graph(), "opset-11 softmax over axes 1..2");
}

TEST(TorchGraphBackend, RefusesWhatItCannotRun) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {2, 3});
  ValueId y = b.add1("Cos", {x});
  b.output(y);
  EXPECT_FALSE(has_match(torch_graph(), b.graph(), {y}));
  EXPECT_EQ(compile_error(torch_graph(), b.graph()), ErrorKind::kUnsupported);
  EXPECT_EQ(compile_error(torch_ops(), b.graph()), ErrorKind::kUnsupported);
}

// Through a Session: a model whose convs/matmuls run on torch and the rest on reference.
TEST(TorchBackend, SessionPlacesAndMatchesReference) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 3, 10, 10});
  ValueId y = b.add1("Relu", {b.add1("Conv", {x, b.random_constant("w", {4, 3, 3, 3})})});
  y = b.add1("Cos", {y});
  y = b.add1("GlobalAveragePool", {y});
  b.output(y);
  const std::string fallback = BackendRegistry::global().fallback().name();
  for (const char* name : {"torch", "torch-graph"}) {
    SessionOptions options;
    options.backend = name;
    options.strict = true;  // a broken compile fails here instead of running on reference
    Session session(b.graph(), options);
    // Conv, Relu and the pool on torch; Cos, which neither takes, on the fallback.
    EXPECT_EQ(session.node_backends(), (std::vector<std::string>{name, name, fallback, name}))
        << name;
    Session reference(b.graph(), SessionOptions{});
    std::vector<Tensor> inputs = random_inputs(b.graph(), 4);
    EXPECT_TRUE(outputs_match(session.run(inputs), reference.run(inputs))) << name;
  }
}

}  // namespace
}  // namespace collage
