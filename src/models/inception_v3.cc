// Inception-v3 as torchvision builds it (torchvision.models.inception_v3, eval mode,
// aux_logits=False, transform_input=False: the default without pretrained weights; 299x299
// input) and torch.onnx exports it at opset 13: BasicConv2d (conv + BN eps 1e-3, folded into
// the conv, + ReLU) everywhere; a five-conv stem with two 3x3 stride-2 max pools; three
// InceptionA, one InceptionB (grid reduction), four InceptionC (factorized 1x7 / 7x1 convs),
// one InceptionD (reduction) and two InceptionE (1x3 / 3x1 pairs whose outputs torch.cat
// twice; the exporter flattens the nested Concats into one of six inputs); GlobalAveragePool,
// Flatten, Gemm. The branch pools are F.avg_pool2d(x, 3, 1, 1) with count_include_pad=True,
// which the exporter writes as Pad + AveragePool. Weights are named as torchvision's
// parameters ("Mixed_6b.branch7x7_2.conv.weight").
#include "models/families.h"
#include "models/layers.h"

namespace collage::models {
namespace {

struct InceptionV3Config {
  std::string name;
  int64_t resolution = 299;
  // Every channel count is divided by this (the tiny variant), except the image's 3.
  int64_t width_divisor = 1;
  int64_t classes = 1000;
};

// One network's blocks, with the channel divisor applied to every conv.
class InceptionV3Builder {
 public:
  InceptionV3Builder(ModelBuilder& b, int64_t div) : b_(b), div_(div) {}

  // BasicConv2d with a kh x kw kernel; scope "<name>.conv".
  ValueId conv(const std::string& name, ValueId x, int64_t out, int64_t kh, int64_t kw,
               int64_t stride = 1, int64_t ph = 0, int64_t pw = 0) {
    Scope s(b_, name + ".conv");
    ConvSpec spec;
    spec.out = out / div_;
    spec.kernel = {kh, kw};
    spec.stride = {stride, stride};
    spec.pad = {ph, pw};
    return relu(b_, models::conv(b_, x, spec));
  }
  ValueId conv(const std::string& name, ValueId x, int64_t out, int64_t k) {
    return conv(name, x, out, k, k);
  }

  ValueId branch_pool(ValueId x, int64_t out) {
    return conv("branch_pool", avg_pool_padded(b_, x, 3, 1, 1), out, 1);
  }

  ValueId inception_a(ValueId x, int64_t pool_features) {
    ValueId b1 = conv("branch1x1", x, 64, 1);
    ValueId b5 = conv("branch5x5_1", x, 48, 1);
    b5 = conv("branch5x5_2", b5, 64, 5, 5, 1, 2, 2);
    ValueId b3 = conv("branch3x3dbl_1", x, 64, 1);
    b3 = conv("branch3x3dbl_2", b3, 96, 3, 3, 1, 1, 1);
    b3 = conv("branch3x3dbl_3", b3, 96, 3, 3, 1, 1, 1);
    return concat(b_, {b1, b5, b3, branch_pool(x, pool_features)}, 1);
  }

  ValueId inception_b(ValueId x) {
    ValueId b3 = conv("branch3x3", x, 384, 3, 3, 2);
    ValueId bd = conv("branch3x3dbl_1", x, 64, 1);
    bd = conv("branch3x3dbl_2", bd, 96, 3, 3, 1, 1, 1);
    bd = conv("branch3x3dbl_3", bd, 96, 3, 3, 2);
    return concat(b_, {b3, bd, max_pool(b_, x, 3, 2, 0)}, 1);
  }

  ValueId inception_c(ValueId x, int64_t c7) {
    ValueId b1 = conv("branch1x1", x, 192, 1);
    ValueId b7 = conv("branch7x7_1", x, c7, 1);
    b7 = conv("branch7x7_2", b7, c7, 1, 7, 1, 0, 3);
    b7 = conv("branch7x7_3", b7, 192, 7, 1, 1, 3, 0);
    ValueId bd = conv("branch7x7dbl_1", x, c7, 1);
    bd = conv("branch7x7dbl_2", bd, c7, 7, 1, 1, 3, 0);
    bd = conv("branch7x7dbl_3", bd, c7, 1, 7, 1, 0, 3);
    bd = conv("branch7x7dbl_4", bd, c7, 7, 1, 1, 3, 0);
    bd = conv("branch7x7dbl_5", bd, 192, 1, 7, 1, 0, 3);
    return concat(b_, {b1, b7, bd, branch_pool(x, 192)}, 1);
  }

  ValueId inception_d(ValueId x) {
    ValueId b3 = conv("branch3x3_1", x, 192, 1);
    b3 = conv("branch3x3_2", b3, 320, 3, 3, 2);
    ValueId b7 = conv("branch7x7x3_1", x, 192, 1);
    b7 = conv("branch7x7x3_2", b7, 192, 1, 7, 1, 0, 3);
    b7 = conv("branch7x7x3_3", b7, 192, 7, 1, 1, 3, 0);
    b7 = conv("branch7x7x3_4", b7, 192, 3, 3, 2);
    return concat(b_, {b3, b7, max_pool(b_, x, 3, 2, 0)}, 1);
  }

  ValueId inception_e(ValueId x) {
    ValueId b1 = conv("branch1x1", x, 320, 1);
    ValueId b3 = conv("branch3x3_1", x, 384, 1);
    ValueId b3a = conv("branch3x3_2a", b3, 384, 1, 3, 1, 0, 1);
    ValueId b3b = conv("branch3x3_2b", b3, 384, 3, 1, 1, 1, 0);
    ValueId bd = conv("branch3x3dbl_1", x, 448, 1);
    bd = conv("branch3x3dbl_2", bd, 384, 3, 3, 1, 1, 1);
    ValueId bda = conv("branch3x3dbl_3a", bd, 384, 1, 3, 1, 0, 1);
    ValueId bdb = conv("branch3x3dbl_3b", bd, 384, 3, 1, 1, 1, 0);
    return concat(b_, {b1, b3a, b3b, bda, bdb, branch_pool(x, 192)}, 1);
  }

 private:
  ModelBuilder& b_;
  int64_t div_;
};

Graph build_inception_v3(const InceptionV3Config& c, uint64_t seed) {
  ModelBuilder b(c.name, seed);
  InceptionV3Builder net(b, c.width_divisor);
  ValueId x = b.input("input", DType::kFloat32, {1, 3, c.resolution, c.resolution});
  x = net.conv("Conv2d_1a_3x3", x, 32, 3, 3, 2);
  x = net.conv("Conv2d_2a_3x3", x, 32, 3);
  x = net.conv("Conv2d_2b_3x3", x, 64, 3, 3, 1, 1, 1);
  x = max_pool(b, x, 3, 2, 0);
  x = net.conv("Conv2d_3b_1x1", x, 80, 1);
  x = net.conv("Conv2d_4a_3x3", x, 192, 3);
  x = max_pool(b, x, 3, 2, 0);
  auto block = [&](const std::string& name, auto&& make) {
    Scope s(b, name);
    x = make(x);
  };
  block("Mixed_5b", [&](ValueId v) { return net.inception_a(v, 32); });
  block("Mixed_5c", [&](ValueId v) { return net.inception_a(v, 64); });
  block("Mixed_5d", [&](ValueId v) { return net.inception_a(v, 64); });
  block("Mixed_6a", [&](ValueId v) { return net.inception_b(v); });
  block("Mixed_6b", [&](ValueId v) { return net.inception_c(v, 128); });
  block("Mixed_6c", [&](ValueId v) { return net.inception_c(v, 160); });
  block("Mixed_6d", [&](ValueId v) { return net.inception_c(v, 160); });
  block("Mixed_6e", [&](ValueId v) { return net.inception_c(v, 192); });
  block("Mixed_7a", [&](ValueId v) { return net.inception_d(v); });
  block("Mixed_7b", [&](ValueId v) { return net.inception_e(v); });
  block("Mixed_7c", [&](ValueId v) { return net.inception_e(v); });
  x = global_avg_pool(b, x);
  {
    Scope s(b, "fc");
    x = flatten_gemm(b, x, c.classes);
  }
  b.output(x, "logits");
  return b.finish();
}

}  // namespace

Graph inception_v3(uint64_t seed) {
  InceptionV3Config c;
  c.name = "inception-v3";
  return build_inception_v3(c, seed);
}

Graph inception_v3_tiny(uint64_t seed) {
  InceptionV3Config c;
  c.name = "inception-v3-tiny";
  // Every block at a quarter of the width; 107x107 leaves the last blocks a 2x2 grid, so
  // their 1x3 / 3x1 convs still see neighbours (75x75, the smallest input, leaves 1x1).
  c.resolution = 107;
  c.width_divisor = 4;
  c.classes = 10;
  return build_inception_v3(c, seed);
}

}  // namespace collage::models
