// MobileNetV2 in torchvision's layout: inverted residual blocks (1x1 expand, 3x3
// depthwise, 1x1 linear projection), ReLU6 exported as Clip(0, 6), BatchNorm folded into
// the convs, GlobalAveragePool + Flatten + Gemm head (Dropout vanishes in eval mode).
#include <algorithm>
#include <cmath>

#include "models/families.h"
#include "models/layers.h"

namespace collage::models {
namespace {

struct BlockSetting {
  int64_t expand;    // t
  int64_t channels;  // c
  int repeats;       // n
  int64_t stride;    // s
};

struct MobileNetConfig {
  std::string name;
  int64_t resolution = 224;
  float width = 1.0f;
  std::vector<BlockSetting> blocks;
  int64_t classes = 1000;
};

// The projection conv is linear (no ReLU after it), so He's sqrt(2) gain is undone.
constexpr float kLinearGain = 0.7071f;

// torchvision's _make_divisible: round to a multiple of 8, never below 90% of the target.
int64_t make_divisible(float v, int64_t divisor = 8) {
  int64_t rounded = std::max(divisor, static_cast<int64_t>(v + divisor / 2.0f) / divisor * divisor);
  if (static_cast<float>(rounded) < 0.9f * v) rounded += divisor;
  return rounded;
}

ValueId conv_relu6(ModelBuilder& b, ValueId x, int64_t out, int64_t kernel, int64_t stride,
                   int64_t group) {
  return relu6(b, conv2d(b, x, out, kernel, stride, (kernel - 1) / 2, group));
}

ValueId inverted_residual(ModelBuilder& b, ValueId x, int64_t out, int64_t stride, int64_t expand) {
  const int64_t in = b.dim(x, 1);
  const int64_t hidden = in * expand;
  ValueId y = x;
  int index = 0;
  if (expand != 1) {
    Scope s(b, "conv." + std::to_string(index++));
    y = conv_relu6(b, y, hidden, 1, 1, 1);
  }
  {
    Scope s(b, "conv." + std::to_string(index++));
    y = conv_relu6(b, y, hidden, 3, stride, hidden);
  }
  {
    Scope s(b, "conv." + std::to_string(index));
    y = conv2d(b, y, out, 1, 1, 0, 1, true, kLinearGain);
  }
  return (stride == 1 && in == out) ? add(b, x, y) : y;
}

Graph build_mobilenet(const MobileNetConfig& c, uint64_t seed) {
  ModelBuilder b(c.name, seed);
  ValueId x = b.input("input", DType::kFloat32, {1, 3, c.resolution, c.resolution});
  int feature = 0;
  {
    Scope s(b, "features." + std::to_string(feature++));
    x = conv_relu6(b, x, make_divisible(32 * c.width), 3, 2, 1);
  }
  for (const BlockSetting& bs : c.blocks) {
    const int64_t out = make_divisible(static_cast<float>(bs.channels) * c.width);
    for (int i = 0; i < bs.repeats; ++i) {
      Scope s(b, "features." + std::to_string(feature++));
      x = inverted_residual(b, x, out, i == 0 ? bs.stride : 1, bs.expand);
    }
  }
  {
    Scope s(b, "features." + std::to_string(feature));
    x = conv_relu6(b, x, make_divisible(1280 * std::max(1.0f, c.width)), 1, 1, 1);
  }
  x = global_avg_pool(b, x);
  {
    Scope s(b, "classifier.1");
    x = flatten_gemm(b, x, c.classes);
  }
  b.output(x, "logits");
  return b.finish();
}

}  // namespace

Graph mobilenet_v2(uint64_t seed) {
  MobileNetConfig c;
  c.name = "mobilenet-v2";
  c.blocks = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
              {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  return build_mobilenet(c, seed);
}

Graph mobilenet_tiny(uint64_t seed) {
  MobileNetConfig c;
  c.name = "mobilenet-tiny";
  c.resolution = 64;
  c.width = 0.5f;
  c.blocks = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 2, 2}, {6, 64, 1, 2}};
  c.classes = 10;
  return build_mobilenet(c, seed);
}

}  // namespace collage::models
