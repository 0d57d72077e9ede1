// The halide backend against the reference backend: every op it claims and the fused
// chains it exists for (GELU, LayerNorm as PyTorch exports it, Softmax, bias + Relu,
// residual adds, Transpose glue) on randomized shapes; the erf approximation against
// std::erf; what the fusion rule proposes; what compile() refuses; and the disk cache.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backend_test_util.h"
#include "backends/halide/cache_stats.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"

namespace collage {
namespace {

using testing::attr_f;
using testing::attr_i;
using testing::attr_ints;
using testing::GraphBuilder;
using testing::outputs_match;
using testing::pick;
using testing::run_backend_and_reference;

Backend& halide() {
  return BackendRegistry::global().get("halide");
}

void expect_like_reference(const Graph& g, const std::string& what, uint64_t seed = 3) {
  testing::expect_like_reference(halide(), g, what, seed);
}

Shape random_shape(std::mt19937& rng, int rank) {
  Shape s;
  for (int d = 0; d < rank; ++d) s.push_back(pick(rng, 1, 40));
  return s;
}

// GELU as torch.onnx exports it: x * 0.5 * (1 + erf(x / sqrt(2))).
ValueId add_gelu(GraphBuilder& b, ValueId x) {
  ValueId d = b.add1("Div", {x, b.constant("sqrt2", Tensor::scalar(1.4142135f))});
  ValueId e = b.add1("Erf", {d});
  ValueId one = b.add1("Add", {e, b.constant("one", Tensor::scalar(1.0f))});
  ValueId m = b.add1("Mul", {x, one});
  return b.add1("Mul", {m, b.constant("half", Tensor::scalar(0.5f))});
}

TEST(HalideBackend, Identity) {
  Backend& b = halide();
  EXPECT_EQ(b.kind(), BackendKind::kOpLevel);
  EXPECT_EQ(b.version().rfind("Halide 14.", 0), 0u) << b.version();
  EXPECT_EQ(b.thread_model(), "Halide thread pool");
  ASSERT_FALSE(b.fusion_rules().empty());
}

using halide_backend::evaluate_math;
using halide_backend::MathFn;

std::vector<float> sweep(float lo, float hi, int n) {
  std::vector<float> xs(n);
  for (int i = 0; i < n; ++i) xs[i] = lo + (hi - lo) * static_cast<float>(i) / (n - 1);
  return xs;
}

// The polynomial erf, vectorised as in kernels, against std::erf.
// Kernels are compiled for features this CPU has. Halide 14 calls AMD's Zen 4/5 (AVX-512 with
// BF16 and VNNI, no FP16) "sapphirerapids", whose features include AVX512-FP16, and a kernel
// then died of SIGILL on a `vmovw` here (jit_cache.cc).
TEST(HalideBackend, TargetClaimsNoFeatureTheCpuLacks) {
  const std::string target = halide_backend::target_string();
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512fp16"))
    EXPECT_EQ(target.find("avx512_sapphirerapids"), std::string::npos) << target;
  if (!__builtin_cpu_supports("avx512f"))
    EXPECT_EQ(target.find("avx512"), std::string::npos) << target;
  if (!__builtin_cpu_supports("avx2")) EXPECT_EQ(target.find("avx2"), std::string::npos) << target;
}

TEST(HalideBackend, ErfApproximationIsFloatAccurate) {
  std::vector<float> xs = sweep(-6.0f, 6.0f, 200001);
  std::vector<float> ys = evaluate_math(MathFn::kErf, xs);
  ASSERT_EQ(ys.size(), xs.size());
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(ys[i]) - std::erf(double(xs[i]))));
  EXPECT_LT(worst, 1e-6);
  EXPECT_GT(worst, 0.0);  // it is an approximation: a zero would mean libm was called
}

TEST(HalideBackend, ExpTanhSigmoidAreAccurate) {
  std::vector<float> xs = sweep(-90.0f, 90.0f, 100001);
  std::vector<float> es = evaluate_math(MathFn::kExp, xs), ts = evaluate_math(MathFn::kTanh, xs),
                     ss = evaluate_math(MathFn::kSigmoid, xs);
  double worst_exp = 0, worst_tanh = 0, worst_sigmoid = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i], e = std::exp(x), t = std::tanh(x), s = 1.0 / (1.0 + std::exp(-x));
    if (e > 1e-37 && e < 1e38) worst_exp = std::max(worst_exp, std::fabs(es[i] - e) / e);
    worst_tanh = std::max(worst_tanh, std::fabs(ts[i] - t) / std::max(1e-6, std::fabs(t)));
    worst_sigmoid = std::max(worst_sigmoid, std::fabs(ss[i] - s));
  }
  EXPECT_LT(worst_exp, 2e-6);
  EXPECT_LT(worst_tanh, 1e-5);
  EXPECT_LT(worst_sigmoid, 1e-6);
  // Saturation instead of nonsense far outside the polynomial's range.
  std::vector<float> far = evaluate_math(MathFn::kExp, {-200.0f, 200.0f});
  EXPECT_EQ(far[0], 0.0f);
  EXPECT_TRUE(std::isinf(far[1]));
}

TEST(HalideBackend, UnaryOpsRandomized) {
  // clang-format off
  const std::vector<std::pair<std::string, std::map<std::string, Attribute>>> ops = {
      {"Relu", {}},        {"LeakyRelu", {{"alpha", attr_f(0.2f)}}},
      {"Elu", {}},         {"Selu", {}},
      {"Celu", {}},        {"Sigmoid", {}},
      {"HardSigmoid", {}}, {"HardSwish", {}},
      {"Softplus", {}},    {"Softsign", {}},
      {"Tanh", {}},        {"Erf", {}},
      {"Exp", {}},         {"Neg", {}},
      {"Abs", {}},         {"Floor", {}},
      {"Ceil", {}},        {"Round", {}},
      {"Sin", {}},         {"Cos", {}},
      {"Atan", {}},        {"Sign", {}},
      {"Identity", {}},    {"Sinh", {}},
      {"Shrink", {}},      {"ThresholdedRelu", {{"alpha", attr_f(0.3f)}}},
      {"Shrink", {{"lambd", attr_f(0.4f)}, {"bias", attr_f(0.1f)}}}};
  // clang-format on
  std::mt19937 rng(11);
  for (const auto& [op, attrs] : ops) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, random_shape(rng, static_cast<int>(pick(rng, 1, 4))));
    // Two ops, so the chain is what the fusion rule would hand over.
    ValueId y = b.add1(op, {x}, attrs);
    b.output(b.add1("Mul", {y, b.constant("k", Tensor::scalar(1.5f))}));
    expect_like_reference(b.graph(), op);
  }
  // Ops with a restricted domain, on positive inputs.
  for (const std::string op : {"Log", "Sqrt", "Reciprocal"}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, random_shape(rng, 3));
    ValueId pos = b.add1("Add", {b.add1("Abs", {x}), b.constant("k", Tensor::scalar(0.5f))});
    b.output(b.add1(op, {pos}));
    expect_like_reference(b.graph(), op);
  }
}

TEST(HalideBackend, BinaryBroadcastRandomized) {
  std::mt19937 rng(5);
  for (const std::string op : {"Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu", "Pow"}) {
    for (int trial = 0; trial < 3; ++trial) {
      const int rank = static_cast<int>(pick(rng, 1, 4));
      Shape a = random_shape(rng, rank), bs = a;
      // Broadcast some dims of b, and sometimes drop leading ones.
      for (auto& d : bs)
        if (pick(rng, 0, 2) == 0) d = 1;
      if (op != "PRelu" && trial == 1) bs.erase(bs.begin());
      GraphBuilder b;
      ValueId x = b.input("x", DType::kFloat32, a);
      ValueId y = b.input("y", DType::kFloat32, bs);
      if (op == "Pow") x = b.add1("Abs", {x});
      ValueId z = b.add1(op, {x, y});
      b.output(b.add1("Relu", {z}));
      expect_like_reference(b.graph(), op + " " + shape_to_string(a) + " " + shape_to_string(bs));
    }
  }
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {3, 4});
  ValueId y = b.input("y", DType::kFloat32, {4});
  ValueId z = b.input("z", DType::kFloat32, {3, 1});
  ValueId s = b.add1("Sum", {x, y, z});
  ValueId m = b.add1("Mean", {s, y, z});
  ValueId c = b.add1(
      "Clip", {m, b.constant("lo", Tensor::scalar(-0.3f)), b.constant("hi", Tensor::scalar(0.4f))});
  b.output(b.add1("Max", {c, y, z}));
  expect_like_reference(b.graph(), "variadic + clip");
}

TEST(HalideBackend, ReductionsRandomized) {
  const std::vector<std::string> ops = {"ReduceSum", "ReduceMean",      "ReduceMax",
                                        "ReduceMin", "ReduceProd",      "ReduceL1",
                                        "ReduceL2",  "ReduceSumSquare", "ReduceLogSumExp"};
  std::mt19937 rng(17);
  for (const std::string& op : ops) {
    for (int trial = 0; trial < 4; ++trial) {
      const int rank = static_cast<int>(pick(rng, 1, 4));
      Shape s = random_shape(rng, rank);
      if (op == "ReduceProd")
        for (auto& d : s) d = std::min<int64_t>(d, 6);
      std::vector<int64_t> axes;
      for (int d = 0; d < rank; ++d)
        if (pick(rng, 0, 1)) axes.push_back(d - (trial % 2 ? rank : 0));
      GraphBuilder b;
      ValueId x = b.input("x", DType::kFloat32, s);
      std::map<std::string, Attribute> attrs = {{"keepdims", attr_i(trial < 2)}};
      if (!axes.empty()) attrs["axes"] = attr_ints(axes);
      ValueId r = b.add1(op, {x}, attrs);
      b.output(b.add1("Add", {r, b.constant("k", Tensor::scalar(0.25f))}));
      expect_like_reference(b.graph(),
                            op + " " + shape_to_string(s) + " axes " + std::to_string(axes.size()));
    }
  }
  // ReduceSum with axes as an input (opset 13) and a big row (vectorised partial sums).
  GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, {6, 1000});
  b.output(b.add1("ReduceSum", {x, b.constant("axes", Tensor::from_vector<int64_t>({1}, {1}))},
                  {{"keepdims", attr_i(0)}}));
  expect_like_reference(b.graph(), "ReduceSum axes input");
}

TEST(HalideBackend, SoftmaxBothConventions) {
  std::mt19937 rng(23);
  for (int opset : {11, 13}) {
    for (const std::string op : {"Softmax", "LogSoftmax"}) {
      for (int trial = 0; trial < 3; ++trial) {
        const int rank = static_cast<int>(pick(rng, 1, 4));
        Shape s = random_shape(rng, rank);
        GraphBuilder b(opset);
        ValueId x = b.input("x", DType::kFloat32, s);
        int64_t axis = pick(rng, -rank, rank - 1);
        b.output(b.add1(op, {x}, {{"axis", attr_i(axis)}}));
        expect_like_reference(b.graph(), op + " opset " + std::to_string(opset) + " " +
                                             shape_to_string(s) + " axis " + std::to_string(axis));
      }
    }
  }
}

TEST(HalideBackend, AttentionSoftmaxChain) {
  // BERT's scores: Div by sqrt(d), Add the mask, Softmax over the last axis.
  GraphBuilder b;
  ValueId x = b.input("scores", DType::kFloat32, {2, 12, 64, 64});
  ValueId mask = b.input("mask", DType::kFloat32, {2, 1, 1, 64});
  ValueId d = b.add1("Div", {x, b.constant("s", Tensor::scalar(8.0f))});
  ValueId a = b.add1("Add", {d, mask});
  b.output(b.add1("Softmax", {a}, {{"axis", attr_i(-1)}}));
  expect_like_reference(b.graph(), "attention softmax");
}

TEST(HalideBackend, GeluChain) {
  std::mt19937 rng(29);
  for (int trial = 0; trial < 3; ++trial) {
    GraphBuilder b;
    const int64_t n = pick(rng, 1, 20), h = pick(rng, 1, 100) * 4;
    ValueId x = b.input("x", DType::kFloat32, {n, h});
    ValueId bias = b.add1("Add", {x, b.random_constant("bias", {h})});
    b.output(add_gelu(b, bias));
    expect_like_reference(b.graph(), "bias + gelu " + std::to_string(h));
  }
}

TEST(HalideBackend, LayerNormDecomposition) {
  std::mt19937 rng(31);
  for (int trial = 0; trial < 3; ++trial) {
    GraphBuilder b;
    const int64_t batch = pick(rng, 1, 3), seq = pick(rng, 1, 40),
                  hidden = trial == 0 ? 768 : pick(rng, 2, 100);
    ValueId x = b.input("x", DType::kFloat32, {batch, seq, hidden});
    ValueId r = b.input("residual", DType::kFloat32, {batch, seq, hidden});
    // Residual add + LayerNorm, as in every BERT block.
    ValueId sum = b.add1("Add", {x, r});
    b.output(testing::decomposed_layer_norm(b, sum, hidden, 1e-5f));
    expect_like_reference(b.graph(), "residual + layernorm hidden " + std::to_string(hidden));
  }
}

TEST(HalideBackend, MultipleOutputs) {
  // The residual sum is read outside too: the kernel exposes it as a second output.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {4, 96});
  ValueId r = b.input("r", DType::kFloat32, {4, 96});
  ValueId sum = b.add1("Add", {x, r});
  b.output(sum);
  b.output(testing::decomposed_layer_norm(b, sum, 96, 1e-5f));
  expect_like_reference(b.graph(), "layernorm + its input as output");
}

TEST(HalideBackend, BiasReluAndResidual) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {2, 8, 7, 7});
  ValueId res = b.input("res", DType::kFloat32, {2, 8, 7, 7});
  ValueId y = b.add1("Add", {x, b.random_constant("bias", {8, 1, 1})});
  y = b.add1("Relu", {y});
  b.output(b.add1("Add", {y, res}));
  expect_like_reference(b.graph(), "bias + relu + residual");
}

TEST(HalideBackend, LayoutGlue) {
  {
    // BERT's head split: Reshape [b, s, 768] -> [b, s, 12, 64], Transpose to [b, 12, s, 64].
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {2, 16, 96});
    ValueId y = b.add1("Add", {x, b.random_constant("bias", {96})});
    y = b.add1("Reshape",
               {y, b.constant("shape", Tensor::from_vector<int64_t>({4}, {2, 16, 4, 24}))});
    b.output(b.add1("Transpose", {y}, {{"perm", attr_ints({0, 2, 1, 3})}}));
    expect_like_reference(b.graph(), "reshape + transpose");
  }
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {3, 5, 6});
    ValueId y = b.add1("Relu", {x});
    ValueId sl = b.add1("Slice", {y, b.constant("st", Tensor::from_vector<int64_t>({2}, {1, 5})),
                                  b.constant("en", Tensor::from_vector<int64_t>({2}, {5, 0})),
                                  b.constant("ax", Tensor::from_vector<int64_t>({2}, {1, 2})),
                                  b.constant("sp", Tensor::from_vector<int64_t>({2}, {2, -2}))});
    ValueId c = b.add1("Concat", {sl, b.add1("Neg", {sl})}, {{"axis", attr_i(1)}});
    ValueId t =
        b.add1("Tile", {c, b.constant("rep", Tensor::from_vector<int64_t>({3}, {1, 2, 1}))});
    ValueId u = b.add1("Unsqueeze", {t, b.constant("ua", Tensor::from_vector<int64_t>({1}, {0}))});
    ValueId e =
        b.add1("Expand", {u, b.constant("es", Tensor::from_vector<int64_t>({4}, {2, 1, 1, 1}))});
    ValueId f = b.add1("Flatten", {e}, {{"axis", attr_i(2)}});
    auto parts = b.add("Split", {f}, {{"axis", attr_i(1)}}, 2);
    b.output(parts[0]);
    b.output(b.add1("Sigmoid", {parts[1]}));
    expect_like_reference(b.graph(), "slice concat tile unsqueeze expand flatten split");
  }
}

// `total` elements as a random shape of 1-4 dims (size-1 dims included).
Shape random_factoring(std::mt19937& rng, int64_t total) {
  Shape s;
  const int rank = pick(rng, 1, 4);
  for (int d = 0; d + 1 < rank; ++d) {
    std::vector<int64_t> divisors;
    for (int64_t k = 1; k <= total; ++k)
      if (total % k == 0) divisors.push_back(k);
    const int64_t k = divisors[pick(rng, 0, static_cast<int>(divisors.size()) - 1)];
    s.push_back(k);
    total /= k;
  }
  s.push_back(total);
  return s;
}

// Reshapes that split and merge dims in runs of every kind ([4, 6] <-> [3, 8] is one run of
// two dims each side), each between two ops so the reshape is inside the kernel; and the
// rotary embedding of a LLaMA layer (heads split, Slice, Neg, Concat on the last axis, Mul,
// Add) over rows of 4 to 128 floats, the lengths the schedule unrolls vector by vector and
// the ones it does not. Fails if a run were indexed with the wrong stride or without its
// modulo, or if an unrolled row's selects took the wrong piece.
TEST(HalideBackend, ReshapeRunsAndLastAxisConcatsLikeReference) {
  std::mt19937 rng(41);
  for (int c = 0; c < 12; ++c) {
    const Shape in = random_shape(rng, pick(rng, 1, 4));
    int64_t total = 1;
    for (int64_t d : in) total *= d;
    const Shape out = random_factoring(rng, total);
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, in);
    ValueId y = b.add1("Relu", {x});
    y = b.add1("Reshape", {y, b.constant("shape", Tensor::from_vector<int64_t>(
                                                      {static_cast<int64_t>(out.size())}, out))});
    b.output(b.add1("Sigmoid", {y}));
    expect_like_reference(b.graph(),
                          "reshape " + shape_to_string(in) + " -> " + shape_to_string(out));
  }
  const int64_t rows[] = {4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256};
  for (int64_t row : rows) {
    const int64_t heads = pick(rng, 1, 4), seq = pick(rng, 1, 9), half = row / 2;
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, seq, heads * row});
    ValueId q =
        b.add1("Reshape",
               {x, b.constant("heads", Tensor::from_vector<int64_t>({4}, {1, seq, heads, row}))});
    q = b.add1("Transpose", {q}, {{"perm", attr_ints({0, 2, 1, 3})}});
    auto slice = [&](int64_t begin, int64_t end) {
      return b.add1("Slice", {q, b.constant("b", Tensor::from_vector<int64_t>({1}, {begin})),
                              b.constant("e", Tensor::from_vector<int64_t>({1}, {end})),
                              b.constant("a", Tensor::from_vector<int64_t>({1}, {-1}))});
    };
    ValueId rotated = b.add1("Concat", {b.add1("Neg", {slice(half, row)}), slice(0, half)},
                             {{"axis", attr_i(-1)}});
    ValueId y = b.add1("Add", {b.add1("Mul", {q, b.random_constant("cos", {1, 1, seq, row})}),
                               b.add1("Mul", {rotated, b.random_constant("sin", {seq, row})})});
    b.output(y);
    expect_like_reference(b.graph(), "rotary embedding, rows of " + std::to_string(row));
  }
}

// Resize in every sampling mode the reference computes (but tf_crop_and_resize), by the
// reference's own taps: nearest in each rounding and coordinate mode, linear and cubic
// (aligned corners, exclude_outside, another cubic coefficient), up and down, by scales or
// sizes, over 1-3 resized dims; and fused with the Add after it in one kernel.
TEST(HalideBackend, ResizeInEveryModeLikeReference) {
  struct Form {
    const char *mode, *coord, *nearest;
  };
  const std::vector<Form> forms = {
      {"nearest", "asymmetric", "round_prefer_floor"},
      {"nearest", "half_pixel", "ceil"},
      {"nearest", "align_corners", "floor"},
      {"nearest", "tf_half_pixel_for_nn", "round_prefer_ceil"},
      {"linear", "align_corners", ""},
      {"linear", "asymmetric", ""},
      {"linear", "pytorch_half_pixel", ""},
      {"cubic", "half_pixel", ""},
      {"cubic", "align_corners", ""},
  };
  std::mt19937 rng(17);
  for (size_t trial = 0; trial < forms.size(); ++trial) {
    const Form& f = forms[trial];
    const int spatial = 1 + static_cast<int>(trial % 3);
    Shape shape = {1, pick(rng, 2, 5)};
    std::vector<float> scales = {1, 1};
    std::vector<int64_t> sizes = shape;
    for (int k = 0; k < spatial; ++k) {
      shape.push_back(pick(rng, 3, 9));
      const float factor = trial % 4 == 3 ? 0.6f : (trial % 2 ? 1.7f : 2.0f);
      scales.push_back(factor);
      sizes.push_back(static_cast<int64_t>(factor * static_cast<float>(shape.back())));
    }
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, shape);
    const int64_t rank = static_cast<int64_t>(shape.size());
    std::vector<ValueId> inputs = {x, kNoValue};
    if (trial % 2) {
      inputs.push_back(kNoValue);
      inputs.push_back(b.constant("sizes", Tensor::from_vector<int64_t>({rank}, sizes)));
    } else {
      inputs.push_back(b.constant("scales", Tensor::from_vector<float>({rank}, scales)));
    }
    std::map<std::string, Attribute> attrs = {
        {"mode", testing::attr_s(f.mode)},
        {"coordinate_transformation_mode", testing::attr_s(f.coord)}};
    if (*f.nearest) attrs["nearest_mode"] = testing::attr_s(f.nearest);
    if (std::string(f.mode) == "cubic" && trial % 2) {
      attrs["exclude_outside"] = attr_i(1);
      attrs["cubic_coeff_a"] = attr_f(-0.5f);
    }
    ValueId y = b.add1("Resize", inputs, attrs);
    b.output(y);
    const std::string what = std::string(f.mode) + " " + f.coord + " " + f.nearest;
    EXPECT_TRUE(testing::has_match(halide(), b.graph(), {y})) << what;
    expect_like_reference(b.graph(), what);
  }
  GraphBuilder b;
  ValueId low = b.input("low", DType::kFloat32, {1, 4, 5, 6});
  ValueId high = b.input("high", DType::kFloat32, {1, 4, 10, 12});
  ValueId up =
      b.add1("Resize",
             {low, kNoValue, b.constant("scales", Tensor::from_vector<float>({4}, {1, 1, 2, 2}))},
             {{"mode", testing::attr_s("linear")},
              {"coordinate_transformation_mode", testing::attr_s("align_corners")}});
  b.output(b.add1("Add", {up, high}));
  EXPECT_TRUE(testing::has_match(halide(), b.graph(), {up, b.graph().outputs[0]}));
  expect_like_reference(b.graph(), "bilinear (aligned corners) + Add");
}

// Pad in each mode, crops included, by the reference's rule; a reflection pad between
// two elementwise ops fused with them.
TEST(HalideBackend, PadInEveryModeLikeReference) {
  std::mt19937 rng(19);
  const char* modes[] = {"constant", "reflect", "edge"};
  for (int trial = 0; trial < 6; ++trial) {
    const std::string mode = modes[trial % 3];
    GraphBuilder b;
    const Shape shape = {1, pick(rng, 2, 4), pick(rng, 4, 9), pick(rng, 4, 9)};
    ValueId x = b.input("x", DType::kFloat32, shape);
    // Reflection needs pads under the dimension; the second round crops one side.
    std::vector<int64_t> pads = {0, 0, pick(rng, 0, 3), pick(rng, 1, 3),
                                 0, 0, pick(rng, 0, 2), trial >= 3 ? -1 : pick(rng, 1, 3)};
    std::vector<ValueId> inputs = {x, b.constant("pads", Tensor::from_vector<int64_t>({8}, pads))};
    if (mode == "constant") inputs.push_back(b.constant("value", Tensor::scalar(2.5f)));
    ValueId y = b.add1("Pad", inputs, {{"mode", testing::attr_s(mode)}});
    b.output(y);
    EXPECT_TRUE(testing::has_match(halide(), b.graph(), {y})) << mode;
    expect_like_reference(b.graph(), "Pad " + mode + " trial " + std::to_string(trial));
  }
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 3, 6, 7});
  ValueId relu = b.add1("Relu", {x});
  ValueId padded = b.add1(
      "Pad",
      {relu, b.constant("pads", Tensor::from_vector<int64_t>({8}, {0, 0, 2, 2, 0, 0, 2, 2}))},
      {{"mode", testing::attr_s("reflect")}});
  b.output(b.add1("Mul", {padded, b.random_constant("w", {1, 3, 1, 1})}));
  EXPECT_TRUE(testing::has_match(halide(), b.graph(), {relu, padded, b.graph().outputs[0]}));
  expect_like_reference(b.graph(), "Relu, reflection Pad, Mul");
}

// Comparisons (of floats and of int64 ids) and logic on the masks they make, fused with the
// Where that reads them, and a bool graph output, on random shapes with broadcasting.
TEST(HalideBackend, ComparisonsAndLogicFusedWithTheirWhere) {
  std::mt19937 rng(31);
  const char* compares[] = {"Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Equal"};
  const char* logic[] = {"And", "Or", "Xor"};
  for (int trial = 0; trial < 5; ++trial) {
    GraphBuilder b;
    const int64_t rows = pick(rng, 1, 6), cols = pick(rng, 2, 40);
    ValueId x = b.input("x", DType::kFloat32, {2, rows, cols});
    ValueId ids = b.input("ids", DType::kInt64, {2, 1, cols});
    ValueId near = b.add1(compares[trial], {x, b.constant("t", Tensor::scalar(0.25f))});
    ValueId pad = b.add1("Equal", {ids, b.constant("pad", Tensor::scalar<int64_t>(1))});
    ValueId kept_ids = b.add1("Not", {pad});
    ValueId keep = b.add1(logic[trial % 3], {near, kept_ids});
    ValueId y = b.add1("Where", {keep, x, b.constant("fill", Tensor::scalar(-1e4f))});
    b.output(y);
    b.output(keep);
    // Values on a 0.25 grid: some exactly at the threshold, where the comparisons differ.
    std::vector<float> xs(2 * rows * cols);
    for (float& v : xs) v = 0.25f * static_cast<float>(pick(rng, -4, 4));
    std::vector<int64_t> id_values(2 * cols);
    for (int64_t& id : id_values) id = pick(rng, 0, 2);
    const std::vector<Tensor> inputs = {Tensor::from_vector<float>({2, rows, cols}, xs),
                                        Tensor::from_vector<int64_t>({2, 1, cols}, id_values)};
    const std::string what = std::string(compares[trial]) + " " + logic[trial % 3];
    EXPECT_TRUE(testing::has_match(halide(), b.graph(), {near, pad, kept_ids, keep, y})) << what;
    testing::expect_like_reference(halide(), b.graph(), inputs, what);
  }
}

// ArgMax / ArgMin on values with ties (a coarse grid), infinities and, in every other
// trial, NaNs: the reference's rule (first extreme, last with select_last_index, a NaN the
// extreme) on random shapes, axes and keepdims, fused with the Add that feeds them.
TEST(HalideBackend, ArgMaxArgMinLikeReferenceWithTiesAndNaNs) {
  std::mt19937 rng(41);
  const float inf = std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 16; ++trial) {
    const std::string op = trial % 2 ? "ArgMin" : "ArgMax";
    const int rank = static_cast<int>(pick(rng, 1, 4));
    const Shape s = random_shape(rng, rank);
    const int64_t axis = pick(rng, 0, rank - 1) - (trial % 3 == 0 ? rank : 0);
    const bool keep = trial % 4 < 2, last = (trial / 2) % 2 == 1;
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, s);
    ValueId shifted = b.add1("Add", {x, b.constant("k", Tensor::scalar(0.5f))});
    ValueId y = b.add1(
        op, {shifted},
        {{"axis", attr_i(axis)}, {"keepdims", attr_i(keep)}, {"select_last_index", attr_i(last)}});
    b.output(y);
    int64_t numel = 1;
    for (int64_t d : s) numel *= d;
    std::vector<float> xs(numel);
    for (float& v : xs) {
      const int64_t r = pick(rng, 0, 99);
      v = r < 2 ? inf : r < 4 ? -inf : (trial % 4 == 3 && r < 8) ? NAN : 0.5f * pick(rng, -3, 3);
    }
    const std::string what = op + " " + shape_to_string(s) + " axis " + std::to_string(axis) +
                             (keep ? " keepdims" : "") + (last ? " last" : "");
    EXPECT_TRUE(testing::has_match(halide(), b.graph(), {shifted, y})) << what;
    testing::expect_like_reference(halide(), b.graph(), {Tensor::from_vector<float>(s, xs)}, what);
  }
}

// CumSum forwards and reversed, inclusive and exclusive, along every axis of random shapes
// (the axis a constant input, negative in some trials), fused with the Mul after it and, in
// odd trials, an output itself too (the scan's buffer is then the output's). Its sums are
// taken in the reference's order, so they are exact, not merely close. The first trials are
// big enough for threads: tasks over the dims outside the axis, over chunks of the dims
// inside it (one outer row), and both.
TEST(HalideBackend, CumSumLikeReferenceInEveryDirection) {
  std::mt19937 rng(43);
  const std::vector<std::pair<Shape, int64_t>> big = {
      {{3, 70000}, 1}, {{1, 64, 4100}, 1}, {{2, 3, 100, 17, 40}, 2}, {{1, 3000, 33}, -1}};
  for (int trial = 0; trial < 20; ++trial) {
    int rank = static_cast<int>(pick(rng, 1, 4));
    Shape s = random_shape(rng, rank);
    int64_t axis = pick(rng, 0, rank - 1) - (trial % 3 == 0 ? rank : 0);
    if (trial < static_cast<int>(big.size())) std::tie(s, axis) = big[trial];
    const bool exclusive = trial % 2 == 1, reverse = (trial / 2) % 2 == 1;
    GraphBuilder b(13);
    ValueId x = b.input("x", DType::kFloat32, s);
    ValueId c = b.add1("CumSum", {x, b.constant("axis", Tensor::scalar<int64_t>(axis))},
                       {{"exclusive", attr_i(exclusive)}, {"reverse", attr_i(reverse)}});
    ValueId y = b.add1("Mul", {c, b.constant("k", Tensor::scalar(2.0f))});
    b.output(y);
    if (trial % 2 == 1) b.output(c);
    const std::string what = "CumSum " + shape_to_string(s) + " axis " + std::to_string(axis) +
                             (exclusive ? " exclusive" : "") + (reverse ? " reverse" : "");
    EXPECT_TRUE(testing::has_match(halide(), b.graph(), {c, y})) << what;
    auto [got, want] = testing::run_backend_and_reference(halide(), b.graph(), 5);
    EXPECT_TRUE(outputs_match(got, want, Tolerance{0, 0})) << what;
  }
}

// IsNaN and IsInf (each sign it may detect) on values with NaNs and infinities, and the
// nan_to_num they are exported in: Where(IsNaN(x), 0, x), one kernel.
TEST(HalideBackend, IsNaNAndIsInfLikeReference) {
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(47);
  const Shape s = {3, 37};
  std::vector<float> xs(3 * 37);
  for (float& v : xs) {
    const int64_t r = pick(rng, 0, 9);
    v = r == 0 ? NAN : r == 1 ? inf : r == 2 ? -inf : static_cast<float>(pick(rng, -5, 5));
  }
  for (int negative = 0; negative < 2; ++negative)
    for (int positive = 0; positive < 2; ++positive) {
      GraphBuilder b;
      ValueId x = b.input("x", DType::kFloat32, s);
      ValueId nan = b.add1("IsNaN", {x});
      ValueId clean = b.add1("Where", {nan, b.constant("zero", Tensor::scalar(0.0f)), x});
      ValueId big =
          b.add1("IsInf", {clean},
                 {{"detect_negative", attr_i(negative)}, {"detect_positive", attr_i(positive)}});
      b.output(b.add1("Where", {big, b.constant("cap", Tensor::scalar(1e4f)), clean}));
      b.output(big);
      b.output(nan);
      const std::string what =
          "IsInf negative " + std::to_string(negative) + " positive " + std::to_string(positive);
      EXPECT_TRUE(testing::has_match(halide(), b.graph(), {nan, clean, big})) << what;
      testing::expect_like_reference(halide(), b.graph(), {Tensor::from_vector<float>(s, xs)},
                                     what);
    }
}

TEST(HalideBackend, RefusesWhatItCannotGenerate) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {4, 4});
  ValueId c = b.add1("Cast", {x}, {{"to", attr_i(static_cast<int64_t>(DType::kInt32))}});
  b.output(b.add1("Neg", {c}));
  testing::expect_unsupported(halide(), b.graph(), "an int32 region", "float32");
  GraphBuilder m;
  ValueId a = m.input("a", DType::kFloat32, {4, 4});
  m.output(m.add1("MatMul", {a, a}));
  testing::expect_unsupported(halide(), m.graph(), "a MatMul");
}

TEST(HalideBackend, FusionRuleProposesWholeChains) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {4, 64});
  ValueId w = b.random_constant("w", {64, 64});
  ValueId mm = b.add1("MatMul", {x, w});
  ValueId y = b.add1("Add", {mm, b.random_constant("bias", {64})});
  ValueId g = add_gelu(b, y);
  b.output(testing::decomposed_layer_norm(b, g, 64, 1e-5f));
  Graph graph = b.finish();
  size_t largest = 0;
  for (const Match& m : find_matches(graph, halide())) {
    for (NodeId n : m.nodes) EXPECT_NE(graph.node(n).op_type, "MatMul");
    largest = std::max(largest, m.nodes.size());
  }
  // bias Add + 5 GELU ops + 9 LayerNorm ops = 15 nodes, under the cap of 16.
  EXPECT_EQ(largest, 15u);
  // And the whole model on halide (MatMul on the fallback) is right.
  Session halide_session(graph, SessionOptions{.backend = "halide", .strict = true});
  const std::vector<std::string> placed = halide_session.node_backends();
  for (size_t n = 0; n < graph.num_nodes(); ++n)
    EXPECT_EQ(placed[n], graph.node(static_cast<NodeId>(n)).op_type == "MatMul"
                             ? BackendRegistry::global().fallback().name()
                             : "halide")
        << graph.node(static_cast<NodeId>(n)).name;
  Session reference(graph, SessionOptions{});
  std::vector<Tensor> in = random_inputs(graph, 9);
  EXPECT_TRUE(outputs_match(halide_session.run(in), reference.run(in)));
}

TEST(HalideBackend, DiskCacheServesTheSecondCompile) {
  namespace fs = std::filesystem;
  testing::TempCacheDir cache_dir("halide-test");
  const fs::path& dir = cache_dir.path();
  // A shape no other test uses, so the kernel is new to this process.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {3, 777});
  b.output(b.add1("Relu", {b.add1("Add", {x, b.random_constant("bias", {777})})}));
  const Graph g = b.finish();
  auto count_objects = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir / "halide"))
      if (e.path().extension() == ".so" && e.path().filename().string().rfind("runtime-", 0) != 0)
        ++n;
    return n;
  };
  const halide_backend::CacheStats before = halide_backend::cache_stats();
  expect_like_reference(g, "first compile");
  const halide_backend::CacheStats first = halide_backend::cache_stats();
  EXPECT_EQ(first.compiles, before.compiles + 1);
  EXPECT_EQ(count_objects(), 1);
  // Same graph again, with the in-process map dropped: served by the file.
  halide_backend::clear_memory_cache();
  expect_like_reference(g, "second compile");
  const halide_backend::CacheStats second = halide_backend::cache_stats();
  EXPECT_EQ(second.compiles, first.compiles);
  EXPECT_EQ(second.disk_hits, first.disk_hits + 1);
  EXPECT_EQ(count_objects(), 1);
  // And without dropping it: served from memory.
  halide().compile(g, testing::test_options());
  EXPECT_EQ(halide_backend::cache_stats().memory_hits, second.memory_hits + 1);
}

TEST(HalideBackend, UnwritableCacheDirFallsBack) {
  testing::ScopedEnv cache_dir("COLLAGE_CACHE_DIR", "/proc/collage-cannot-create-this");
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {5, 333});
  b.output(b.add1("Tanh", {b.add1("Mul", {x, b.constant("k", Tensor::scalar(3.0f))})}));
  expect_like_reference(b.graph(), "no disk cache");
  EXPECT_EQ(halide_backend::cache_dir().find("/proc"), std::string::npos);
}

}  // namespace
}  // namespace collage
