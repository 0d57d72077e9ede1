// Halide's transformer glue against the reference backend, on randomized shapes: what the
// zoo's BERT, GPT-2 and ViT graphs need off reference (Gather, Where, LayerNormalization and
// typed int32/int64/bool glue). Outputs are compared with the project's one rule
// (util/compare.h), which fails NaN as well.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "collage/backend.h"
#include "collage/model.h"
#include "collage/session.h"
#include "models/zoo.h"
#include "unit/backend_test_util.h"
#include "unit/graph_builder.h"
#include "util/compare.h"

namespace collage {
namespace {

using testing::attr_f;
using testing::attr_i;
using testing::attr_ints;
using testing::expect_like_reference;
using testing::GraphBuilder;
using testing::pick;

Backend& halide() {
  return BackendRegistry::global().get("halide");
}

Tensor int64s(Shape shape, std::mt19937& rng, int64_t lo, int64_t hi) {
  Tensor t(DType::kInt64, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = pick(rng, lo, hi);
  return t;
}

// ------------------------------------------------------------------------- halide glue

TEST(TransformerHalide, GatherOnRandomShapesAxesAndIndexTypes) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 8; ++trial) {
    const int rank = static_cast<int>(pick(rng, 1, 3));
    Shape data;
    for (int d = 0; d < rank; ++d) data.push_back(pick(rng, 2, 9));
    const int64_t axis = pick(rng, -rank, rank - 1);
    const int64_t dim = data[axis < 0 ? axis + rank : axis];
    Shape ishape;
    for (int d = 0, r = static_cast<int>(pick(rng, 0, 2)); d < r; ++d)
      ishape.push_back(pick(rng, 1, 5));
    const bool constant_indices = trial % 2 == 0;
    const bool int32 = trial % 3 == 0;
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, data);
    Tensor idx = int64s(ishape, rng, -dim, dim - 1);  // negative ones count from the end
    if (int32) {
      Tensor t(DType::kInt32, ishape);
      for (int64_t i = 0; i < t.numel(); ++i)
        t.data<int32_t>()[i] = static_cast<int32_t>(idx.data<int64_t>()[i]);
      idx = t;
    }
    std::vector<Tensor> inputs = random_inputs(b.graph(), 3);
    ValueId indices;
    if (constant_indices) {
      indices = b.constant("idx", idx);
    } else {
      indices = b.input("idx", idx.dtype(), ishape);
      inputs.push_back(idx);
    }
    b.output(b.add1("Gather", {x, indices}, {{"axis", attr_i(axis)}}));
    expect_like_reference(
        halide(), b.graph(), inputs,
        fmt::format("Gather {} axis {} indices {}{}", shape_to_string(data), axis,
                    shape_to_string(ishape), constant_indices ? " (constant)" : ""));
  }
}

TEST(TransformerHalide, GatherIndexOutOfRangeFailsTheKernel) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {5, 16});
  ValueId idx = b.input("idx", DType::kInt64, {3});
  b.output(b.add1("Gather", {x, idx}, {{"axis", attr_i(0)}}));
  const Graph g = b.finish();
  std::unique_ptr<Kernel> kernel = halide().compile(g, testing::test_options());
  std::vector<Tensor> inputs = random_inputs(g, 1);
  inputs[1] = Tensor::from_vector<int64_t>({3}, {0, 5, 1});
  std::vector<Tensor> out = {Tensor(DType::kFloat32, {3, 16})};
  EXPECT_THROW(kernel->run(inputs, out), Error);
  inputs[1] = Tensor::from_vector<int64_t>({3}, {0, -5, 4});
  EXPECT_NO_THROW(kernel->run(inputs, out));
}

// BERT's embeddings: Gather on the word table, two position-like constants added,
// LayerNorm decomposed. GPT-2's: int64 input_ids reshaped, then two Gathers added.
TEST(TransformerHalide, EmbeddingRegions) {
  std::mt19937 rng(3);
  {
    GraphBuilder b(13);
    const int64_t seq = 7, hidden = 48, vocab = 50;
    ValueId ids = b.input("ids", DType::kInt64, {1, seq});
    ValueId x =
        b.add1("Gather", {b.random_constant("table", {vocab, hidden}), ids}, {{"axis", attr_i(0)}});
    x = b.add1("Add", {x, b.random_constant("tok", {1, seq, hidden})});
    x = b.add1("Add", {x, b.random_constant("pos", {1, seq, hidden})});
    b.output(testing::decomposed_layer_norm(b, x, hidden, 1e-12f));
    std::vector<Tensor> inputs = {int64s({1, seq}, rng, 0, vocab - 1)};
    expect_like_reference(halide(), b.graph(), inputs, "BERT embeddings + LayerNorm");
  }
  {
    GraphBuilder b(13);
    const int64_t seq = 9, hidden = 32, vocab = 40;
    ValueId ids = b.input("ids", DType::kInt64, {1, seq});
    ValueId flat =
        b.add1("Reshape", {ids, b.constant("s", Tensor::from_vector<int64_t>({2}, {-1, seq}))});
    ValueId x =
        b.add1("Gather", {b.random_constant("wte", {vocab, hidden}), flat}, {{"axis", attr_i(0)}});
    std::vector<int64_t> positions;
    for (int64_t i = 0; i < seq; ++i) positions.push_back(i);
    ValueId p = b.add1("Gather",
                       {b.random_constant("wpe", {16, hidden}),
                        b.constant("pos", Tensor::from_vector<int64_t>({1, seq}, positions))},
                       {{"axis", attr_i(0)}});
    b.output(b.add1("Add", {x, p}));
    std::vector<Tensor> inputs = {int64s({1, seq}, rng, 0, vocab - 1)};
    expect_like_reference(halide(), b.graph(), inputs, "GPT-2 embeddings");
  }
}

// GPT-2's causal mask: Where(tril bool constant, scores / scale, lowest float), Softmax,
// and the no-op Cast; on odd sequence lengths.
TEST(TransformerHalide, CausalMaskWhereSoftmax) {
  for (int64_t seq : {1, 5, 17, 33}) {
    GraphBuilder b(13);
    const int64_t heads = 3;
    ValueId s = b.input("scores", DType::kFloat32, {1, heads, seq, seq});
    Tensor mask(DType::kBool, {1, 1, seq, seq});
    for (int64_t i = 0; i < seq; ++i)
      for (int64_t j = 0; j < seq; ++j) mask.data<bool>()[i * seq + j] = j <= i;
    ValueId d = b.add1("Div", {s, b.constant("scale", Tensor::scalar(8.0f))});
    ValueId w =
        b.add1("Where", {b.constant("mask", mask), d,
                         b.constant("min", Tensor::scalar(std::numeric_limits<float>::lowest()))});
    ValueId p = b.add1("Softmax", {w}, {{"axis", attr_i(-1)}});
    b.output(b.add1("Cast", {p}, {{"to", attr_i(static_cast<int64_t>(DType::kFloat32))}}));
    expect_like_reference(halide(), b.graph(), fmt::format("causal softmax, seq {}", seq));
  }
  // A runtime condition and tensor operands on both sides, broadcast.
  GraphBuilder b;
  ValueId c = b.input("c", DType::kBool, {4, 1});
  ValueId x = b.input("x", DType::kFloat32, {4, 6});
  ValueId y = b.input("y", DType::kFloat32, {6});
  b.output(b.add1("Where", {c, x, y}));
  expect_like_reference(halide(), b.graph(), "Where with a runtime condition");
}

TEST(TransformerHalide, LayerNormalizationOp) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 6; ++trial) {
    const int rank = static_cast<int>(pick(rng, 2, 3));
    Shape shape;
    for (int d = 0; d < rank; ++d) shape.push_back(pick(rng, 1, 40));
    shape.back() = pick(rng, 3, 97);
    const int64_t axis = trial % 3 == 2 ? -2 : -1;
    Shape norm(shape.end() + axis, shape.end());
    GraphBuilder b(17);
    ValueId x = b.input("x", DType::kFloat32, shape);
    std::vector<ValueId> ins = {x, b.random_constant("scale", norm)};
    if (trial % 2 == 0) ins.push_back(b.random_constant("bias", norm));
    b.output(
        b.add1("LayerNormalization", ins, {{"axis", attr_i(axis)}, {"epsilon", attr_f(1e-6f)}}));
    expect_like_reference(
        halide(), b.graph(),
        fmt::format("LayerNormalization {} axis {}", shape_to_string(shape), axis));
  }
  // Residual Add + LayerNormalization as one region, both values read outside (pre-LN).
  GraphBuilder b(17);
  ValueId x = b.input("x", DType::kFloat32, {1, 13, 64});
  ValueId r = b.input("r", DType::kFloat32, {1, 13, 64});
  ValueId sum = b.add1("Add", {x, r});
  b.output(sum);
  b.output(b.add1("LayerNormalization",
                  {sum, b.random_constant("scale", {64}), b.random_constant("bias", {64})}));
  expect_like_reference(halide(), b.graph(), "residual Add + LayerNormalization, two outputs");
}

TEST(TransformerHalide, ProposesTheGlueAlone) {
  GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, {2, 3, 4});
  ValueId w = b.random_constant("w", {4, 4});
  ValueId m = b.add1("MatMul", {x, w});
  ValueId t = b.add1("Transpose", {m}, {{"perm", attr_ints({1, 0, 2})}});
  b.output(b.add1("MatMul", {t, w}));
  EXPECT_TRUE(testing::has_match(halide(), b.graph(), {t}));
  expect_like_reference(
      halide(),
      [&] {
        GraphBuilder g(13);
        ValueId in = g.input("x", DType::kInt64, {2, 3, 4});
        g.output(g.add1("Transpose", {in}, {{"perm", attr_ints({2, 0, 1})}}));
        return g.finish();
      }(),
      "int64 Transpose");
}

}  // namespace
}  // namespace collage
