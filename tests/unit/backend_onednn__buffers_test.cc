// The onednn Program's rewritten buffers share one arena by their steps' lifetimes
// (Program::finalize): a chain of intermediates needs the memory of what is live at once, the
// results do not change, and a buffer kept from compile time (Pad's border) is never
// overwritten by the shared ones.
#include <gtest/gtest.h>

#include <vector>

#include "backends/onednn/dnnl_common.h"
#include "collage/tensor.h"
#include "onednn_program_steps.h"

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

}  // namespace
}  // namespace collage::onednn
