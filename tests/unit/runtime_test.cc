#include <gtest/gtest.h>

#include <random>

#include "collage/op_registry.h"
#include "collage/session.h"
#include "runtime/memory_plan.h"

namespace collage {
namespace {

TEST(MemoryPlan, OverlappingLifetimesNeverShareBytes) {
  std::mt19937 rng(7);
  std::vector<BufferRequest> requests;
  for (int i = 0; i < 200; ++i) {
    int first = static_cast<int>(rng() % 50);
    requests.push_back(
        {static_cast<size_t>(rng() % 10000 + 1), first, first + static_cast<int>(rng() % 10)});
  }
  MemoryPlan plan = plan_memory(requests);
  for (size_t a = 0; a < requests.size(); ++a) {
    EXPECT_EQ(plan.offsets[a] % 64, 0u);
    EXPECT_LE(plan.offsets[a] + requests[a].bytes, plan.arena_bytes);
    for (size_t b = a + 1; b < requests.size(); ++b) {
      bool live_together = requests[a].first_step <= requests[b].last_step &&
                           requests[b].first_step <= requests[a].last_step;
      bool bytes_overlap = plan.offsets[a] < plan.offsets[b] + requests[b].bytes &&
                           plan.offsets[b] < plan.offsets[a] + requests[a].bytes;
      EXPECT_FALSE(live_together && bytes_overlap) << a << " vs " << b;
    }
  }
}

TEST(MemoryPlan, ChainReusesBuffers) {
  // v0 -> v1 -> v2 -> v3: at most two are alive at once.
  std::vector<BufferRequest> chain = {{640, -1, 0}, {640, 0, 1}, {640, 1, 2}, {640, 2, 3}};
  EXPECT_EQ(plan_memory(chain).arena_bytes, 1280u);
}

// A test-only op, so the executor is tested independently of the real op set.
void register_add_one() {
  OpDef def;
  def.name = "CollageTestAddOne";
  def.kind = OpKind::kElementwise;
  def.infer = [](InferContext& ctx) { ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0)); };
  def.reference = [](const Graph&, const Node&) -> RefKernel {
    return [](std::span<const Tensor> in, std::span<const Tensor> out) {
      const float* x = in[0].data<float>();
      float* y = out[0].data<float>();
      for (int64_t i = 0; i < in[0].numel(); ++i) y[i] = x[i] + 1.0f;
    };
  };
  OpRegistry::global().add(def);
}

Graph add_one_chain(int length, const Shape& shape) {
  register_add_one();
  Graph g;
  ValueId prev = g.add_value("x", DType::kFloat32, shape, true);
  g.inputs = {prev};
  for (int i = 0; i < length; ++i) {
    ValueId next = g.add_value("v" + std::to_string(i), DType::kFloat32, shape, true);
    g.add_node(Node{"n" + std::to_string(i), "CollageTestAddOne", "", {prev}, {next}, {}});
    prev = next;
  }
  g.outputs = {prev};
  return g;
}

TEST(Session, RunsChainAndReusesArena) {
  Session session(add_one_chain(5, {4, 16}), SessionOptions{});
  EXPECT_EQ(session.num_steps(), 5u);
  // Input slot + two alternating intermediates + the output: far less than 6 buffers.
  EXPECT_LE(session.arena_bytes(), 4u * 256u);
  Tensor x = Tensor::from_vector<float>({4, 16}, std::vector<float>(64, 2.0f));
  for (int repeat = 0; repeat < 2; ++repeat) {
    std::vector<Tensor> out = session.run({x});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].shape(), (Shape{4, 16}));
    for (float v : out[0].span<float>()) EXPECT_FLOAT_EQ(v, 7.0f);
  }
  EXPECT_EQ(session.node_backends()[0], "reference");
}

TEST(Session, RunProfiledTimesEveryStepAndComputesTheSame) {
  Session session(add_one_chain(6, {64, 64}), SessionOptions{});
  Tensor x = Tensor::from_vector<float>({64, 64}, std::vector<float>(64 * 64, 1.0f));
  std::vector<StepTiming> timings(1);  // resized and overwritten
  timings[0].start_ms = -1;
  std::vector<Tensor> out = session.run_profiled({x}, timings);
  ASSERT_EQ(timings.size(), session.num_steps());
  ASSERT_EQ(timings.size(), session.plan().groups.size());
  double previous_end = 0;
  for (const StepTiming& t : timings) {
    // One after another on the calling thread: each starts after the last one ended.
    EXPECT_GE(t.start_ms, previous_end);
    EXPECT_GE(t.end_ms, t.start_ms);
    EXPECT_EQ(t.worker, 0);
    previous_end = t.end_ms;
  }
  for (float v : out[0].span<float>()) EXPECT_FLOAT_EQ(v, 7.0f);
}

TEST(Session, RejectsWrongInputShape) {
  Session session(add_one_chain(2, {3}), SessionOptions{});
  try {
    session.run({Tensor(DType::kFloat32, {4})});
    FAIL() << "wrong shape accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("[3]"), std::string::npos);
  }
  EXPECT_THROW(session.run({}), Error);
}

TEST(Session, OutputThatIsAnInputOrConstant) {
  Graph g;
  ValueId x = g.add_value("x", DType::kFloat32, {2}, true);
  ValueId c = g.add_constant("c", Tensor::from_vector<float>({2}, {5, 6}));
  g.inputs = {x};
  g.outputs = {x, c};
  Session session(std::move(g), SessionOptions{});
  auto out = session.run({Tensor::from_vector<float>({2}, {1, 2})});
  EXPECT_EQ(out[0].to_float_vector(), (std::vector<float>{1, 2}));
  EXPECT_EQ(out[1].to_float_vector(), (std::vector<float>{5, 6}));
}

// A node nothing reads (the ONNX importer removes them; a graph built through the API may
// have one) runs into a buffer of its own instead of failing the session.
TEST(Session, RunsAGraphWithANodeNothingReads) {
  Graph g;
  ValueId x = g.add_value("x", DType::kFloat32, {3}, true);
  ValueId y = g.add_value("y", DType::kFloat32, {3}, true);
  ValueId unread = g.add_value("unread", DType::kFloat32, {3}, true);
  g.inputs = {x};
  g.add_node(Node{"relu", "Relu", "", {x}, {y}, {}});
  g.add_node(Node{"sigmoid", "Sigmoid", "", {x}, {unread}, {}});
  g.outputs = {y};
  Session session(std::move(g), SessionOptions{});
  auto out = session.run({Tensor::from_vector<float>({3}, {-1, 0, 2})});
  EXPECT_EQ(out[0].to_float_vector(), (std::vector<float>{0, 0, 2}));
}

}  // namespace
}  // namespace collage
