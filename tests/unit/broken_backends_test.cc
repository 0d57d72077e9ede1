// The checks every backend test relies on, shown to fail when they should: deliberately
// broken backends (never registered, so no other test sees them) whose kernel computes NaN
// or whose compile() breaks must fail the comparison and the strict single-backend placement.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <limits>
#include <optional>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "graph_builder.h"
#include "runtime/partitioner.h"

namespace collage {
namespace {

using testing::GraphBuilder;

// Writes `value` into every output element.
class FillKernel : public Kernel {
 public:
  explicit FillKernel(float value) : value_(value) {}
  void run(std::span<const Tensor>, std::span<const Tensor> out) override {
    for (const Tensor& t : out) {
      float* d = const_cast<float*>(t.data<float>());
      for (int64_t i = 0; i < t.numel(); ++i) d[i] = value_;
    }
  }

 private:
  float value_;
};

// Takes every Relu. Its compile() returns a kernel filling `fill`, or throws `error`.
class BrokenBackend : public Backend {
 public:
  BrokenBackend(float fill, std::optional<ErrorKind> error) : fill_(fill), error_(error) {}
  std::string name() const override { return "test-broken"; }
  std::string version() const override { return "1"; }
  std::vector<PatternEntry> patterns() const override { return {{"relu", op("Relu"), {}}}; }
  std::unique_ptr<Kernel> compile(const Graph&, const CompileOptions&) override {
    if (error_) fail(*error_, "test-broken: compile() fails");
    return std::make_unique<FillKernel>(fill_);
  }

 private:
  float fill_;
  std::optional<ErrorKind> error_;
};

Graph relu_graph() {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {4, 8});
  b.output(b.add1("Relu", {x}));
  return b.finish();
}

// The helper every backend test compares with: a kernel computing only NaN (or inf) must
// fail it. (The tests' earlier tolerance_ratio took max(worst, NaN ratio) and kept `worst`:
// an all-NaN kernel passed every backend test.)
TEST(BrokenBackends, NanOrInfOutputsFailTheComparison) {
  const Graph g = relu_graph();
  for (float fill :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity()}) {
    BrokenBackend backend(fill, std::nullopt);
    EXPECT_FALSE(testing::backend_matches_reference(backend, g)) << fill;
    EXPECT_NONFATAL_FAILURE(testing::expect_like_reference(backend, g, "filled"), "differ");
  }
  // A right answer still passes (the comparison is not failing everything).
  BrokenBackend zeros(0.0f, std::nullopt);
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {4, 8});
  b.output(b.add1("Mul", {x, b.constant("zero", Tensor::scalar<float>(0.0f))}));
  EXPECT_TRUE(testing::backend_matches_reference(zeros, b.graph()));
}

// A strict single-backend placement (the per-backend conformance and models tests, `collage
// run --backend --strict`) fails on a compile error that is not an honest refusal; the
// non-strict one (what a user of that backend alone gets) runs those nodes on the fallback.
TEST(BrokenBackends, StrictPlacementFailsOnABrokenCompile) {
  const Graph g = relu_graph();
  for (ErrorKind kind : {ErrorKind::kInternal, ErrorKind::kBackend}) {
    BrokenBackend backend(0.0f, kind);
    try {
      place_on_single_backend(g, backend, 1, nullptr, nullptr, /*strict=*/true);
      ADD_FAILURE() << "a broken compile (" << error_kind_name(kind) << ") was not reported";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_NE(std::string(e.what()).find("test-broken: compile() fails"), std::string::npos)
          << e.what();
    }
    std::vector<std::string> log;
    EXPECT_TRUE(place_on_single_backend(g, backend, 1, &log).empty());
    EXPECT_EQ(log.size(), 1u);
  }
  // kUnsupported is an honest refusal: strict or not, the node runs on the fallback.
  BrokenBackend refusing(0.0f, ErrorKind::kUnsupported);
  EXPECT_TRUE(place_on_single_backend(g, refusing, 1, nullptr, nullptr, true).empty());
}

// What the per-backend tests count: nodes the patterns match against nodes placed.
TEST(BrokenBackends, CoverageCountsMatchedAndPlacedNodes) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {4, 8});
  ValueId r = b.add1("Relu", {x});
  b.output(b.add1("Relu", {b.add1("Neg", {r})}));
  const Graph g = b.finish();
  BrokenBackend backend(0.0f, std::nullopt);
  Placement placed = place_on_single_backend(g, backend, 1);
  EXPECT_EQ(placed.size(), 2u);
  std::vector<std::string> node_backends(g.num_nodes(), "reference");
  for (const Candidate& c : placed)
    for (NodeId n : c.nodes) node_backends[n] = backend.name();
  BackendCoverage coverage = backend_coverage(g, backend, node_backends);
  EXPECT_EQ(coverage.matched, 2u);
  EXPECT_EQ(coverage.placed, 2u);
  BrokenBackend refusing(0.0f, ErrorKind::kUnsupported);
  EXPECT_EQ(backend_coverage(g, refusing, std::vector<std::string>(3, "reference")).placed, 0u);
}

}  // namespace
}  // namespace collage
