// Pooling on oneDNN where its row-major kernels give out (pool_kernel.cc, emit_spatial_reduce
// in layout_kernel.cc): over large planes oneDNN 2.6 has only its generic loops for a
// row-major source, so the source is read in channel blocks; every form still computes what
// reference does. (The pooling forms themselves: backend_onednn_test.cc.)
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::attr_ints;
using testing::expect_fast_and_like_reference;
using testing::GraphBuilder;
using testing::onednn;
using testing::onednn_graph;
using Attrs = std::map<std::string, Attribute>;

// oneDNN 2.6 has no jit pooling for a row-major source past small planes: its generic
// "simple_nchw" loops ran Inception-v3's first MaxPool (64x147x147) in 9.4 ms, a 3-D MaxPool
// over 64x16x56x56 in 23 (its jit kernels on channel blocks: 0.7 and 1.9). Alone (the source
// a kernel input) and in a region after a Relu, each runs on a jit kernel and computes what
// reference does.
TEST(OnednnPooling, OverLargePlanesRunsOnJitKernels) {
  const Attrs pool3 = {{"kernel_shape", attr_ints({3, 3})}, {"strides", attr_ints({2, 2})}};
  const Attrs avg3 = {{"kernel_shape", attr_ints({3, 3})},
                      {"pads", attr_ints({1, 1, 1, 1})},
                      {"count_include_pad", attr_i(0)}};
  const Attrs pool3d = {{"kernel_shape", attr_ints({3, 3, 3})},
                        {"strides", attr_ints({2, 2, 2})},
                        {"pads", attr_ints({1, 1, 1, 1, 1, 1})}};
  const std::vector<std::tuple<const char*, Shape, Attrs>> cases = {
      {"MaxPool", {1, 64, 147, 147}, pool3},
      {"AveragePool", {1, 32, 112, 112}, avg3},
      {"MaxPool", {1, 64, 16, 56, 56}, pool3d},
      {"GlobalMaxPool", {1, 64, 147, 147}, {}},
      {"ReduceMax", {1, 64, 147, 147}, {{"axes", attr_ints({2, 3})}}}};
  for (const auto& [op, shape, attrs] : cases)
    for (const bool after_relu : {false, true}) {
      GraphBuilder b;
      ValueId x = b.input("x", DType::kFloat32, shape);
      if (after_relu) x = b.add1("Relu", {x});
      b.output(b.add1(op, {x}, attrs));
      const std::string what = fmt::format("{} over {}{}", op, ::testing::PrintToString(shape),
                                           after_relu ? " after a Relu" : "");
      expect_fast_and_like_reference(after_relu ? onednn_graph() : onednn(), b.graph(), what);
    }
}

}  // namespace
}  // namespace collage
