// What the GPU backends' tests share: skipping (reported by ctest as skipped, never as passed)
// where no device is usable, and running a graph through a Session on one GPU backend (its
// kernels on device memory, the copies the runtime makes around them) against reference.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"

// Skips the current test, with the backend's reason, when `name` has no device here. A
// backend that is not registered at all fails: its folder built the test, so it must be.
#define COLLAGE_SKIP_WITHOUT_GPU(name)                                                    \
  do {                                                                                    \
    ::collage::Backend* gpu_backend_ = ::collage::BackendRegistry::global().find(name);   \
    if (!gpu_backend_) FAIL() << (name) << " is not registered";                          \
    if (!gpu_backend_->available())                                                       \
      GTEST_SKIP() << (name) << " not available: " << gpu_backend_->unavailable_reason(); \
  } while (0)

namespace collage::testing {

// Runs `g` on `backend` alone (what it cannot take on reference) and on reference, on the same
// inputs. Every node must have run on `backend` (a silent fallback fails the test), and the
// outputs must agree within rtol/atol (util/compare.h, as every backend test).
inline void expect_gpu_like_reference(const std::string& backend, const Graph& g,
                                      const std::string& what, double rtol = 1e-3,
                                      double atol = 1e-4, uint64_t seed = 3) {
  SCOPED_TRACE(backend + ": " + what);
  SessionOptions options;
  options.backend = backend;
  Session on_gpu(g, options);
  std::vector<std::string> placed = on_gpu.node_backends();
  for (size_t n = 0; n < placed.size(); ++n)
    EXPECT_EQ(placed[n], backend) << "node " << g.node(static_cast<NodeId>(n)).name << " ("
                                  << g.node(static_cast<NodeId>(n)).op_type << ")";
  std::vector<Tensor> inputs = random_inputs(g, seed);
  std::vector<Tensor> got = on_gpu.run(inputs);
  Session reference(g, SessionOptions{});
  std::vector<Tensor> want = reference.run(inputs);
  for (const Tensor& t : got)
    for (int64_t i = 0; i < t.numel(); ++i)
      ASSERT_TRUE(std::isfinite(t.get_as_double(i))) << "non-finite output";
  EXPECT_TRUE(outputs_match(got, want, Tolerance{rtol, atol}));
}

}  // namespace collage::testing
