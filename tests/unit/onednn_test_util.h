// Checks shared by the oneDNN backends' tests: a kernel they compile runs oneDNN's optimized
// primitives, never its reference loops (which compute the same numbers, so a comparison
// with the reference backend alone would not notice a slow path); and the lanes setting of
// one test.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/region_kernel.h"
#include "collage/backend.h"
#include "graph_builder.h"
#include "runtime/threads.h"

namespace collage::testing {

// The two oneDNN backends, as the registry holds them.
inline Backend& onednn() {
  return BackendRegistry::global().get("onednn");
}
inline Backend& onednn_graph() {
  return BackendRegistry::global().get("onednn-graph");
}

// `kernel` is a oneDNN program of at least `min_primitives` primitives, none of them a
// reference implementation.
inline void expect_no_reference_primitive(const Kernel& kernel, const std::string& what,
                                          size_t min_primitives = 1) {
  const auto* program = dynamic_cast<const onednn::ProgramKernel*>(&kernel);
  ASSERT_NE(program, nullptr) << what << ": not a oneDNN program";
  const std::vector<std::string> impls = program->program().implementations();
  EXPECT_GE(impls.size(), min_primitives) << what;
  for (const std::string& impl : impls)
    EXPECT_FALSE(onednn::is_reference_impl(impl))
        << what << ": " << impl << " of " << ::testing::PrintToString(impls);
}

// The kernel `backend` compiles for the whole of `g` computes what the reference backend
// does, with no reference primitive.
inline void expect_fast_and_like_reference(Backend& backend, const Graph& g,
                                           const std::string& what) {
  expect_like_reference(backend, g, what);
  std::unique_ptr<Kernel> kernel = backend.compile(g, test_options());
  expect_no_reference_primitive(*kernel, what);
}

// The steps of a compiled oneDNN program: their kinds and implementations, and how many
// concurrent stages it runs.
struct ProgramSteps {
  std::vector<dnnl::primitive::kind> kinds;
  std::vector<std::string> implementations;
  int concurrent_stages = 0;
  std::ptrdiff_t count(dnnl::primitive::kind kind) const {
    return std::count(kinds.begin(), kinds.end(), kind);
  }
  std::ptrdiff_t count(const std::string& implementation) const {
    return std::count(implementations.begin(), implementations.end(), implementation);
  }
};
inline ProgramSteps steps_of(const Kernel& kernel) {
  const auto* program = dynamic_cast<const onednn::ProgramKernel*>(&kernel);
  if (!program) {
    ADD_FAILURE() << "an onednn kernel is a program";
    return {};
  }
  return {program->program().step_kinds(), program->program().implementations(),
          program->program().concurrent_stages()};
}
// `g` compiled whole on onednn-graph as `variant` and on reference, run on random inputs
// (`seed`), like reference; returns its program's steps.
inline ProgramSteps variant_steps_like_reference(const Graph& g, const std::string& variant,
                                                 const std::string& what, uint64_t seed) {
  CompileOptions options = test_options(2);
  options.variant = variant;
  auto [got, want] = run_backend_and_reference(onednn_graph(), g, random_inputs(g, seed), options);
  EXPECT_TRUE(outputs_match(got, want)) << what << ", variant '" << variant << "'";
  return steps_of(*onednn_graph().compile(g, options));
}

// The tails the conv steps' tests put after a conv (depthwise_conv2d.h takes all but kTanh),
// as PyTorch exports them.
enum class ConvTail {
  kNone,
  kRelu,
  kClip,
  kReluThenClip,
  kClipThenRelu,
  kLeakyRelu,
  kSilu,
  kHardSwish,
  kTanh
};
inline ValueId add_conv_tail(GraphBuilder& b, ValueId y, ConvTail tail) {
  auto clip = [&](ValueId v, float lo, float hi) {
    return b.add1("Clip", {v, b.constant(fmt::format("lo{}", v), Tensor::scalar<float>(lo)),
                           b.constant(fmt::format("hi{}", v), Tensor::scalar<float>(hi))});
  };
  switch (tail) {
    case ConvTail::kNone:
      return y;
    case ConvTail::kRelu:
      return b.add1("Relu", {y});
    case ConvTail::kClip:
      return clip(y, 0.0f, 6.0f);
    case ConvTail::kReluThenClip:
      return clip(b.add1("Relu", {y}), -1.0f, 0.75f);
    case ConvTail::kClipThenRelu:
      return b.add1("Relu", {clip(y, -0.5f, 1.5f)});
    case ConvTail::kLeakyRelu:
      return b.add1("LeakyRelu", {y}, {{"alpha", attr_f(0.1f)}});
    case ConvTail::kSilu:
      return b.add1("Mul", {y, b.add1("Sigmoid", {y})});
    case ConvTail::kHardSwish:  // opset 13's nn.Hardswish
      return b.add1("Mul", {y, b.add1("HardSigmoid", {y},
                                      {{"alpha", attr_f(1.0f / 6)}, {"beta", attr_f(0.5f)}})});
    case ConvTail::kTanh:
      return b.add1("Tanh", {y});
  }
  return y;
}

// The thread count and COLLAGE_ONEDNN_LANES for one test, restored after it.
class WithLanes {
 public:
  // nullptr: unset (the default, kMeasured).
  explicit WithLanes(const char* mode) {
    use_threads_on_this_thread(2);
    if (const char* v = std::getenv("COLLAGE_ONEDNN_LANES")) saved_ = v;
    if (mode)
      setenv("COLLAGE_ONEDNN_LANES", mode, 1);
    else
      unsetenv("COLLAGE_ONEDNN_LANES");
  }
  ~WithLanes() {
    if (saved_.empty())
      unsetenv("COLLAGE_ONEDNN_LANES");
    else
      setenv("COLLAGE_ONEDNN_LANES", saved_.c_str(), 1);
  }

 private:
  std::string saved_;
};

// `kernel` run on `inputs` by the first thread of an OpenMP team of two, as a lane runs its
// steps (a team of one would be an inactive region, where the step starts its own team).
inline std::vector<Tensor> run_in_a_lane(Kernel& kernel, const Graph& g,
                                         const std::vector<Tensor>& inputs) {
  std::vector<Tensor> got;
  for (ValueId v : g.outputs) got.emplace_back(g.value(v).dtype, g.value(v).shape);
  std::string error;
#pragma omp parallel num_threads(2)
  if (omp_get_thread_num() == 0) {
    try {
      kernel.run(inputs, got);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  EXPECT_EQ(error, "");
  return got;
}

}  // namespace collage::testing
