// The check against reference for models chaotic in float32 (util/compare.h,
// compare_within_sensitivity): an output that misses the tolerance matches where it differs by
// at most kSensitivityAllowance times as much as the reference's own output moves under a
// kSensitivityInputChange change of the inputs. The rule itself, on tensors made to measure
// (the tuner's check on a real chaotic graph: backend_onednn_graph__sensitivity_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "util/compare.h"

namespace collage {
namespace {

// A [256] tensor of values in [-1, 1] (scale 1), and one like it moved by `fraction` of that
// scale at every element (alternating signs).
Tensor values() {
  Tensor t(DType::kFloat32, {256});
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::sin(0.37f * i);
  t.data<float>()[3] = 1.0f;
  return t;
}
Tensor moved_by(const Tensor& t, double fraction) {
  Tensor out = t.clone();
  for (int64_t i = 0; i < out.numel(); ++i)
    out.data<float>()[i] += static_cast<float>((i % 2 ? fraction : -fraction));
  return out;
}

TEST(Sensitivity, AnOutputMatchesWithinItsOwnMovementAndNoFurther) {
  const Tolerance tol = Tolerance::backend_vs_reference();
  const Tensor expected = values();
  const std::vector<Tensor> want = {expected}, moved = {moved_by(expected, 0.05)};
  EXPECT_NEAR(scaled_difference(moved[0], expected), 0.05, 1e-6);

  // 0.1 of the scale: outside the tolerance, within 4x the 0.05 the reference moves.
  const std::vector<Tensor> near = {moved_by(expected, 0.1)};
  ASSERT_NE(compare_outputs(near, want, tol), "");
  SensitivityCheck check = compare_within_sensitivity(near, want, moved, tol);
  EXPECT_EQ(check.mismatch, "");
  EXPECT_NE(check.note.find("output 0 differs by 0.1"), std::string::npos) << check.note;

  // 0.3: over 4x 0.05. The mismatch says how far the reference moved.
  check = compare_within_sensitivity({moved_by(expected, 0.3)}, want, moved, tol);
  EXPECT_NE(check.mismatch, "");
  EXPECT_NE(check.mismatch.find("0.05"), std::string::npos) << check.mismatch;
  EXPECT_EQ(check.note, "");

  // A well-conditioned computation (the reference does not move): the tolerance alone.
  check = compare_within_sensitivity(near, want, want, tol);
  EXPECT_NE(check.mismatch, "");
  check = compare_within_sensitivity({moved_by(expected, 1e-6)}, want, want, tol);
  EXPECT_EQ(check.mismatch, "");
  EXPECT_EQ(check.note, "");

  // NaN never matches a number, however chaotic the model.
  Tensor nan = expected.clone();
  nan.data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(scaled_difference(nan, expected), std::numeric_limits<double>::infinity());
  EXPECT_NE(compare_within_sensitivity({nan}, want, moved, tol).mismatch, "");
  // Another shape, or another count of outputs, never matches either.
  EXPECT_NE(compare_within_sensitivity({Tensor(DType::kFloat32, {255})}, want, moved, tol).mismatch,
            "");
  EXPECT_NE(compare_within_sensitivity({}, want, moved, tol).mismatch, "");
}

// The tuner's and `run --verify`'s form: the expected computation runs once more, on the
// scaled inputs, only where the outputs miss the tolerance.
TEST(Sensitivity, TheExpectedComputationRunsAgainOnlyOnAMiss) {
  const Tolerance tol = Tolerance::backend_vs_reference();
  const Tensor expected = values();
  const std::vector<Tensor> inputs = {expected}, want = {expected};
  int runs = 0;
  std::vector<Tensor> moved;
  const ExpectedRun moves_by_0_05 =
      [&](const std::vector<Tensor>& scaled) -> const std::vector<Tensor>& {
    ++runs;
    EXPECT_NEAR(scaled_difference(scaled[0], inputs[0]), kSensitivityInputChange, 1e-7);
    return moved = {moved_by(expected, 0.05)};
  };
  EXPECT_EQ(compare_allowing_sensitivity(want, want, inputs, moves_by_0_05, tol).mismatch, "");
  EXPECT_EQ(runs, 0);
  const SensitivityCheck check =
      compare_allowing_sensitivity({moved_by(expected, 0.1)}, want, inputs, moves_by_0_05, tol);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(check.mismatch, "");
  EXPECT_NE(check.note, "");
}

TEST(Sensitivity, ScaledInputsChangeFloatsOnly) {
  const Tensor f = values();
  const Tensor ids = Tensor::from_vector<int64_t>({4}, {1, 2, 3, 4});
  const std::vector<Tensor> scaled = scaled_inputs({f, ids}, 1e-3);
  ASSERT_EQ(scaled.size(), 2u);
  EXPECT_NEAR(scaled_difference(scaled[0], f), 1e-3, 1e-6);
  EXPECT_EQ(scaled[1].to_int_vector(), ids.to_int_vector());
  // The inputs themselves are not touched.
  EXPECT_EQ(f.data<float>()[3], 1.0f);
}

}  // namespace
}  // namespace collage
