// The DCGAN generator (Radford et al.; the PyTorch examples' netG): z [1, nz, 1, 1] ->
// ConvTranspose 4x4 stride 1 -> BN -> ReLU -> three ConvTranspose 4x4 stride 2 (halving
// channels) -> BN -> ReLU -> ConvTranspose to 3 channels -> Tanh, a 64x64 image. The
// convs have no bias, and BatchNormalization stays a node: the exporter folds BN only into
// a Conv, not into a ConvTranspose.
#include "models/families.h"
#include "models/layers.h"

namespace collage::models {
namespace {

Graph build_dcgan(const std::string& name, int64_t nz, int64_t ngf, uint64_t seed) {
  ModelBuilder b(name, seed);
  ValueId x = b.input("z", DType::kFloat32, {1, nz, 1, 1});
  int index = 0;
  auto block = [&](int64_t out, int64_t stride, int64_t pad) {
    {
      Scope s(b, "main." + std::to_string(index++));
      x = conv_transpose2d(b, x, out, 4, stride, pad, /*with_bias=*/false);
    }
    {
      Scope s(b, "main." + std::to_string(index++));
      x = batch_norm(b, x);
    }
    Scope s(b, "main." + std::to_string(index++));
    x = relu(b, x);
  };
  block(ngf * 8, 1, 0);  // 4x4
  block(ngf * 4, 2, 1);  // 8x8
  block(ngf * 2, 2, 1);  // 16x16
  block(ngf, 2, 1);      // 32x32
  {
    Scope s(b, "main." + std::to_string(index++));
    x = conv_transpose2d(b, x, 3, 4, 2, 1, /*with_bias=*/false);  // 64x64
  }
  Scope s(b, "main." + std::to_string(index));
  b.output(tanh(b, x), "image");
  return b.finish();
}

}  // namespace

Graph dcgan(uint64_t seed) {
  return build_dcgan("dcgan", 100, 64, seed);
}
Graph dcgan_tiny(uint64_t seed) {
  return build_dcgan("dcgan-tiny", 16, 8, seed);
}

}  // namespace collage::models
