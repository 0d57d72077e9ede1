// cuda-graph: what it proposes is checked on any machine; recording and replaying regions
// needs a GPU, and skips without one.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "models/zoo.h"
#include "op_test_util.h"
#include "runtime/device_buffers.h"

namespace collage {
namespace {

using testing::attr_ints;
using testing::expect_gpu_like_reference;
using testing::GraphBuilder;

Backend& cuda_graph() {
  return BackendRegistry::global().get("cuda-graph");
}

// Conv + Relu, a pool, a Softmax: parts for cudnn and cuda-gen in one region.
Graph mixed_region() {
  GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, {1, 3, 12, 12});
  ValueId y =
      b.add1("Relu",
             {b.add1("Conv", {x, b.random_constant("w", {8, 3, 3, 3}), b.random_constant("b", {8})},
                     {{"pads", attr_ints({1, 1, 1, 1})}})});
  y = b.add1("MaxPool", {y}, {{"kernel_shape", attr_ints({2, 2})}, {"strides", attr_ints({2, 2})}});
  y = b.add1("Sigmoid", {y});
  b.output(b.add1("Mul", {y, b.constant("k", Tensor::scalar(2.0f))}));
  return b.finish();
}

TEST(CudaGraph, IsGraphLevelOverTheGpuBackendsPatterns) {
  EXPECT_EQ(cuda_graph().kind(), BackendKind::kGraphLevel);
  EXPECT_NE(cuda_graph().device(), nullptr);
  std::set<std::string> from;
  for (const PatternEntry& p : cuda_graph().patterns())
    from.insert(p.name.substr(0, p.name.find(':')));
  EXPECT_TRUE(from.count("cudnn"));
  EXPECT_TRUE(from.count("cublas"));
  EXPECT_TRUE(from.count("cuda-gen"));
  EXPECT_FALSE(from.count("cuda-graph"));
  // Every node of the mixed region is some GPU backend's.
  const Graph g = mixed_region();
  std::set<NodeId> covered;
  for (const Match& m : find_matches(g, cuda_graph()))
    covered.insert(m.nodes.begin(), m.nodes.end());
  EXPECT_EQ(covered.size(), g.num_nodes());
}

// ---- on a device --------------------------------------------------------------------------

TEST(CudaGraphDevice, MixedRegionLikeReference) {
  COLLAGE_SKIP_WITHOUT_GPU("cuda-graph");
  const Graph g = mixed_region();
  SessionOptions options;
  options.backend = "cuda-graph";
  EXPECT_EQ(Session(g, options).num_steps(), 1u) << "the whole region, one graph";
  expect_gpu_like_reference("cuda-graph", g, "conv, pool, eltwise");
}

TEST(CudaGraphDevice, RecapturesWhenItsBuffersMove) {
  COLLAGE_SKIP_WITHOUT_GPU("cuda-graph");
  const Graph g = mixed_region();
  std::unique_ptr<Kernel> k = cuda_graph().compile(g, CompileOptions{"", 1});
  Device& device = *cuda_graph().device();
  std::vector<Tensor> inputs = random_inputs(g, 2);
  Session reference(g, SessionOptions{});
  std::vector<Tensor> want = reference.run(inputs);
  for (int round = 0; round < 3; ++round) {
    // Fresh device buffers each round (some stay alive, so addresses differ).
    DeviceBuffers in(device, inputs, true);
    std::vector<Tensor> host_out = {Tensor(DType::kFloat32, g.value(g.outputs[0]).shape)};
    DeviceBuffers out(device, host_out, false);
    k->run(in.views(), out.views());
    out.download(host_out);
    EXPECT_TRUE(testing::outputs_match(host_out, want)) << "round " << round;
  }
}

TEST(CudaGraphDevice, TinyZooModelsWholeOnTheGpu) {
  COLLAGE_SKIP_WITHOUT_GPU("cuda-graph");
  for (const char* name : {"resnet-tiny", "bert-tiny"}) {
    Graph g = models::build_zoo_model(name);
    SessionOptions options;
    options.backend = "cuda-graph";
    Session s(g, options);
    std::vector<Tensor> inputs = random_inputs(g, 1);
    Session reference(g, SessionOptions{});
    EXPECT_TRUE(testing::outputs_match(s.run(inputs), reference.run(inputs), Tolerance{1e-3, 1e-4}))
        << name;
  }
}

}  // namespace
}  // namespace collage
