// How the executor hands graph inputs to the steps (executor.h): a 64-byte aligned input of
// 1 MiB or more is read where the caller holds it (no copy per run); an unaligned or smaller
// one is copied into the arena first, and so is an input that is also a graph output (its
// output view outlives the run). Whichever way, the outputs are the reference's run after run, when
// the caller changes the data or the buffer between runs, and no step writes the caller's input.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "runtime/executor.h"
#include "runtime/partitioner.h"
#include "util/compare.h"

namespace collage {
namespace {

using testing::GraphBuilder;

// x -> Relu -> Add(., x) -> Sigmoid, and x itself an output when `x_out`; the Relu and the
// Add on onednn, the Sigmoid on the fallback, so x is read by kernels of two backends.
struct Model {
  Graph graph;
  Placement placement;
};
Model model(bool x_out, int64_t columns) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {4, columns});
  ValueId r = b.add1("Relu", {x});
  ValueId a = b.add1("Add", {r, x});
  b.output(b.add1("Sigmoid", {a}));
  if (x_out) b.output(x);
  Model m{b.finish(), {}};
  Backend* onednn = BackendRegistry::global().find("onednn");
  Backend* fallback = &BackendRegistry::global().fallback();
  m.placement = {Candidate{{0}, onednn, "", 1}, Candidate{{1}, onednn, "", 1},
                 Candidate{{2}, fallback, "", 1}};
  return m;
}

// A float32 tensor like `values` over storage 64-byte aligned plus `offset` bytes.
struct Buffer {
  std::shared_ptr<std::byte[]> storage;
  Tensor tensor;
};
Buffer buffer(size_t offset, const Tensor& values) {
  Buffer b;
  b.storage = std::shared_ptr<std::byte[]>(
      static_cast<std::byte*>(std::aligned_alloc(64, values.nbytes() + 64)), std::free);
  b.tensor = Tensor::view(DType::kFloat32, values.shape(), b.storage.get() + offset);
  std::memcpy(b.tensor.raw(), values.raw(), values.nbytes());
  return b;
}

// Whether some step reads graph input 0 at `data`.
bool a_step_reads_at(const Executor& e, const void* data) {
  for (size_t s = 0; s < e.steps().size(); ++s)
    for (const Tensor& t : e.step_input_views(s))
      if (t.defined() && t.raw() == data) return true;
  return false;
}

TEST(ExecutorInputs, AlignedInputsAreReadInPlaceUnalignedOnesCopied) {
  for (int64_t columns : {int64_t{65536}, int64_t{64}})  // 1 MiB, 1 KiB
    for (bool x_out : {false, true}) {
      SCOPED_TRACE(fmt::format("[4, {}], {}", columns, x_out ? "also an output" : "an input only"));
      Model m = model(x_out, columns);
      Executor e(m.graph, build_steps(m.graph, m.placement, nullptr));
      Session reference(m.graph, SessionOptions{});
      for (uint64_t seed = 1; seed <= 4; ++seed) {
        const Tensor values = random_inputs(m.graph, seed)[0];
        const size_t offset = seed % 2 ? 0 : 4;  // aligned, then 4 bytes off, then aligned...
        Buffer in = buffer(offset, values);
        const std::vector<Tensor> got = e.run({in.tensor});
        const bool in_place = offset == 0 && !x_out && columns == 65536;
        EXPECT_EQ(a_step_reads_at(e, in.tensor.raw()), in_place) << "seed " << seed;
        std::vector<Tensor> got_copy;
        for (const Tensor& t : got) got_copy.push_back(t.clone());
        // The caller's input is unchanged, and may change once the run returned: the outputs
        // (x's too, when it is one) stay what the run computed.
        EXPECT_EQ(std::memcmp(in.tensor.raw(), values.raw(), values.nbytes()), 0);
        std::memset(in.tensor.raw(), 0, values.nbytes());
        EXPECT_EQ(compare_outputs(got, got_copy, Tolerance{0, 0, 0}), "") << "seed " << seed;
        EXPECT_EQ(
            compare_outputs(got_copy, reference.run({values}), Tolerance::backend_vs_reference()),
            "")
            << "seed " << seed;
      }
    }
}

// A 1 MiB input read in place by every backend's kernels (a conv, its activation, and a
// residual Add reading the input again): the outputs are the reference's, and no kernel
// wrote the caller's input (expect_session_like_reference checks both).
TEST(ExecutorInputs, EveryBackendLeavesALargeInputAsItWas) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 128, 128});
  ValueId y = b.add1("Relu", {testing::conv3x3(b, x, 16, "c")});
  b.output(b.add1("Add", {y, x}));
  const Graph g = b.finish();
  const std::vector<Tensor> inputs = random_inputs(g, 5);
  const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
  for (Backend* backend : BackendRegistry::global().all()) {
    if (backend->device()) continue;  // a device copies its inputs over
    testing::expect_session_like_reference(backend->name(), g, 2, inputs, want, "1 MiB input");
  }
}

}  // namespace
}  // namespace collage
