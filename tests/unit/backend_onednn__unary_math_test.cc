// The elementwise functions oneDNN 2.6 has no eltwise algorithm for, as collage's own step in
// onednn programs (unary_math.h): each between two convolutions of one onednn-graph region
// (its input in the convs' layout, values in its domain), in the channel-blocked variant
// with a channel count the block pads (Cos(0) = 1 must not land in the padding), and a lone
// Erf; each against the reference backend, one unary step, no reference primitive; and each
// as a kernel of op-level onednn.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/unary_math.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_ints;
using testing::GraphBuilder;
using testing::onednn_graph;
using testing::outputs_match;
using testing::ProgramSteps;
using testing::steps_of;

// conv (channels `c`) -> a map into `op`'s domain -> op -> conv.
Graph between_convs(const std::string& op, int64_t c) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 8, 12, 12});
  auto conv = [&](ValueId v, int64_t /*cin*/, int64_t cout, const std::string& name) {
    return testing::conv3x3(b, v, cout, name);
  };
  ValueId y = conv(x, 8, c, "a");
  if (op == "Asin" || op == "Acos") {
    y = b.add1("Tanh", {y});  // (-1, 1)
  } else if (op == "Tan" || op == "Atanh") {
    // (-0.9, 0.9): away from the pole of tan and the infinities of atanh, where the convs'
    // rounding (oneDNN's order of sums against the reference's) is magnified past any bound.
    y = b.add1("Mul", {b.add1("Tanh", {y}), b.constant("shrink", Tensor::scalar(0.9f))});
  } else if (op == "Acosh") {
    y = b.add1("Add", {b.add1("Abs", {y}), b.constant("one", Tensor::scalar(1.0f))});  // >= 1
  } else if (op == "Floor" || op == "Ceil" || op == "Sign") {
    y = b.add1("Mul", {y, b.constant("spread", Tensor::scalar(7.0f))});  // many integers apart
  }
  y = b.add1(op, {y});
  b.output(conv(y, c, 8, "b"));
  return b.graph();
}

ProgramSteps compiled(const Graph& g, const std::string& variant) {
  CompileOptions options = testing::test_options();
  options.variant = variant;
  return steps_of(*onednn_graph().compile(g, options));
}

TEST(OnednnUnaryMath, EachFunctionRunsInsideARegionLikeReference) {
  const std::vector<std::string> ops = {"Sin",  "Cos",  "Tan",   "Asin",    "Acos",  "Atan",
                                        "Sinh", "Cosh", "Asinh", "Acosh",   "Atanh", "Floor",
                                        "Ceil", "Sign", "Erf",   "Softsign"};
  for (const std::string& op : ops)
    for (int64_t c : {16, 20}) {
      const Graph g = between_convs(op, c);
      const std::string what = op + " on " + std::to_string(c) + " channels";
      for (const std::string variant : {"", "blocked"}) {
        const ProgramSteps steps = compiled(g, variant);
        EXPECT_EQ(steps.count(onednn::kUnaryMathStep), 1) << what << " " << variant;
        for (const std::string& impl : steps.implementations)
          EXPECT_FALSE(onednn::is_reference_impl(impl)) << what << " " << variant << ": " << impl;
        CompileOptions options = testing::test_options();
        options.variant = variant;
        const std::vector<Tensor> inputs = random_inputs(g, 7);
        std::unique_ptr<Kernel> kernel = onednn_graph().compile(g, options);
        std::vector<Tensor> got = {Tensor(DType::kFloat32, g.value(g.outputs[0]).shape)};
        kernel->run(inputs, got);
        EXPECT_TRUE(outputs_match(got, Session(g, SessionOptions{}).run(inputs)))
            << what << " " << variant;
      }
      // onednn's own kernels (op level) take it too: nothing left to the fallback.
      const std::vector<Tensor> inputs = random_inputs(g, 7);
      EXPECT_TRUE(testing::expect_session_like_reference(
                      "onednn", g, 2, inputs, Session(g, SessionOptions{}).run(inputs), what)
                      .empty())
          << what << " on onednn";
    }
}

// A lone Erf (no GELU around it) and a Sign after a pooling, the form PyTorch exports
// F.lp_pool2d in: one region each, where they were cut out before.
TEST(OnednnUnaryMath, ALoneErfAndAnLpPoolExportAreOneRegion) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 10, 10});
  ValueId e = b.add1("Erf", {b.add1("Relu", {x})});
  ValueId pooled = b.add1("AveragePool", {b.add1("Mul", {e, e})},
                          {{"kernel_shape", attr_ints({2, 2})}, {"strides", attr_ints({2, 2})}});
  ValueId s = b.add1("Mul", {b.add1("Sign", {pooled}), b.add1("Relu", {b.add1("Abs", {pooled})})});
  b.output(b.add1("Sqrt", {b.add1("Mul", {s, b.constant("k", Tensor::scalar(4.0f))})}));
  testing::expect_fast_and_like_reference(onednn_graph(), b.graph(), "erf, lp_pool2d");
  EXPECT_EQ(steps_of(*onednn_graph().compile(b.graph(), testing::test_options()))
                .count(onednn::kUnaryMathStep),
            2);
  EXPECT_TRUE(testing::has_match(onednn_graph(), b.graph(), {e}));
}

// Sin and Cos run vectorized over |x| <= 8192 (util/fast_math.h's fast_sin_or_cos) and on
// libm past it: over arguments of every magnitude up to 1e7, both signs, zeros, infinities and
// NaN, split unevenly between the threads, each as the reference (NaN where it has NaN).
TEST(OnednnUnaryMath, SinAndCosOverEveryMagnitudeLikeReference) {
  std::mt19937 rng(5);
  std::vector<float> xs;
  for (float range : {1.0f, 30.0f, 1000.0f, 8192.0f, 8300.0f, 1e7f}) {
    std::uniform_real_distribution<float> u(-range, range);
    for (int i = 0; i < 5000; ++i) xs.push_back(u(rng));
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float special : {0.0f, -0.0f, inf, -inf, std::nanf(""), 8192.0f, -8192.0f, 8192.001f})
    xs.push_back(special);
  const int64_t n = static_cast<int64_t>(xs.size());
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {n});
  b.output(b.add1("Sin", {x}));
  b.output(b.add1("Cos", {x}));
  const std::vector<Tensor> inputs = {Tensor::from_vector<float>({n}, xs)};
  const std::vector<Tensor> want = Session(b.graph(), SessionOptions{}).run(inputs);
  for (const char* backend : {"onednn", "onednn-graph"})
    for (int threads : {1, 2, 3})
      EXPECT_TRUE(testing::expect_session_like_reference(backend, b.graph(), threads, inputs, want,
                                                         "sin and cos")
                      .empty())
          << backend;
}

}  // namespace
}  // namespace collage
