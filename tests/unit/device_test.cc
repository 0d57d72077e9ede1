// The runtime's and the search's device logic, on a test device whose memory is host memory
// (host_memory_device.h): which values live where, where the copies go, the device arena, and
// how the op-level search weighs copies. The GPU backends' own tests need a GPU; these run
// everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "collage/session.h"
#include "graph_builder.h"
#include "host_memory_device.h"
#include "plan/hardware.h"
#include "runtime/device_buffers.h"
#include "runtime/executor.h"
#include "runtime/partitioner.h"
#include "search/cost_db.h"
#include "search/cost_model.h"
#include "search/measure.h"
#include "search/op_level_search.h"
#include "search/plan_records.h"

namespace collage {
namespace {

using testing::GraphBuilder;
using testing::HostMemoryDevice;
using testing::HostMemoryDeviceBackend;

class DeviceTest : public ::testing::Test {
 protected:
  HostMemoryDevice device;
  HostMemoryDeviceBackend backend{&device};
  Backend& host = BackendRegistry::global().fallback();

  // The node producing `v`.
  static NodeId node_of(const Graph& g, ValueId v) { return g.value(v).producer; }
  Candidate on_device(std::vector<NodeId> nodes) {
    std::sort(nodes.begin(), nodes.end());
    return Candidate{nodes, &backend, "", 1};
  }
  Candidate on_host(NodeId n) { return Candidate{{n}, &host, "", 1}; }

  // Runs `placement` (complete) and reference on the same inputs: the outputs must agree.
  void expect_like_reference(const Graph& g, Executor& e) {
    std::vector<Tensor> inputs = random_inputs(g, 5);
    std::vector<Tensor> got = e.run(inputs);
    Session reference(g, SessionOptions{});
    std::vector<Tensor> want = reference.run(inputs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_FALSE(device.owns(got[i].raw(), 1)) << "output " << i << " left on the device";
      for (int64_t k = 0; k < want[i].numel(); ++k)
        ASSERT_FLOAT_EQ(got[i].data<float>()[k], want[i].data<float>()[k]) << i << "[" << k << "]";
    }
  }

  // Every step's tensors are on its own side: device memory for device steps, host memory
  // for host steps.
  void expect_views_on_their_side(const Executor& e) {
    for (size_t s = 0; s < e.steps().size(); ++s) {
      const bool on_dev = e.steps()[s].candidate.backend->device() != nullptr;
      for (const auto* list : {&e.step_input_views(s), &e.step_output_views(s)})
        for (const Tensor& t : *list) {
          if (!t.defined() || !t.nbytes()) continue;
          EXPECT_EQ(device.owns(t.raw(), t.nbytes()), on_dev)
              << "step " << s << " (" << e.steps()[s].backend_name() << ")";
        }
    }
  }
};

// x -> Relu(host) -> a; b = Mul(a, a) (device); c = Add(b, x) (device); y = Relu(c) (host).
TEST_F(DeviceTest, CopiesGoWhereThePlacementCrossesAndOnlyThere) {
  GraphBuilder gb;
  ValueId x = gb.input("x", DType::kFloat32, {4, 8});
  ValueId a = gb.add1("Relu", {x});
  ValueId b = gb.add1("Mul", {a, a});
  ValueId c = gb.add1("Add", {b, x});
  ValueId y = gb.add1("Relu", {c});
  gb.output(y);
  Graph g = gb.finish();
  Placement p = {on_host(node_of(g, a)), on_device({node_of(g, b)}), on_device({node_of(g, c)}),
                 on_host(node_of(g, y))};
  Executor e(g, build_steps(g, p));

  // a and x go over before their first device reader, c comes back before the host Relu; b
  // stays on the device.
  std::map<ValueId, Executor::CopyInfo> copies;
  for (const auto& info : e.copies()) copies[info.value] = info;
  ASSERT_EQ(copies.size(), 3u);
  EXPECT_FALSE(copies.at(a).to_host);
  EXPECT_EQ(copies.at(a).before_step, 1);
  EXPECT_FALSE(copies.at(x).to_host);
  EXPECT_EQ(copies.at(x).before_step, 2);
  EXPECT_TRUE(copies.at(c).to_host);
  EXPECT_EQ(copies.at(c).before_step, 3);
  EXPECT_EQ(copies.count(b), 0u);
  EXPECT_GT(e.device_arena_bytes(&device), 0u);
  expect_views_on_their_side(e);

  device.to_device = device.to_host = 0;
  expect_like_reference(g, e);
  EXPECT_EQ(device.to_device, 2);
  EXPECT_EQ(device.to_host, 1);
}

TEST_F(DeviceTest, GraphOutputComputedOnTheDeviceIsCopiedBackAtTheEnd) {
  GraphBuilder gb;
  ValueId x = gb.input("x", DType::kFloat32, {3, 5});
  ValueId a = gb.add1("Sigmoid", {x});
  ValueId b = gb.add1("Mul", {a, x});
  gb.output(a);  // read on the device by Mul, and a graph output
  gb.output(b);
  Graph g = gb.finish();
  Executor e(g, build_steps(g, {on_device({node_of(g, a)}), on_device({node_of(g, b)})}));
  int at_end = 0;
  for (const auto& info : e.copies())
    if (info.before_step < 0) {
      EXPECT_TRUE(info.to_host);
      ++at_end;
    }
  EXPECT_EQ(at_end, 2);
  expect_views_on_their_side(e);
  expect_like_reference(g, e);
}

TEST_F(DeviceTest, DeviceArenaIsPlannedByLiveness) {
  // A chain of six device steps on equal tensors: at most two are live at once, so the
  // arena holds two (the input's copy, then every step's output, reuse slots).
  GraphBuilder gb;
  ValueId v = gb.input("x", DType::kFloat32, {16, 16});
  std::vector<NodeId> nodes;
  for (int i = 0; i < 6; ++i) {
    v = gb.add1("Relu", {v});
    nodes.push_back(gb.graph().value(v).producer);
  }
  gb.output(v);
  Graph g = gb.finish();
  Placement p;
  for (NodeId n : nodes) p.push_back(on_device({n}));
  Executor e(g, build_steps(g, p));
  EXPECT_EQ(e.device_arena_bytes(&device), 2u * 16 * 16 * 4);
  // One arena: the device handed out one block (no constants to upload).
  EXPECT_EQ(device.live_blocks(), 1u);
  // A step's input and output never share bytes.
  for (size_t s = 0; s < e.steps().size(); ++s) {
    const Tensor& in = e.step_input_views(s)[0];
    const Tensor& out = e.step_output_views(s)[0];
    EXPECT_NE(in.raw(), out.raw()) << "step " << s;
  }
  expect_views_on_their_side(e);
  expect_like_reference(g, e);
}

TEST_F(DeviceTest, ArenaGoesBackWithTheExecutor) {
  GraphBuilder gb;
  ValueId x = gb.input("x", DType::kFloat32, {8});
  ValueId y = gb.add1("Relu", {x});
  gb.output(y);
  Graph g = gb.finish();
  {
    Executor e(g, build_steps(g, {on_device({node_of(g, y)})}));
    EXPECT_GT(device.live_blocks(), 0u);
  }
  EXPECT_EQ(device.live_blocks(), 0u);
}

TEST_F(DeviceTest, HostOnlyPlanHasNoCopiesAndNoDeviceArena) {
  GraphBuilder gb;
  ValueId x = gb.input("x", DType::kFloat32, {4, 4});
  ValueId a = gb.add1("Relu", {x});
  ValueId b = gb.add1("Mul", {a, x});
  gb.output(b);
  Graph g = gb.finish();
  Executor e(g, build_steps(g, {on_host(node_of(g, a)), on_host(node_of(g, b))}));
  EXPECT_TRUE(e.copies().empty());
  EXPECT_EQ(e.device_arena_bytes(&device), 0u);
  EXPECT_EQ(device.allocations, 0);
  expect_like_reference(g, e);
}

TEST_F(DeviceTest, ConcurrentStageGetsItsInputsBeforeItStarts) {
  // x -> Relu (host, stage 0); then two device lanes each read the Relu's output (stage 1),
  // then Add on the host (stage 2). The copy is made once, before stage 1 starts.
  GraphBuilder gb;
  ValueId x = gb.input("x", DType::kFloat32, {32});
  ValueId a = gb.add1("Relu", {x});
  ValueId l = gb.add1("Sigmoid", {a});
  ValueId r = gb.add1("Mul", {a, a});
  ValueId y = gb.add1("Add", {l, r});
  gb.output(y);
  Graph g = gb.finish();
  Placement p = {on_host(node_of(g, a)), on_device({node_of(g, l)}), on_device({node_of(g, r)}),
                 on_host(node_of(g, y))};
  Schedule schedule = {{0, 0}, {1, 0}, {1, 1}, {2, 0}};
  Executor e(g, build_steps(g, p, &schedule));
  ASSERT_EQ(e.max_lanes(), 2);
  int before_stage = 0, to_host = 0;
  for (const auto& info : e.copies()) {
    if (info.value == a) {
      EXPECT_TRUE(info.before_stage);
      ++before_stage;
    }
    if (info.to_host) ++to_host;
  }
  EXPECT_EQ(before_stage, 1);
  EXPECT_EQ(to_host, 2);  // l and r, each before the Add
  expect_views_on_their_side(e);
  for (int i = 0; i < 20; ++i) expect_like_reference(g, e);
}

TEST_F(DeviceTest, ProfiledRunTimesEveryStep) {
  GraphBuilder gb;
  ValueId x = gb.input("x", DType::kFloat32, {64});
  ValueId a = gb.add1("Relu", {x});
  ValueId b = gb.add1("Sigmoid", {a});
  gb.output(b);
  Graph g = gb.finish();
  Executor e(g, build_steps(g, {on_host(node_of(g, a)), on_device({node_of(g, b)})}));
  std::vector<StepTiming> timings;
  e.run_profiled(random_inputs(g), timings);
  ASSERT_EQ(timings.size(), 2u);
  for (const StepTiming& t : timings) EXPECT_GE(t.end_ms, t.start_ms);
}

TEST_F(DeviceTest, DeviceBuffersRoundTrip) {
  Tensor t = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  std::vector<Tensor> back = {Tensor(DType::kFloat32, {2, 3})};
  {
    DeviceBuffers buffers(device, {t}, true);
    ASSERT_TRUE(device.owns(buffers.views()[0].raw(), t.nbytes()));
    buffers.download(back);
  }
  EXPECT_EQ(back[0].to_float_vector(), t.to_float_vector());
  EXPECT_EQ(device.live_blocks(), 0u);
}

TEST_F(DeviceTest, MeasuringACopyUsesTheDevice) {
  device.to_device = device.to_host = 0;
  EXPECT_GE(measure_copy_ms(device, false, 4096), 0.0);
  EXPECT_GE(measure_copy_ms(device, true, 4096), 0.0);
  EXPECT_GT(device.to_device, 0);
  EXPECT_GT(device.to_host, 0);
  EXPECT_EQ(device.live_blocks(), 0u);
}

TEST_F(DeviceTest, FingerprintNamesTheDeviceOnlyWhereOneIsUsed) {
  const Hardware machine = this_machine(2);
  EXPECT_EQ(with_devices(machine, {}).fingerprint(), machine.fingerprint());
  EXPECT_EQ(with_devices(machine, {nullptr}).fingerprint(), machine.fingerprint());
  const std::string with = with_devices(machine, {&device, &device}).fingerprint();
  EXPECT_NE(with.find(machine.fingerprint()), std::string::npos);
  EXPECT_NE(with.find("test device (host memory)"), std::string::npos);
  EXPECT_EQ(with.find("test device (host memory); test device"), std::string::npos) << "once";

  GraphBuilder gb;
  ValueId x = gb.input("x", DType::kFloat32, {4});
  ValueId a = gb.add1("Relu", {x});
  ValueId b = gb.add1("Sigmoid", {a});
  gb.output(b);
  Graph g = gb.finish();
  const Placement host_only = {on_host(0), on_host(1)};
  const Placement mixed = {on_host(0), on_device({1})};
  // A plan record's key: the CPU's fingerprint alone for a host-only plan, the device's too
  // for one that uses it.
  RecordKey h = plan_record_key(g, host_only, "", kPlanFitnessRecord, machine);
  EXPECT_EQ(h.key, CostDb::make_key(h.text, kPlanFitnessRecord, "", machine.fingerprint()));
  RecordKey m = plan_record_key(g, mixed, "", kPlanFitnessRecord, machine);
  EXPECT_NE(m.key, CostDb::make_key(m.text, kPlanFitnessRecord, "", machine.fingerprint()));
  EXPECT_EQ(m.key, CostDb::make_key(m.text, kPlanFitnessRecord, "",
                                    with_devices(machine, {&device}).fingerprint()));
  // A kernel's key likewise.
  Graph sub = extract_subgraph(g, {1});
  KernelKey k_dev = kernel_key(sub, on_device({1}), machine, {});
  Hardware hw = with_devices(machine, {&device});
  hw.threads = 1;
  EXPECT_EQ(k_dev.key, CostDb::make_key(k_dev.text, "test-device", "1", hw.fingerprint()));
}

// Costs per node set and backend, plus a price per copy.
class DeviceCosts : public CostModel {
 public:
  std::map<std::pair<std::vector<NodeId>, const Backend*>, double> costs;
  double per_copy = 0;
  int copies_priced = 0;
  double cost_ms(const Candidate& c) override {
    auto it = costs.find({c.nodes, c.backend});
    return it == costs.end() ? std::numeric_limits<double>::infinity() : it->second;
  }
  double step_overhead_ms() override { return 0.01; }
  double stage_overhead_ms() override { return 0; }
  double copy_ms(Device&, bool, size_t) override {
    ++copies_priced;
    return per_copy;
  }
};

class DeviceSearchTest : public DeviceTest {
 protected:
  // x -> n0 Relu -> n1 Sigmoid -> n2 Relu -> y. Every node runs on the host for 1 ms or on
  // the device for 0.4 ms, except n1 which only the host runs.
  void SetUp() override {
    GraphBuilder gb;
    ValueId v = gb.input("x", DType::kFloat32, {256});
    v = gb.add1("Relu", {v});
    v = gb.add1("Sigmoid", {v});
    v = gb.add1("Relu", {v});
    gb.output(v);
    graph = gb.finish();
    for (NodeId n = 0; n < 3; ++n) {
      candidates.push_back(on_host(n));
      costs.costs[{{n}, &host}] = 1.0;
      if (n == 1) continue;
      candidates.push_back(on_device({n}));
      costs.costs[{{n}, &backend}] = 0.4;
    }
  }
  std::vector<std::string> placed() {
    OpLevelResult r = op_level_search(graph, candidates, costs);
    std::vector<std::string> out;
    for (int c : r.chosen) out.push_back(candidates[c].backend->name());
    cost = r.cost_ms;
    return out;
  }
  Graph graph;
  std::vector<Candidate> candidates;
  DeviceCosts costs;
  double cost = 0;
};

TEST_F(DeviceSearchTest, FreeCopiesLetTheDeviceTakeWhatItCan) {
  costs.per_copy = 0;
  EXPECT_EQ(placed(), (std::vector<std::string>{"test-device", "reference", "test-device"}));
  EXPECT_NEAR(cost, 0.4 + 1.0 + 0.4 + 3 * 0.01, 1e-9);
  // x over, n0's output back, n1's output over, y back.
  EXPECT_GT(costs.copies_priced, 0);
}

TEST_F(DeviceSearchTest, CopiesDearerThanTheGainKeepEverythingOnTheHost) {
  // Each device node saves 0.6 ms but costs two copies (in and out): at 0.35 ms a copy the
  // host is cheaper.
  costs.per_copy = 0.35;
  EXPECT_EQ(placed(), (std::vector<std::string>{"reference", "reference", "reference"}));
  EXPECT_NEAR(cost, 3.0 + 3 * 0.01, 1e-9);
}

TEST_F(DeviceSearchTest, ChargesEachCopyOnce) {
  // At 0.25 a copy: n0 on the device costs 0.4 + 2 copies = 0.9 < 1; the same for n2.
  costs.per_copy = 0.25;
  EXPECT_EQ(placed(), (std::vector<std::string>{"test-device", "reference", "test-device"}));
  EXPECT_NEAR(cost, 0.4 + 1.0 + 0.4 + 4 * 0.25 + 3 * 0.01, 1e-9);
  // predict_copies_ms prices the same four copies for that placement.
  Placement p = {candidates[1], candidates[2], candidates[4]};
  EXPECT_EQ(p[0].backend, &backend);
  EXPECT_EQ(p[2].backend, &backend);
  EXPECT_NEAR(predict_copies_ms(graph, p, costs), 4 * 0.25, 1e-9);
}

TEST_F(DeviceSearchTest, AValueCopiedOnceServesEveryReaderThere) {
  // y = Add(Relu(x), Sigmoid(x)) on the device: x goes over once; one copy back.
  GraphBuilder gb;
  ValueId x = gb.input("x", DType::kFloat32, {64});
  ValueId a = gb.add1("Relu", {x});
  ValueId b = gb.add1("Sigmoid", {x});
  ValueId y = gb.add1("Add", {a, b});
  gb.output(y);
  Graph g = gb.finish();
  Placement p = {on_device({node_of(g, a)}), on_device({node_of(g, b)}),
                 on_device({node_of(g, y)})};
  costs.per_copy = 1;
  EXPECT_NEAR(predict_copies_ms(g, p, costs), 2.0, 1e-9);
  Executor e(g, build_steps(g, p));
  EXPECT_EQ(e.copies().size(), 2u);
  std::vector<Candidate> cands = p;
  for (const Candidate& c : p) {
    costs.costs[{c.nodes, &backend}] = 0.1;
    costs.costs[{c.nodes, &host}] = 10;
    cands.push_back(on_host(c.nodes[0]));
  }
  OpLevelResult r = op_level_search(g, cands, costs);
  EXPECT_NEAR(r.cost_ms, 3 * 0.1 + 3 * 0.01 + 2.0, 1e-9);
}

}  // namespace
}  // namespace collage
