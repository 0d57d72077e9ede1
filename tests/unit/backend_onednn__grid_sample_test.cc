// GridSample as collage's own step in onednn programs (grid_sample_kernel.h): every mode,
// padding mode and align_corners, a grid computed in the model (reaching past [-1, 1], so
// every padding rule is read) or a constant one, between two convolutions (channels-last and
// channel-blocked): one onednn-graph region with one sampling step, no node left to the
// fallback on onednn-graph or onednn, equal to the reference kernel (itself checked against
// ONNX's expected outputs by the conformance suite's test_gridsample_*).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/grid_sample_kernel.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::attr_ints;
using testing::attr_s;
using testing::GraphBuilder;

Graph warp(const std::string& mode, const std::string& padding, bool align, bool constant_grid) {
  GraphBuilder b;
  const int64_t c = 16, h = 11, w = 13, oh = 9, ow = 15;
  const ValueId x = b.input("x", DType::kFloat32, {1, 4, h, w});
  auto conv = [&](ValueId v, int64_t /*cin*/, int64_t cout, const std::string& name) {
    return testing::conv3x3(b, v, cout, name);
  };
  // A grid in (-1.3, 1.3): a Tanh of an input, scaled (or a constant drawn the same way).
  const ValueId grid =
      constant_grid
          ? b.random_constant("grid", {1, oh, ow, 2}, 1.3f)
          : b.add1("Mul", {b.add1("Tanh", {b.input("g", DType::kFloat32, {1, oh, ow, 2})}),
                           b.constant("spread", Tensor::scalar(1.3f))});
  const ValueId sampled = b.add1("GridSample", {conv(x, 4, c, "a"), grid},
                                 {{"mode", attr_s(mode)},
                                  {"padding_mode", attr_s(padding)},
                                  {"align_corners", attr_i(align ? 1 : 0)}});
  b.output(conv(sampled, c, 8, "b"));
  return b.finish();
}

TEST(OnednnGridSample, EveryModeInsideARegionLikeReference) {
  int seed = 0;
  for (const std::string mode : {"bilinear", "nearest", "bicubic"})
    for (const std::string padding : {"zeros", "border", "reflection"})
      for (const bool align : {false, true}) {
        const bool constant_grid = ++seed % 4 == 0;
        const std::string what = fmt::format("{}, {} padding, align_corners {}{}", mode, padding,
                                             align, constant_grid ? ", constant grid" : "");
        SCOPED_TRACE(what);
        const Graph g = warp(mode, padding, align, constant_grid);
        const std::vector<Tensor> inputs = random_inputs(g, seed);
        const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
        // The default variant's convs write channels-last (the step's pixel-major loop), the
        // blocked one's nChw16c (read row-major).
        for (const std::string variant : {"", "blocked"}) {
          CompileOptions options = testing::test_options();
          options.variant = variant;
          std::unique_ptr<Kernel> kernel = testing::onednn_graph().compile(g, options);
          const testing::ProgramSteps steps = testing::steps_of(*kernel);
          EXPECT_EQ(steps.count(onednn::kGridSampleStep), 1) << variant;
          for (const std::string& impl : steps.implementations)
            EXPECT_FALSE(onednn::is_reference_impl(impl)) << impl;
          std::vector<Tensor> got = {Tensor(DType::kFloat32, g.value(g.outputs[0]).shape)};
          kernel->run(inputs, got);
          EXPECT_TRUE(testing::outputs_match(got, want)) << variant;
        }
        for (const char* backend : {"onednn-graph", "onednn"})
          EXPECT_TRUE(
              testing::expect_session_like_reference(backend, g, 2, inputs, want, what).empty())
              << backend;
      }
}

// A mode the op does not define is refused when the model loads, naming the node.
TEST(OnednnGridSample, AnUnknownModeIsAnErrorNamingTheNode) {
  GraphBuilder b;
  const ValueId x = b.input("x", DType::kFloat32, {1, 2, 4, 4});
  const ValueId grid = b.input("g", DType::kFloat32, {1, 3, 3, 2});
  try {
    b.add1("GridSample", {x, grid}, {{"mode", attr_s("trilinear")}});
    ADD_FAILURE() << "an unknown mode was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown mode 'trilinear'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace collage
