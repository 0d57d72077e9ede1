// PRelu on the oneDNN backends: one slope (nn.PReLU()) is an eltwise relu with that alpha,
// one per channel (nn.PReLU(C) exports [C, 1, 1]) oneDNN's prelu post-op; alone, as a conv's
// post-op and inside an onednn-graph region (so a PReLU network is not cut at each
// activation), on random shapes and slopes of both signs.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_ints;
using testing::expect_fast_and_like_reference;
using testing::GraphBuilder;
using testing::has_match;
using testing::pick;

Backend& backend(const char* name) {
  return BackendRegistry::global().get(name);
}

TEST(OnednnPrelu, ConstantSlopesAloneAfterAConvAndInARegion) {
  std::mt19937 rng(29);
  for (int trial = 0; trial < 9; ++trial) {
    const int64_t c = pick(rng, 1, 40), hw = pick(rng, 1, 12);
    const Shape slope_shape = trial % 3 == 0   ? Shape{1}
                              : trial % 3 == 1 ? Shape{c, 1, 1}
                                               : Shape{1, c, 1, 1};
    const std::string what = "trial " + std::to_string(trial) + ", slopes " +
                             shape_to_string(slope_shape) + ", " + std::to_string(c) + " channels";
    GraphBuilder b;
    ValueId v = b.input("x", DType::kFloat32, {1, c, hw, hw});
    const bool after_conv = trial % 2 == 1;
    if (after_conv)
      v = b.add1("Conv", {v, b.random_constant("w", {c, c, 3, 3}), b.random_constant("b", {c})},
                 {{"pads", attr_ints({1, 1, 1, 1})}});
    ValueId y = b.add1("PRelu", {v, b.random_constant("slope", slope_shape)});
    b.output(y);
    const Graph& g = b.graph();
    // One slope is a post-op of the conv's primitive; slopes per channel are a primitive of
    // their own (oneDNN 2.6's prelu post-op runs only its reference loop).
    const bool one_slope = trial % 3 == 0;
    EXPECT_TRUE(has_match(backend("onednn"), g, {y})) << what;
    if (after_conv) {
      EXPECT_EQ(has_match(backend("onednn"), g, {v, y}), one_slope) << what;
    }
    if (!after_conv || one_slope)
      expect_fast_and_like_reference(backend("onednn"), g, "onednn: " + what);
    expect_fast_and_like_reference(backend("onednn-graph"), g, "onednn-graph: " + what);
  }
}

// A PReLU network's block in one region: conv, PRelu, conv, residual Add, PRelu, pool.
TEST(OnednnPrelu, ResidualBlockIsOneRegion) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 14, 14});
  auto conv = [&](ValueId v, const std::string& name) {
    return b.add1(
        "Conv",
        {v, b.random_constant(name + "_w", {16, 16, 3, 3}), b.random_constant(name + "_b", {16})},
        {{"pads", attr_ints({1, 1, 1, 1})}});
  };
  ValueId h = b.add1("PRelu", {conv(x, "c1"), b.random_constant("s1", {16, 1, 1})});
  ValueId s = b.add1("Add", {conv(h, "c2"), x});
  ValueId y = b.add1("PRelu", {s, b.random_constant("s2", {16, 1, 1})});
  b.output(b.add1("MaxPool", {y},
                  {{"kernel_shape", attr_ints({2, 2})}, {"strides", attr_ints({2, 2})}}));
  expect_fast_and_like_reference(backend("onednn-graph"), b.graph(), "PReLU residual block");
}

// Slopes that vary along another axis, or computed at run time: left to other backends.
TEST(OnednnPrelu, RefusesOtherSlopes) {
  for (bool runtime : {false, true}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 4, 5, 6});
    ValueId slope = runtime ? b.input("slope", DType::kFloat32, {4, 1, 1})
                            : b.random_constant("slope", {1, 1, 6});
    b.output(b.add1("PRelu", {x, slope}));
    EXPECT_FALSE(has_match(backend("onednn"), b.graph(), {b.graph().outputs[0]}))
        << (runtime ? "runtime slopes" : "slopes along W");
    testing::expect_unsupported(backend("onednn"), b.graph(),
                                runtime ? "runtime slopes" : "slopes along W");
  }
}

}  // namespace
}  // namespace collage
