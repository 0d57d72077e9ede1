// BERT encoders as Hugging Face's BertModel exports at opset 13 with static shapes:
// Gather on the word embeddings, LayerNorm decomposed, attention as MatMul / Reshape /
// Transpose / Softmax, GELU as Div / Erf / Add / Mul / Mul, nn.Linear as MatMul + Add.
// Output: the last hidden state. Simplifications, both what constant folding gives when
// only input_ids is an input: the position and token-type embeddings (a Gather of fixed
// indices) are a precomputed [1, S, H] constant each, and the all-ones attention mask
// disappears.
#include <cmath>

#include "models/families.h"
#include "models/layers.h"

namespace collage::models {
namespace {

struct BertConfig {
  std::string name;
  int layers = 12;
  int64_t hidden = 768;
  int64_t heads = 12;
  int64_t ffn = 3072;
  int64_t seq = 128;
  int64_t vocab = 30522;
  int64_t opset = 13;
};

constexpr float kLayerNormEps = 1e-12f;
// BERT's initializer_range: embeddings are N(0, 0.02); LayerNorm rescales them.
constexpr float kEmbeddingStd = 0.02f;

ValueId heads_view(ModelBuilder& b, ValueId x, const BertConfig& c, std::vector<int64_t> perm) {
  ValueId shape = b.int64s(b.param_name("shape"), {1, c.seq, c.heads, c.hidden / c.heads});
  ValueId split = b.add1("Reshape", {x, shape});
  return b.add1("Transpose", {split}, {{"perm", ints_attr(std::move(perm))}});
}

ValueId self_attention(ModelBuilder& b, ValueId x, const BertConfig& c) {
  Scope s(b, "self");
  ValueId q, k, v;
  {
    Scope q_scope(b, "query");
    q = heads_view(b, linear(b, x, c.hidden), c, {0, 2, 1, 3});
  }
  {
    // transpose_for_scores then .transpose(-1, -2): the exporter merges the two Transposes.
    Scope k_scope(b, "key");
    k = heads_view(b, linear(b, x, c.hidden), c, {0, 2, 3, 1});
  }
  {
    Scope v_scope(b, "value");
    v = heads_view(b, linear(b, x, c.hidden), c, {0, 2, 1, 3});
  }
  ValueId scores = b.add1("MatMul", {q, k});
  const float scale = std::sqrt(static_cast<float>(c.hidden / c.heads));
  scores = b.add1("Div", {scores, b.scalar(b.param_name("scale"), scale)});
  ValueId probs = b.add1("Softmax", {scores}, {{"axis", int_attr(-1)}});
  ValueId context = b.add1("MatMul", {probs, v});
  context = b.add1("Transpose", {context}, {{"perm", ints_attr({0, 2, 1, 3})}});
  ValueId shape = b.int64s(b.param_name("shape"), {1, c.seq, c.hidden});
  return b.add1("Reshape", {context, shape});
}

ValueId encoder_layer(ModelBuilder& b, ValueId x, const BertConfig& c) {
  ValueId attention;
  {
    Scope s(b, "attention");
    ValueId context = self_attention(b, x, c);
    Scope out(b, "output");
    ValueId projected;
    {
      Scope dense(b, "dense");
      projected = linear(b, context, c.hidden);
    }
    Scope ln(b, "LayerNorm");
    attention = layer_norm(b, add(b, projected, x), kLayerNormEps);
  }
  ValueId intermediate;
  {
    Scope s(b, "intermediate.dense");
    intermediate = gelu(b, linear(b, attention, c.ffn));
  }
  Scope s(b, "output");
  ValueId out;
  {
    Scope dense(b, "dense");
    out = linear(b, intermediate, c.hidden);
  }
  Scope ln(b, "LayerNorm");
  return layer_norm(b, add(b, out, attention), kLayerNormEps);
}

ValueId embeddings(ModelBuilder& b, ValueId input_ids, const BertConfig& c) {
  Scope s(b, "embeddings");
  ValueId table =
      b.random(b.param_name("word_embeddings.weight"), {c.vocab, c.hidden}, kEmbeddingStd);
  ValueId x = b.add1("Gather", {table, input_ids}, {{"axis", int_attr(0)}});
  ValueId token_type =
      b.random(b.param_name("token_type_embeddings"), {1, c.seq, c.hidden}, kEmbeddingStd);
  x = add(b, x, token_type);
  ValueId position =
      b.random(b.param_name("position_embeddings"), {1, c.seq, c.hidden}, kEmbeddingStd);
  x = add(b, x, position);
  Scope ln(b, "LayerNorm");
  return layer_norm(b, x, kLayerNormEps);
}

Graph build_bert(const BertConfig& c, uint64_t seed) {
  ModelBuilder b(c.name, seed, c.opset);
  ValueId input_ids = b.input("input_ids", DType::kInt64, {1, c.seq});
  ValueId x = embeddings(b, input_ids, c);
  for (int i = 0; i < c.layers; ++i) {
    Scope s(b, "encoder.layer." + std::to_string(i));
    x = encoder_layer(b, x, c);
  }
  b.output(x, "last_hidden_state");
  return b.finish();
}

}  // namespace

Graph bert_base(uint64_t seed) {
  BertConfig c;
  c.name = "bert-base";
  return build_bert(c, seed);
}

Graph bert_tiny(uint64_t seed) {
  BertConfig c;
  c.name = "bert-tiny";
  c.layers = 2;
  c.hidden = 128;
  c.heads = 2;
  c.ffn = 512;
  c.seq = 32;
  c.vocab = 1000;
  return build_bert(c, seed);
}

Graph bert_sized(const TransformerSize& size, uint64_t seed) {
  BertConfig c;
  c.name = "bert-sized";
  c.layers = size.layers;
  c.hidden = size.hidden;
  c.heads = size.heads;
  c.ffn = size.ffn;
  c.seq = size.seq;
  c.vocab = size.vocab;
  c.opset = size.opset;
  return build_bert(c, seed);
}

}  // namespace collage::models
