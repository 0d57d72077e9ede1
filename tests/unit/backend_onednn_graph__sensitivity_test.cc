// The tuner's check against reference (Measurer) on a model chaotic in float32: a real
// graph whose outputs move far under a 1e-6 input change, on a real backend whose products
// sum in another order than reference's (util/compare.h, compare_within_sensitivity; the
// rule itself: sensitivity_test.cc).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "collage/backend.h"
#include "graph_builder.h"
#include "plan/hardware.h"
#include "search/cost_db.h"
#include "search/measure.h"
#include "util/compare.h"

namespace collage {
namespace {

namespace fs = std::filesystem;
using testing::GraphBuilder;

// x [1, 1024] -> MatMul [1024, 64] -> Mul(gain) -> Sin -> MatMul [64, 16]: with a large gain,
// the first product's rounding (another summation order moves it by ~1e-7) becomes ~1e-3 of
// a radian in the sines, and so of the output; a 1e-6 input change moves it ~10x that.
Graph sine_of_a_product(float gain) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 1024});
  ValueId h = b.add1("MatMul", {x, b.random_constant("w1", {1024, 64}, 0.1f)});
  h = b.add1("Mul", {h, b.constant("gain", Tensor::from_vector<float>({1}, {gain}))});
  h = b.add1("Sin", {h});
  b.output(b.add1("MatMul", {h, b.random_constant("w2", {64, 16}, 0.2f)}));
  return b.finish();
}

// The tuner's check on a real backend: the chaotic graph's kernel is measured, with a record
// that says it matched within its own sensitivity (without the rule it was refused as a wrong
// result); the same graph at gain 1 matches within the tolerance, with no note.
TEST(Sensitivity, TheTunersCheckMeasuresAChaoticSubgraph) {
  Backend* backend = BackendRegistry::global().find("onednn-graph");
  ASSERT_NE(backend, nullptr);
  const fs::path dir =
      fs::temp_directory_path() / ("collage_sensitivity_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    CostDb db((dir / "costs.db").string());
    Measurer measurer(&db, this_machine(1), MeasureOptions{});
    const Graph chaotic = sine_of_a_product(3e4f), calm = sine_of_a_product(1.0f);
    const Candidate all{{0, 1, 2, 3}, backend, "", 1};
    const CostRecord measured = measurer.measure(chaotic, all).record;
    EXPECT_TRUE(measured.ok) << measured.reason;
    EXPECT_GT(measured.milliseconds, 0.0);
    EXPECT_EQ(measured.reason.rfind(kWithinSensitivity, 0), 0u) << measured.reason;
    const CostRecord plain = measurer.measure(calm, all).record;
    EXPECT_TRUE(plain.ok) << plain.reason;
    EXPECT_EQ(plain.reason, "");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace collage
