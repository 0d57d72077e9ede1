// Reduction op group: Reduce*, ArgMax/ArgMin, TopK, CumSum against hand-computed cases and
// a naive reduction written here.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "unit/op_test_util.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::attr_ints;
using testing::OpInput;
using testing::run_op;

template <typename T>
std::vector<T> values(const Tensor& t) {
  auto s = t.span<T>();
  return {s.begin(), s.end()};
}

ErrorKind error_kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::kInternal;
}

Tensor axes_tensor(std::vector<int64_t> axes) {
  return Tensor::from_vector<int64_t>({static_cast<int64_t>(axes.size())}, axes);
}

// x: shape [3, 2, 2] = 1..12.
Tensor one_to_twelve() {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = static_cast<float>(i + 1);
  return Tensor::from_vector<float>({3, 2, 2}, v);
}

TEST(Reduce, SumWithAxesInputAndKeepdims) {
  Tensor x = one_to_twelve();
  auto y =
      run_op("ReduceSum", {{x}, {axes_tensor({1}), true}}, {{"keepdims", attr_i(1)}}, 1, 13)[0];
  EXPECT_EQ(y.shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{4, 6, 12, 14, 20, 22}));
  y = run_op("ReduceSum", {{x}, {axes_tensor({-1, 0}), true}}, {{"keepdims", attr_i(0)}}, 1, 13)[0];
  EXPECT_EQ(y.shape(), (Shape{2}));
  EXPECT_EQ(values<float>(y),
            (std::vector<float>{1 + 2 + 5 + 6 + 9 + 10, 3 + 4 + 7 + 8 + 11 + 12}));
  // No axes: everything; empty axes with noop_with_empty_axes: nothing.
  y = run_op("ReduceSum", {{x}}, {}, 1, 13)[0];
  EXPECT_EQ(y.shape(), (Shape{1, 1, 1}));
  EXPECT_EQ(values<float>(y)[0], 78);
  y = run_op("ReduceSum", {{x}, {axes_tensor({}), true}}, {{"noop_with_empty_axes", attr_i(1)}}, 1,
             13)[0];
  EXPECT_EQ(y.shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(values<float>(y), values<float>(x));
  // Opset 11 spells the axes as an attribute.
  y = run_op("ReduceSum", {{x}}, {{"axes", attr_ints({0, 2})}, {"keepdims", attr_i(0)}}, 1, 11)[0];
  EXPECT_EQ(values<float>(y),
            (std::vector<float>{1 + 2 + 5 + 6 + 9 + 10, 3 + 4 + 7 + 8 + 11 + 12}));
}

TEST(Reduce, OtherReducersByHand) {
  Tensor x = Tensor::from_vector<float>({2, 3}, {1, -2, 3, 4, 5, -6});
  std::map<std::string, Attribute> last = {{"axes", attr_ints({1})}, {"keepdims", attr_i(0)}};
  auto r = [&](const char* op) { return values<float>(run_op(op, {{x}}, last, 1, 13)[0]); };
  EXPECT_EQ(r("ReduceMean"), (std::vector<float>{2.0f / 3, 1}));
  EXPECT_EQ(r("ReduceMax"), (std::vector<float>{3, 5}));
  EXPECT_EQ(r("ReduceMin"), (std::vector<float>{-2, -6}));
  EXPECT_EQ(r("ReduceProd"), (std::vector<float>{-6, -120}));
  EXPECT_EQ(r("ReduceL1"), (std::vector<float>{6, 15}));
  EXPECT_EQ(r("ReduceSumSquare"), (std::vector<float>{14, 77}));
  auto l2 = r("ReduceL2");
  EXPECT_FLOAT_EQ(l2[0], std::sqrt(14.0f));
  EXPECT_FLOAT_EQ(l2[1], std::sqrt(77.0f));
  Tensor pos = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  auto ls = values<float>(run_op("ReduceLogSum", {{pos}}, {{"axes", attr_ints({0})}}, 1, 13)[0]);
  EXPECT_FLOAT_EQ(ls[0], std::log(4.0f));
  EXPECT_FLOAT_EQ(ls[1], std::log(6.0f));
  // LogSumExp must not overflow where exp(x) does.
  Tensor big = Tensor::from_vector<double>({2}, {1000, 1000});
  auto lse =
      values<double>(run_op("ReduceLogSumExp", {{big}}, {{"keepdims", attr_i(0)}}, 1, 13)[0]);
  EXPECT_DOUBLE_EQ(lse[0], 1000 + std::log(2.0));
  Tensor ints = Tensor::from_vector<int64_t>({2, 2}, {7, 2, -3, 4});
  EXPECT_EQ(values<int64_t>(run_op("ReduceSum", {{ints}, {axes_tensor({1}), true}}, {}, 1, 13)[0]),
            (std::vector<int64_t>{9, 1}));
  EXPECT_EQ(values<int64_t>(run_op("ReduceMax", {{ints}}, {{"axes", attr_ints({0})}}, 1, 13)[0]),
            (std::vector<int64_t>{7, 4}));
}

// Sums or maxes over the axes in `mask` of a [4, 5, 6] tensor, the slow obvious way.
std::vector<double> naive_reduce(const std::vector<float>& x, const std::vector<bool>& mask,
                                 bool is_max) {
  const int dims[3] = {4, 5, 6};
  int od[3];
  for (int d = 0; d < 3; ++d) od[d] = mask[d] ? 1 : dims[d];
  std::vector<double> out(od[0] * od[1] * od[2], is_max ? -1e300 : 0.0);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 6; ++k) {
        int o = ((mask[0] ? 0 : i) * od[1] + (mask[1] ? 0 : j)) * od[2] + (mask[2] ? 0 : k);
        double v = x[(i * 5 + j) * 6 + k];
        out[o] = is_max ? std::max(out[o], v) : out[o] + v;
      }
  return out;
}

TEST(Reduce, EveryAxisSubsetMatchesNaive) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-2, 2);
  std::vector<float> v(120);
  for (auto& e : v) e = dist(rng);
  Tensor x = Tensor::from_vector<float>({4, 5, 6}, v);
  for (int bits = 1; bits < 8; ++bits) {
    std::vector<bool> mask = {(bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0};
    std::vector<int64_t> axes;
    for (int d = 0; d < 3; ++d)
      if (mask[d]) axes.push_back(d);
    auto sum = values<float>(run_op("ReduceSum", {{x}, {axes_tensor(axes), true}}, {}, 1, 13)[0]);
    auto max = values<float>(run_op("ReduceMax", {{x}}, {{"axes", attr_ints(axes)}}, 1, 13)[0]);
    auto want_sum = naive_reduce(v, mask, false), want_max = naive_reduce(v, mask, true);
    ASSERT_EQ(sum.size(), want_sum.size());
    for (size_t i = 0; i < sum.size(); ++i) {
      EXPECT_NEAR(sum[i], want_sum[i], 1e-4) << bits << " " << i;
      EXPECT_EQ(max[i], static_cast<float>(want_max[i])) << bits << " " << i;
    }
  }
}

TEST(Reduce, LargeLastAxisMean) {
  // LayerNorm's shape: parallel path over rows.
  const int rows = 512, cols = 768;
  std::vector<float> v(rows * cols);
  for (int i = 0; i < rows * cols; ++i) v[i] = static_cast<float>((i * 37) % 101) / 10.0f;
  Tensor x = Tensor::from_vector<float>({rows, cols}, v);
  auto y = values<float>(run_op("ReduceMean", {{x}}, {{"axes", attr_ints({-1})}}, 1, 13)[0]);
  ASSERT_EQ(y.size(), static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    double s = 0;
    for (int c = 0; c < cols; ++c) s += v[r * cols + c];
    EXPECT_NEAR(y[r], s / cols, 1e-5);
  }
}

TEST(Reduce, Errors) {
  Tensor x = one_to_twelve();
  EXPECT_EQ(error_kind_of([&] {
              run_op("ReduceSum", {{x}, {axes_tensor({3}), true}}, {}, 1, 13);
            }),
            ErrorKind::kShape);
  EXPECT_EQ(error_kind_of([&] {
              run_op("ReduceMean", {{x}}, {{"axes", attr_ints({1, -2})}});
            }),
            ErrorKind::kShape);
  // Axes computed at run time cannot give a static output shape.
  EXPECT_EQ(error_kind_of([&] {
              run_op("ReduceSum", {{x}, {axes_tensor({1}), false}}, {}, 1, 13);
            }),
            ErrorKind::kShape);
  Tensor b = Tensor::from_vector<bool>({2}, {true, false});
  EXPECT_EQ(error_kind_of([&] { run_op("ReduceSum", {{b}}); }), ErrorKind::kUnsupported);
}

TEST(ArgMaxMin, TiesAndSelectLastIndex) {
  Tensor x = Tensor::from_vector<float>({2, 3}, {2, 7, 7, 1, 1, 0});
  auto amax = run_op("ArgMax", {{x}}, {{"axis", attr_i(1)}, {"keepdims", attr_i(0)}})[0];
  ASSERT_EQ(amax.dtype(), DType::kInt64);
  EXPECT_EQ(amax.shape(), (Shape{2}));
  EXPECT_EQ(values<int64_t>(amax), (std::vector<int64_t>{1, 0}));
  auto last = run_op("ArgMax", {{x}}, {{"axis", attr_i(-1)}, {"select_last_index", attr_i(1)}})[0];
  EXPECT_EQ(last.shape(), (Shape{2, 1}));
  EXPECT_EQ(values<int64_t>(last), (std::vector<int64_t>{2, 1}));
  auto amin = run_op("ArgMin", {{x}})[0];  // axis 0, keepdims
  EXPECT_EQ(amin.shape(), (Shape{1, 3}));
  EXPECT_EQ(values<int64_t>(amin), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(values<int64_t>(run_op("ArgMin", {{x}}, {{"axis", attr_i(1)}})[0]),
            (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(error_kind_of([&] {
              run_op("ArgMax", {{x}}, {{"axis", attr_i(2)}});
            }),
            ErrorKind::kShape);
}

TEST(TopK, LargestSmallestAndTies) {
  Tensor x = Tensor::from_vector<float>({2, 4}, {1, 5, 5, 3, 0, -1, 2, -1});
  Tensor k = Tensor::from_vector<int64_t>({1}, {2});
  auto out = run_op("TopK", {{x}, {k, true}}, {}, 2, 11);
  EXPECT_EQ(out[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{5, 5, 2, 0}));
  EXPECT_EQ(values<int64_t>(out[1]), (std::vector<int64_t>{1, 2, 2, 0}));
  out = run_op("TopK", {{x}, {k, true}}, {{"largest", attr_i(0)}}, 2, 11);
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, 3, -1, -1}));
  EXPECT_EQ(values<int64_t>(out[1]), (std::vector<int64_t>{0, 3, 1, 3}));
  // Along axis 0, with k as the pre-opset-10 attribute.
  out = run_op("TopK", {{x}}, {{"k", attr_i(1)}, {"axis", attr_i(0)}}, 2, 9);
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, 5, 5, 3}));
  EXPECT_EQ(values<int64_t>(out[1]), (std::vector<int64_t>{0, 0, 0, 0}));
  Tensor k9 = Tensor::from_vector<int64_t>({1}, {9});
  EXPECT_EQ(error_kind_of([&] {
              run_op("TopK", {{x}, {k9, true}}, {}, 2, 11);
            }),
            ErrorKind::kShape);
  EXPECT_EQ(error_kind_of([&] {
              run_op("TopK", {{x}, {k, false}}, {}, 2, 11);
            }),
            ErrorKind::kShape);
}

TEST(CumSum, ExclusiveAndReverse) {
  Tensor x = Tensor::from_vector<double>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor axis1 = Tensor::from_vector<int32_t>({}, {1});
  Tensor axis0 = Tensor::from_vector<int64_t>({}, {-2});
  EXPECT_EQ(values<double>(run_op("CumSum", {{x}, {axis1}})[0]),
            (std::vector<double>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(values<double>(run_op("CumSum", {{x}, {axis0}})[0]),
            (std::vector<double>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(values<double>(run_op("CumSum", {{x}, {axis1}}, {{"exclusive", attr_i(1)}})[0]),
            (std::vector<double>{0, 1, 3, 0, 4, 9}));
  EXPECT_EQ(values<double>(run_op("CumSum", {{x}, {axis1}}, {{"reverse", attr_i(1)}})[0]),
            (std::vector<double>{6, 5, 3, 15, 11, 6}));
  EXPECT_EQ(values<double>(run_op("CumSum", {{x}, {axis1}},
                                  {{"reverse", attr_i(1)}, {"exclusive", attr_i(1)}})[0]),
            (std::vector<double>{5, 3, 0, 11, 6, 0}));
  Tensor bad = Tensor::from_vector<int32_t>({}, {2});
  EXPECT_EQ(error_kind_of([&] { run_op("CumSum", {{x}, {bad}}); }), ErrorKind::kShape);
}

}  // namespace
}  // namespace collage
