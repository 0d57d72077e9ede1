// onednn's transformer kernels against the reference backend, on randomized shapes: the
// fused attention (BERT, GPT-2, ViT, cross-attention, every mask form), GEMM tails through
// reshapes and tanh-GELU. Outputs are compared with the project's one rule (util/compare.h),
// which fails NaN as well.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/onednn/attention.h"
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

Backend& onednn() {
  return BackendRegistry::global().get("onednn");
}

bool has_op(const Graph& g, const std::vector<NodeId>& nodes, const std::string& op) {
  for (NodeId n : nodes)
    if (g.node(n).op_type == op) return true;
  return false;
}

// The onednn matches holding a Softmax (the attention rule's), each compiled standalone and
// checked against reference; returns them.
std::vector<Match> check_attention_matches(const Graph& g, const std::string& what) {
  std::vector<Match> found;
  for (const Match& m : find_matches(g, onednn())) {
    if (m.nodes.size() < 2 || !has_op(g, m.nodes, "Softmax")) continue;
    found.push_back(m);
    Graph sub = extract_subgraph(g, m.nodes);
    expect_like_reference(onednn(), sub,
                          fmt::format("{}: attention over {} nodes", what, m.nodes.size()));
  }
  return found;
}

struct HeadsCase {
  int64_t seq, heads, head_dim;
};

// BERT's self-attention as Hugging Face exports it: three projections (MatMul + Add bias),
// per-head Reshape + Transpose (k's two transposes merged), MatMul, Div, [Add mask],
// Softmax, MatMul, Transpose + Reshape back; then the output dense layer.
Graph bert_attention(const HeadsCase& c, int mask_kind) {
  GraphBuilder b(13);
  const int64_t hidden = c.heads * c.head_dim;
  ValueId x = b.input("x", DType::kFloat32, {1, c.seq, hidden});
  auto head_view = [&](ValueId v, std::vector<int64_t> perm) {
    ValueId r = b.add1(
        "Reshape",
        {v, b.constant("s", Tensor::from_vector<int64_t>({4}, {1, c.seq, c.heads, c.head_dim}))});
    return b.add1("Transpose", {r}, {{"perm", attr_ints(std::move(perm))}});
  };
  auto linear = [&](ValueId v, int64_t out) {
    ValueId m = b.add1("MatMul", {v, b.random_constant("w", {hidden, out}, 0.2f)});
    return b.add1("Add", {b.random_constant("bias", {out}, 0.1f), m});
  };
  ValueId q = head_view(linear(x, hidden), {0, 2, 1, 3});
  ValueId k = head_view(linear(x, hidden), {0, 2, 3, 1});
  ValueId v = head_view(linear(x, hidden), {0, 2, 1, 3});
  ValueId s = b.add1("MatMul", {q, k});
  s = b.add1("Div", {s, b.constant("scale", Tensor::scalar(std::sqrt(float(c.head_dim))))});
  if (mask_kind == 1) {
    // HF's extended attention mask, [1, 1, 1, S]: 0 where attended, -10000 where padded.
    Tensor m(DType::kFloat32, {1, 1, 1, c.seq});
    for (int64_t j = 0; j < c.seq; ++j) m.data<float>()[j] = j % 3 == 2 ? -10000.0f : 0.0f;
    s = b.add1("Add", {s, b.constant("mask", m)});
  } else if (mask_kind == 2) {
    // A runtime mask input, one per query row.
    s = b.add1("Add", {b.input("mask", DType::kFloat32, {1, 1, c.seq, c.seq}), s});
  }
  ValueId p = b.add1("Softmax", {s}, {{"axis", attr_i(-1)}});
  ValueId ctx = b.add1("MatMul", {p, v});
  ctx = b.add1("Transpose", {ctx}, {{"perm", attr_ints({0, 2, 1, 3})}});
  ctx = b.add1("Reshape",
               {ctx, b.constant("s2", Tensor::from_vector<int64_t>({3}, {1, c.seq, hidden}))});
  b.output(linear(ctx, hidden));
  return b.finish();
}

TEST(TransformerOnednn, BertAttentionOnRandomShapesAndMasks) {
  std::mt19937 rng(5);
  const std::vector<HeadsCase> cases = {{1, 1, 4}, {7, 3, 8}, {33, 2, 16}, {128, 12, 64}};
  for (const HeadsCase& c : cases)
    for (int mask = 0; mask < 3; ++mask) {
      const Graph g = bert_attention(c, mask);
      std::vector<Match> found = check_attention_matches(
          g, fmt::format("BERT seq {} heads {} dim {} mask {}", c.seq, c.heads, c.head_dim, mask));
      // The core, + head views, + the merge of heads, + the three projections as one GEMM.
      EXPECT_EQ(found.size(), 4u);
      size_t largest = 0;
      for (const Match& m : found) largest = std::max(largest, m.nodes.size());
      // 3 x (MatMul, Add, Reshape, Transpose) + MatMul, Div, [Add], Softmax, MatMul,
      // Transpose, Reshape.
      EXPECT_EQ(largest, 12u + 6u + (mask ? 1u : 0u));
    }
}

// GPT-2's: Conv1D (Reshape, Gemm, Reshape), Split into q/k/v, the causal Where, Softmax,
// the no-op Cast; and ViT's (torchvision MultiheadAttention): sequence-first Transpose,
// packed MatMul + Add, three Slices, q divided before the product.
Graph gpt2_attention(int64_t seq, int64_t heads, int64_t head_dim) {
  GraphBuilder b(13);
  const int64_t e = heads * head_dim;
  ValueId x = b.input("x", DType::kFloat32, {1, seq, e});
  ValueId flat =
      b.add1("Reshape", {x, b.constant("f", Tensor::from_vector<int64_t>({2}, {-1, e}))});
  ValueId qkv = b.add1("Gemm", {flat, b.random_constant("w", {e, 3 * e}, 0.2f),
                                b.random_constant("b", {3 * e}, 0.1f)});
  qkv =
      b.add1("Reshape", {qkv, b.constant("u", Tensor::from_vector<int64_t>({3}, {1, seq, 3 * e}))});
  std::vector<ValueId> parts =
      b.add("Split", {qkv, b.constant("sp", Tensor::from_vector<int64_t>({3}, {e, e, e}))},
            {{"axis", attr_i(2)}}, 3);
  auto heads_of = [&](ValueId v, std::vector<int64_t> perm) {
    ValueId r =
        b.add1("Reshape",
               {v, b.constant("h", Tensor::from_vector<int64_t>({4}, {1, seq, heads, head_dim}))});
    return b.add1("Transpose", {r}, {{"perm", attr_ints(std::move(perm))}});
  };
  ValueId q = heads_of(parts[0], {0, 2, 1, 3});
  ValueId k = heads_of(parts[1], {0, 2, 3, 1});
  ValueId v = heads_of(parts[2], {0, 2, 1, 3});
  ValueId s = b.add1("MatMul", {q, k});
  s = b.add1("Div", {s, b.constant("scale", Tensor::scalar(std::sqrt(float(head_dim))))});
  Tensor mask(DType::kBool, {1, 1, seq, seq});
  for (int64_t i = 0; i < seq; ++i)
    for (int64_t j = 0; j < seq; ++j) mask.data<bool>()[i * seq + j] = j <= i;
  s = b.add1("Where", {b.constant("causal", mask), s,
                       b.constant("min", Tensor::scalar(std::numeric_limits<float>::lowest()))});
  ValueId p = b.add1("Softmax", {s}, {{"axis", attr_i(-1)}});
  p = b.add1("Cast", {p}, {{"to", attr_i(static_cast<int64_t>(DType::kFloat32))}});
  ValueId ctx =
      b.add1("Transpose", {b.add1("MatMul", {p, v})}, {{"perm", attr_ints({0, 2, 1, 3})}});
  ctx = b.add1("Reshape", {ctx, b.constant("m", Tensor::from_vector<int64_t>({3}, {1, seq, e}))});
  ctx = b.add1("Reshape", {ctx, b.constant("f2", Tensor::from_vector<int64_t>({2}, {-1, e}))});
  b.output(b.add1("Gemm", {ctx, b.random_constant("wo", {e, e}, 0.2f)}));
  return b.finish();
}

Graph vit_attention(int64_t seq, int64_t heads, int64_t head_dim) {
  GraphBuilder b(17);
  const int64_t e = heads * head_dim;
  ValueId x = b.input("x", DType::kFloat32, {1, seq, e});
  ValueId t = b.add1("Transpose", {x}, {{"perm", attr_ints({1, 0, 2})}});
  ValueId qkv = b.add1("Add", {b.random_constant("b", {3 * e}, 0.1f),
                               b.add1("MatMul", {t, b.random_constant("w", {e, 3 * e}, 0.2f)})});
  auto slice = [&](int64_t begin) {
    return b.add1("Slice", {qkv, b.constant("st", Tensor::from_vector<int64_t>({1}, {begin})),
                            b.constant("en", Tensor::from_vector<int64_t>({1}, {begin + e})),
                            b.constant("ax", Tensor::from_vector<int64_t>({1}, {-1}))});
  };
  auto heads_of = [&](ValueId v) {
    return b.add1("Reshape",
                  {v, b.constant("h", Tensor::from_vector<int64_t>({3}, {seq, heads, head_dim}))});
  };
  ValueId q = b.add1("Transpose", {heads_of(slice(0))}, {{"perm", attr_ints({1, 0, 2})}});
  ValueId k = heads_of(slice(e));
  ValueId v = b.add1("Transpose", {heads_of(slice(2 * e))}, {{"perm", attr_ints({1, 0, 2})}});
  q = b.add1("Div", {q, b.constant("scale", Tensor::scalar(std::sqrt(float(head_dim))))});
  ValueId s = b.add1("MatMul", {q, b.add1("Transpose", {k}, {{"perm", attr_ints({1, 2, 0})}})});
  ValueId p = b.add1("Softmax", {s}, {{"axis", attr_i(-1)}});
  ValueId ctx = b.add1("Transpose", {b.add1("MatMul", {p, v})}, {{"perm", attr_ints({1, 0, 2})}});
  ctx = b.add1("Reshape", {ctx, b.constant("m", Tensor::from_vector<int64_t>({2}, {seq, e}))});
  b.output(b.add1("Gemm", {ctx, b.random_constant("wo", {e, e}, 0.2f)}, {{"transB", attr_i(1)}}));
  return b.finish();
}

TEST(TransformerOnednn, Gpt2AndVitAttentionOnOddSequences) {
  for (int64_t seq : {1, 5, 17, 197}) {
    std::vector<Match> gpt =
        check_attention_matches(gpt2_attention(seq, 3, 8), fmt::format("GPT-2 seq {}", seq));
    EXPECT_EQ(gpt.size(), 4u) << seq;
    std::vector<Match> vit =
        check_attention_matches(vit_attention(seq, 2, 16), fmt::format("ViT seq {}", seq));
    EXPECT_EQ(vit.size(), 4u) << seq;
  }
}

// Where masks the kernel must not shortcut (keys it may skip only when every row keeps a
// non-empty prefix): a random mask with a fully masked row (uniform weights), a key
// padding mask shared by all rows (a prefix: skipped), and the masked branch first.
TEST(TransformerOnednn, WhereMasksOfEveryShape) {
  std::mt19937 rng(17);
  const int64_t heads = 2, seq = 13, dim = 8;
  for (int kind = 0; kind < 3; ++kind) {
    GraphBuilder b(13);
    ValueId q = b.input("q", DType::kFloat32, {1, heads, seq, dim});
    ValueId k = b.input("k", DType::kFloat32, {1, heads, dim, seq});
    ValueId v = b.input("v", DType::kFloat32, {1, heads, seq, dim});
    const Shape mask_shape = kind == 1 ? Shape{1, 1, 1, seq} : Shape{1, 1, seq, seq};
    Tensor mask(DType::kBool, mask_shape);
    for (int64_t i = 0; i < mask.numel(); ++i) {
      const int64_t col = i % seq, row = i / seq;
      if (kind == 1)
        mask.data<bool>()[i] = col < 9;
      else if (kind == 0)
        mask.data<bool>()[i] = row != 4 && pick(rng, 0, 2) != 0;
      else
        mask.data<bool>()[i] = col > row;  // masked where true: the fill is input 1
    }
    ValueId s = b.add1("MatMul", {q, k});
    ValueId fill = b.constant("fill", Tensor::scalar(std::numeric_limits<float>::lowest()));
    s = kind == 2 ? b.add1("Where", {b.constant("m", mask), fill, s})
                  : b.add1("Where", {b.constant("m", mask), s, fill});
    b.output(b.add1("MatMul", {b.add1("Softmax", {s}, {{"axis", attr_i(-1)}}), v}));
    std::vector<Match> found =
        check_attention_matches(b.graph(), fmt::format("Where mask kind {}", kind));
    EXPECT_EQ(found.size(), 1u) << kind;  // no views, no projections: the core only
  }
}

// Cross-attention (a decoder reading an encoder): q projected from x, k and v from another
// input y, a key-padding mask as a runtime input. Only the projection reading the same
// input as the first joins the GEMM; the others stay outside.
TEST(TransformerOnednn, CrossAttentionWithTwoInputs) {
  for (int64_t sk : {1, 6, 31}) {
    GraphBuilder b(13);
    const int64_t sq = 5, heads = 2, dim = 8, e = heads * dim;
    ValueId x = b.input("x", DType::kFloat32, {1, sq, e});
    ValueId y = b.input("y", DType::kFloat32, {1, sk, e});
    ValueId pad = b.input("pad", DType::kFloat32, {1, 1, 1, sk});
    auto proj = [&](ValueId in, int64_t s, std::vector<int64_t> perm) {
      ValueId m = b.add1("MatMul", {in, b.random_constant("w", {e, e}, 0.3f)});
      m = b.add1("Add", {m, b.random_constant("b", {e}, 0.1f)});
      m = b.add1("Reshape",
                 {m, b.constant("s", Tensor::from_vector<int64_t>({4}, {1, s, heads, dim}))});
      return b.add1("Transpose", {m}, {{"perm", attr_ints(std::move(perm))}});
    };
    ValueId q = proj(x, sq, {0, 2, 1, 3});
    ValueId k = proj(y, sk, {0, 2, 3, 1});
    ValueId v = proj(y, sk, {0, 2, 1, 3});
    ValueId s = b.add1("Mul", {b.add1("MatMul", {q, k}), b.constant("c", Tensor::scalar(0.35f))});
    s = b.add1("Add", {s, pad});
    ValueId ctx = b.add1("MatMul", {b.add1("Softmax", {s}, {{"axis", attr_i(-1)}}), v});
    b.output(b.add1("Transpose", {ctx}, {{"perm", attr_ints({0, 2, 1, 3})}}));
    std::vector<Match> found =
        check_attention_matches(b.graph(), fmt::format("cross-attention, {} keys", sk));
    EXPECT_EQ(found.size(), 4u) << sk;
  }
}

// The three zoo transformers: every attention the rule proposes, compiled standalone.
TEST(TransformerOnednn, ZooTinyTransformers) {
  for (const char* name : {"bert-tiny", "gpt2-tiny", "vit-tiny"}) {
    Graph g = load_model_from_bytes(model_to_bytes(models::build_zoo_model(name)), "");
    std::vector<Match> found = check_attention_matches(g, name);
    EXPECT_EQ(found.size(), 8u) << name;  // 2 layers x 4 sizes
  }
}

// GPT-2's MLP: the projection, its bias and the tanh-approximated GELU as one matmul with
// post-ops; and that GELU alone.
TEST(TransformerOnednn, MatMulBiasGeluTanh) {
  for (int64_t rows : {1, 7, 32}) {
    GraphBuilder b(13);
    ValueId x = b.input("x", DType::kFloat32, {rows, 48});
    ValueId y = b.add1("Add", {b.add1("MatMul", {x, b.random_constant("w", {48, 80}, 0.3f)}),
                               b.random_constant("bias", {80})});
    const size_t first_gelu = b.graph().num_nodes();
    ValueId half = b.add1("Mul", {y, b.constant("half", Tensor::scalar(0.5f))});
    ValueId cube = b.add1("Pow", {y, b.constant("three", Tensor::scalar(3.0f))});
    ValueId inner =
        b.add1("Add", {y, b.add1("Mul", {cube, b.constant("c", Tensor::scalar(0.044715f))})});
    ValueId t =
        b.add1("Tanh", {b.add1("Mul", {inner, b.constant("k", Tensor::scalar(0.7978845608f))})});
    ValueId out =
        b.add1("Mul", {half, b.add1("Add", {t, b.constant("one", Tensor::scalar(1.0f))})});
    b.output(out);
    const Graph g = b.finish();
    std::vector<NodeId> all(g.num_nodes()), gelu;
    std::iota(all.begin(), all.end(), 0);
    for (size_t n = first_gelu; n < g.num_nodes(); ++n) gelu.push_back(static_cast<NodeId>(n));
    bool whole = false, alone = false;
    for (const Match& m : find_matches(g, onednn())) {
      whole |= m.nodes == all;
      alone |= m.nodes == gelu;
    }
    EXPECT_TRUE(whole) << "MatMul + bias + GELU(tanh) as one kernel";
    EXPECT_TRUE(alone) << "GELU(tanh) alone";
    expect_like_reference(onednn(), g, fmt::format("MatMul + bias + GELU(tanh), {} rows", rows));
    expect_like_reference(onednn(), extract_subgraph(g, gelu), "GELU(tanh)");
  }
}

// GPT-2's Conv1D: Gemm on [S, in], Reshape back to [1, S, out], then the GELU or the
// residual Add: one matmul kernel, the reshape a no-op on its plain output.
TEST(TransformerOnednn, GemmTailsThroughAReshape) {
  for (int64_t seq : {1, 9, 32}) {
    GraphBuilder b(13);
    ValueId x = b.input("x", DType::kFloat32, {seq, 40});
    ValueId r = b.input("residual", DType::kFloat32, {1, seq, 24});
    ValueId y = b.add1(
        "Gemm", {x, b.random_constant("w", {40, 24}, 0.3f), b.random_constant("b", {24}, 0.1f)});
    y = b.add1("Reshape", {y, b.constant("s", Tensor::from_vector<int64_t>({3}, {1, seq, 24}))});
    y = b.add1("Add", {y, r});
    y = b.add1("Mul", {y, b.random_constant("scale", {24})});  // per last dim, kept by the reshape
    b.output(b.add1("Relu", {y}));
    const Graph g = b.finish();
    std::vector<NodeId> all(g.num_nodes());
    std::iota(all.begin(), all.end(), 0);
    bool whole = false;
    for (const Match& m : find_matches(g, onednn())) whole |= m.nodes == all;
    EXPECT_TRUE(whole) << "Gemm + Reshape + Add + Mul + Relu as one kernel";
    expect_like_reference(onednn(), g, fmt::format("Gemm, Reshape, residual, seq {}", seq));
  }
  // The whole Conv1D: Reshape to 2-D, Gemm, Reshape back, GELU.
  for (int64_t seq : {3, 32}) {
    GraphBuilder b(13);
    ValueId x = b.input("x", DType::kFloat32, {1, seq, 24});
    ValueId flat =
        b.add1("Reshape", {x, b.constant("f", Tensor::from_vector<int64_t>({2}, {-1, 24}))});
    ValueId y = b.add1(
        "Gemm", {flat, b.random_constant("w", {24, 40}, 0.3f), b.random_constant("b", {40}, 0.1f)});
    y = b.add1("Reshape", {y, b.constant("s", Tensor::from_vector<int64_t>({3}, {1, seq, 40}))});
    b.output(b.add1("Tanh", {y}));
    bool whole = false;
    for (const Match& m : find_matches(b.graph(), onednn()))
      whole |= m.nodes == std::vector<NodeId>{0, 1, 2, 3};
    EXPECT_TRUE(whole) << "Reshape + Gemm + Reshape + Tanh as one kernel";
    expect_like_reference(onednn(), b.graph(), fmt::format("Conv1D, seq {}", seq));
  }
  // ViT's in_proj reads the sequence-first Transpose [1, S, E] -> [S, 1, E]: a view.
  {
    GraphBuilder b(17);
    ValueId x = b.input("x", DType::kFloat32, {1, 7, 16});
    ValueId t = b.add1("Transpose", {x}, {{"perm", attr_ints({1, 0, 2})}});
    ValueId y = b.add1("MatMul", {t, b.random_constant("w", {16, 48}, 0.3f)});
    b.output(b.add1("Add", {b.random_constant("b", {48}), y}));
    bool whole = false;
    for (const Match& m : find_matches(b.graph(), onednn()))
      whole |= m.nodes == std::vector<NodeId>{0, 1, 2};
    EXPECT_TRUE(whole) << "Transpose + MatMul + Add as one kernel";
    expect_like_reference(onednn(), b.graph(), "unit Transpose, MatMul, bias");
  }
  // ViT's out_proj: Gemm, Reshape to [S, 1, E], Transpose to [1, S, E] (moves a size-1
  // dim only), residual Add.
  {
    GraphBuilder b(17);
    ValueId x = b.input("x", DType::kFloat32, {5, 16});
    ValueId r = b.input("residual", DType::kFloat32, {1, 5, 16});
    ValueId y =
        b.add1("Gemm", {x, b.random_constant("w", {16, 16}, 0.3f)}, {{"transB", attr_i(1)}});
    y = b.add1("Reshape", {y, b.constant("s", Tensor::from_vector<int64_t>({3}, {5, 1, 16}))});
    y = b.add1("Transpose", {y}, {{"perm", attr_ints({1, 0, 2})}});
    b.output(b.add1("Add", {y, r}));
    bool whole = false;
    for (const Match& m : find_matches(b.graph(), onednn()))
      whole |= m.nodes == std::vector<NodeId>{0, 1, 2, 3};
    EXPECT_TRUE(whole) << "Gemm + Reshape + Transpose + Add as one kernel";
    expect_like_reference(onednn(), b.graph(), "Gemm, Reshape, unit Transpose, residual");
  }
  // A per-column operand of a reshape that changes the last dim has no place in the
  // Gemm's output: refused.
  GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, {6, 8});
  ValueId y = b.add1("Gemm", {x, b.random_constant("w", {8, 12})});
  y = b.add1("Reshape", {y, b.constant("s", Tensor::from_vector<int64_t>({2}, {12, 6}))});
  b.output(b.add1("Add", {y, b.random_constant("c", {6})}));
  testing::expect_unsupported(onednn(), b.graph(), "a column operand across a reshape",
                              "after a reshape");
}

// Reading head splits in place rests on this: a reshape of a strided view needs no copy
// exactly when each merged or split group of dims is contiguous.
TEST(TransformerOnednn, ReshapeViewFollowsNumpysNoCopyRule) {
  using onednn::contiguous_view;
  using onednn::reshape_view;
  using onednn::StridedView;
  auto strides = [](const std::optional<StridedView>& v) {
    return v ? v->strides : std::vector<int64_t>{-999};
  };
  EXPECT_EQ(strides(reshape_view(contiguous_view({2, 3, 4}), {6, 4})),
            (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(strides(reshape_view(contiguous_view({2, 3, 4}), {2, 12})),
            (std::vector<int64_t>{12, 1}));
  EXPECT_EQ(strides(reshape_view(contiguous_view({6}), {1, 2, 1, 3})),
            (std::vector<int64_t>{6, 3, 3, 1}));
  // A transpose cannot be flattened without a copy.
  StridedView t{{3, 2}, {1, 3}, 0};
  EXPECT_FALSE(reshape_view(t, {6}));
  std::optional<StridedView> t3 = reshape_view(t, {3, 1, 2});  // a size-1 dim's stride is free
  ASSERT_TRUE(t3);
  EXPECT_EQ(t3->strides[0], 1);
  EXPECT_EQ(t3->strides[2], 3);
  // ViT's sequence-first [S, 1, E] view of [1, S, E] is plain rows again.
  StridedView seq_first{{5, 1, 8}, {8, 40, 1}, 0};
  EXPECT_EQ(strides(reshape_view(seq_first, {5, 8})), (std::vector<int64_t>{8, 1}));
  // Columns [8, 16) of a [4, 24] matrix split into heads; flattening them is a copy.
  StridedView cols{{4, 8}, {24, 1}, 8};
  std::optional<StridedView> heads = reshape_view(cols, {4, 2, 4});
  EXPECT_EQ(strides(heads), (std::vector<int64_t>{24, 4, 1}));
  EXPECT_EQ(heads->offset, 8);
  EXPECT_FALSE(reshape_view(cols, {32}));
  EXPECT_FALSE(reshape_view(cols, {4, 9}));
}

}  // namespace
}  // namespace collage
