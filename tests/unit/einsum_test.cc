// Einsum: the reference kernel on hand-computed equations (implicit outputs, ellipses,
// diagonals, broadcasts), its errors, and the importer's lowering to Transpose/Reshape/
// MatMul/ReduceSum checked against the reference kernel on random equations.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "backend_test_util.h"
#include "collage/model.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "op_test_util.h"

namespace collage {
namespace {

using testing::attr_s;
using testing::GraphBuilder;
using testing::OpInput;
using testing::outputs_match;
using testing::run_op;

Tensor floats(Shape shape, std::vector<float> values) {
  return Tensor::from_vector<float>(std::move(shape), values);
}

std::vector<float> values_of(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

Tensor einsum(const std::string& equation, const std::vector<Tensor>& inputs) {
  std::vector<OpInput> in;
  for (const Tensor& t : inputs) in.push_back({t});
  return run_op("Einsum", in, {{"equation", attr_s(equation)}})[0];
}

TEST(Einsum, HandComputedEquations) {
  const Tensor a = floats({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = floats({3, 2}, {1, 0, 0, 1, 2, 3});
  const Tensor ab = einsum("ij,jk->ik", {a, b});
  EXPECT_EQ(ab.shape(), (Shape{2, 2}));
  EXPECT_EQ(values_of(ab), (std::vector<float>{7, 11, 16, 23}));
  // Implicit output: the letters used once, in order; "ji" alone is a transpose.
  EXPECT_EQ(values_of(einsum("ij,jk", {a, b})), values_of(ab));
  EXPECT_EQ(values_of(einsum("ji", {a})), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(values_of(einsum("ij->", {a})), (std::vector<float>{21}));
  EXPECT_EQ(values_of(einsum("ij->j", {a})), (std::vector<float>{5, 7, 9}));
  // Upper case sorts before lower case in an implicit output, as numpy's does.
  EXPECT_EQ(einsum("aB", {a}).shape(), (Shape{3, 2}));
  // Diagonals: a label twice in one term.
  const Tensor sq = floats({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(values_of(einsum("ii->i", {sq})), (std::vector<float>{1, 5, 9}));
  EXPECT_EQ(values_of(einsum("ii", {sq})), (std::vector<float>{15}));
  // An ellipsis broadcasts its dimensions: [2,1,...] against [3,...] gives [2,3,...].
  const Tensor x = floats({2, 1, 1, 2}, {1, 2, 3, 4});
  const Tensor y = floats({3, 2, 1}, {1, 1, 2, 2, 3, 3});
  const Tensor xy = einsum("...ij,...jk->...ik", {x, y});
  EXPECT_EQ(xy.shape(), (Shape{2, 3, 1, 1}));
  EXPECT_EQ(values_of(xy), (std::vector<float>{3, 6, 9, 7, 14, 21}));
  // Three operands, and a broadcast size-1 label.
  const Tensor v = floats({2}, {1, 2});
  EXPECT_EQ(values_of(einsum("i,ij,j->", {v, a.reshaped({2, 3}), floats({3}, {1, 1, 1})})),
            (std::vector<float>{1 * 6 + 2 * 15}));
  EXPECT_EQ(values_of(einsum("ij,j->ij", {a, floats({1}, {2})})),
            (std::vector<float>{2, 4, 6, 8, 10, 12}));
}

TEST(Einsum, ErrorsNameWhatDoesNotFit) {
  const Tensor a = floats({2, 3}, {1, 2, 3, 4, 5, 6});
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ij->il", "output label 'l' is in no input"},
      {"ij->ii", "appears twice"},
      {"ijk->i", "does not fit operand 0"},
      {"ij,ij->i", "2 terms for 1 operands"},
      {"i1->i", "not a letter"},
      {"......->", "two ellipses"},
  };
  for (const auto& [equation, message] : cases) {
    try {
      einsum(equation, {a});
      ADD_FAILURE() << equation << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kShape) << equation;
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
          << equation << ": " << e.what();
    }
  }
  try {
    einsum("i,i->i", {floats({2}, {1, 2}), floats({3}, {1, 2, 3})});
    ADD_FAILURE() << "sizes 2 and 3 of one label were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 'i' is 2 in one place and 3"), std::string::npos)
        << e.what();
  }
}

// A graph of one Einsum over inputs of `shapes`, written to ONNX and loaded back: optimized
// (lowered) and not (the reference kernel).
struct Loaded {
  Graph lowered, kept;
};
Loaded load_einsum(const std::string& equation, const std::vector<Shape>& shapes, int64_t opset) {
  GraphBuilder b(opset);
  std::vector<ValueId> inputs;
  for (size_t i = 0; i < shapes.size(); ++i)
    inputs.push_back(b.input("x" + std::to_string(i), DType::kFloat32, shapes[i]));
  b.output(b.add1("Einsum", inputs, {{"equation", attr_s(equation)}}));
  const std::string bytes = model_to_bytes(b.graph());
  LoadOptions plain;
  plain.optimize = false;
  return {load_model_from_bytes(bytes, ""), load_model_from_bytes(bytes, "", plain)};
}

size_t count_op(const Graph& g, const std::string& op) {
  return std::count_if(g.nodes().begin(), g.nodes().end(),
                       [&](const Node& n) { return n.op_type == op; });
}

TEST(EinsumLowering, RandomEquationsComputeWhatTheReferenceKernelDoes) {
  std::mt19937 rng(12);
  const std::string letters = "abcdefgh";
  for (int trial = 0; trial < 60; ++trial) {
    // 1 to 3 operands over up to 6 labels of sizes 2-4, some shared; an explicit output of a
    // random subset in random order, or the implicit one.
    const int operands = 1 + static_cast<int>(rng() % 3);
    const int num_labels = 2 + static_cast<int>(rng() % 5);
    std::vector<int64_t> size(num_labels);
    for (int64_t& s : size) s = 2 + static_cast<int64_t>(rng() % 3);
    std::string equation;
    std::vector<Shape> shapes;
    std::string used;
    for (int i = 0; i < operands; ++i) {
      std::string term;
      for (int l = 0; l < num_labels; ++l)
        if (rng() % 2 && term.size() < 4) term += letters[l];
      if (term.empty()) term += letters[rng() % num_labels];
      std::shuffle(term.begin(), term.end(), rng);
      Shape shape;
      for (char c : term) shape.push_back(size[c - 'a']);
      shapes.push_back(shape);
      equation += (i ? "," : "") + term;
      used += term;
    }
    if (rng() % 4) {
      std::string out;
      for (char c : letters.substr(0, num_labels))
        if (used.find(c) != std::string::npos && rng() % 2) out += c;
      std::shuffle(out.begin(), out.end(), rng);
      equation += "->" + out;
    }
    const int64_t opset = trial % 2 ? 13 : 12;  // ReduceSum's axes: an input from 13 on
    SCOPED_TRACE(equation + " at opset " + std::to_string(opset));
    const Loaded g = load_einsum(equation, shapes, opset);
    EXPECT_EQ(count_op(g.lowered, "Einsum"), 0u);
    EXPECT_EQ(count_op(g.kept, "Einsum"), 1u);
    const std::vector<Tensor> inputs = random_inputs(g.kept, trial);
    const std::vector<Tensor> want = Session(g.kept, SessionOptions{}).run(inputs);
    const std::vector<Tensor> got = Session(g.lowered, SessionOptions{}).run(inputs);
    EXPECT_TRUE(outputs_match(got, want, Tolerance{1e-5, 1e-5}));
  }
}

TEST(EinsumLowering, AttentionBecomesTransposeAndMatMulLikeAnExport) {
  const Loaded scores = load_einsum("bhqd,bhkd->bhqk", {{1, 2, 5, 4}, {1, 2, 7, 4}}, 13);
  EXPECT_EQ(count_op(scores.lowered, "MatMul"), 1u);
  EXPECT_EQ(count_op(scores.lowered, "Transpose"), 1u);
  EXPECT_EQ(scores.lowered.num_nodes(), 2u);
  const Loaded context = load_einsum("bhqk,bhkd->bhqd", {{1, 2, 5, 7}, {1, 2, 7, 4}}, 13);
  EXPECT_EQ(context.lowered.num_nodes(), 1u);
  EXPECT_EQ(context.lowered.node(0).op_type, "MatMul");
}

TEST(EinsumLowering, DiagonalsAndBroadcastsStayEinsumAndStillRun) {
  for (const auto& [equation, shapes] : std::vector<std::pair<std::string, std::vector<Shape>>>{
           {"ii->i", {{3, 3}}}, {"ij,j->i", {{2, 3}, {1}}}}) {
    SCOPED_TRACE(equation);
    const Loaded g = load_einsum(equation, shapes, 13);
    EXPECT_EQ(count_op(g.lowered, "Einsum"), 1u);
    const std::vector<Tensor> inputs = random_inputs(g.kept, 5);
    EXPECT_TRUE(outputs_match(Session(g.lowered, SessionOptions{}).run(inputs),
                              Session(g.kept, SessionOptions{}).run(inputs)));
  }
}

}  // namespace
}  // namespace collage
