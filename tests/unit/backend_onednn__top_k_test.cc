// TopK on the onednn backend (top_k.h: a heap per row, rows split between the threads): on
// randomized shapes, axes and k (0 to the whole axis), largest and smallest, over values with
// many ties (indices must then keep ONNX's lower-index-first order), NaN, infinities and both
// zeros, in either opset's form of k: the values and indices of the reference backend, the
// node not left to the fallback, on 1 to 3 threads and inside a lane.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/top_k.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::GraphBuilder;
using testing::pick;

TEST(OnednnTopK, RandomShapesTiesAndNaNLikeReference) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < testing::random_graph_count(24); ++trial) {
    const int64_t rank = pick(rng, 1, 4);
    Shape shape;
    for (int64_t d = 0; d < rank; ++d) shape.push_back(pick(rng, 1, d + 1 == rank ? 300 : 6));
    const int64_t axis = pick(rng, 0, rank - 1);
    const int64_t k = pick(rng, 0, shape[axis]);
    const bool largest = pick(rng, 0, 1) == 1;
    const bool opset9 = trial % 6 == 5;  // k an attribute
    GraphBuilder b(opset9 ? 9 : 17);
    const ValueId x = b.input("x", DType::kFloat32, shape);
    std::vector<ValueId> in = {x};
    std::map<std::string, Attribute> attrs = {{"axis", attr_i(axis - (trial % 2 ? rank : 0))}};
    if (opset9)
      attrs["k"] = attr_i(k);
    else
      in.push_back(b.constant("k", Tensor::from_vector<int64_t>({1}, {k})));
    if (!opset9) attrs["largest"] = attr_i(largest ? 1 : 0);
    const std::vector<ValueId> out = b.add("TopK", in, attrs, 2);
    b.output(out[0]);
    b.output(out[1]);
    const Graph& g = b.graph();
    const std::string what =
        fmt::format("{} axis {} k {} {}{}", shape_to_string(shape), axis, k,
                    largest || opset9 ? "largest" : "smallest", opset9 ? " opset 9" : "");
    SCOPED_TRACE(what);
    ASSERT_TRUE(onednn::top_k_takes(g, g.node(0)));
    // Values on a grid of quarters (ties everywhere), and some NaN, infinities and zeros.
    Tensor xt(DType::kFloat32, shape);
    float* p = xt.data<float>();
    const float inf = std::numeric_limits<float>::infinity();
    const float specials[] = {std::nanf(""), inf, -inf, 0.0f, -0.0f};
    for (int64_t i = 0; i < xt.numel(); ++i)
      p[i] = pick(rng, 0, 19) == 0 ? specials[pick(rng, 0, 4)]
                                   : static_cast<float>(pick(rng, -8, 8)) * 0.25f;
    const std::vector<Tensor> inputs = {xt};
    const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
    for (int threads : {1, 2, 3})
      EXPECT_TRUE(
          testing::expect_session_like_reference("onednn", g, threads, inputs, want, what).empty());
    // Inside a lane (an active team): on the lane's thread alone.
    std::unique_ptr<Kernel> kernel = testing::onednn().compile(g, testing::test_options(2));
    EXPECT_TRUE(testing::outputs_match(testing::run_in_a_lane(*kernel, g, inputs), want))
        << "in a lane";
  }
}

}  // namespace
}  // namespace collage
