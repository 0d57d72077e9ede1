// Decoder-only transformers as Hugging Face's GPT2LMHeadModel exports with torch.onnx at
// opset 13 (static shapes, eval mode, no KV cache), GPT-2 small by default: 12 layers,
// d 768, 12 heads, vocabulary 50257, 1024 positions, input_ids [1, 128].
//
// - Embeddings: Reshape(input_ids, [-1, S]), Gather on wte, Gather on wpe with the constant
//   positions 0..S-1 (arange folds to a constant; the Gather stays), Add.
// - Pre-LN blocks: LayerNorm (decomposed at opset 13, LayerNormalization from 17), attention,
//   residual Add, LayerNorm, MLP, residual Add. HF's Conv1D (x @ W + b, W stored [in, out])
//   exports as Reshape to 2-D + Gemm + Reshape back.
// - Attention: c_attn, Split into q/k/v, per-head Reshape + Transpose (k's two transposes
//   merged), MatMul, Div by sqrt(head_dim), the causal mask as
//   Where(tril bool constant, scores, finfo(float).min) — HF's torch.where(causal_mask,
//   attn_weights, mask_value), one mask constant shared by all layers — Softmax, the no-op
//   Cast of .type(value.dtype), MatMul, Transpose + Reshape to merge heads, c_proj.
// - MLP: c_fc, tanh-approximated GELU written out (Mul/Pow/Mul/Add/Mul/Tanh/Add/Mul), c_proj.
// - ln_f, a Reshape to [1, S, d], and the LM head tied to wte: MatMul with the transposed
//   embedding. The exporter folds that transpose into a second initializer ([d, vocab]),
//   so the file holds the tied matrix twice (124.4 M distinct parameters, 163 M stored);
//   this model does the same, with the copy equal to wte transposed.
// Weights are named as Hugging Face's parameters ("transformer.h.0.attn.c_attn.weight").
#include <cmath>
#include <limits>

#include "models/families.h"
#include "models/layers.h"

namespace collage::models {
namespace {

struct Gpt2Config {
  std::string name;
  int layers = 12;
  int64_t hidden = 768;
  int64_t heads = 12;
  int64_t vocab = 50257;
  int64_t positions = 1024;
  int64_t seq = 128;
  int64_t opset = 13;
};

constexpr float kLayerNormEps = 1e-5f;
// GPT-2's initializer_range: embeddings N(0, 0.02).
constexpr float kEmbeddingStd = 0.02f;

ValueId reshape(ModelBuilder& b, ValueId x, const std::vector<int64_t>& shape) {
  return b.add1("Reshape", {x, b.int64s(b.param_name("shape"), shape)});
}

ValueId transpose(ModelBuilder& b, ValueId x, std::vector<int64_t> perm) {
  return b.add1("Transpose", {x}, {{"perm", ints_attr(std::move(perm))}});
}

// HF's Conv1D on [1, S, in]: addmm(bias, x.view(-1, in), weight).view(1, S, out).
ValueId conv1d(ModelBuilder& b, const std::string& name, ValueId x, int64_t out, float gain = 1) {
  Scope s(b, name);
  const int64_t in = b.dim(x, -1);
  ValueId flat = reshape(b, x, {-1, in});
  ValueId w = b.random(b.param_name("weight"), {in, out}, gain / std::sqrt(static_cast<float>(in)));
  ValueId y = b.add1("Gemm", {flat, w, random_bias(b, out)},
                     {{"alpha", float_attr(1.0f)}, {"beta", float_attr(1.0f)}});
  return reshape(b, y, {1, b.dim(x, 1), out});
}

// The mask and the value masked scores take: one constant each, shared by all layers (the
// exporter merges the layers' identical initializers).
struct CausalMask {
  ValueId mask;
  ValueId masked_value;
};

ValueId attention(ModelBuilder& b, ValueId x, const CausalMask& causal, const Gpt2Config& c) {
  Scope s(b, "attn");
  const int64_t head_dim = c.hidden / c.heads;
  ValueId qkv = conv1d(b, "c_attn", x, 3 * c.hidden);
  std::vector<ValueId> parts =
      b.add("Split", {qkv, b.int64s(b.param_name("split"), {c.hidden, c.hidden, c.hidden})},
            {{"axis", int_attr(2)}}, 3);
  const std::vector<int64_t> heads_shape = {1, c.seq, c.heads, head_dim};
  ValueId q = transpose(b, reshape(b, parts[0], heads_shape), {0, 2, 1, 3});
  ValueId k = transpose(b, reshape(b, parts[1], heads_shape), {0, 2, 3, 1});
  ValueId v = transpose(b, reshape(b, parts[2], heads_shape), {0, 2, 1, 3});
  ValueId scores = b.add1("MatMul", {q, k});
  const float scale = std::sqrt(static_cast<float>(head_dim));
  scores = b.add1("Div", {scores, b.scalar(b.param_name("scale"), scale)});
  scores = b.add1("Where", {causal.mask, scores, causal.masked_value});
  ValueId probs = b.add1("Softmax", {scores}, {{"axis", int_attr(-1)}});
  probs = b.add1("Cast", {probs}, {{"to", int_attr(static_cast<int64_t>(DType::kFloat32))}});
  ValueId context = transpose(b, b.add1("MatMul", {probs, v}), {0, 2, 1, 3});
  context = reshape(b, context, {1, c.seq, c.hidden});
  // The residual branch's last projection is scaled down (GPT-2 scales it by
  // 1/sqrt(2 * layers) at initialisation for the same reason).
  return conv1d(b, "c_proj", context, c.hidden, 0.5f);
}

ValueId block(ModelBuilder& b, ValueId x, const CausalMask& causal, const Gpt2Config& c) {
  ValueId h;
  {
    Scope s(b, "ln_1");
    h = layer_norm(b, x, kLayerNormEps);
  }
  x = add(b, attention(b, h, causal, c), x);
  {
    Scope s(b, "ln_2");
    h = layer_norm(b, x, kLayerNormEps);
  }
  Scope s(b, "mlp");
  h = conv1d(b, "c_fc", h, 4 * c.hidden);
  {
    Scope act(b, "act");
    h = gelu_tanh(b, h);
  }
  h = conv1d(b, "c_proj", h, c.hidden, 0.5f);
  return add(b, x, h);
}

// The lower-triangular [1, 1, S, S] bool mask (HF's `bias` buffer sliced to the sequence)
// and torch.finfo(float32).min.
CausalMask causal_mask(ModelBuilder& b, int64_t seq) {
  Tensor mask(DType::kBool, {1, 1, seq, seq});
  bool* m = mask.data<bool>();
  for (int64_t i = 0; i < seq; ++i)
    for (int64_t j = 0; j < seq; ++j) m[i * seq + j] = j <= i;
  return {b.constant("causal_mask", std::move(mask)),
          b.scalar("mask_value", std::numeric_limits<float>::lowest())};
}

Graph build_gpt2(const Gpt2Config& c, uint64_t seed) {
  ModelBuilder b(c.name, seed, c.opset);
  ValueId input_ids = b.input("input_ids", DType::kInt64, {1, c.seq});
  ValueId wte, x;
  {
    Scope s(b, "transformer");
    ValueId ids = reshape(b, input_ids, {-1, c.seq});
    {
      Scope e(b, "wte");
      wte = b.random(b.param_name("weight"), {c.vocab, c.hidden}, kEmbeddingStd);
      x = b.add1("Gather", {wte, ids}, {{"axis", int_attr(0)}});
    }
    {
      Scope e(b, "wpe");
      ValueId wpe = b.random(b.param_name("weight"), {c.positions, c.hidden}, kEmbeddingStd);
      std::vector<int64_t> positions(static_cast<size_t>(c.seq));
      for (int64_t i = 0; i < c.seq; ++i) positions[static_cast<size_t>(i)] = i;
      ValueId position_ids = b.constant(b.param_name("position_ids"),
                                        Tensor::from_vector<int64_t>({1, c.seq}, positions));
      x = add(b, x, b.add1("Gather", {wpe, position_ids}, {{"axis", int_attr(0)}}));
    }
    const CausalMask causal = causal_mask(b, c.seq);
    for (int i = 0; i < c.layers; ++i) {
      Scope layer(b, "h." + std::to_string(i));
      x = block(b, x, causal, c);
    }
    {
      Scope ln(b, "ln_f");
      x = layer_norm(b, x, kLayerNormEps);
    }
    x = reshape(b, x, {1, c.seq, c.hidden});
  }
  // lm_head.weight is wte; the exporter stores its transpose for the MatMul.
  const Tensor& table = b.constant_value(wte);
  Tensor transposed(DType::kFloat32, {c.hidden, c.vocab});
  const float* src = table.data<float>();
  float* dst = transposed.data<float>();
  for (int64_t v = 0; v < c.vocab; ++v)
    for (int64_t d = 0; d < c.hidden; ++d) dst[d * c.vocab + v] = src[v * c.hidden + d];
  ValueId head = b.constant("lm_head.weight", std::move(transposed));
  {
    Scope s(b, "lm_head");
    x = b.add1("MatMul", {x, head});
  }
  b.output(x, "logits");
  return b.finish();
}

}  // namespace

Graph gpt2(uint64_t seed) {
  Gpt2Config c;
  c.name = "gpt2";
  return build_gpt2(c, seed);
}

Graph gpt2_tiny(uint64_t seed) {
  Gpt2Config c;
  c.name = "gpt2-tiny";
  c.layers = 2;
  c.hidden = 128;
  c.heads = 2;
  c.vocab = 1000;
  c.positions = 64;
  c.seq = 32;
  return build_gpt2(c, seed);
}

Graph gpt2_sized(const TransformerSize& size, uint64_t seed) {
  Gpt2Config c;
  c.name = "gpt2-sized";
  c.layers = size.layers;
  c.hidden = size.hidden;
  c.heads = size.heads;
  c.vocab = size.vocab;
  c.positions = size.seq + 3;
  c.seq = size.seq;
  c.opset = size.opset;
  return build_gpt2(c, seed);
}

}  // namespace collage::models
