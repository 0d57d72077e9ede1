// The onednn Program's rewritten buffers share one arena by their steps' lifetimes
// (Program::finalize): a chain of intermediates needs the memory of what is live at once, the
// results do not change, and a buffer kept from compile time (Pad's border) is never
// overwritten by the shared ones. A kernel whose residual is copied into its output offers
// that output the residual's buffer (Kernel::in_place) and then copies nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backends/onednn/dnnl_common.h"
#include "collage/tensor.h"
#include "graph_builder.h"
#include "onednn_program_steps.h"
#include "onednn_test_util.h"
#include "runtime/executor.h"
#include "runtime/partitioner.h"

namespace collage::onednn {
namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

using program_steps::add_linear;
using program_steps::add_sum;

TEST(OnednnProgram, AChainOfIntermediatesSharesThreeBuffersAndComputesTheSame) {
  constexpr int kSteps = 12, kElems = 4096;
  const dnnl::memory::desc md({kElems}, dt::f32, tag::a);
  Program p;
  dnnl::memory x = p.input(0, md);
  // `first` is read again by the last step: live throughout, it must share with nothing.
  dnnl::memory first = p.rewritten_buffer(md);
  add_linear(p, x, first, 1.0f, 1.0f);
  dnnl::memory prev = first;
  for (int i = 0; i < kSteps; ++i) {
    dnnl::memory next = p.rewritten_buffer(md);
    add_linear(p, prev, next, 1.0f, 1.0f);  // +1 per step
    prev = next;
  }
  dnnl::memory y = p.output(0, md);
  add_sum(p, prev, first, y);
  p.finalize();
  EXPECT_EQ(p.rewritten_bytes(), size_t{kSteps + 1} * kElems * sizeof(float));
  // `first`, and a step's input and output: three live at once, not thirteen.
  EXPECT_EQ(p.arena_bytes(), size_t{3} * kElems * sizeof(float));

  Tensor in = Tensor::from_vector<float>({kElems}, std::vector<float>(kElems, 0.5f));
  Tensor out(DType::kFloat32, {kElems});
  for (int run = 0; run < 3; ++run) {  // the shared memory holds nothing from run to run
    p.run(std::span<const Tensor>(&in, 1), std::span<const Tensor>(&out, 1));
    const float* o = out.data<float>();
    for (int i = 0; i < kElems; ++i) ASSERT_EQ(o[i], (1.5f + kSteps) + 1.5f) << i;
  }
}

TEST(OnednnProgram, AKeptBufferIsNeverSharedWithRewrittenOnes) {
  constexpr int kElems = 1024;
  const dnnl::memory::desc md({kElems}, dt::f32, tag::a);
  Program p;
  dnnl::memory x = p.input(0, md);
  // Filled at compile time and only read by the last step, as Pad's border is.
  dnnl::memory kept = p.buffer(md);
  std::vector<float> sevens(kElems, 7.0f);
  std::copy(sevens.begin(), sevens.end(), static_cast<float*>(kept.get_data_handle()));
  dnnl::memory a = p.rewritten_buffer(md), b = p.rewritten_buffer(md), c = p.rewritten_buffer(md);
  add_linear(p, x, a, 1.0f, 1.0f);
  add_linear(p, a, b, 1.0f, 1.0f);
  add_linear(p, b, c, 1.0f, 1.0f);
  dnnl::memory y = p.output(0, md);
  add_sum(p, c, kept, y);
  p.finalize();
  EXPECT_LT(p.arena_bytes(), p.rewritten_bytes());

  Tensor in = Tensor::from_vector<float>({kElems}, std::vector<float>(kElems, 1.0f));
  Tensor out(DType::kFloat32, {kElems});
  for (int run = 0; run < 2; ++run) {
    p.run(std::span<const Tensor>(&in, 1), std::span<const Tensor>(&out, 1));
    for (int i = 0; i < kElems; ++i) ASSERT_EQ(out.data<float>()[i], 1.0f + 3.0f + 7.0f) << i;
  }
}

Backend& onednn_backend() {
  return BackendRegistry::global().get("onednn");
}

// Runs `kernel` and counts the reorders oneDNN executed (its verbose lines): the residual's
// copy into the output is one. Also checks that the matmul was seen, so that a build
// without verbose output fails here instead of passing.
int reorders_run(Kernel& kernel, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  ::testing::internal::CaptureStdout();
  dnnl_set_verbose(1);
  kernel.run(inputs, outputs);
  dnnl_set_verbose(0);
  const std::string log = ::testing::internal::GetCapturedStdout();
  int reorders = 0, matmuls = 0;
  for (size_t at = log.find(",exec,"); at != std::string::npos; at = log.find(",exec,", at + 1)) {
    const std::string line = log.substr(at, log.find('\n', at) - at);
    reorders += line.find(",reorder,") != std::string::npos;
    matmuls += line.find(",matmul,") != std::string::npos;
  }
  EXPECT_EQ(matmuls, 1) << log;
  return reorders;
}

// ViT's fc2 (MatMul, bias, residual Add) as one kernel: the residual is a sum post-op, copied
// into the output first. Its output may take the residual's buffer, and then the result is
// the same without the copy.
TEST(OnednnInPlace, AResidualSummedIntoTheOutputMayShareItsBuffer) {
  testing::GraphBuilder b;
  ValueId h = b.input("h", DType::kFloat32, {1, 24, 64});
  ValueId r = b.input("r", DType::kFloat32, {1, 24, 32});
  ValueId y = b.add1("MatMul", {h, b.random_constant("w", {64, 32})});
  y = b.add1("Add", {y, b.random_constant("bias", {32})});
  b.output(b.add1("Add", {y, r}));
  const Graph g = b.finish();
  std::unique_ptr<Kernel> kernel = onednn_backend().compile(g, testing::test_options());
  testing::expect_no_reference_primitive(*kernel, "MatMul + bias + residual");
  EXPECT_EQ(kernel->in_place(), (std::vector<InPlace>{{0, input_index(g, r)}}));

  const std::vector<Tensor> inputs = random_inputs(g, 5);
  const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
  auto no_nan = [](const Tensor& t) {
    for (float v : t.span<float>())
      if (std::isnan(v)) return false;
    return true;
  };
  for (int repeat = 0; repeat < 2; ++repeat) {
    SCOPED_TRACE(repeat);
    // Buffers of their own: the residual is copied into the output.
    Tensor apart(DType::kFloat32, {1, 24, 32});
    EXPECT_EQ(reorders_run(*kernel, inputs, std::span<const Tensor>(&apart, 1)), 1);
    EXPECT_TRUE(testing::outputs_match({apart}, want)) << "separate buffers";
    EXPECT_TRUE(no_nan(apart));
    // One buffer holding the residual, as the runtime gives it: nothing to copy.
    Tensor shared = inputs[1].clone();
    const std::vector<Tensor> shared_inputs = {inputs[0], shared};
    EXPECT_EQ(reorders_run(*kernel, shared_inputs, std::span<const Tensor>(&shared, 1)), 0);
    EXPECT_TRUE(testing::outputs_match({shared}, want)) << "output over the residual";
    EXPECT_TRUE(no_nan(shared));
  }
}

// The residual is also the MatMul's A: writing the output over it would change A while the
// product reads it, so the kernel offers nothing.
TEST(OnednnInPlace, AResidualTheKernelAlsoReadsIsNotOffered) {
  testing::GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {24, 32});
  ValueId y = b.add1("MatMul", {x, b.random_constant("w", {32, 32})});
  b.output(b.add1("Add", {y, x}));
  const Graph g = b.finish();
  std::unique_ptr<Kernel> kernel = onednn_backend().compile(g, testing::test_options());
  EXPECT_TRUE(kernel->in_place().empty());
  testing::expect_like_reference(onednn_backend(), g, "MatMul + its own input");
}

// A transformer's FFN on onednn alone, run by the executor: the residual stream `r` dies at
// the second MatMul's kernel, which sums it, so that kernel writes its output over r's buffer,
// and the run computes what reference does.
TEST(OnednnInPlace, TheExecutorGivesAResidualKernelItsResidualsBuffer) {
  testing::GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 24, 32});
  ValueId r = b.add1("Relu", {x});
  ValueId h = b.add1("MatMul", {r, b.random_constant("w1", {32, 64})});
  h = b.add1("Relu", {b.add1("Add", {h, b.random_constant("b1", {64})})});
  ValueId y = b.add1("MatMul", {h, b.random_constant("w2", {64, 32})});
  y = b.add1("Add", {b.add1("Add", {y, b.random_constant("b2", {32})}), r});
  // Two readers: y is no kernel's fused tail and no graph output.
  b.output(b.add1("Relu", {y}));
  b.output(b.add1("Sigmoid", {y}));
  const Graph g = b.finish();
  Executor e(g, build_steps(g, place_on_single_backend(g, onednn_backend(), 1, nullptr, nullptr,
                                                       /*strict=*/true)));
  int shared = 0;
  for (size_t s = 0; s < e.steps().size(); ++s)
    for (const InPlace& pair : e.steps()[s].kernel->in_place()) {
      EXPECT_EQ(e.step_output_views(s)[pair.output].raw(), e.step_input_views(s)[pair.input].raw())
          << "step " << s;
      ++shared;
    }
  EXPECT_EQ(shared, 1);
  const std::vector<Tensor> inputs = random_inputs(g, 5);
  const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
  for (int repeat = 0; repeat < 2; ++repeat)
    EXPECT_TRUE(testing::outputs_match(e.run(inputs), want)) << "run " << repeat;
}

}  // namespace
}  // namespace collage::onednn
