// NASNet-A Mobile (Zoph et al. 2018) in the layout of Cadene's pretrainedmodels port,
// the PyTorch model usually exported to ONNX: a 3x3 stride-2 stem conv, two stem cells,
// then three stages of (FirstCell + N NormalCells) separated by two reduction cells, and a
// ReLU / AveragePool / Flatten / Gemm head. Cells mix separable convs (depthwise +
// pointwise, each ReLU-preceded pair followed by BatchNorm), 3x3 avg/max pools, Adds and
// Concats, and the factorized-reduction paths (AveragePool 1x1 stride 2, plus a one-pixel
// shift made by Pad + Slice).
//
// Simplifications: BatchNorm after a pointwise conv is folded into it (as the exporter
// does); the BN after the factorized-reduction Concat cannot fold and stays a node. The
// reduction cells' asymmetric "TF SAME" padding (ZeroPad2d + Slice around the separable
// convs and pools of ReductionCell0) is replaced by symmetric padding, which gives the same
// output sizes. Dropout vanishes in eval mode.
#include <cstdint>

#include "models/families.h"
#include "models/layers.h"

namespace collage::models {
namespace {

struct NasNetConfig {
  std::string name;
  int64_t resolution = 224;
  int64_t stem_filters = 32;
  int64_t penultimate_filters = 1056;
  int normal_cells = 3;  // NormalCells after each stage's FirstCell
  int64_t classes = 1000;
};

// The last pointwise conv of a branch feeds an Add, not a ReLU.
constexpr float kLinearGain = 0.7071f;

ValueId separable(ModelBuilder& b, ValueId x, int64_t out, int64_t kernel, int64_t stride,
                  float gain) {
  const int64_t in = b.dim(x, 1);
  ValueId y;
  {
    Scope s(b, "depthwise_conv2d");
    y = conv2d(b, x, in, kernel, stride, kernel / 2, in, /*bias=*/false);
  }
  Scope s(b, "pointwise_conv2d");
  return conv2d(b, y, out, 1, 1, 0, 1, /*bias=*/true, gain);
}

// BranchSeparables: ReLU, separable (stride), ReLU, separable. The stem variant changes
// the channel count in the first separable conv, the others in the second.
ValueId branch_separables(ModelBuilder& b, const std::string& name, ValueId x, int64_t out,
                          int64_t kernel, int64_t stride, bool stem = false) {
  Scope s(b, name);
  const int64_t mid = stem ? out : b.dim(x, 1);
  ValueId y;
  {
    Scope s1(b, "separable_1");
    y = separable(b, relu(b, x), mid, kernel, stride, 1.0f);
  }
  Scope s2(b, "separable_2");
  return separable(b, relu(b, y), out, kernel, 1, kLinearGain);
}

// ReLU, 1x1 conv (+ folded BN): how each cell projects its inputs.
ValueId relu_conv_1x1(ModelBuilder& b, const std::string& name, ValueId x, int64_t out) {
  Scope s(b, name);
  return conv2d(b, relu(b, x), out, 1);
}

// Factorized reduction of a twice-as-large input: two 1x1 convs on stride-2 samples, the
// second shifted by one pixel, concatenated and batch-normalized.
ValueId factorized_reduction(ModelBuilder& b, ValueId x, int64_t out) {
  ValueId r = relu(b, x);
  ValueId p1;
  {
    Scope s(b, "path_1");
    p1 = conv2d(b, avg_pool(b, r, 1, 2, 0, false), out / 2, 1, 1, 0, 1, /*bias=*/false);
  }
  ValueId p2;
  {
    Scope s(b, "path_2");
    ValueId padded = b.add1("Pad", {r, b.int64s(b.param_name("pads"), {0, 0, 0, 0, 0, 0, 1, 1})},
                            {{"mode", string_attr("constant")}});
    ValueId shifted = b.add1(
        "Slice", {padded, b.int64s(b.param_name("starts"), {1, 1}),
                  b.int64s(b.param_name("ends"), {INT64_MAX, INT64_MAX}),
                  b.int64s(b.param_name("axes"), {2, 3}), b.int64s(b.param_name("steps"), {1, 1})});
    p2 = conv2d(b, avg_pool(b, shifted, 1, 2, 0, false), out / 2, 1, 1, 0, 1, /*bias=*/false);
  }
  Scope s(b, "final_path_bn");
  return batch_norm(b, concat(b, {p1, p2}, 1));
}

ValueId avg3(ModelBuilder& b, ValueId x, int64_t stride) {
  return avg_pool(b, x, 3, stride, 1, false);
}
ValueId max3(ModelBuilder& b, ValueId x, int64_t stride) {
  return max_pool(b, x, 3, stride, 1);
}

// The normal cell's five combinations over x_left (from the previous cell) and x_right
// (from this cell's input); both have `out` channels.
ValueId normal_combinations(ModelBuilder& b, ValueId left, ValueId right, int64_t out) {
  ValueId c0 = add(b, branch_separables(b, "comb_iter_0_left", right, out, 5, 1),
                   branch_separables(b, "comb_iter_0_right", left, out, 3, 1));
  ValueId c1 = add(b, branch_separables(b, "comb_iter_1_left", left, out, 5, 1),
                   branch_separables(b, "comb_iter_1_right", left, out, 3, 1));
  ValueId c2 = add(b, avg3(b, right, 1), left);
  ValueId c3 = add(b, avg3(b, left, 1), avg3(b, left, 1));
  ValueId c4 = add(b, branch_separables(b, "comb_iter_4_left", right, out, 3, 1), right);
  return concat(b, {left, c0, c1, c2, c3, c4}, 1);
}

// FirstCell: x_prev has twice x's resolution, so it is factorized-reduced.
ValueId first_cell(ModelBuilder& b, ValueId x, ValueId x_prev, int64_t out) {
  ValueId left = factorized_reduction(b, x_prev, out);
  ValueId right = relu_conv_1x1(b, "conv_1x1", x, out);
  return normal_combinations(b, left, right, out);
}

ValueId normal_cell(ModelBuilder& b, ValueId x, ValueId x_prev, int64_t out) {
  ValueId left = relu_conv_1x1(b, "conv_prev_1x1", x_prev, out);
  ValueId right = relu_conv_1x1(b, "conv_1x1", x, out);
  return normal_combinations(b, left, right, out);
}

// The reduction combinations shared by the stem cells and the reduction cells: `a` is
// reduced by pools and separables, `c` only by separables (the stems use the
// channel-changing variant on the raw stem output).
ValueId reduction_combinations(ModelBuilder& b, ValueId a, ValueId c, int64_t out,
                               bool stem_right) {
  ValueId c0 = add(b, branch_separables(b, "comb_iter_0_left", a, out, 5, 2),
                   branch_separables(b, "comb_iter_0_right", c, out, 7, 2, stem_right));
  ValueId c1 =
      add(b, max3(b, a, 2), branch_separables(b, "comb_iter_1_right", c, out, 7, 2, stem_right));
  ValueId c2 =
      add(b, avg3(b, a, 2), branch_separables(b, "comb_iter_2_right", c, out, 5, 2, stem_right));
  ValueId c3 = add(b, avg3(b, c0, 1), c1);
  ValueId c4 = add(b, branch_separables(b, "comb_iter_4_left", c0, out, 3, 1), max3(b, a, 2));
  return concat(b, {c1, c2, c3, c4}, 1);
}

ValueId reduction_cell(ModelBuilder& b, ValueId x, ValueId x_prev, int64_t out) {
  ValueId left = relu_conv_1x1(b, "conv_prev_1x1", x_prev, out);
  ValueId right = relu_conv_1x1(b, "conv_1x1", x, out);
  return reduction_combinations(b, right, left, out, false);
}

Graph build_nasnet(const NasNetConfig& c, uint64_t seed) {
  ModelBuilder b(c.name, seed);
  const int64_t filters = c.penultimate_filters / 24;
  ValueId x = b.input("input", DType::kFloat32, {1, 3, c.resolution, c.resolution});
  ValueId conv0;
  {
    Scope s(b, "conv0");
    conv0 = conv2d(b, x, c.stem_filters, 3, 2, 0);
  }
  ValueId stem0, stem1;
  {
    Scope s(b, "cell_stem_0");
    ValueId x1 = relu_conv_1x1(b, "conv_1x1", conv0, filters / 4);
    stem0 = reduction_combinations(b, x1, conv0, filters / 4, /*stem_right=*/true);
  }
  {
    Scope s(b, "cell_stem_1");
    ValueId left = relu_conv_1x1(b, "conv_1x1", stem0, filters / 2);
    ValueId right = factorized_reduction(b, conv0, filters / 2);
    stem1 = reduction_combinations(b, left, right, filters / 2, false);
  }
  ValueId prev = stem0, cur = stem1;
  int index = 0;
  for (int stage = 0; stage < 3; ++stage) {
    const int64_t out = filters << stage;
    if (stage > 0) {
      Scope s(b, "reduction_cell_" + std::to_string(stage - 1));
      ValueId next = reduction_cell(b, cur, prev, out);
      prev = cur;
      cur = next;
    }
    for (int i = 0; i <= c.normal_cells; ++i) {
      Scope s(b, "cell_" + std::to_string(index++));
      ValueId next = i == 0 ? first_cell(b, cur, prev, out) : normal_cell(b, cur, prev, out);
      prev = cur;
      cur = next;
    }
    index += 2;  // the reduction cell takes two slots in the original numbering
  }
  ValueId y = avg_pool(b, relu(b, cur), b.dim(cur, 2), 1, 0, false);
  {
    Scope s(b, "last_linear");
    y = flatten_gemm(b, y, c.classes);
  }
  b.output(y, "logits");
  return b.finish();
}

}  // namespace

Graph nasnet_a_mobile(uint64_t seed) {
  NasNetConfig c;
  c.name = "nasnet-a-mobile";
  return build_nasnet(c, seed);
}

Graph nasnet_tiny(uint64_t seed) {
  NasNetConfig c;
  c.name = "nasnet-tiny";
  c.resolution = 64;
  c.stem_filters = 8;
  c.penultimate_filters = 192;
  c.normal_cells = 1;
  c.classes = 10;
  return build_nasnet(c, seed);
}

}  // namespace collage::models
