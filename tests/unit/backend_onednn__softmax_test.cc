// Softmax and LogSoftmax on oneDNN over every axis (norm_kernel.cc's emit_softmax): oneDNN
// 2.6's jit softmax needs the axis innermost in memory, and over another axis of a row-major
// value it runs its reference loops (a softmax over the channels of 1x21x160x160 took
// 35.8 ms, reference's 2.3), so the value is read with the axis innermost. On randomized
// shapes, alone on onednn and after a Relu on onednn-graph: no reference primitive, results
// as reference's.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::expect_fast_and_like_reference;
using testing::GraphBuilder;
using testing::onednn;
using testing::onednn_graph;
using testing::pick;

TEST(OnednnSoftmax, EveryAxisRunsOnAJitKernel) {
  std::mt19937 rng(7);
  for (int rank = 2; rank <= 5; ++rank) {
    Shape shape;
    for (int d = 0; d < rank; ++d) shape.push_back(pick(rng, 2, 9));
    for (int64_t axis = -rank; axis < rank; ++axis)
      for (const char* op : {"Softmax", "LogSoftmax"})
        for (const bool after_relu : {false, true}) {
          GraphBuilder b;
          ValueId x = b.input("x", DType::kFloat32, shape);
          if (after_relu) x = b.add1("Relu", {x});
          b.output(b.add1(op, {x}, {{"axis", attr_i(axis)}}));
          const std::string what =
              fmt::format("{} over axis {} of {}{}", op, axis, ::testing::PrintToString(shape),
                          after_relu ? " after a Relu" : "");
          expect_fast_and_like_reference(after_relu ? onednn_graph() : onednn(), b.graph(), what);
        }
  }
}

}  // namespace
}  // namespace collage
