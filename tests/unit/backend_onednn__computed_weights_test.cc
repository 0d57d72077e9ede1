// Convolutions whose weights are computed in the model (a StyleGAN2 modulated conv scales its
// weights per sample, a dynamic conv mixes them; here they are graph inputs): the onednn
// backends run them as oneDNN's convolution and deconvolution primitives, the weights
// reordered into the primitive's layout by a step each run (conv_kernel.cc). On randomized
// 1-3-D shapes, groups, strides and pads, with a constant bias and a Relu after: like the
// reference backend, nothing left to the fallback, no reference primitive, and no Winograd
// variant offered for them (its transforms need the weights at compile time).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::attr_ints;
using testing::GraphBuilder;
using testing::onednn;
using testing::onednn_graph;
using testing::pick;

struct ComputedWeightsConv {
  bool transposed = false;
  int64_t spatial = 2, group = 1, cin = 8, cout = 8, kernel = 3, stride = 1, pad = 1, size = 9;
  std::string text() const {
    return fmt::format("{} {}-D group {} {}->{} k{} s{} p{} size {}",
                       transposed ? "ConvTranspose" : "Conv", spatial, group, cin, cout, kernel,
                       stride, pad, size);
  }
};

// x [1, cin, size...] and the weights are graph inputs; Conv(x, w, constant bias), Relu.
Graph computed_weights_graph(const ComputedWeightsConv& c) {
  GraphBuilder b;
  Shape xs = {1, c.cin}, ws;
  for (int64_t d = 0; d < c.spatial; ++d) xs.push_back(c.size);
  // Conv weights [cout, cin / group, k...]; ConvTranspose's [cin, cout / group, k...].
  ws = c.transposed ? Shape{c.cin, c.cout / c.group} : Shape{c.cout, c.cin / c.group};
  for (int64_t d = 0; d < c.spatial; ++d) ws.push_back(c.kernel);
  const std::vector<int64_t> k(c.spatial, c.kernel), s(c.spatial, c.stride),
      p(2 * c.spatial, c.pad);
  const ValueId y = b.add1(c.transposed ? "ConvTranspose" : "Conv",
                           {b.input("x", DType::kFloat32, xs), b.input("w", DType::kFloat32, ws),
                            b.random_constant("b", {c.cout})},
                           {{"group", attr_i(c.group)},
                            {"kernel_shape", attr_ints(k)},
                            {"strides", attr_ints(s)},
                            {"pads", attr_ints(p)}});
  b.output(b.add1("Relu", {y}));
  return b.finish();
}

TEST(OnednnComputedWeights, ConvsWithComputedWeightsRunAsPrimitivesLikeReference) {
  std::mt19937 rng(41);
  for (int trial = 0; trial < testing::random_graph_count(16); ++trial) {
    ComputedWeightsConv c;
    c.transposed = trial % 4 == 3;
    c.spatial = c.transposed ? 2 : pick(rng, 1, 3);
    c.group = pick(rng, 1, 3);
    c.cin = c.group * pick(rng, 1, 12);
    c.cout = c.group * pick(rng, 1, 12);
    c.kernel = pick(rng, 1, 3);
    c.stride = pick(rng, 1, 2);
    c.pad = pick(rng, 0, c.kernel - 1);
    c.size = pick(rng, c.kernel, c.spatial == 3 ? 7 : 14);
    SCOPED_TRACE(c.text());
    const Graph g = computed_weights_graph(c);
    const std::vector<Tensor> inputs = random_inputs(g, static_cast<uint64_t>(trial));
    const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
    for (const char* backend : {"onednn", "onednn-graph"})
      EXPECT_TRUE(
          testing::expect_session_like_reference(backend, g, 2, inputs, want, c.text()).empty())
          << backend;
    testing::expect_no_reference_primitive(*onednn_graph().compile(g, testing::test_options()),
                                           c.text());
    EXPECT_EQ(onednn().variants(g), std::vector<std::string>{""});
  }
}

}  // namespace
}  // namespace collage
