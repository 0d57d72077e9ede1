// Concurrent stages inside an onednn program (lanes.h, program_lanes.cc): the dependencies
// between steps from the buffers they touch, the stages chosen under costs the test sets
// (where the best cover is known), and programs and regions run with lanes computing what
// they compute one step at a time, including a oneDNN kernel that is wrong on one thread of
// a team and must be kept out of the lanes.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/lane_memo.h"
#include "backends/onednn/lanes.h"
#include "backends/onednn/region_kernel.h"
#include "onednn_program_steps.h"
#include "onednn_test_util.h"
#include "runtime/threads.h"

namespace collage::onednn {
namespace {

using testing::attr_i;
using testing::attr_ints;
using testing::GraphBuilder;
using testing::outputs_match;
using testing::WithLanes;

std::vector<std::vector<size_t>> deps(const std::vector<StepAccess>& steps) {
  return step_dependencies(steps);
}

TEST(OnednnLanes, DependenciesFollowWritesNotSharedReads) {
  // 0 writes A; 1 and 2 both read A (independent of each other); 3 overwrites A in place
  // (after both readers); 4 reads B, which nothing wrote.
  const std::vector<StepAccess> steps = {{{}, {1}}, {{1}, {2}}, {{1}, {3}}, {{1}, {1}}, {{4}, {5}}};
  const auto p = deps(steps);
  EXPECT_EQ(p[0], std::vector<size_t>{});
  EXPECT_EQ(p[1], std::vector<size_t>{0});
  EXPECT_EQ(p[2], std::vector<size_t>{0});  // not 1: reads do not order each other
  EXPECT_EQ(p[3], (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(p[4], std::vector<size_t>{});
}

// Steps of a fork: `head` wide, then two chains of `len` steps each, then a join.
struct Fork {
  std::vector<std::vector<size_t>> preds;
  std::vector<StepCost> costs;
};
Fork fork_of_two_chains(size_t len, StepCost chain_step) {
  Fork f;
  f.preds.push_back({});  // 0: head
  f.costs.push_back({1.0, 1.8});
  for (size_t c = 0; c < 2; ++c)
    for (size_t i = 0; i < len; ++i) {
      const size_t s = f.preds.size();
      f.preds.push_back({i == 0 ? size_t{0} : s - 1});
      f.costs.push_back(chain_step);
    }
  f.preds.push_back({len, 2 * len});  // join: the ends of both chains
  f.costs.push_back({1.0, 1.8});
  return f;
}

TEST(OnednnLanes, TwoBadlyScalingChainsRunAsOneStageOfTwoLanes) {
  // Each chain step: 1 ms on one thread, 0.8 ms on two (scales 1.25x). One after another:
  // 1 + 8 x 0.8 + 1 = 8.4; the chains side by side: 1 + 4 + 0.05 + 1 = 6.05.
  const Fork f = fork_of_two_chains(4, {0.8, 1.0});
  const LanePlan plan = plan_lanes(f.preds, f.costs, 2, 0.05);
  EXPECT_DOUBLE_EQ(plan.sequential_ms, 8.4);
  EXPECT_NEAR(plan.predicted_ms, 6.05, 1e-9);
  ASSERT_EQ(plan.stages.size(), 3u);
  EXPECT_FALSE(plan.stages[0].concurrent());
  EXPECT_EQ(plan.stages[0].end, 1u);
  ASSERT_TRUE(plan.stages[1].concurrent());
  EXPECT_EQ(plan.stages[1].begin, 1u);
  EXPECT_EQ(plan.stages[1].end, 9u);
  // Each chain stays on one lane (no hand-over between threads).
  EXPECT_EQ(plan.stages[1].lanes, (std::vector<std::vector<size_t>>{{1, 2, 3, 4}, {5, 6, 7, 8}}));
  EXPECT_FALSE(plan.stages[2].concurrent());
}

TEST(OnednnLanes, StepsThatScaleWellStayOnEveryThread) {
  // 2 ms on one thread, 1 ms on two: lanes cannot win.
  const Fork f = fork_of_two_chains(4, {1.0, 2.0});
  const LanePlan plan = plan_lanes(f.preds, f.costs, 2, 0.0);
  EXPECT_EQ(plan.concurrent_stages(), 0);
  EXPECT_DOUBLE_EQ(plan.predicted_ms, plan.sequential_ms);
  ASSERT_EQ(plan.stages.size(), 1u);  // one sequential stage for the whole program
  EXPECT_EQ(plan.stages[0].end, f.costs.size());
}

TEST(OnednnLanes, AStageCostsItsHandOff) {
  // The lanes save 8 x 0.8 - 4 = 2.4 ms; a hand-off of 3 ms makes them lose.
  const Fork f = fork_of_two_chains(4, {0.8, 1.0});
  EXPECT_EQ(plan_lanes(f.preds, f.costs, 2, 2.0).concurrent_stages(), 1);
  EXPECT_EQ(plan_lanes(f.preds, f.costs, 2, 3.0).concurrent_stages(), 0);
}

TEST(OnednnLanes, AStepUnsafeOnOneThreadNeverRunsInALane) {
  Fork f = fork_of_two_chains(4, {0.8, 1.0});
  f.costs[6].narrow_safe = false;  // the second chain's second step
  const LanePlan plan = plan_lanes(f.preds, f.costs, 2, 0.05);
  bool seen = false;
  for (const LaneStage& s : plan.stages) {
    if (s.begin <= 6 && 6 < s.end) {
      EXPECT_FALSE(s.concurrent());
      seen = true;
    }
  }
  EXPECT_TRUE(seen);
  EXPECT_GT(plan.concurrent_stages(), 0);  // the rest still overlaps
  EXPECT_LT(plan.predicted_ms, plan.sequential_ms);
}

TEST(OnednnLanes, OnlyAFirstLookPromisingOnePercentIsMeasuredFully) {
  // The fork above saves 2.35 of 8.4 ms: measured fully and timed whole.
  Fork f = fork_of_two_chains(4, {0.8, 1.0});
  EXPECT_TRUE(lanes_worth_confirming(plan_lanes(f.preds, f.costs, 2, 0.05)));
  // The same stage behind a 300 ms head: still planned, but 2.35 of 307.35 ms (0.76 %).
  f.costs[0] = {300.0, 540.0};
  const LanePlan small = plan_lanes(f.preds, f.costs, 2, 0.05);
  EXPECT_EQ(small.concurrent_stages(), 1);
  EXPECT_FALSE(lanes_worth_confirming(small));
  // Just over the line: a 200 ms head (2.35 of 207.35 ms, 1.1 %).
  f.costs[0] = {200.0, 360.0};
  EXPECT_TRUE(lanes_worth_confirming(plan_lanes(f.preds, f.costs, 2, 0.05)));
  // No stage, nothing to confirm.
  const Fork scaling = fork_of_two_chains(4, {1.0, 2.0});
  EXPECT_FALSE(lanes_worth_confirming(plan_lanes(scaling.preds, scaling.costs, 2, 0.0)));
}

TEST(OnednnLanes, OneLaneNeverMakesAStage) {
  const Fork f = fork_of_two_chains(4, {0.8, 1.0});
  EXPECT_EQ(plan_lanes(f.preds, f.costs, 1, 0.0).concurrent_stages(), 0);
}

using dt = dnnl::memory::data_type;

using program_steps::add_batch_norm;
using program_steps::add_linear;
using program_steps::add_sum;

// y = (x + 6) + (2^6 x) in 13 steps: chain a at even steps 0-10, chain b at odd 1-11, the sum.
void build_two_chains(Program& p, const dnnl::memory::desc& md) {
  dnnl::memory x = p.input(0, md);
  dnnl::memory a = x, b = x;
  for (int i = 0; i < 6; ++i) {
    dnnl::memory na = p.rewritten_buffer(md), nb = p.rewritten_buffer(md);
    add_linear(p, a, na, 1.0f, 1.0f);
    add_linear(p, b, nb, 2.0f, 0.0f);
    a = na;
    b = nb;
  }
  add_sum(p, a, b, p.output(0, md));
}

void expect_two_chains_computed(Program& p, int elems, int runs = 5) {
  std::vector<float> values(elems);
  for (int i = 0; i < elems; ++i) values[i] = static_cast<float>(i % 101) * 0.25f;
  Tensor in = Tensor::from_vector<float>({elems}, values);
  for (int run = 0; run < runs; ++run) {
    Tensor got(DType::kFloat32, {elems});
    p.run(std::span<const Tensor>(&in, 1), std::span<const Tensor>(&got, 1));
    for (int i = 0; i < elems; ++i)
      ASSERT_EQ(got.data<float>()[i], (values[i] + 6) + 64.0f * values[i]) << run << " " << i;
  }
}

TEST(OnednnLanes, TwoChainsOfAProgramRunConcurrentlyAndComputeTheSame) {
  WithLanes lanes("always");
  constexpr int kElems = 1 << 14;
  const dnnl::memory::desc md({kElems}, dt::f32, tag::a);
  Program sequential, staged;
  build_two_chains(sequential, md);
  build_two_chains(staged, md);
  sequential.finalize();
  staged.finalize(Program::Lanes::kAlways);
  EXPECT_EQ(sequential.concurrent_stages(), 0);
  ASSERT_EQ(staged.concurrent_stages(), 1);
  // Two chains live at once keep apart: more arena than one step after another needs.
  EXPECT_GT(staged.arena_bytes(), sequential.arena_bytes());
  expect_two_chains_computed(staged, kElems, 20);
}

TEST(OnednnLanes, StagesFitOnlyACoverOfTheProgramInProgramOrder) {
  const std::vector<bool> safe(6, true);
  const std::vector<LaneStage> good = {{0, 1, {}}, {1, 5, {{1, 3}, {2, 4}}}, {5, 6, {}}};
  EXPECT_TRUE(stages_fit(good, 6, 2, safe));
  EXPECT_FALSE(stages_fit(good, 7, 2, safe)) << "a step left out";
  EXPECT_FALSE(stages_fit(good, 6, 1, safe)) << "more lanes than threads";
  EXPECT_FALSE(stages_fit({{0, 1, {}}, {2, 6, {}}}, 6, 2, safe)) << "a gap";
  EXPECT_FALSE(stages_fit({{0, 6, {{0, 2, 1}, {3, 4, 5}}}}, 6, 2, safe)) << "a lane out of order";
  EXPECT_FALSE(stages_fit({{0, 6, {{0, 1, 2}, {2, 3, 4, 5}}}}, 6, 2, safe)) << "a step twice";
  EXPECT_FALSE(stages_fit({{0, 6, {{0, 1, 2}, {3, 4}}}}, 6, 2, safe)) << "a step in no lane";
  EXPECT_FALSE(stages_fit({{0, 6, {{0, 1, 2, 3, 4, 5}}}}, 6, 2, safe)) << "one lane";
  EXPECT_FALSE(stages_fit({{0, 6, {{0, 1, 2}, {3, 4, 9}}}}, 6, 2, safe)) << "a step outside";
  std::vector<bool> unsafe = safe;
  unsafe[3] = false;
  EXPECT_FALSE(stages_fit(good, 6, 2, unsafe)) << "a step wrong on one thread of a team";
  EXPECT_TRUE(stages_fit({{0, 3, {}}, {3, 6, {}}}, 6, 2, unsafe)) << "sequential stages";
}

TEST(OnednnLanes, StagesTextRoundTripsAndOtherTextIsNone) {
  const std::vector<LaneStage> stages = {{0, 2, {}}, {2, 9, {{2, 4, 8}, {3, 5, 6, 7}}}};
  const std::optional<std::vector<LaneStage>> back = parse_stages(stages_text(stages));
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].lanes, stages[1].lanes);
  EXPECT_EQ((*back)[1].end, 9u);
  EXPECT_FALSE((*back)[0].concurrent());
  ASSERT_TRUE(parse_stages(stages_text({})).has_value()) << "sequential: no stage";
  EXPECT_TRUE(parse_stages(stages_text({}))->empty());
  for (const char* bad : {"", "collage onednn lanes 0\n", "collage onednn lanes 1\n0 x\n",
                          "collage onednn lanes 1\n0 4 2 3\n", "collage onednn lanes 1\n0 4 | a\n"})
    EXPECT_FALSE(parse_stages(bad).has_value()) << bad;
}

TEST(OnednnLanes, MemoKeepsEachConvAlgorithmApart) {
  // The steps of a region depend on how its convs are built (a Winograd conv is one custom
  // step, a blocked one adds reorders): a stage choice remembered for one assignment must
  // not be recalled for another, or its step indices would name other steps.
  testing::TempCacheDir cache_dir("lane-memo-test");
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 8, 8});
  b.output(b.add1("Relu", {b.add1("Conv", {x, b.random_constant("w", {16, 16, 3, 3})},
                                  {{"pads", attr_ints({1, 1, 1, 1})}})}));
  const Graph g = b.finish();
  const std::vector<std::vector<ConvAlgorithm>> assignments = {
      {}, {ConvAlgorithm::kWinograd}, {ConvAlgorithm::kWinograd2x2}, {ConvAlgorithm::kBlocked}};
  for (size_t i = 0; i < assignments.size(); ++i) {
    std::unique_ptr<LaneMemo> memo = region_lane_memo(g, assignments[i], 2);
    ASSERT_NE(memo, nullptr);
    EXPECT_FALSE(memo->recall().has_value()) << "assignment " << i << " recalls another's";
    memo->remember({{0, static_cast<size_t>(i + 1), {}}});
    ASSERT_TRUE(region_lane_memo(g, assignments[i], 2)->recall().has_value()) << i;
    EXPECT_EQ(region_lane_memo(g, assignments[i], 2)->recall()->front().end, i + 1) << i;
  }
}

// A memo in memory: what it holds, and how often it was written.
class HeldLaneMemo : public LaneMemo {
 public:
  explicit HeldLaneMemo(std::optional<std::vector<LaneStage>> held) : held_(std::move(held)) {}
  std::optional<std::vector<LaneStage>> recall() override { return held_; }
  void remember(const std::vector<LaneStage>& stages) override {
    held_ = stages;
    ++writes;
  }
  const std::optional<std::vector<LaneStage>>& held() const { return held_; }
  int writes = 0;

 private:
  std::optional<std::vector<LaneStage>> held_;
};

TEST(OnednnLanes, ARememberedChoiceRunsAsRememberedAndAnUnfitOneIsMeasuredAgain) {
  WithLanes lanes(nullptr);
  constexpr int kElems = 1 << 12;
  const dnnl::memory::desc md({kElems}, dt::f32, tag::a);
  const std::vector<LaneStage> chains = {{0, 12, {{0, 2, 4, 6, 8, 10}, {1, 3, 5, 7, 9, 11}}},
                                         {12, 13, {}}};
  struct Recalled {
    const char* what;
    std::vector<LaneStage> held;
    int stages;
  };
  for (const Recalled& r : {Recalled{"stages: taken as they are", chains, 1},
                            Recalled{"one step after another", {}, 0}}) {
    SCOPED_TRACE(r.what);
    HeldLaneMemo memo(r.held);
    Program p;
    build_two_chains(p, md);
    p.finalize(Program::Lanes::kMeasured, &memo);
    EXPECT_EQ(p.concurrent_stages(), r.stages);
    EXPECT_EQ(memo.writes, 0) << "nothing measured or written";
    expect_two_chains_computed(p, kElems);
  }
  for (const std::optional<std::vector<LaneStage>>& held :
       {std::optional<std::vector<LaneStage>>{},
        std::optional<std::vector<LaneStage>>{{{0, 13, {{0, 1}, {2, 3}}}}}}) {
    // Nothing, or a choice for another program: measured, and the choice written.
    HeldLaneMemo memo(held);
    Program p;
    build_two_chains(p, md);
    p.finalize(Program::Lanes::kMeasured, &memo);
    EXPECT_EQ(memo.writes, 1);
    ASSERT_TRUE(memo.held().has_value());
    EXPECT_TRUE(memo.held()->empty() ||
                stages_fit(*memo.held(), 13, 2, std::vector<bool>(13, true)));
    expect_two_chains_computed(p, kElems);
  }
}

TEST(OnednnLanes, OffKeepsEveryProgramSequential) {
  WithLanes lanes("off");
  const dnnl::memory::desc md({1024}, dt::f32, tag::a);
  Program p;
  dnnl::memory x = p.input(0, md);
  dnnl::memory a = p.rewritten_buffer(md), b = p.rewritten_buffer(md);
  add_linear(p, x, a, 1.0f, 1.0f);
  add_linear(p, x, b, 2.0f, 0.0f);
  add_sum(p, a, b, p.output(0, md));
  p.finalize(Program::Lanes::kAlways);
  EXPECT_EQ(p.concurrent_stages(), 0);
}

TEST(OnednnLanes, ABatchNormWrongOnOneThreadOfATeamStaysOutOfTheLanes) {
  // oneDNN 2.6's batch norm in channels-last (bnorm_tbb_jit) splits its work by the thread
  // count it was built for, so on one thread of a team it writes half its output. The
  // program checks each step on one thread before giving it a lane: two branches, one a
  // batch norm, must still compute what they compute one after another.
  WithLanes lanes("always");
  const dnnl::memory::desc md({1, 44, 28, 28}, dt::f32, tag::acdb);
  auto build = [&](Program& p) {
    dnnl::memory x = p.input(0, md);
    dnnl::memory normed = p.rewritten_buffer(md), other = p.rewritten_buffer(md);
    add_batch_norm(p, x, normed);
    // Two more branches, so that the program has lanes to give.
    dnnl::memory other2 = p.rewritten_buffer(md), third = p.rewritten_buffer(md);
    add_linear(p, x, other, 3.0f, 1.0f);
    add_linear(p, other, other2, 0.5f, 0.0f);
    add_linear(p, x, third, -1.0f, 2.0f);
    dnnl::memory partial = p.rewritten_buffer(md);
    add_sum(p, normed, other2, partial);
    add_sum(p, partial, third, p.output(0, md));
  };
  Program sequential, staged, remembered;
  build(sequential);
  build(staged);
  build(remembered);
  sequential.finalize(Program::Lanes::kSequential);
  staged.finalize(Program::Lanes::kAlways);
  EXPECT_GE(staged.concurrent_stages(), 1);
  // A remembered choice that gives the batch norm (step 0) a lane is measured again.
  HeldLaneMemo memo(std::vector<LaneStage>{{0, 4, {{0, 3}, {1, 2}}}, {4, 6, {}}});
  {
    WithLanes measured(nullptr);
    remembered.finalize(Program::Lanes::kMeasured, &memo);
  }
  EXPECT_EQ(memo.writes, 1);
  const size_t n = md.get_size() / sizeof(float);
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 53) * 0.03f - 0.7f;
  Tensor in = Tensor::from_vector<float>({1, 44, 28, 28}, values);
  Tensor want(DType::kFloat32, {1, 44, 28, 28});
  sequential.run(std::span<const Tensor>(&in, 1), std::span<const Tensor>(&want, 1));
  for (int run = 0; run < 5; ++run) {
    Tensor got(DType::kFloat32, {1, 44, 28, 28});
    staged.run(std::span<const Tensor>(&in, 1), std::span<const Tensor>(&got, 1));
    ASSERT_TRUE(outputs_match({got}, {want}, Tolerance{0, 0, 0})) << "run " << run;
    remembered.run(std::span<const Tensor>(&in, 1), std::span<const Tensor>(&got, 1));
    ASSERT_TRUE(outputs_match({got}, {want}, Tolerance{0, 0, 0})) << "remembered, run " << run;
  }
}

TEST(OnednnLanes, APrimitiveCallingAnOpenMpBarrierRunsInALaneWithoutHanging) {
  // oneDNN 2.6's batch norm in plain layout (ncsp_bnorm) blocks over channels when its data
  // is over half the L3 share of its threads, and then calls an OpenMP barrier from its
  // parallel(); on one thread of a team that barrier bound to the enclosing team and waited
  // for the other thread forever (DenseNet-121 under onednn-graph hung in the narrow check
  // on a Zen 5 EPYC). 16 MiB is past that size on the machines seen (4-8 MiB L3 per core).
  // Each lane now runs in a team of its own thread (in_team_of_one): the program is
  // checked, staged and run, and computes what it computes one step at a time.
  WithLanes lanes("always");
  const int64_t c = 256, hw = 128;
  const dnnl::memory::desc md({1, c, hw, hw}, dt::f32, tag::abcd);
  auto build = [&](Program& p) {
    dnnl::memory x = p.input(0, md);
    dnnl::memory normed = p.rewritten_buffer(md), other = p.rewritten_buffer(md);
    add_batch_norm(p, x, normed);
    add_linear(p, x, other, 3.0f, 1.0f);
    add_sum(p, normed, other, p.output(0, md));
  };
  Program sequential, staged;
  build(sequential);
  build(staged);
  sequential.finalize(Program::Lanes::kSequential);
  staged.finalize(Program::Lanes::kAlways);
  const Shape shape = {1, c, hw, hw};
  std::vector<float> values(static_cast<size_t>(c * hw * hw));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 61) * 0.02f - 0.6f;
  Tensor in = Tensor::from_vector<float>(shape, values);
  Tensor want(DType::kFloat32, shape), got(DType::kFloat32, shape);
  sequential.run(std::span<const Tensor>(&in, 1), std::span<const Tensor>(&want, 1));
  for (int run = 0; run < 2; ++run) {
    staged.run(std::span<const Tensor>(&in, 1), std::span<const Tensor>(&got, 1));
    ASSERT_TRUE(outputs_match({got}, {want}, Tolerance{0, 0, 0})) << "run " << run;
  }
}

ValueId conv_relu(GraphBuilder& b, ValueId x, int64_t in, int64_t out, int64_t k) {
  const int64_t p = k / 2;
  return b.add1(
      "Relu",
      {b.add1("Conv",
              {x, b.random_constant("w", {out, in, k, k}, 0.2f), b.random_constant("b", {out})},
              {{"pads", attr_ints({p, p, p, p})}})});
}

TEST(OnednnLanes, AnInceptionBlockRegionRunsItsBranchesInLanesLikeReference) {
  WithLanes lanes("always");
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 32, 14, 14});
  std::vector<ValueId> branches = {
      conv_relu(b, x, 32, 16, 1), conv_relu(b, conv_relu(b, x, 32, 24, 1), 24, 32, 3),
      conv_relu(b, conv_relu(b, x, 32, 8, 1), 8, 16, 5),
      conv_relu(b,
                b.add1("MaxPool", {x},
                       {{"kernel_shape", attr_ints({3, 3})}, {"pads", attr_ints({1, 1, 1, 1})}}),
                32, 16, 1)};
  b.output(b.add1("Concat", branches, {{"axis", attr_i(1)}}));
  const Graph& g = b.graph();
  std::unique_ptr<Kernel> kernel = compile_region(g);
  const auto* program_kernel = dynamic_cast<const ProgramKernel*>(kernel.get());
  ASSERT_NE(program_kernel, nullptr);
  EXPECT_GE(program_kernel->program().concurrent_stages(), 1);
  const std::vector<Tensor> inputs = random_inputs(g, 7);
  Session reference(g, SessionOptions{});
  const std::vector<Tensor> want = reference.run(inputs);
  use_threads_on_this_thread(2);  // the reference session set its own
  for (int run = 0; run < 5; ++run) {
    std::vector<Tensor> got = {Tensor(DType::kFloat32, g.value(g.outputs[0]).shape)};
    kernel->run(inputs, got);
    ASSERT_TRUE(outputs_match(got, want)) << "run " << run;
  }
}

}  // namespace
}  // namespace collage::onednn
