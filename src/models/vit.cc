// Vision transformers as torchvision's VisionTransformer (vit_b_16: 224x224, 16x16 patches,
// 12 layers, hidden 768, 12 heads, MLP 3072) exports with torch.onnx at opset 17, eval mode:
// patches by a stride-16 Conv, Reshape + Transpose to tokens, the class token Expanded and
// Concatenated in front, the position embedding Added; pre-LN encoder blocks
// (LayerNormalization at opset 17, decomposed below it); exact-erf GELU; the final LN;
// the head (Gemm) on the class token, picked by a Gather.
//
// nn.MultiheadAttention (batch_first) is written as the exporter writes
// F.multi_head_attention_forward: Transpose to sequence-first, one packed in-projection
// (MatMul with the pre-transposed in_proj_weight + Add), three Slices for q/k/v, per-head
// Reshape/Transpose, q divided by sqrt(head_dim), MatMul/Softmax/MatMul, and the output
// projection as Reshape + Gemm(transB) + Reshape + Transpose back. The Shape/Gather/Div
// arithmetic the exporter leaves around the Slices is written as the constants it folds to.
// Weights are named as torchvision's parameters; MatMul weights are stored [in, out].
#include <cmath>

#include "models/families.h"
#include "models/layers.h"

namespace collage::models {
namespace {

struct VitConfig {
  std::string name;
  int64_t image = 224;
  int64_t patch = 16;
  int layers = 12;
  int64_t heads = 12;
  int64_t hidden = 768;
  int64_t mlp = 3072;
  int64_t classes = 1000;
  int64_t opset = 17;
};

constexpr float kLayerNormEps = 1e-6f;
// torchvision initialises the class token to zeros and the position embedding N(0, 0.02);
// both random here, so that neither is a no-op.
constexpr float kEmbeddingStd = 0.02f;

ValueId reshape(ModelBuilder& b, ValueId x, const std::vector<int64_t>& shape) {
  return b.add1("Reshape", {x, b.int64s(b.param_name("shape"), shape)});
}

ValueId transpose(ModelBuilder& b, ValueId x, std::vector<int64_t> perm) {
  return b.add1("Transpose", {x}, {{"perm", ints_attr(std::move(perm))}});
}

// Columns [begin, end) of the last axis.
ValueId slice_last(ModelBuilder& b, ValueId x, int64_t begin, int64_t end) {
  return b.add1(
      "Slice", {x, b.int64s(b.param_name("starts"), {begin}), b.int64s(b.param_name("ends"), {end}),
                b.int64s(b.param_name("axes"), {-1})});
}

ValueId self_attention(ModelBuilder& b, ValueId x, const VitConfig& c) {
  Scope s(b, "self_attention");
  const int64_t seq = b.dim(x, 1), e = c.hidden, head_dim = c.hidden / c.heads;
  ValueId t = transpose(b, x, {1, 0, 2});  // [S, 1, E]
  ValueId w =
      b.random(b.param_name("in_proj_weight"), {e, 3 * e}, 1.0f / std::sqrt(static_cast<float>(e)));
  ValueId bias = b.random_range(b.param_name("in_proj_bias"), {3 * e}, -0.1f, 0.1f);
  ValueId qkv = b.add1("Add", {bias, b.add1("MatMul", {t, w})});
  const std::vector<int64_t> heads_shape = {seq, c.heads, head_dim};
  ValueId q = transpose(b, reshape(b, slice_last(b, qkv, 0, e), heads_shape), {1, 0, 2});
  ValueId k = reshape(b, slice_last(b, qkv, e, 2 * e), heads_shape);
  ValueId v = transpose(b, reshape(b, slice_last(b, qkv, 2 * e, 3 * e), heads_shape), {1, 0, 2});
  const float scale = std::sqrt(static_cast<float>(head_dim));
  q = b.add1("Div", {q, b.scalar(b.param_name("scale"), scale)});
  ValueId scores = b.add1("MatMul", {q, transpose(b, k, {1, 2, 0})});
  ValueId probs = b.add1("Softmax", {scores}, {{"axis", int_attr(-1)}});
  ValueId context = transpose(b, b.add1("MatMul", {probs, v}), {1, 0, 2});  // [S, H, hd]
  context = reshape(b, context, {seq, e});
  ValueId out;
  {
    Scope o(b, "out_proj");
    out = gemm(b, context, e);
  }
  return transpose(b, reshape(b, out, {seq, 1, e}), {1, 0, 2});
}

ValueId encoder_block(ModelBuilder& b, ValueId input, const VitConfig& c) {
  ValueId x;
  {
    Scope s(b, "ln_1");
    x = layer_norm(b, input, kLayerNormEps);
  }
  x = add(b, self_attention(b, x, c), input);
  ValueId y;
  {
    Scope s(b, "ln_2");
    y = layer_norm(b, x, kLayerNormEps);
  }
  {
    Scope s(b, "mlp.0");
    y = gelu(b, linear(b, y, c.mlp));
  }
  {
    // The residual branch's last projection is scaled down so 12 summed blocks keep the
    // stream O(1) (as in the ResNets).
    Scope s(b, "mlp.3");
    y = linear(b, y, c.hidden, 0.5f);
  }
  return add(b, x, y);
}

Graph build_vit(const VitConfig& c, uint64_t seed) {
  ModelBuilder b(c.name, seed, c.opset);
  const int64_t grid = c.image / c.patch;
  ValueId x = b.input("input", DType::kFloat32, {1, 3, c.image, c.image});
  {
    Scope s(b, "conv_proj");
    x = conv2d(b, x, c.hidden, c.patch, c.patch, 0);
  }
  x = transpose(b, reshape(b, x, {1, c.hidden, grid * grid}), {0, 2, 1});
  ValueId class_token = b.random("class_token", {1, 1, c.hidden}, kEmbeddingStd);
  // class_token.expand(n, -1, -1) at n = 1: the exporter's shape arithmetic folds to 1s.
  class_token = b.add1("Expand", {class_token, b.int64s("expand_shape", {1, 1, 1})});
  x = concat(b, {class_token, x}, 1);
  {
    Scope s(b, "encoder");
    ValueId pos =
        b.random(b.param_name("pos_embedding"), {1, grid * grid + 1, c.hidden}, kEmbeddingStd);
    x = add(b, x, pos);
    for (int i = 0; i < c.layers; ++i) {
      Scope layer(b, "layers.encoder_layer_" + std::to_string(i));
      x = encoder_block(b, x, c);
    }
    Scope ln(b, "ln");
    x = layer_norm(b, x, kLayerNormEps);
  }
  ValueId first = b.constant("class_index", Tensor::scalar<int64_t>(0));
  x = b.add1("Gather", {x, first}, {{"axis", int_attr(1)}});
  {
    Scope s(b, "heads.head");
    x = gemm(b, x, c.classes);
  }
  b.output(x, "logits");
  return b.finish();
}

}  // namespace

Graph vit_b16(uint64_t seed) {
  VitConfig c;
  c.name = "vit";
  return build_vit(c, seed);
}

Graph vit_tiny(uint64_t seed) {
  VitConfig c;
  c.name = "vit-tiny";
  c.image = 64;  // 4x4 patches + the class token: 17 tokens
  c.layers = 2;
  c.heads = 2;
  c.hidden = 64;
  c.mlp = 256;
  c.classes = 10;
  return build_vit(c, seed);
}

Graph vit_sized(const TransformerSize& size, uint64_t seed) {
  VitConfig c;
  c.name = "vit-sized";
  int64_t grid = 1;
  while ((grid + 1) * (grid + 1) <= size.seq - 1) ++grid;
  c.patch = 4;
  c.image = grid * c.patch;
  c.layers = size.layers;
  c.heads = size.heads;
  c.hidden = size.hidden;
  c.mlp = size.ffn;
  c.classes = 10;
  c.opset = size.opset;
  return build_vit(c, seed);
}

}  // namespace collage::models
