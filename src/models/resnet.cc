// ResNet-50, ResNeXt-50 (32x4d), 3D ResNet-50 and their tiny test variants: one bottleneck
// ResNet generator over 2 or 3 spatial dims. Layouts follow torchvision's resnet50 /
// resnext50_32x4d (stride on the 3x3 conv, "v1.5") and Kensho Hara's 3D-ResNets (the 3-D
// model the Collage paper uses: Conv3d everywhere, 7x7x7 stem with temporal stride 1,
// type-B projection shortcuts). BatchNorm is folded into the convs, as the exporter does.
#include "models/families.h"
#include "models/layers.h"

namespace collage::models {
namespace {

struct ResNetConfig {
  std::string name;
  Shape input;                  // [1, 3, H, W] or [1, 3, T, H, W]
  std::vector<int> blocks;      // bottleneck blocks per stage
  std::vector<int64_t> planes;  // bottleneck "planes" per stage (output = 4x)
  int64_t stem = 64;            // conv1 channels
  std::vector<int64_t> stem_kernel, stem_stride, stem_pad;
  int64_t groups = 1;
  int64_t width_per_group = 64;
  int64_t classes = 1000;
};

constexpr int64_t kExpansion = 4;
// The residual branch's last conv is scaled down so 16 summed blocks keep activations O(1).
constexpr float kResidualGain = 0.25f;

ConvSpec cube(int64_t out, int64_t kernel, int64_t stride, int64_t pad, size_t dims,
              int64_t group = 1, float gain = 1) {
  ConvSpec s;
  s.out = out;
  s.kernel.assign(dims, kernel);
  s.stride.assign(dims, stride);
  s.pad.assign(dims, pad);
  s.group = group;
  s.gain = gain;
  return s;
}

ValueId bottleneck(ModelBuilder& b, ValueId x, const ResNetConfig& c, int64_t planes,
                   int64_t stride) {
  const size_t dims = c.input.size() - 2;
  const int64_t width = planes * c.width_per_group / 64 * c.groups;
  const int64_t out = planes * kExpansion;
  ValueId identity = x;
  if (stride != 1 || b.dim(x, 1) != out) {
    Scope s(b, "downsample.0");
    identity = conv(b, x, cube(out, 1, stride, 0, dims));
  }
  ValueId y;
  {
    Scope s(b, "conv1");
    y = relu(b, conv(b, x, cube(width, 1, 1, 0, dims)));
  }
  {
    Scope s(b, "conv2");
    y = relu(b, conv(b, y, cube(width, 3, stride, 1, dims, c.groups)));
  }
  {
    Scope s(b, "conv3");
    y = conv(b, y, cube(out, 1, 1, 0, dims, 1, kResidualGain));
  }
  return relu(b, add(b, y, identity));
}

Graph build_resnet(const ResNetConfig& c, uint64_t seed) {
  ModelBuilder b(c.name, seed);
  ValueId x = b.input("input", DType::kFloat32, c.input);
  {
    Scope s(b, "conv1");
    ConvSpec stem;
    stem.out = c.stem;
    stem.kernel = c.stem_kernel;
    stem.stride = c.stem_stride;
    stem.pad = c.stem_pad;
    x = relu(b, conv(b, x, stem));
  }
  x = max_pool(b, x, 3, 2, 1);
  for (size_t stage = 0; stage < c.blocks.size(); ++stage) {
    Scope s(b, "layer" + std::to_string(stage + 1));
    for (int i = 0; i < c.blocks[stage]; ++i) {
      Scope block(b, std::to_string(i));
      x = bottleneck(b, x, c, c.planes[stage], (i == 0 && stage > 0) ? 2 : 1);
    }
  }
  x = global_avg_pool(b, x);
  {
    Scope s(b, "fc");
    x = flatten_gemm(b, x, c.classes);
  }
  b.output(x, "logits");
  return b.finish();
}

ResNetConfig resnet50_config(const std::string& name) {
  ResNetConfig c;
  c.name = name;
  c.input = {1, 3, 224, 224};
  c.blocks = {3, 4, 6, 3};
  c.planes = {64, 128, 256, 512};
  c.stem_kernel = {7, 7};
  c.stem_stride = {2, 2};
  c.stem_pad = {3, 3};
  return c;
}

}  // namespace

Graph resnet50(uint64_t seed) {
  return build_resnet(resnet50_config("resnet50"), seed);
}

Graph resnext50(uint64_t seed) {
  ResNetConfig c = resnet50_config("resnext50");
  c.groups = 32;
  c.width_per_group = 4;
  return build_resnet(c, seed);
}

Graph resnet_tiny(uint64_t seed) {
  ResNetConfig c = resnet50_config("resnet-tiny");
  c.input = {1, 3, 64, 64};
  c.blocks = {1, 1, 1};
  c.planes = {16, 32, 64};
  c.stem = 16;
  c.classes = 10;
  return build_resnet(c, seed);
}

Graph resnet3d_50(uint64_t seed) {
  ResNetConfig c = resnet50_config("resnet3d-50");
  c.input = {1, 3, 16, 112, 112};
  c.stem_kernel = {7, 7, 7};
  c.stem_stride = {1, 2, 2};
  c.stem_pad = {3, 3, 3};
  c.classes = 400;  // Kinetics-400
  return build_resnet(c, seed);
}

Graph resnet3d_tiny(uint64_t seed) {
  ResNetConfig c = resnet50_config("resnet3d-tiny");
  c.input = {1, 3, 8, 32, 32};
  c.stem_kernel = {3, 7, 7};
  c.stem_stride = {1, 2, 2};
  c.stem_pad = {1, 3, 3};
  c.blocks = {1, 1};
  c.planes = {8, 16};
  c.stem = 8;
  c.classes = 10;
  return build_resnet(c, seed);
}

}  // namespace collage::models
