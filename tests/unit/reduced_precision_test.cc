// A backend of reduced-precision float32 math (TF32 tensor cores, COLLAGE_CUDA_TF32=1) is held
// to its own precision by the check against reference (Backend::float32_significand_bits,
// Tolerance::backend_vs_reference), and still fails it when it computes wrong. Without a GPU:
// a host backend that rounds a MatMul's inputs to 11 significand bits as TF32 does.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
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

constexpr int kTf32Bits = 11;

// `x` rounded to `bits` significand bits (to nearest).
float round_to_bits(float x, int bits) {
  int exponent = 0;
  const double mantissa = std::frexp(static_cast<double>(x), &exponent);
  return static_cast<float>(
      std::ldexp(std::nearbyint(std::ldexp(mantissa, bits)), exponent - bits));
}

// out[M,N] = scale * A[M,K] B[K,N], the inputs rounded to `bits` first, sums in float.
void rounded_matmul(const Tensor& a, const Tensor& b, const Tensor& out, int bits, float scale) {
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += round_to_bits(pa[i * k + p], bits) * round_to_bits(pb[p * n + j], bits);
      po[i * n + j] = scale * sum;
    }
}

class RoundedMatMulKernel : public Kernel {
 public:
  explicit RoundedMatMulKernel(float scale) : scale_(scale) {}
  void run(std::span<const Tensor> in, std::span<const Tensor> out) override {
    rounded_matmul(in[0], in[1], out[0], kTf32Bits, scale_);
  }

 private:
  float scale_;
};

// Takes every MatMul, computes it in TF32 (times `scale`: 1 is right) and declares
// `declared_bits` of float32 precision.
class Tf32Backend : public Backend {
 public:
  Tf32Backend(int declared_bits, float scale) : declared_bits_(declared_bits), scale_(scale) {}
  std::string name() const override { return "test-tf32"; }
  std::string version() const override {
    return "bits" + std::to_string(declared_bits_) + "x" + std::to_string(scale_);
  }
  int float32_significand_bits() const override { return declared_bits_; }
  std::vector<PatternEntry> patterns() const override { return {{"matmul", op("MatMul"), {}}}; }
  std::unique_ptr<Kernel> compile(const Graph&, const CompileOptions&) override {
    return std::make_unique<RoundedMatMulKernel>(scale_);
  }

 private:
  int declared_bits_;
  float scale_;
};

Tensor random_matrix(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  Tensor t = Tensor(DType::kFloat32, {rows, cols});
  float* d = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = normal(rng);
  return t;
}

// The tolerance itself: TF32's rounding is outside float32's rule and inside TF32's; a result
// 5 % off is outside both.
TEST(ReducedPrecision, TheToleranceFollowsTheSignificandBits) {
  std::mt19937 rng(7);
  const Tensor a = random_matrix(32, 256, rng), b = random_matrix(256, 32, rng);
  Tensor exact = Tensor(DType::kFloat32, {32, 32});
  Tensor tf32 = Tensor(DType::kFloat32, {32, 32});
  Tensor wrong = Tensor(DType::kFloat32, {32, 32});
  rounded_matmul(a, b, exact, 24, 1.0f);
  rounded_matmul(a, b, tf32, kTf32Bits, 1.0f);
  rounded_matmul(a, b, wrong, kTf32Bits, 1.05f);
  EXPECT_NE(compare_tensors(tf32, exact, Tolerance::backend_vs_reference()), "");
  EXPECT_EQ(compare_tensors(tf32, exact, Tolerance::backend_vs_reference(kTf32Bits)), "");
  EXPECT_NE(compare_tensors(wrong, exact, Tolerance::backend_vs_reference(kTf32Bits)), "");
  // Fewer bits, a wider rule, in both its relative and its scale-free absolute slack.
  const Tolerance float32_rule = Tolerance::backend_vs_reference(24),
                  tf32_rule = Tolerance::backend_vs_reference(kTf32Bits);
  EXPECT_GT(tf32_rule.rtol, float32_rule.rtol);
  EXPECT_GT(tf32_rule.atol_fraction, float32_rule.atol_fraction);
}

// The tuner's check (Measurer): a TF32 kernel that says so gets a cost; the same kernel
// claiming float32 precision, or a wrong one claiming TF32, is refused as a wrong result.
TEST(ReducedPrecision, TheTunersCheckHoldsABackendToTheBitsItDeclares) {
  GraphBuilder builder;
  ValueId a = builder.input("a", DType::kFloat32, {32, 256});
  ValueId b = builder.input("b", DType::kFloat32, {256, 32});
  builder.output(builder.add1("MatMul", {a, b}));
  const Graph g = builder.finish();
  const fs::path dir = fs::temp_directory_path() / ("collage_tf32_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    CostDb db((dir / "costs.db").string());
    Measurer measurer(&db, this_machine(1), MeasureOptions{});
    auto measure = [&](Backend& backend) {
      return measurer.measure(g, Candidate{{0}, &backend, "", 1}).record;
    };
    Tf32Backend honest(kTf32Bits, 1.0f), claims_float32(24, 1.0f), wrong(kTf32Bits, 1.05f);
    const CostRecord ok = measure(honest);
    EXPECT_TRUE(ok.ok) << ok.reason;
    EXPECT_GT(ok.milliseconds, 0.0);
    const CostRecord refused = measure(claims_float32);
    EXPECT_FALSE(refused.ok);
    EXPECT_NE(refused.reason.find("wrong result"), std::string::npos) << refused.reason;
    const CostRecord wrong_result = measure(wrong);
    EXPECT_FALSE(wrong_result.ok);
    EXPECT_NE(wrong_result.reason.find("wrong result"), std::string::npos) << wrong_result.reason;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace collage
