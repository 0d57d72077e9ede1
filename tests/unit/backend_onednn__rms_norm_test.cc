// The exported RMSNorm (LLaMA, Mistral, Gemma, T5) on the onednn backends: every form the
// exporters write becomes one step of collage's code (kRmsNormStep) that computes what the
// reference backend does, on randomized shapes, small (one thread) and large (the team),
// alone and inside onednn-graph regions.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/kernels.h"
#include "backends/onednn/region_kernel.h"
#include "collage/backend.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_ints;
using testing::GraphBuilder;
using testing::has_match;
using testing::onednn;
using testing::onednn_graph;
using testing::pick;
using testing::steps_of;

// How the normalized value is written: x * (1 / sqrt(.)) as torch.rsqrt exports,
// Reciprocal(sqrt(.)) * x, or x / sqrt(.).
enum class Form { kDivideOne, kReciprocal, kDivideX };

struct RmsNorm {
  Form form = Form::kDivideOne;
  bool scaled = true;
  int64_t pow_exponent = 2;
  int64_t axis = -1;
};

Graph rms_norm(const Shape& xs, const RmsNorm& r) {
  GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, xs);
  ValueId squares =
      b.add1("Pow", {x, b.constant("p", Tensor::scalar(static_cast<float>(r.pow_exponent)))});
  ValueId mean = b.add1("ReduceMean", {squares}, {{"axes", attr_ints({r.axis})}});
  ValueId root = b.add1("Sqrt", {b.add1("Add", {mean, b.constant("eps", Tensor::scalar(1e-6f))})});
  ValueId y = kNoValue;
  switch (r.form) {
    case Form::kDivideOne:
      y = b.add1("Mul", {x, b.add1("Div", {b.constant("one", Tensor::scalar(1.0f)), root})});
      break;
    case Form::kReciprocal:
      y = b.add1("Mul", {b.add1("Reciprocal", {root}), x});
      break;
    case Form::kDivideX:
      y = b.add1("Div", {x, root});
      break;
  }
  if (r.scaled) y = b.add1("Mul", {b.random_constant("gamma", {xs.back()}), y});
  b.output(y);
  return b.finish();
}

std::vector<ValueId> all_outputs(const Graph& g) {
  std::vector<ValueId> out;
  for (const Node& n : g.nodes()) out.push_back(n.outputs[0]);
  return out;
}

TEST(OnednnRmsNorm, EveryExportedFormIsOneStepLikeReference) {
  std::mt19937 rng(11);
  const Form forms[] = {Form::kDivideOne, Form::kReciprocal, Form::kDivideX};
  for (int trial = 0; trial < 12; ++trial) {
    // Odd widths for the tail after the 16-float lanes; 1 x 200 x 777 is over the size at
    // which the step splits its rows across the team.
    const Shape xs = trial % 3 == 2 ? Shape{1, pick(rng, 100, 200), pick(rng, 700, 800)}
                                    : Shape{pick(rng, 1, 3), pick(rng, 1, 40), pick(rng, 1, 70)};
    RmsNorm r;
    r.form = forms[trial % 3];
    r.scaled = trial % 4 != 3;
    const Graph g = rms_norm(xs, r);
    const std::string what = fmt::format("trial {}: x {} form {} scaled {}", trial,
                                         shape_to_string(xs), trial % 3, r.scaled);
    ASSERT_TRUE(onednn::rms_norm_group(g)) << what;
    EXPECT_TRUE(has_match(onednn(), g, all_outputs(g))) << what;
    std::unique_ptr<Kernel> kernel = onednn().compile(g, testing::test_options());
    const testing::ProgramSteps steps = steps_of(*kernel);
    EXPECT_EQ(steps.count(std::string(onednn::kRmsNormStep)), 1) << what;
    EXPECT_EQ(steps.implementations.size(), 1u) << what;
    testing::expect_like_reference(onednn(), g, what);
  }
}

TEST(OnednnRmsNorm, InRegionsBetweenProjectionsLikeReference) {
  // As in a LLaMA layer: the norm of x feeds a projection, and x is read again by the
  // residual Add. The region runs each norm as its one step: no reduction or binary
  // primitive left, since the projections and the residual fuse.
  for (int threads : {1, 2}) {
    for (Form form : {Form::kDivideOne, Form::kDivideX}) {
      GraphBuilder b;
      ValueId x = b.input("x", DType::kFloat32, {1, 24, 48});
      for (int layer = 0; layer < 2; ++layer) {
        ValueId squares = b.add1("Pow", {x, b.constant("p", Tensor::scalar(2.0f))});
        ValueId mean = b.add1("ReduceMean", {squares}, {{"axes", attr_ints({-1})}});
        ValueId root =
            b.add1("Sqrt", {b.add1("Add", {mean, b.constant("eps", Tensor::scalar(1e-6f))})});
        ValueId norm =
            form == Form::kDivideX
                ? b.add1("Div", {x, root})
                : b.add1("Mul",
                         {x, b.add1("Div", {b.constant("one", Tensor::scalar(1.0f)), root})});
        norm = b.add1("Mul", {b.random_constant("gamma", {48}), norm});
        x = b.add1("Add", {x, b.add1("MatMul", {norm, b.random_constant("w", {48, 48}, 0.2f)})});
      }
      b.output(x);
      const std::string what = fmt::format("threads {} form {}", threads, static_cast<int>(form));
      use_threads_on_this_thread(threads);
      std::unique_ptr<Kernel> kernel = onednn::compile_region(b.graph());
      const testing::ProgramSteps steps = steps_of(*kernel);
      EXPECT_EQ(steps.count(std::string(onednn::kRmsNormStep)), 2) << what;
      EXPECT_EQ(steps.count(dnnl::primitive::kind::reduction), 0) << what;
      EXPECT_EQ(steps.count(dnnl::primitive::kind::pooling_v2), 0) << what;
      EXPECT_EQ(steps.count(dnnl::primitive::kind::binary), 0) << what;
      testing::expect_like_reference(onednn_graph(), b.graph(), what);
    }
  }
}

TEST(OnednnRmsNorm, OtherNormsAreNotTakenForIt) {
  // x^3, or a mean over another axis than the last: not an RMSNorm, never proposed as one.
  RmsNorm cube;
  cube.pow_exponent = 3;
  RmsNorm other_axis;
  other_axis.axis = 1;
  for (const RmsNorm& r : {cube, other_axis}) {
    const Graph g = rms_norm({2, 6, 10}, r);
    EXPECT_FALSE(onednn::rms_norm_group(g)) << "exponent " << r.pow_exponent << " axis " << r.axis;
    EXPECT_FALSE(has_match(onednn(), g, all_outputs(g)))
        << "exponent " << r.pow_exponent << " axis " << r.axis;
  }
}

}  // namespace
}  // namespace collage
