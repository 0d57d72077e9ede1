// Models of opsets 18-22, what current exporters write (past the ONNX 1.12 this builds
// against, whose checker knows opset 17: ir/onnx_import.cc). Each operator whose definition
// changed there, written in its new form, computes what the same computation written in the
// opset-13 (or 16) form does: loaded as a file (the checker's path for newer opsets and the
// import's lowerings), on the reference kernels and on onednn-graph. The forms' own semantics
// were checked against ONNX Runtime 1.30 when this was written (docs/DESIGN.md, "IR").
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "collage/model.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "op_test_util.h"
#include "util/compare.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::attr_ints;
using testing::attr_s;
using testing::GraphBuilder;

ValueId ints(GraphBuilder& b, const std::string& name, const std::vector<int64_t>& v) {
  return b.constant(name, Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v));
}

// `newer` and `older` (same inputs) give the same outputs on the reference kernels, and
// `newer` on onednn-graph too (strict: a compile error other than "unsupported" fails).
void expect_same(const Graph& newer, const Graph& older, int seed) {
  const Graph n = load_model_from_bytes(model_to_bytes(newer), "");
  const Graph o = load_model_from_bytes(model_to_bytes(older), "");
  EXPECT_EQ(n.opset, newer.opset);
  const std::vector<Tensor> inputs = random_inputs(o, seed);
  const std::vector<Tensor> want = Session(o, SessionOptions{}).run(inputs);
  EXPECT_EQ(compare_outputs(Session(n, SessionOptions{}).run(inputs), want,
                            Tolerance::backend_vs_reference()),
            "");
  SessionOptions on;
  on.backend = "onednn-graph";
  on.strict = true;
  EXPECT_EQ(compare_outputs(Session(n, on).run(inputs), want, Tolerance::backend_vs_reference()),
            "");
}

// How many kernels the onednn backend (strict) runs `g` as, loaded from its bytes.
size_t onednn_steps(const Graph& g) {
  SessionOptions onednn;
  onednn.backend = "onednn";
  onednn.strict = true;
  return Session(load_model_from_bytes(model_to_bytes(g), ""), onednn).num_steps();
}

TEST(NewerOpsets, ReductionsTakeTheirAxesAsAnInput) {
  std::mt19937 rng(3);
  int seed = 0;
  for (const std::string op : {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                               "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"}) {
    const std::vector<int64_t> axes =
        rng() % 2 ? std::vector<int64_t>{1} : std::vector<int64_t>{0, -1};
    const int64_t keepdims = static_cast<int64_t>(rng() % 2);
    SCOPED_TRACE(fmt::format("{} axes [{}] keepdims {}", op, fmt::join(axes, ","), keepdims));
    auto build = [&](int64_t opset) {
      GraphBuilder b(opset);
      // Sigmoid: positive values for ReduceLogSum's Log and a product that stays finite.
      const ValueId x = b.add1("Sigmoid", {b.input("x", DType::kFloat32, {3, 4, 5})});
      std::map<std::string, Attribute> attrs = {{"keepdims", attr_i(keepdims)}};
      std::vector<ValueId> in = {x};
      if (opset >= 18)
        in.push_back(ints(b, "axes", axes));
      else
        attrs["axes"] = attr_ints(axes);
      b.output(b.add1("Tanh", {b.add1(op, in, attrs)}));
      return b.finish();
    };
    expect_same(build(18), build(13), ++seed);
  }
  // noop_with_empty_axes: no axes, nothing reduced.
  GraphBuilder newer(18), older(13);
  const ValueId x = newer.add1("Sigmoid", {newer.input("x", DType::kFloat32, {3, 4})});
  newer.output(newer.add1("ReduceMean", {x}, {{"noop_with_empty_axes", attr_i(1)}}));
  older.output(older.add1("Sigmoid", {older.input("x", DType::kFloat32, {3, 4})}));
  expect_same(newer.finish(), older.finish(), ++seed);
}

TEST(NewerOpsets, SplitByCountPadByAxesAndGridSampleByItsNewModeNames) {
  {  // Split into 3 of 7: 3, 3 and the last 1 (opset 18's num_outputs).
    GraphBuilder newer(18), older(13);
    for (GraphBuilder* b : {&newer, &older}) {
      const ValueId x = b->add1("Tanh", {b->input("x", DType::kFloat32, {2, 7, 3})});
      std::vector<ValueId> parts =
          b == &newer
              ? b->add("Split", {x}, {{"axis", attr_i(1)}, {"num_outputs", attr_i(3)}}, 3)
              : b->add("Split", {x, ints(*b, "split", {3, 3, 1})}, {{"axis", attr_i(1)}}, 3);
      for (ValueId p : parts) b->output(b->add1("Sigmoid", {p}));
    }
    expect_same(newer.finish(), older.finish(), 11);
  }
  {  // Pad of the last two axes only (opset 18's axes input).
    GraphBuilder newer(18), older(13);
    for (GraphBuilder* b : {&newer, &older}) {
      const ValueId x = b->add1("Tanh", {b->input("x", DType::kFloat32, {1, 3, 5, 4})});
      const ValueId value = b->constant("value", Tensor::scalar(0.5f));
      const ValueId y =
          b == &newer
              ? b->add1("Pad", {x, ints(*b, "pads", {1, 2, 0, 1}), value, ints(*b, "axes", {2, 3})})
              : b->add1("Pad", {x, ints(*b, "pads", {0, 0, 1, 2, 0, 0, 0, 1}), value});
      b->output(b->add1("Relu", {y}));
    }
    expect_same(newer.finish(), older.finish(), 12);
  }
  {  // GridSample's "linear" and "cubic" (opset 20) are "bilinear" and "bicubic" (16).
    for (const auto& [mode, old_mode] : std::vector<std::pair<std::string, std::string>>{
             {"linear", "bilinear"}, {"cubic", "bicubic"}}) {
      GraphBuilder newer(20), older(16);
      for (GraphBuilder* b : {&newer, &older}) {
        const ValueId x = b->input("x", DType::kFloat32, {1, 2, 5, 6});
        const ValueId grid = b->add1("Tanh", {b->input("grid", DType::kFloat32, {1, 4, 3, 2})});
        b->output(
            b->add1("GridSample", {x, grid}, {{"mode", attr_s(b == &newer ? mode : old_mode)}}));
      }
      expect_same(newer.finish(), older.finish(), 13);
    }
  }
}

// Gelu (opset 20) and Mish (18) compute their function bodies written out at opset 13, and a
// MatMul with a Gelu after it is one onednn kernel (the GELU post-op its pattern fuses).
TEST(NewerOpsets, GeluAndMishAreTheirFunctionBodies) {
  for (const std::string approximate : {"none", "tanh"}) {
    SCOPED_TRACE(approximate);
    GraphBuilder newer(20), older(13);
    auto c = [](GraphBuilder& b, const std::string& name, float v) {
      return b.constant(name, Tensor::scalar(v));
    };
    for (GraphBuilder* b : {&newer, &older}) {
      const ValueId x = b->add1("MatMul", {b->input("x", DType::kFloat32, {4, 16}),
                                           b->random_constant("w", {16, 8}, 0.5f)});
      ValueId y;
      if (b == &newer) {
        y = b->add1("Gelu", {x}, {{"approximate", attr_s(approximate)}});
      } else if (approximate == "none") {
        const ValueId erf = b->add1("Erf", {b->add1("Div", {x, c(*b, "r2", 1.41421356f)})});
        y = b->add1("Mul", {b->add1("Mul", {x, b->add1("Add", {erf, c(*b, "one", 1)})}),
                            c(*b, "half", 0.5f)});
      } else {
        const ValueId cube = b->add1("Mul", {x, b->add1("Mul", {x, x})});
        const ValueId inner =
            b->add1("Mul", {b->add1("Add", {x, b->add1("Mul", {cube, c(*b, "k", 0.044715f)})}),
                            c(*b, "s", 0.7978845608f)});
        y = b->add1("Mul", {b->add1("Mul", {x, c(*b, "half", 0.5f)}),
                            b->add1("Add", {b->add1("Tanh", {inner}), c(*b, "one", 1)})});
      }
      b->output(y);
    }
    const Graph n = newer.finish();
    expect_same(n, older.finish(), 21);
    EXPECT_EQ(onednn_steps(n), 1u);
  }
  GraphBuilder newer(18), older(13);
  for (GraphBuilder* b : {&newer, &older}) {
    const ValueId x = b->add1("Mul", {b->input("x", DType::kFloat32, {3, 10}),
                                      b->constant("three", Tensor::scalar(3.0f))});
    b->output(b == &newer ? b->add1("Mish", {x})
                          : b->add1("Mul", {x, b->add1("Tanh", {b->add1("Softplus", {x})})}));
  }
  expect_same(newer.finish(), older.finish(), 22);
}

TEST(NewerOpsets, GroupNormalizationIsPyTorchsGroupNormDecomposition) {
  // Its scale and bias per group at opset 18, per channel at 21; written the way PyTorch
  // exported nn.GroupNorm before (Reshape, InstanceNormalization, Reshape, [Mul, Add]).
  for (int64_t opset : {18, 21}) {
    SCOPED_TRACE(fmt::format("opset {}", opset));
    const bool per_channel = opset >= 21;
    const Shape xs = {2, 6, 5, 4};
    const int64_t groups = 3;
    GraphBuilder newer(opset), older(13);
    for (GraphBuilder* b : {&newer, &older}) {
      const ValueId x = b->input("x", DType::kFloat32, xs);
      // Drawn in the same order in both graphs: the same values.
      const ValueId scale = b->random_constant("scale", {per_channel ? xs[1] : groups});
      const ValueId bias = b->random_constant("bias", {per_channel ? xs[1] : groups});
      if (b == &newer) {
        b->output(b->add1("GroupNormalization", {x, scale, bias},
                          {{"num_groups", attr_i(groups)}, {"epsilon", testing::attr_f(1e-3f)}}));
        continue;
      }
      const ValueId planes = b->add1("Reshape", {x, ints(*b, "planes", {xs[0], groups, -1})});
      const ValueId ones = b->constant("ones", Tensor::from_vector<float>({groups}, {1, 1, 1}));
      const ValueId zeros = b->constant("zeros", Tensor::from_vector<float>({groups}, {0, 0, 0}));
      const ValueId norm = b->add1("InstanceNormalization",
                                   {planes, per_channel ? ones : scale, per_channel ? zeros : bias},
                                   {{"epsilon", testing::attr_f(1e-3f)}});
      ValueId y = b->add1("Reshape", {norm, ints(*b, "back", xs)});
      if (per_channel) {
        const std::vector<int64_t> channel = {xs[1], 1, 1};
        y = b->add1("Mul", {y, b->add1("Reshape", {scale, ints(*b, "cs", channel)})});
        y = b->add1("Add", {y, b->add1("Reshape", {bias, ints(*b, "cb", channel)})});
      }
      b->output(y);
    }
    const Graph n = newer.finish();
    expect_same(n, older.finish(), 23);
    // One kernel on onednn: the lowered form is the group norm step's pattern.
    EXPECT_EQ(onednn_steps(n), 1u);
  }
}

}  // namespace
}  // namespace collage
