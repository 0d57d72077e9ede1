// A Where of a computed condition with the nodes computing it, as one step of collage's own
// inside onednn-graph regions (masked_select.h): the forms PyTorch exports (masked_fill,
// torch.where(x > 0, ...), Hardshrink, a float mask, nan_to_num with its float64 Casts), a
// threshold per channel, a condition against a value of another shape, between two
// convolutions in the plain and channel-blocked variants (20 channels: a padded block), each
// one region against the reference backend, with no node left to the fallback.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/masked_select.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::attr_ints;
using testing::GraphBuilder;
using testing::onednn_graph;
using testing::outputs_match;
using testing::ProgramSteps;
using testing::steps_of;

ValueId scalar(GraphBuilder& b, const std::string& name, float v) {
  return b.constant(name, Tensor::scalar(v));
}

ValueId cast(GraphBuilder& b, ValueId v, DType to) {
  return b.add1("Cast", {v}, {{"to", attr_i(static_cast<int64_t>(to))}});
}

// The forms, each applied to `y` (1 x c x 12 x 12); how many units each writes.
struct Form {
  std::string name;
  int units;
  ValueId (*apply)(GraphBuilder&, ValueId, int64_t);
};

const std::vector<Form>& forms() {
  static const std::vector<Form> all = {
      {"where(y > 0, y, 0.1 y)", 1,
       [](GraphBuilder& b, ValueId y, int64_t) {
         const ValueId gt = b.add1("Greater", {y, scalar(b, "zero", 0.0f)});
         return b.add1("Where", {gt, y, b.add1("Mul", {y, scalar(b, "slope", 0.1f)})});
       }},
      {"masked_fill(y < -0.5, 0)", 1,
       [](GraphBuilder& b, ValueId y, int64_t) {
         const ValueId lt = b.add1("Less", {y, scalar(b, "t", -0.5f)});
         return b.add1("Where", {cast(b, lt, DType::kBool), scalar(b, "fill", 0.0f), y});
       }},
      {"hardshrink", 1,
       [](GraphBuilder& b, ValueId y, int64_t) {
         const ValueId out = b.add1("Or", {b.add1("Greater", {y, scalar(b, "hi", 0.4f)}),
                                           b.add1("Less", {y, scalar(b, "lo", -0.4f)})});
         return b.add1("Where", {out, y, scalar(b, "fill", 0.0f)});
       }},
      // Comparisons of integers (Floor), so that ties decide: < against <= shows.
      {"y * float(q >= 0), Xor/Not/Equal/LessOrEqual of q = floor(4 y)", 2,
       [](GraphBuilder& b, ValueId y, int64_t) {
         const ValueId q = b.add1("Floor", {b.add1("Mul", {y, scalar(b, "four", 4.0f)})});
         const ValueId ge =
             cast(b, b.add1("GreaterOrEqual", {q, scalar(b, "zero", 0.0f)}), DType::kFloat32);
         const ValueId z = b.add1("Mul", {y, ge});
         const ValueId c =
             b.add1("Xor", {b.add1("Not", {b.add1("LessOrEqual", {q, scalar(b, "one", 1.0f)})}),
                            b.add1("Equal", {q, scalar(b, "minus_one", -1.0f)})});
         return b.add1("Where", {c, b.add1("Neg", {z}), z});
       }},
      {"where(q < -1 or q > 1, y, q), q = floor(4 y)", 1,
       [](GraphBuilder& b, ValueId y, int64_t) {
         const ValueId q = b.add1("Floor", {b.add1("Mul", {y, scalar(b, "four", 4.0f)})});
         const ValueId out = b.add1("Or", {b.add1("Less", {q, scalar(b, "lo", -1.0f)}),
                                           b.add1("Greater", {q, scalar(b, "hi", 1.0f)})});
         return b.add1("Where", {out, y, q});
       }},
      {"a threshold and a fill per channel", 1,
       [](GraphBuilder& b, ValueId y, int64_t c) {
         const ValueId lt = b.add1("Less", {y, b.random_constant("t", {c, 1, 1}, 0.5f)});
         return b.add1("Where", {lt, b.random_constant("fill", {1, c, 1, 1}), y});
       }},
      {"y above its channel mean", 1,
       [](GraphBuilder& b, ValueId y, int64_t) {
         const ValueId mean = b.add1("ReduceMean", {y}, {{"axes", attr_ints({1})}});
         return b.add1("Where", {b.add1("Greater", {y, mean}), y, mean});
       }},
  };
  return all;
}

// conv (8 -> c) -> form -> conv (c -> 8).
Graph between_convs(const Form& form, int64_t c) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 8, 12, 12});
  auto conv = [&](ValueId v, int64_t /*cin*/, int64_t cout, const std::string& name) {
    return testing::conv3x3(b, v, cout, name);
  };
  b.output(conv(form.apply(b, conv(x, 8, c, "a"), c), c, 8, "b"));
  return b.graph();
}

TEST(OnednnMaskedSelect, EachFormRunsInsideARegionLikeReference) {
  for (const Form& form : forms())
    for (int64_t c : {16, 20}) {
      const Graph g = between_convs(form, c);
      const std::string what = form.name + " on " + std::to_string(c) + " channels";
      const std::vector<Tensor> inputs = random_inputs(g, 11);
      const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
      for (const std::string variant : {"", "blocked"}) {
        CompileOptions options = testing::test_options();
        options.variant = variant;
        std::unique_ptr<Kernel> kernel = onednn_graph().compile(g, options);
        const ProgramSteps steps = steps_of(*kernel);
        EXPECT_EQ(steps.count(onednn::kMaskedSelectStep), form.units) << what << " " << variant;
        for (const std::string& impl : steps.implementations)
          EXPECT_FALSE(onednn::is_reference_impl(impl)) << what << " " << variant << ": " << impl;
        std::vector<Tensor> got = {Tensor(DType::kFloat32, g.value(g.outputs[0]).shape)};
        kernel->run(inputs, got);
        EXPECT_TRUE(outputs_match(got, want)) << what << " " << variant;
      }
      // What a user of onednn-graph alone gets, or of onednn's kernels: every node placed there.
      for (const char* backend : {"onednn-graph", "onednn"})
        EXPECT_TRUE(
            testing::expect_session_like_reference(backend, g, 2, inputs, want, what).empty())
            << what << " on " << backend;
    }
}

// nan_to_num as PyTorch exports it (IsNaN, then IsInf of a float64 Cast of the value, And
// its sign; +inf by IsInf's detect flags alone), on an input holding NaNs and infinities of both
// signs, over a size that runs on several threads; then a conv.
TEST(OnednnMaskedSelect, NanToNumExportReplacesEveryNonFiniteValue) {
  GraphBuilder b;
  const int64_t c = 16, hw = 160;
  ValueId x = b.input("x", DType::kFloat32, {1, c, hw, hw});
  ValueId y = b.add1("Where", {b.add1("IsNaN", {x}), scalar(b, "nan_fill", 0.0f), x});
  for (const bool positive : {true, false}) {
    const std::string sign = positive ? "pos" : "neg";
    const ValueId inf = b.add1("IsInf", {cast(b, y, DType::kFloat64)},
                               {{"detect_positive", attr_i(positive ? 1 : 0)},
                                {"detect_negative", attr_i(positive ? 0 : 1)}});
    // The export's And of the sign for -inf; IsInf's own flags alone for +inf.
    const ValueId which =
        positive ? inf : b.add1("And", {inf, b.add1("Less", {y, scalar(b, sign + "0", 0.0f)})});
    y = b.add1("Where", {which, scalar(b, sign, positive ? 3e3f : -3e3f), y});
  }
  b.output(b.add1("Conv", {y, b.random_constant("w", {8, c, 3, 3}, 0.1f)},
                  {{"pads", attr_ints({1, 1, 1, 1})}}));
  const Graph& g = b.graph();
  std::vector<Tensor> inputs = random_inputs(g, 3);
  float* d = inputs[0].data<float>();
  const float special[] = {std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity()};
  for (int64_t i = 0; i < inputs[0].numel(); i += 7) d[i] = special[(i / 7) % 3];
  const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
  std::unique_ptr<Kernel> kernel = onednn_graph().compile(g, testing::test_options());
  EXPECT_EQ(steps_of(*kernel).count(onednn::kMaskedSelectStep), 3);
  std::vector<Tensor> got = {Tensor(DType::kFloat32, g.value(g.outputs[0]).shape)};
  kernel->run(inputs, got);
  EXPECT_TRUE(outputs_match(got, want));
  for (int64_t i = 0; i < got[0].numel(); ++i)
    ASSERT_TRUE(std::isfinite(got[0].data<float>()[i])) << "element " << i;
  EXPECT_TRUE(
      testing::expect_session_like_reference("onednn-graph", g, 2, inputs, want, "nan_to_num")
          .empty());
}

// A condition two Wheres read is no unit of either (its bool would leave one): refused by the
// region, left to another backend, never computed wrong.
TEST(OnednnMaskedSelect, AConditionTwoWheresReadIsRefused) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 8, 8});
  const ValueId gt = b.add1("Greater", {x, scalar(b, "zero", 0.0f)});
  const ValueId a = b.add1("Where", {gt, x, scalar(b, "fa", 0.0f)});
  const ValueId n = b.add1("Where", {gt, scalar(b, "fb", 0.0f), x});
  b.output(b.add1("Add", {a, b.add1("Mul", {n, scalar(b, "k", 0.5f)})}));
  const Graph& g = b.graph();
  EXPECT_THROW(onednn_graph().compile(g, testing::test_options()), Error);
  const std::vector<Tensor> inputs = random_inputs(g, 5);
  const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
  SessionOptions options;
  options.backend = "onednn-graph";
  EXPECT_TRUE(outputs_match(Session(g, options).run(inputs), want));
}

}  // namespace
}  // namespace collage
