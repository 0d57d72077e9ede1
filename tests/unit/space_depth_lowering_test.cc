// DepthToSpace / SpaceToDepth lowered on import to Reshape -> Transpose -> Reshape
// (ir/space_depth_lowering.cc): the lowered graph computes what the ops' reference kernels
// do, for both DepthToSpace modes and random shapes and block sizes, and the fast backends
// then take the pieces.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "collage/model.h"
#include "collage/session.h"
#include "graph_builder.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::attr_s;
using testing::GraphBuilder;
using testing::outputs_match;

size_t count_op(const Graph& g, const std::string& op) {
  return std::count_if(g.nodes().begin(), g.nodes().end(),
                       [&](const Node& n) { return n.op_type == op; });
}

TEST(SpaceDepthLowering, ComputesWhatTheReferenceKernelsDo) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 18; ++trial) {
    const int kind = trial % 3;  // DepthToSpace DCR, DepthToSpace CRD, SpaceToDepth
    const int64_t bs = 2 + static_cast<int64_t>(rng() % 2);
    const int64_t n = 1 + static_cast<int64_t>(rng() % 2);
    const int64_t c = 1 + static_cast<int64_t>(rng() % 3);
    const int64_t h = 1 + static_cast<int64_t>(rng() % 4), w = 1 + static_cast<int64_t>(rng() % 4);
    GraphBuilder b(13);
    std::string what;
    if (kind < 2) {
      ValueId x = b.input("x", DType::kFloat32, {n, c * bs * bs, h, w});
      const std::string mode = kind == 0 ? "DCR" : "CRD";
      b.output(b.add1("DepthToSpace", {x}, {{"blocksize", attr_i(bs)}, {"mode", attr_s(mode)}}));
      what = "DepthToSpace " + mode;
    } else {
      ValueId x = b.input("x", DType::kFloat32, {n, c, h * bs, w * bs});
      b.output(b.add1("SpaceToDepth", {x}, {{"blocksize", attr_i(bs)}}));
      what = "SpaceToDepth";
    }
    SCOPED_TRACE(what + " blocksize " + std::to_string(bs) + " trial " + std::to_string(trial));
    const std::string bytes = model_to_bytes(b.graph());
    LoadOptions plain;
    plain.optimize = false;
    const Graph lowered = load_model_from_bytes(bytes, "");
    const Graph kept = load_model_from_bytes(bytes, "", plain);
    EXPECT_EQ(count_op(lowered, "Transpose"), 1u);
    EXPECT_EQ(count_op(lowered, "DepthToSpace") + count_op(lowered, "SpaceToDepth"), 0u);
    EXPECT_EQ(count_op(kept, "Transpose"), 0u);
    const std::vector<Tensor> inputs = random_inputs(kept, trial);
    const std::vector<Tensor> want = Session(kept, SessionOptions{}).run(inputs);
    // Exact: the same elements moved.
    EXPECT_TRUE(
        outputs_match(Session(lowered, SessionOptions{}).run(inputs), want, Tolerance{0, 0}));
    // onednn and onednn-graph take all of it (a reorder through permuted strides).
    for (const char* backend : {"onednn", "onednn-graph"}) {
      SessionOptions on;
      on.backend = backend;
      on.strict = true;
      Session session(lowered, on);
      EXPECT_TRUE(outputs_match(session.run(inputs), want, Tolerance{0, 0})) << backend;
      for (const PlanGroup& group : session.plan().groups) EXPECT_EQ(group.backend, backend);
    }
  }
}

}  // namespace
}  // namespace collage
