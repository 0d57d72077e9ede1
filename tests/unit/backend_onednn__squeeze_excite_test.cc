// The squeeze-excitation step (src/backends/onednn/squeeze_excite.h): which node chains it
// takes, and that it computes what the reference backend does, alone (the onednn backend's
// fusion) and inside onednn-graph regions, where its input comes channels-last from a conv.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/region_kernel.h"
#include "backends/onednn/squeeze_excite.h"
#include "collage/backend.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_f;
using testing::attr_i;
using testing::attr_ints;
using testing::GraphBuilder;
using testing::onednn;
using testing::onednn_graph;
using testing::pick;
using testing::ProgramSteps;
using testing::steps_of;

// The activations a block's two elementwise places take in these tests.
enum class Act { kRelu, kSilu, kHardSigmoid, kSigmoid, kNone };

ValueId apply(GraphBuilder& b, ValueId v, Act act) {
  switch (act) {
    case Act::kRelu:
      return b.add1("Relu", {v});
    case Act::kSilu:
      return b.add1("Mul", {v, b.add1("Sigmoid", {v})});
    case Act::kHardSigmoid:
      return b.add1("HardSigmoid", {v}, {{"alpha", attr_f(1.0f / 6)}, {"beta", attr_f(0.5f)}});
    case Act::kSigmoid:
      return b.add1("Sigmoid", {v});
    case Act::kNone:
      return v;
  }
  return v;
}

struct Block {
  int64_t reduced = 4;
  Act act = Act::kRelu, gate = Act::kSigmoid;
  bool reduce_mean = false;  // ReduceMean over the spatial axes instead of GlobalAveragePool
  bool biases = true;
  bool x_first = false;  // Mul(x, gate) instead of Mul(gate, x)
};

// A squeeze-excitation block reading `x` ([N, C, S...]); returns its output.
ValueId squeeze_excite(GraphBuilder& b, ValueId x, const Block& blk) {
  const Shape xs = b.graph().value(x).shape;
  const int64_t c = xs[1];
  Shape w1 = {blk.reduced, c}, w2 = {c, blk.reduced};
  for (size_t i = 2; i < xs.size(); ++i) {
    w1.push_back(1);
    w2.push_back(1);
  }
  std::vector<int64_t> axes;
  for (size_t i = 2; i < xs.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  ValueId s = blk.reduce_mean
                  ? b.add1("ReduceMean", {x}, {{"axes", attr_ints(axes)}, {"keepdims", attr_i(1)}})
                  : b.add1("GlobalAveragePool", {x});
  std::vector<ValueId> in1 = {s, b.random_constant("w1", w1, 0.5f)};
  if (blk.biases) in1.push_back(b.random_constant("b1", {blk.reduced}, 0.5f));
  ValueId h = apply(b, b.add1("Conv", in1), blk.act);
  std::vector<ValueId> in2 = {h, b.random_constant("w2", w2, 0.5f)};
  if (blk.biases) in2.push_back(b.random_constant("b2", {c}, 0.5f));
  ValueId g = apply(b, b.add1("Conv", in2), blk.gate);
  return blk.x_first ? b.add1("Mul", {x, g}) : b.add1("Mul", {g, x});
}

// As in EfficientNet, twice on `x` (40 channels): a depthwise 3x3 conv with SiLU, a block
// (reduced to 10, SiLU), a 1x1 conv reading the product. Returns the last conv's output.
ValueId efficientnet_chain(GraphBuilder& b, ValueId x) {
  ValueId y = x;
  for (int k = 0; k < 2; ++k) {
    y = b.add1("Conv", {y, b.random_constant("dw", {40, 1, 3, 3}, 0.5f)},
               {{"group", attr_i(40)}, {"pads", attr_ints({1, 1, 1, 1})}});
    y = b.add1("Mul", {y, b.add1("Sigmoid", {y})});
    Block blk;
    blk.reduced = 10;
    blk.act = Act::kSilu;
    y = squeeze_excite(b, y, blk);
    y = b.add1("Conv", {y, b.random_constant("pw", {40, 40, 1, 1}, 0.3f)});
  }
  return y;
}

TEST(OnednnSqueezeExcite, RandomizedBlocksLikeReference) {
  // Channel counts off the 16-channel shares (and fewer than one share per thread), 1-3
  // spatial dims, batch 1-3, each activation and gate, either Mul order, with and without
  // biases, either spatial mean: the onednn backend proposes the block as one group, compiles
  // it as the one step and matches the reference. A wrong mean, transposed weight, missed bias
  // or activation, or a thread's share left unscaled fails here.
  std::mt19937 rng(41);
  const Act acts[] = {Act::kRelu, Act::kSilu, Act::kNone};
  const Act gates[] = {Act::kSigmoid, Act::kHardSigmoid};
  for (int trial = 0; trial < 16; ++trial) {
    const int64_t n = pick(rng, 1, 3), c = pick(rng, 1, 90), rank = pick(rng, 3, 5);
    Shape xs = {n, c};
    for (int64_t i = 2; i < rank; ++i) xs.push_back(pick(rng, 1, rank == 5 ? 6 : 20));
    Block blk;
    blk.reduced = pick(rng, 1, 24);
    blk.act = acts[trial % 3];
    blk.gate = gates[trial % 2];
    blk.reduce_mean = trial % 4 == 1;
    blk.biases = trial % 5 != 2;
    blk.x_first = trial % 3 == 1;
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, xs);
    b.output(squeeze_excite(b, x, blk));
    const std::string what =
        fmt::format("trial {}: x {} reduced {}", trial, shape_to_string(xs), blk.reduced);
    ASSERT_TRUE(onednn::squeeze_excite_group(b.graph())) << what;
    const std::vector<Match> proposed = onednn::grow_squeeze_excite(b.graph());
    ASSERT_EQ(proposed.size(), 1u) << what;
    EXPECT_EQ(proposed[0].nodes.size(), b.graph().num_nodes()) << what;
    std::unique_ptr<Kernel> kernel = onednn().compile(b.graph(), testing::test_options());
    EXPECT_EQ(steps_of(*kernel).count(std::string(onednn::kSqueezeExciteStep)), 1) << what;
    testing::expect_like_reference(onednn(), b.graph(), what);
  }
}

TEST(OnednnSqueezeExcite, InsideRegionsBetweenConvsLikeReference) {
  // As in EfficientNet: a depthwise conv with SiLU makes x (channels-last in the region), the
  // block scales it, a 1x1 conv reads the product; twice in a row, batch 1 and 2, threads 1
  // and 2. The region must run each block as its one step (no pooling or binary primitive
  // left) and match the reference.
  for (int64_t batch : {1, 2}) {
    for (int threads : {1, 2}) {
      GraphBuilder b;
      ValueId x = b.input("x", DType::kFloat32, {batch, 40, 14, 14});
      b.output(efficientnet_chain(b, x));
      const std::string what = fmt::format("batch {} threads {}", batch, threads);
      use_threads_on_this_thread(threads);
      std::unique_ptr<Kernel> kernel = onednn::compile_region(b.graph());
      const ProgramSteps steps = steps_of(*kernel);
      EXPECT_EQ(steps.count(std::string(onednn::kSqueezeExciteStep)), 2) << what;
      EXPECT_EQ(steps.count(dnnl::primitive::kind::pooling_v2), 0) << what;
      EXPECT_EQ(steps.count(dnnl::primitive::kind::binary), 0) << what;
      testing::expect_like_reference(onednn_graph(), b.graph(), what);
    }
  }
  use_threads_on_this_thread(0);
}

TEST(OnednnSqueezeExcite, InsideBlockedRegionsReadsAndWritesChannelBlocks) {
  // The same EfficientNet chain (40 channels: three blocks of 16, the last half padding)
  // compiled as the "blocked" variant, where the convs write nChw16c: the step must take x
  // in that layout and write its product so for the next 1x1 conv, so the program reorders
  // only the region's input and output, and every conv stays on oneDNN's blocked kernels; and
  // it must match the reference (a block read or written at the wrong stride fails). Before the
  // step read channel blocks, the first block cost a reorder to channels-last and the region ran
  // channels-last from there.
  for (int64_t batch : {1, 2}) {
    for (int threads : {1, 2}) {
      GraphBuilder b;
      // A full conv first: it reads the plain input into channel blocks (the chain's convs
      // would not: oneDNN has no jit kernel for a plain depthwise input and a blocked output).
      ValueId y = b.add1("Conv",
                         {b.input("x", DType::kFloat32, {batch, 16, 14, 14}),
                          b.random_constant("stem", {40, 16, 3, 3}, 0.2f)},
                         {{"pads", attr_ints({1, 1, 1, 1})}});
      b.output(efficientnet_chain(b, y));
      const std::string what = fmt::format("batch {} threads {}", batch, threads);
      CompileOptions options = testing::test_options(threads);
      options.variant = "blocked";
      const ProgramSteps steps = steps_of(*onednn_graph().compile(b.graph(), options));
      const std::string listed = ::testing::PrintToString(steps.implementations);
      EXPECT_EQ(steps.count(std::string(onednn::kSqueezeExciteStep)), 2) << what << ": " << listed;
      EXPECT_LE(steps.count(dnnl::primitive::kind::reorder), 2) << what << ": " << listed;
      for (const std::string& impl : steps.implementations)  // no channels-last kernel
        EXPECT_EQ(impl.find("brg"), std::string::npos) << what << ": " << listed;
      auto [got, want] = testing::run_backend_and_reference(onednn_graph(), b.graph(),
                                                            random_inputs(b.graph(), 3), options);
      EXPECT_TRUE(testing::outputs_match(got, want)) << what;
    }
  }
}

TEST(OnednnSqueezeExcite, ConcurrentBranchesLikeReference) {
  // Two branches, each a conv and a block, summed: with every independent step run
  // concurrently (COLLAGE_ONEDNN_LANES=always), each block runs on one thread of a lane; a
  // step that waited at a barrier of its own team there, or shared its buffers between the
  // lanes, fails or deadlocks here.
  testing::WithLanes lanes("always");
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 48, 20, 20});
  std::vector<ValueId> branch;
  for (int k = 0; k < 2; ++k) {
    ValueId y = b.add1("Relu", {b.add1("Conv", {x, b.random_constant("w", {48, 48, 1, 1}, 0.3f)})});
    Block blk;
    blk.reduced = 12;
    blk.act = k == 0 ? Act::kRelu : Act::kSilu;
    branch.push_back(squeeze_excite(b, y, blk));
  }
  b.output(b.add1("Add", {branch[0], branch[1]}));
  std::unique_ptr<Kernel> kernel = onednn::compile_region(b.graph());
  const ProgramSteps steps = steps_of(*kernel);
  EXPECT_GT(steps.concurrent_stages, 0);
  EXPECT_EQ(steps.count(std::string(onednn::kSqueezeExciteStep)), 2);
  testing::expect_like_reference(onednn_graph(), b.graph(), "two concurrent blocks");
}

TEST(OnednnSqueezeExcite, NotABlockWhereItsInsideIsReadElsewhere) {
  // The squeezed vector also leaves the graph: the block is no one step (its interior would
  // have to exist), and onednn runs the nodes as ordinary groups.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 32, 7, 7});
  Block blk;
  ValueId y = squeeze_excite(b, x, blk);
  b.output(y);
  const NodeId pool = 0;
  b.output(b.graph().node(pool).outputs[0]);
  EXPECT_FALSE(onednn::squeeze_excite_group(b.graph()));
  EXPECT_TRUE(onednn::grow_squeeze_excite(b.graph()).empty());
  // A gate that is no elementwise op the step evaluates (a Softmax) is no block either.
  GraphBuilder s;
  ValueId sx = s.input("x", DType::kFloat32, {1, 32, 7, 7});
  ValueId m = s.add1("GlobalAveragePool", {sx});
  ValueId h = s.add1("Relu", {s.add1("Conv", {m, s.random_constant("w1", {4, 32, 1, 1})})});
  ValueId g = s.add1("Softmax", {s.add1("Conv", {h, s.random_constant("w2", {32, 4, 1, 1})})},
                     {{"axis", attr_i(1)}});
  s.output(s.add1("Mul", {g, sx}));
  EXPECT_TRUE(onednn::grow_squeeze_excite(s.graph()).empty());
}

}  // namespace
}  // namespace collage
