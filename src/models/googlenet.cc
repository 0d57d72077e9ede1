// GoogLeNet as torchvision builds it (torchvision.models.googlenet, eval mode,
// aux_logits=False, transform_input=False: the default for a model made without pretrained
// weights) and torch.onnx exports it: every conv is a BasicConv2d (conv without bias + BN
// with eps 1e-3 + ReLU) whose BN the exporter folds into the conv; ceil-mode max pools; nine
// inception blocks of four branches (1x1; 1x1 -> 3x3; 1x1 -> 3x3, torchvision's "5x5" branch
// that really is 3x3; 3x3 max pool -> 1x1) joined by one Concat; GlobalAveragePool, Flatten
// and a Gemm (Dropout vanishes in eval mode). Weights are named as torchvision's parameters
// ("inception3a.branch2.0.conv.weight"); a folded BN's shift is the conv's ".bias".
#include "models/families.h"
#include "models/layers.h"

namespace collage::models {
namespace {

struct InceptionSpec {
  std::string name;
  int64_t ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj;
};

struct GoogLeNetConfig {
  std::string name;
  int64_t resolution = 224;
  // Every channel count is divided by this (the tiny variant), except the image's 3.
  int64_t width_divisor = 1;
  int64_t classes = 1000;
};

// BasicConv2d: conv (+ folded BN) and ReLU, in scope "<name>.conv".
ValueId basic_conv(ModelBuilder& b, const std::string& name, ValueId x, int64_t out, int64_t kernel,
                   int64_t stride = 1, int64_t pad = 0) {
  Scope s(b, name + ".conv");
  return relu(b, conv2d(b, x, out, kernel, stride, pad));
}

ValueId inception(ModelBuilder& b, ValueId x, const InceptionSpec& s, int64_t div) {
  Scope scope(b, s.name);
  ValueId branch1 = basic_conv(b, "branch1", x, s.ch1x1 / div, 1);
  ValueId branch2 = basic_conv(b, "branch2.0", x, s.ch3x3red / div, 1);
  branch2 = basic_conv(b, "branch2.1", branch2, s.ch3x3 / div, 3, 1, 1);
  ValueId branch3 = basic_conv(b, "branch3.0", x, s.ch5x5red / div, 1);
  branch3 = basic_conv(b, "branch3.1", branch3, s.ch5x5 / div, 3, 1, 1);
  ValueId branch4 = max_pool(b, x, 3, 1, 1, /*ceil_mode=*/true);
  branch4 = basic_conv(b, "branch4.1", branch4, s.pool_proj / div, 1);
  return concat(b, {branch1, branch2, branch3, branch4}, 1);
}

Graph build_googlenet(const GoogLeNetConfig& c, uint64_t seed) {
  const int64_t div = c.width_divisor;
  ModelBuilder b(c.name, seed);
  ValueId x = b.input("input", DType::kFloat32, {1, 3, c.resolution, c.resolution});
  x = basic_conv(b, "conv1", x, 64 / div, 7, 2, 3);
  x = max_pool(b, x, 3, 2, 0, /*ceil_mode=*/true);
  x = basic_conv(b, "conv2", x, 64 / div, 1);
  x = basic_conv(b, "conv3", x, 192 / div, 3, 1, 1);
  x = max_pool(b, x, 3, 2, 0, /*ceil_mode=*/true);
  x = inception(b, x, {"inception3a", 64, 96, 128, 16, 32, 32}, div);
  x = inception(b, x, {"inception3b", 128, 128, 192, 32, 96, 64}, div);
  x = max_pool(b, x, 3, 2, 0, /*ceil_mode=*/true);
  x = inception(b, x, {"inception4a", 192, 96, 208, 16, 48, 64}, div);
  x = inception(b, x, {"inception4b", 160, 112, 224, 24, 64, 64}, div);
  x = inception(b, x, {"inception4c", 128, 128, 256, 24, 64, 64}, div);
  x = inception(b, x, {"inception4d", 112, 144, 288, 32, 64, 64}, div);
  x = inception(b, x, {"inception4e", 256, 160, 320, 32, 128, 128}, div);
  x = max_pool(b, x, 2, 2, 0, /*ceil_mode=*/true);
  x = inception(b, x, {"inception5a", 256, 160, 320, 32, 128, 128}, div);
  x = inception(b, x, {"inception5b", 384, 192, 384, 48, 128, 128}, div);
  x = global_avg_pool(b, x);
  {
    Scope s(b, "fc");
    x = flatten_gemm(b, x, c.classes);
  }
  b.output(x, "logits");
  return b.finish();
}

}  // namespace

Graph googlenet(uint64_t seed) {
  GoogLeNetConfig c;
  c.name = "googlenet";
  return build_googlenet(c, seed);
}

Graph googlenet_tiny(uint64_t seed) {
  GoogLeNetConfig c;
  c.name = "googlenet-tiny";
  // The ceil-mode pools still round up: 32 -> 16 -> 8 -> 4 (floor mode: 15, 7, 3).
  c.resolution = 64;
  c.width_divisor = 4;
  c.classes = 10;
  return build_googlenet(c, seed);
}

}  // namespace collage::models
