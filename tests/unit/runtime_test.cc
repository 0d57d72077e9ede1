#include <gtest/gtest.h>

#include <random>

#include "backend_test_util.h"
#include "collage/op_registry.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "runtime/executor.h"
#include "runtime/memory_plan.h"
#include "runtime/partitioner.h"

namespace collage {
namespace {

using testing::GraphBuilder;
using testing::outputs_match;

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

// The request at the end of r's share_with chain.
size_t root_of(const std::vector<BufferRequest>& requests, size_t r) {
  while (requests[r].share_with >= 0) r = static_cast<size_t>(requests[r].share_with);
  return r;
}

TEST(MemoryPlan, SharedRequestsTakeOneOffsetAndNothingElseTheirBytes) {
  std::mt19937 rng(11);
  std::vector<BufferRequest> requests;
  for (int i = 0; i < 200; ++i) {
    int first = static_cast<int>(rng() % 50);
    requests.push_back(
        {static_cast<size_t>(rng() % 10000 + 1), first, first + static_cast<int>(rng() % 10)});
  }
  // Chains as the executor makes them: an output (starting where the input dies, of its
  // size) takes the bytes of an input nothing else took.
  std::vector<bool> taken(requests.size(), false);
  for (size_t r = 100; r < requests.size(); r += 2) {
    const size_t j = rng() % r;
    if (taken[j]) continue;
    taken[j] = true;
    requests[r].share_with = static_cast<int>(j);
    requests[r].bytes = requests[j].bytes;
    requests[r].first_step = requests[j].last_step;
    requests[r].last_step = std::max(requests[r].last_step, requests[r].first_step);
  }
  // Each chain holds its bytes over the union of its members' lifetimes.
  std::vector<BufferRequest> held(requests.size());
  for (size_t r = 0; r < requests.size(); ++r) {
    BufferRequest& h = held[root_of(requests, r)];
    if (h.bytes == 0) h = requests[r];
    h.first_step = std::min(h.first_step, requests[r].first_step);
    h.last_step = std::max(h.last_step, requests[r].last_step);
  }
  MemoryPlan plan = plan_memory(requests);
  int shared = 0;
  for (size_t a = 0; a < requests.size(); ++a) {
    EXPECT_EQ(plan.offsets[a] % 64, 0u);
    EXPECT_LE(plan.offsets[a] + requests[a].bytes, plan.arena_bytes);
    for (size_t b = a + 1; b < requests.size(); ++b) {
      const size_t ra = root_of(requests, a), rb = root_of(requests, b);
      if (ra == rb) {
        EXPECT_EQ(plan.offsets[a], plan.offsets[b]) << a << " shares with " << b;
        ++shared;
        continue;
      }
      bool live_together =
          held[ra].first_step <= held[rb].last_step && held[rb].first_step <= held[ra].last_step;
      bool bytes_overlap = plan.offsets[a] < plan.offsets[b] + requests[b].bytes &&
                           plan.offsets[b] < plan.offsets[a] + requests[a].bytes;
      EXPECT_FALSE(live_together && bytes_overlap) << a << " vs " << b;
    }
  }
  EXPECT_GT(shared, 20);
}

TEST(MemoryPlan, AnOutputOverItsDyingInputNeedsNoBytesOfItsOwn) {
  // The input lives until step 1, where the output is written: apart they need two blocks.
  std::vector<BufferRequest> requests = {{640, 0, 1}, {640, 1, 2}};
  EXPECT_EQ(plan_memory(requests).arena_bytes, 1280u);
  requests[1].share_with = 0;
  MemoryPlan plan = plan_memory(requests);
  EXPECT_EQ(plan.offsets[0], plan.offsets[1]);
  EXPECT_EQ(plan.arena_bytes, 640u);
}

TEST(MemoryPlan, ASharingCycleIsAnInternalError) {
  std::vector<BufferRequest> requests = {{64, 0, 1, 1}, {64, 1, 2, 0}};
  try {
    plan_memory(requests);
    FAIL() << "a cycle was planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
  }
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

// y = a + b, each element read before it is written: right whether y shares a's buffer or
// not. It offers y over a and records the addresses it ran on.
class InPlaceAddKernel : public Kernel {
 public:
  void run(std::span<const Tensor> in, std::span<const Tensor> out) override {
    input = in[0].raw();
    output = out[0].raw();
    const float* a = in[0].data<float>();
    const float* b = in[1].data<float>();
    float* y = out[0].data<float>();
    for (int64_t i = 0; i < out[0].numel(); ++i) y[i] = a[i] + b[i];
  }
  std::vector<InPlace> in_place() const override { return {{0, 0}}; }

  const void* input = nullptr;
  const void* output = nullptr;
};

// Runs a graph with every Add on an InPlaceAddKernel and the other nodes on the fallback,
// one step per node (in node order, with `schedule` when given), and checks the outputs
// against the reference backend's.
class InPlaceTest : public ::testing::Test {
 protected:
  static constexpr int64_t kRows = 4, kCols = 16;

  void run(const Graph& g, const Schedule* schedule = nullptr) {
    adds.clear();
    Placement placement;
    for (size_t n = 0; n < g.num_nodes(); ++n)
      placement.push_back(
          Candidate{{static_cast<NodeId>(n)}, &BackendRegistry::global().fallback(), "", 1});
    KernelSource source = [&](const Graph& graph, const Candidate& c) -> std::shared_ptr<Kernel> {
      if (graph.node(c.nodes[0]).op_type != "Add") return compile_candidate(graph, c);
      adds.push_back(std::make_shared<InPlaceAddKernel>());
      return adds.back();
    };
    Executor e(g, build_steps(g, placement, schedule, source));
    const std::vector<Tensor> inputs = random_inputs(g, 7);
    const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
    for (int repeat = 0; repeat < 2; ++repeat)
      EXPECT_TRUE(outputs_match(e.run(inputs), want)) << "run " << repeat;
  }
  // Whether Add number `i` of the last run (in node order) wrote over its first input.
  bool shared(size_t i) const {
    EXPECT_NE(adds.at(i)->output, nullptr);
    return adds.at(i)->input == adds.at(i)->output;
  }

  std::vector<std::shared_ptr<InPlaceAddKernel>> adds;
};

TEST_F(InPlaceTest, AnOutputTakesTheBufferOfAnInputThatDiesThere) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {kRows, kCols});
  ValueId c = b.add1("Relu", {x});
  ValueId y = b.add1("Add", {c, b.input("k", DType::kFloat32, {kRows, kCols})});
  b.output(b.add1("Relu", {y}));
  run(b.finish());
  EXPECT_TRUE(shared(0));
}

TEST_F(InPlaceTest, AChainOfThemSharesOneBuffer) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {kRows, kCols});
  ValueId k = b.input("k", DType::kFloat32, {kRows, kCols});
  ValueId y = b.add1("Add", {b.add1("Add", {b.add1("Relu", {x}), k}), k});
  b.output(b.add1("Relu", {y}));
  run(b.finish());
  EXPECT_TRUE(shared(0));
  EXPECT_TRUE(shared(1));
  EXPECT_EQ(adds[0]->output, adds[1]->output);
}

TEST_F(InPlaceTest, AnInputReadLaterKeepsItsBuffer) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {kRows, kCols});
  ValueId c = b.add1("Relu", {x});
  ValueId y = b.add1("Add", {c, b.input("k", DType::kFloat32, {kRows, kCols})});
  b.output(b.add1("Mul", {b.add1("Relu", {y}), c}));
  run(b.finish());
  EXPECT_FALSE(shared(0));
}

TEST_F(InPlaceTest, GraphInputsAndOutputsKeepTheirBuffers) {
  {
    SCOPED_TRACE("the input is a graph input");
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {kRows, kCols});
    b.output(b.add1("Relu", {b.add1("Add", {x, b.input("k", DType::kFloat32, {kRows, kCols})})}));
    run(b.finish());
    EXPECT_FALSE(shared(0));
  }
  {
    SCOPED_TRACE("the output is a graph output");
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {kRows, kCols});
    b.output(b.add1("Add", {b.add1("Relu", {x}), b.input("k", DType::kFloat32, {kRows, kCols})}));
    run(b.finish());
    EXPECT_FALSE(shared(0));
  }
  {
    SCOPED_TRACE("the input is a graph output");
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {kRows, kCols});
    ValueId c = b.add1("Relu", {x});
    b.output(b.add1("Relu", {b.add1("Add", {c, b.input("k", DType::kFloat32, {kRows, kCols})})}));
    b.output(c);
    run(b.finish());
    EXPECT_FALSE(shared(0));
  }
}

TEST_F(InPlaceTest, StepsOfAConcurrentStageKeepTheirBuffers) {
  // Stage 0 runs two lanes, each an Add over a value that dies there: a step of a concurrent
  // stage shares its one time with the other lane's steps, so no dying is certain.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {kRows, kCols});
  ValueId k = b.input("k", DType::kFloat32, {kRows, kCols});
  ValueId l = b.add1("Add", {b.add1("Relu", {x}), k});
  ValueId r = b.add1("Add", {b.add1("Sigmoid", {x}), k});
  b.output(b.add1("Mul", {l, r}));
  // Nodes: Relu, Add, Sigmoid, Add, Mul.
  const Schedule schedule = {{0, 0}, {0, 0}, {0, 1}, {0, 1}, {1, 0}};
  run(b.finish(), &schedule);
  ASSERT_EQ(adds.size(), 2u);
  EXPECT_FALSE(shared(0));
  EXPECT_FALSE(shared(1));
}

}  // namespace
}  // namespace collage
