// The built-in model zoo and the ONNX exporter: tiny variants build, export, re-import and
// run; full-size models have the published sizes; weights are reproducible.
#include <gtest/gtest.h>

#include <cmath>

#include "collage/model.h"
#include "collage/session.h"
#include "models/zoo.h"

namespace collage {
namespace {

const std::vector<std::string> kTinyModels = {
    "bert-tiny",   "resnet-tiny",    "mobilenet-tiny",    "dcgan-tiny", "resnet3d-tiny",
    "nasnet-tiny", "googlenet-tiny", "inception-v3-tiny", "gpt2-tiny",  "vit-tiny"};

void expect_same_signature(const Graph& a, const Graph& b) {
  ASSERT_EQ(a.num_nodes(), b.num_nodes());
  for (size_t i = 0; i < a.num_nodes(); ++i) EXPECT_EQ(a.nodes()[i].op_type, b.nodes()[i].op_type);
  ASSERT_EQ(a.inputs.size(), b.inputs.size());
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    EXPECT_EQ(a.value(a.inputs[i]).name, b.value(b.inputs[i]).name);
    EXPECT_EQ(a.value(a.inputs[i]).shape, b.value(b.inputs[i]).shape);
  }
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    EXPECT_EQ(a.value(a.outputs[i]).dtype, b.value(b.outputs[i]).dtype);
    EXPECT_EQ(a.value(a.outputs[i]).shape, b.value(b.outputs[i]).shape);
  }
}

class TinyZooModel : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyZooModel, ExportsReimportsAndRuns) {
  Graph built = models::build_zoo_model(GetParam());
  const std::string bytes = model_to_bytes(built);
  // The file holds exactly the built graph (some models have nodes that fold on import,
  // as the exporter's do: GPT-2's position Gather, ViT's class-token Expand).
  LoadOptions as_written;
  as_written.optimize = false;
  Graph reloaded = load_model_from_bytes(bytes, "", as_written);
  expect_same_signature(built, reloaded);
  const ModelStats stats = model_stats(built);
  EXPECT_EQ(stats.parameters, model_stats(reloaded).parameters);
  // Tiny, so tests can afford them: bounded in size, not in (machine- and load-dependent)
  // seconds. The largest, inception-v3-tiny, has 1.37 M parameters and 0.066 GFLOPs.
  EXPECT_LT(stats.parameters, 2'000'000);
  EXPECT_LT(stats.gflops, 0.1);

  Graph loaded = load_model_from_bytes(bytes, "");
  std::vector<Tensor> inputs = random_inputs(loaded, 5);
  Session session(std::move(loaded), SessionOptions{});
  std::vector<Tensor> outputs = session.run(inputs);
  ASSERT_EQ(outputs.size(), 1u);
  double sum_sq = 0;
  for (float v : outputs[0].span<float>()) {
    ASSERT_TRUE(std::isfinite(v));
    sum_sq += static_cast<double>(v) * v;
  }
  // The weight scaling keeps activations O(1): neither vanished nor exploded.
  double rms = std::sqrt(sum_sq / static_cast<double>(outputs[0].numel()));
  EXPECT_GT(rms, 1e-3);
  EXPECT_LT(rms, 1e3);
}

INSTANTIATE_TEST_SUITE_P(Zoo, TinyZooModel, ::testing::ValuesIn(kTinyModels), [](const auto& info) {
  std::string name = info.param;
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
});

TEST(Zoo, WeightsAreReproducible) {
  std::string a = model_to_bytes(models::build_zoo_model("resnet-tiny", 7));
  std::string b = model_to_bytes(models::build_zoo_model("resnet-tiny", 7));
  std::string c = model_to_bytes(models::build_zoo_model("resnet-tiny", 8));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Zoo, UnknownNameListsTheModels) {
  try {
    models::build_zoo_model("resnet51");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("resnet50"), std::string::npos);
  }
}

TEST(Zoo, ExportKeepsAttributesAndFoldedBatchNormStatistics) {
  Graph built = models::build_zoo_model("dcgan-tiny");
  Graph loaded = load_model_from_bytes(model_to_bytes(built), "");
  // DCGAN keeps BatchNormalization nodes (nothing folds into ConvTranspose); their
  // statistics are neither all-0 nor all-1.
  int batch_norms = 0;
  for (const Node& node : loaded.nodes()) {
    if (node.op_type == "ConvTranspose") {
      EXPECT_EQ(node.attr_ints("strides").size(), 2u);
      EXPECT_EQ(node.attr_ints("kernel_shape"), (std::vector<int64_t>{4, 4}));
    }
    if (node.op_type != "BatchNormalization") continue;
    ++batch_norms;
    EXPECT_FLOAT_EQ(node.attr_float("epsilon", 0), 1e-5f);
    for (size_t i = 1; i < 5; ++i) {
      std::vector<float> v = loaded.value(node.inputs[i]).constant.to_float_vector();
      bool all_zero = true, all_one = true;
      for (float f : v) {
        all_zero &= f == 0.0f;
        all_one &= f == 1.0f;
      }
      EXPECT_FALSE(all_zero || all_one) << node.name << " input " << i;
    }
  }
  EXPECT_EQ(batch_norms, 4);
}

TEST(OnnxExport, GivesUnnamedAndDuplicateValuesUniqueNames) {
  // Passes may leave values unnamed or with clashing names; the file must not.
  Graph g;
  g.opset = 13;
  ValueId x = g.add_value("x", DType::kFloat32, {2, 3}, true);
  g.inputs.push_back(x);
  ValueId a = g.add_value("", DType::kFloat32, {2, 3}, true);
  ValueId b = g.add_value("x", DType::kFloat32, {3, 2}, true);
  Node leaky;
  leaky.name = "leaky";
  leaky.op_type = "LeakyRelu";
  leaky.inputs = {x};
  leaky.outputs = {a};
  leaky.attrs["alpha"].type = Attribute::Type::kFloat;
  leaky.attrs["alpha"].f = 0.25f;
  g.add_node(leaky);
  Node transpose;
  transpose.name = "transpose";
  transpose.op_type = "Transpose";
  transpose.inputs = {a};
  transpose.outputs = {b};
  transpose.attrs["perm"].type = Attribute::Type::kInts;
  transpose.attrs["perm"].ints = {1, 0};
  g.add_node(transpose);
  g.outputs.push_back(b);

  Graph loaded = load_model_from_bytes(model_to_bytes(g), "");
  ASSERT_EQ(loaded.num_nodes(), 2u);
  EXPECT_FLOAT_EQ(loaded.nodes()[0].attr_float("alpha", 0), 0.25f);
  EXPECT_EQ(loaded.nodes()[1].attr_ints("perm"), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(loaded.value(loaded.outputs[0]).shape, (Shape{3, 2}));
  EXPECT_NE(loaded.value(loaded.outputs[0]).name, "x");
  Tensor in = Tensor::from_vector<float>({2, 3}, {-4, 1, 2, 3, -8, 5});
  std::vector<Tensor> out = Session(std::move(loaded), SessionOptions{}).run({in});
  EXPECT_EQ(out[0].to_float_vector(), (std::vector<float>{-1, 3, 1, -2, 2, 5}));
}

TEST(OnnxExport, FullSizeModelRoundTripsWithItsWeights) {
  Graph built = models::build_zoo_model("mobilenet-v2");
  Graph loaded = load_model_from_bytes(model_to_bytes(built), "");
  expect_same_signature(built, loaded);
  ModelStats a = model_stats(built), b = model_stats(loaded);
  EXPECT_EQ(a.parameters, b.parameters);
  EXPECT_DOUBLE_EQ(a.gflops, b.gflops);
  EXPECT_EQ(a.op_histogram, b.op_histogram);
}

// Published sizes (torchvision, Hugging Face, the papers), with BatchNorm folded into
// the convs as the exporter does (that removes one of BN's two affine vectors per channel).
struct Published {
  std::string name;
  double mparams;
  double gflops;  // 2 x MACs of Conv/ConvTranspose/MatMul/Gemm
};

TEST(Zoo, FullSizeModelsHaveThePublishedSizes) {
  const std::vector<Published> published = {
      {"resnet50", 25.56, 8.18},     // torchvision: 25.557 M, 4.09 GMACs
      {"resnext50", 25.03, 8.46},    // torchvision: 25.029 M, 4.23 GMACs
      {"mobilenet-v2", 3.50, 0.60},  // torchvision: 3.505 M, 0.30 GMACs
      // 108.9 M without the pooler (110 M with it); 11.2 GMACs at sequence length 128.
      {"bert-base", 108.9, 22.3},
      {"dcgan", 3.58, 0.21},  // 3.57 M weights + BN; 105 M MACs
      // Hara et al. (CVPR 2018): 46.4 M; 10.1 GMACs counted from the layer shapes.
      {"resnet3d-50", 46.4, 20.1},
      {"nasnet-a-mobile", 5.3, 1.13},  // Zoph et al.: 5.3 M, 564 M MACs
      // torchvision: 6.62 M with BN's second vector per channel, 1.50 GMACs.
      {"googlenet", 6.62, 3.00},
      // torchvision: 27.16 M with the aux head (3.34 M) and unfolded BN, 5.71 GMACs.
      {"inception-v3", 23.82, 11.43},
      // torchvision vit_b_16: 86.57 M, 17.56 GMACs.
      {"vit", 86.57, 35.13},
      // Hugging Face GPT-2 small: 124.44 M, plus the LM head's pre-transposed copy of the
      // tied 50257 x 768 embedding that the exporter stores (38.60 M); 16.1 GMACs at 128
      // tokens (11.2 in the blocks, 4.9 in the LM head).
      {"gpt2", 163.04, 32.23},
  };
  for (const Published& p : published) {
    SCOPED_TRACE(p.name);
    ModelStats stats = model_stats(models::build_zoo_model(p.name));
    EXPECT_NEAR(stats.parameters / 1e6, p.mparams, 0.03 * p.mparams);
    EXPECT_NEAR(stats.gflops, p.gflops, 0.05 * p.gflops);
  }
}

TEST(Zoo, Gpt2IsGpt2SmallWithTheLmHeadTiedToTheTokenEmbedding) {
  Graph g = models::build_zoo_model("gpt2");
  const Node* token_gather = nullptr;
  const Node* lm_head = nullptr;
  for (const Node& node : g.nodes()) {
    if (node.op_type == "Gather" && !token_gather) token_gather = &node;
    if (node.op_type == "MatMul") lm_head = &node;  // the last MatMul
  }
  ASSERT_TRUE(token_gather && lm_head);
  const Tensor& wte = g.value(token_gather->inputs[0]).constant;
  const Tensor& head = g.value(lm_head->inputs[1]).constant;
  ASSERT_EQ(wte.shape(), (Shape{50257, 768}));
  ASSERT_EQ(head.shape(), (Shape{768, 50257}));
  // The exporter's folded transpose: the same values, not merely the same shape.
  const float* w = wte.data<float>();
  const float* h = head.data<float>();
  for (int64_t v = 0; v < 50257; v += 97)
    for (int64_t d = 0; d < 768; d += 13) ASSERT_EQ(h[d * 50257 + v], w[v * 768 + d]);
  // Without that copy, GPT-2 small's 124,439,808 parameters; rank-0 constants (LayerNorm
  // eps, GELU coefficients) add a few hundred more.
  const int64_t distinct = model_stats(g).parameters - head.numel();
  EXPECT_GE(distinct, 124'439'808);
  EXPECT_LT(distinct, 124'439'808 + 1000);
  EXPECT_EQ(g.value(g.outputs[0]).shape, (Shape{1, 128, 50257}));
}

}  // namespace
}  // namespace collage
