// Denormals flushed to zero while collage runs kernels (runtime/threads.h): on the calling
// thread for the scope, restored after; on the OpenMP team's workers; and in a session's
// run, whose kernels then never see a denormal operand.
#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <vector>

#include "collage/session.h"
#include "graph_builder.h"
#include "runtime/threads.h"

namespace collage {
namespace {

// A product whose exact value is a denormal; `volatile` keeps the compiler from folding it.
float tiny_product() {
  volatile float a = FLT_MIN, b = 0.5f;
  return a * b;
}

TEST(Denormals, FlushedOnTheCallingThreadForTheScopeOnly) {
#if defined(__SSE__)
  ASSERT_NE(tiny_product(), 0.0f);  // IEEE by default: FLT_MIN / 2 is a denormal
  {
    DenormalsFlushed flushed;
    EXPECT_EQ(tiny_product(), 0.0f);
  }
  EXPECT_NE(tiny_product(), 0.0f);  // the caller's mode is back
#else
  GTEST_SKIP() << "no SSE control register on this architecture";
#endif
}

TEST(Denormals, FlushedOnTheOpenMpTeamsWorkers) {
#if defined(__SSE__)
  flush_denormals_on_openmp_team(2);
  std::vector<float> seen(2, -1.0f);
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    if (t > 0) seen[t] = tiny_product();
  }
  EXPECT_EQ(seen[1], 0.0f);
#else
  GTEST_SKIP() << "no SSE control register on this architecture";
#endif
}

TEST(Denormals, ASessionRunFlushesThem) {
#if defined(__SSE__)
  // x * 0.5 on the reference backend, x = FLT_MIN: a denormal result unless flushed.
  testing::GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {4});
  b.output(b.add1("Mul", {x, b.constant("half", Tensor::scalar(0.5f))}));
  Session session(b.graph(), SessionOptions{});
  const std::vector<Tensor> out =
      session.run({Tensor::from_vector<float>({4}, std::vector<float>(4, FLT_MIN))});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[0].data<float>()[i], 0.0f) << i;
  EXPECT_NE(tiny_product(), 0.0f);  // and leaves the caller's thread as it was
#else
  GTEST_SKIP() << "no SSE control register on this architecture";
#endif
}

}  // namespace
}  // namespace collage
