// Elementwise op group: hand-computed cases, randomized cases against naive formulas
// written here, and the errors shape inference must raise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "unit/op_test_util.h"

namespace collage {
namespace {

using testing::attr_f;
using testing::attr_i;
using testing::attr_ints;
using testing::attr_s;
using testing::OpInput;
using testing::run_op;

template <typename T>
std::vector<T> values(const Tensor& t) {
  auto s = t.span<T>();
  return {s.begin(), s.end()};
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -3, float hi = 3) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

ErrorKind error_kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::kInternal;  // "no error" reads as a failure of the expectation
}

// Element `flat` of `out` mapped back into an operand of shape `in` by numpy's rule.
int64_t broadcast_source(const Shape& out, const Shape& in, int64_t flat) {
  int64_t src = 0, stride = 1;
  for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
    int64_t idx = flat % out[d];
    flat /= out[d];
    int di = d - static_cast<int>(out.size() - in.size());
    if (di >= 0) {
      if (in[di] != 1) src += idx * stride;
      stride *= in[di];
    }
  }
  return src;
}

// ---------------------------------------------------------------------------------------
// Unary

TEST(ElementwiseUnary, ReluAndLeakyRelu) {
  Tensor x = Tensor::from_vector<float>({4}, {-2, -0.5f, 0, 3});
  EXPECT_EQ(values<float>(run_op("Relu", {{x}})[0]), (std::vector<float>{0, 0, 0, 3}));
  auto y = values<float>(run_op("LeakyRelu", {{x}}, {{"alpha", attr_f(0.1f)}})[0]);
  EXPECT_FLOAT_EQ(y[0], -0.2f);
  EXPECT_FLOAT_EQ(y[1], -0.05f);
  EXPECT_FLOAT_EQ(y[3], 3);
  Tensor xi = Tensor::from_vector<int32_t>({3}, {-5, 0, 7});
  EXPECT_EQ(values<int32_t>(run_op("Relu", {{xi}})[0]), (std::vector<int32_t>{0, 0, 7}));
}

TEST(ElementwiseUnary, RandomActivationsMatchFormulas) {
  std::vector<float> v = random_floats(1000, 1, -10, 10);
  Tensor x = Tensor::from_vector<float>({10, 100}, v);
  auto sig = values<float>(run_op("Sigmoid", {{x}})[0]);
  auto elu = values<float>(run_op("Elu", {{x}}, {{"alpha", attr_f(2.0f)}})[0]);
  auto sp = values<float>(run_op("Softplus", {{x}})[0]);
  auto ss = values<float>(run_op("Softsign", {{x}})[0]);
  auto hs = values<float>(run_op("HardSigmoid", {{x}})[0]);
  auto hw = values<float>(run_op("HardSwish", {{x}})[0]);
  auto celu = values<float>(run_op("Celu", {{x}}, {{"alpha", attr_f(2.0f)}})[0]);
  auto erf = values<float>(run_op("Erf", {{x}})[0]);
  for (size_t i = 0; i < v.size(); ++i) {
    double a = v[i];
    EXPECT_NEAR(sig[i], 1 / (1 + std::exp(-a)), 1e-6);
    EXPECT_NEAR(elu[i], a > 0 ? a : 2 * (std::exp(a) - 1), 1e-5);
    EXPECT_NEAR(sp[i], std::log(std::exp(a) + 1), 1e-5);
    EXPECT_NEAR(ss[i], a / (1 + std::fabs(a)), 1e-6);
    EXPECT_NEAR(hs[i], std::clamp(0.2 * a + 0.5, 0.0, 1.0), 1e-6);
    EXPECT_NEAR(hw[i], a * std::clamp(a / 6 + 0.5, 0.0, 1.0), 1e-5);
    EXPECT_NEAR(celu[i], std::max(0.0, a) + std::min(0.0, 2 * (std::exp(a / 2) - 1)), 1e-5);
    EXPECT_NEAR(erf[i], std::erf(a), 1e-6);
  }
}

TEST(ElementwiseUnary, SeluDefaults) {
  Tensor x = Tensor::from_vector<float>({2}, {-1, 2});
  auto y = values<float>(run_op("Selu", {{x}}, {}, 1, 6)[0]);
  const double alpha = 1.6732632423543772, gamma = 1.0507009873554805;
  EXPECT_NEAR(y[0], gamma * alpha * (std::exp(-1.0) - 1), 1e-5);
  EXPECT_NEAR(y[1], gamma * 2, 1e-5);
}

TEST(ElementwiseUnary, RoundHalfToEven) {
  Tensor x = Tensor::from_vector<float>(
      {9}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 2.3f, -2.7f, 0.49999997f});
  EXPECT_EQ(values<float>(run_op("Round", {{x}})[0]),
            (std::vector<float>{0, 2, 2, -0.0f, -2, -2, 2, -3, 0}));
}

TEST(ElementwiseUnary, SignAbsNegOnIntegersAndFloats) {
  Tensor xi = Tensor::from_vector<int64_t>({3}, {-4, 0, 9});
  EXPECT_EQ(values<int64_t>(run_op("Sign", {{xi}})[0]), (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(values<int64_t>(run_op("Abs", {{xi}})[0]), (std::vector<int64_t>{4, 0, 9}));
  EXPECT_EQ(values<int64_t>(run_op("Neg", {{xi}})[0]), (std::vector<int64_t>{4, 0, -9}));
  Tensor xf = Tensor::from_vector<double>({3}, {-0.25, 0, 8});
  EXPECT_EQ(values<double>(run_op("Sign", {{xf}})[0]), (std::vector<double>{-1, 0, 1}));
  Tensor xu = Tensor::from_vector<uint8_t>({2}, {0, 200});
  EXPECT_EQ(values<uint8_t>(run_op("Abs", {{xu}})[0]), (std::vector<uint8_t>{0, 200}));
}

TEST(ElementwiseUnary, TrigAndMathOnDoubles) {
  std::vector<double> v = {0.1, 0.5, 0.9};
  Tensor x = Tensor::from_vector<double>({3}, v);
  auto asin = values<double>(run_op("Asin", {{x}}, {}, 1, 7)[0]);
  auto atanh = values<double>(run_op("Atanh", {{x}}, {}, 1, 9)[0]);
  auto sqrt = values<double>(run_op("Sqrt", {{x}})[0]);
  auto recip = values<double>(run_op("Reciprocal", {{x}})[0]);
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_DOUBLE_EQ(asin[i], std::asin(v[i]));
    EXPECT_DOUBLE_EQ(atanh[i], 0.5 * std::log((1 + v[i]) / (1 - v[i])));
    EXPECT_DOUBLE_EQ(sqrt[i] * sqrt[i], v[i]);
    EXPECT_DOUBLE_EQ(recip[i], 1 / v[i]);
  }
}

TEST(ElementwiseUnary, PredicatesGiveBool) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = Tensor::from_vector<float>({4}, {-inf, 1, inf, std::nanf("")});
  Tensor nan = run_op("IsNaN", {{x}})[0];
  ASSERT_EQ(nan.dtype(), DType::kBool);
  EXPECT_EQ(values<bool>(nan), (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(values<bool>(run_op("IsInf", {{x}})[0]), (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(values<bool>(run_op("IsInf", {{x}}, {{"detect_positive", attr_i(0)}})[0]),
            (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(values<bool>(run_op("IsInf", {{x}}, {{"detect_negative", attr_i(0)}})[0]),
            (std::vector<bool>{false, false, true, false}));
  Tensor b = Tensor::from_vector<bool>({2}, {true, false});
  EXPECT_EQ(values<bool>(run_op("Not", {{b}})[0]), (std::vector<bool>{false, true}));
}

TEST(ElementwiseUnary, RejectsUnsupportedTypes) {
  Tensor xi = Tensor::from_vector<int32_t>({2}, {1, 2});
  EXPECT_EQ(error_kind_of([&] { run_op("Sin", {{xi}}); }), ErrorKind::kUnsupported);
  EXPECT_EQ(error_kind_of([&] { run_op("Not", {{xi}}); }), ErrorKind::kUnsupported);
  Tensor half(DType::kFloat16, {2});
  EXPECT_EQ(error_kind_of([&] { run_op("Exp", {{half}}); }), ErrorKind::kUnsupported);
}

// ---------------------------------------------------------------------------------------
// Binary with broadcasting

struct BroadcastCase {
  Shape a, b;
};

TEST(ElementwiseBinary, RandomBroadcastsMatchNaiveIndexing) {
  std::vector<BroadcastCase> cases = {
      {{2, 3, 4}, {2, 3, 4}},
      {{2, 3, 4}, {4}},
      {{2, 3, 4}, {3, 1}},
      {{1, 3, 1}, {2, 1, 4}},
      {{5}, {}},
      {{}, {2, 2}},
      {{2, 1, 3, 1}, {1, 4, 1, 5}},
      {{3, 1}, {1, 1}},
      {{4, 128, 768}, {768}},  // big: the parallel paths
      {{512, 1024}, {512, 1024}},
      {{2, 1, 1, 128}, {2, 12, 128, 128}},
  };
  uint32_t seed = 10;
  for (const auto& c : cases) {
    Shape out = *broadcast_shapes(c.a, c.b);
    std::vector<float> av = random_floats(shape_numel(c.a), seed++);
    std::vector<float> bv = random_floats(shape_numel(c.b), seed++, 0.5f, 3);
    Tensor a = Tensor::from_vector<float>(c.a, av), b = Tensor::from_vector<float>(c.b, bv);
    auto add = run_op("Add", {{a}, {b}})[0];
    auto sub = run_op("Sub", {{a}, {b}})[0];
    auto mul = run_op("Mul", {{a}, {b}})[0];
    auto div = run_op("Div", {{a}, {b}})[0];
    auto less = run_op("Less", {{a}, {b}})[0];
    ASSERT_EQ(add.shape(), out) << shape_to_string(c.a) << " " << shape_to_string(c.b);
    auto padd = add.data<float>(), psub = sub.data<float>(), pmul = mul.data<float>(),
         pdiv = div.data<float>();
    auto pless = less.data<bool>();
    for (int64_t i = 0; i < add.numel(); ++i) {
      float x = av[broadcast_source(out, c.a, i)], y = bv[broadcast_source(out, c.b, i)];
      ASSERT_EQ(padd[i], x + y) << i;
      ASSERT_EQ(psub[i], x - y) << i;
      ASSERT_EQ(pmul[i], x * y) << i;
      ASSERT_EQ(pdiv[i], x / y) << i;
      ASSERT_EQ(pless[i], x < y) << i;
    }
  }
}

TEST(ElementwiseBinary, IntegerArithmetic) {
  Tensor a = Tensor::from_vector<int64_t>({5}, {7, -7, 7, -7, 5});
  Tensor b = Tensor::from_vector<int64_t>({5}, {2, 2, -2, -2, 0});
  // Division truncates toward zero; by zero it is defined as 0 rather than a trap.
  EXPECT_EQ(values<int64_t>(run_op("Div", {{a}, {b}})[0]), (std::vector<int64_t>{3, -3, -3, 3, 0}));
  EXPECT_EQ(values<int64_t>(run_op("Mod", {{a}, {b}})[0]), (std::vector<int64_t>{1, 1, -1, -1, 0}));
  EXPECT_EQ(values<int64_t>(run_op("Mod", {{a}, {b}}, {{"fmod", attr_i(1)}})[0]),
            (std::vector<int64_t>{1, -1, 1, -1, 0}));
  Tensor u = Tensor::from_vector<uint8_t>({2}, {250, 3});
  Tensor v = Tensor::from_vector<uint8_t>({2}, {10, 5});
  EXPECT_EQ(values<uint8_t>(run_op("Add", {{u}, {v}})[0]), (std::vector<uint8_t>{4, 8}));
  EXPECT_EQ(values<uint8_t>(run_op("Sub", {{u}, {v}})[0]), (std::vector<uint8_t>{240, 254}));
  EXPECT_EQ(values<uint8_t>(run_op("Mul", {{u}, {v}})[0]), (std::vector<uint8_t>{196, 15}));
  Tensor big = Tensor::from_vector<int32_t>({1}, {std::numeric_limits<int32_t>::min()});
  Tensor minus1 = Tensor::from_vector<int32_t>({1}, {-1});
  EXPECT_EQ(values<int32_t>(run_op("Div", {{big}, {minus1}})[0])[0],
            std::numeric_limits<int32_t>::min());
}

TEST(ElementwiseBinary, FloatModFollowsTheDivisorSign) {
  Tensor a = Tensor::from_vector<float>({4}, {5.5f, -5.5f, 5.5f, -5.5f});
  Tensor b = Tensor::from_vector<float>({4}, {2, 2, -2, -2});
  EXPECT_EQ(values<float>(run_op("Mod", {{a}, {b}}, {{"fmod", attr_i(1)}})[0]),
            (std::vector<float>{1.5f, -1.5f, 1.5f, -1.5f}));
  EXPECT_EQ(values<float>(run_op("Mod", {{a}, {b}})[0]),
            (std::vector<float>{1.5f, 0.5f, -0.5f, -1.5f}));
}

TEST(ElementwiseBinary, PowMixedTypes) {
  Tensor fb = Tensor::from_vector<float>({3}, {2, 4, -3});
  Tensor ie = Tensor::from_vector<int64_t>({3}, {3, -1, 2});
  EXPECT_EQ(values<float>(run_op("Pow", {{fb}, {ie}})[0]), (std::vector<float>{8, 0.25f, 9}));
  Tensor ib = Tensor::from_vector<int32_t>({4}, {2, 3, -2, 1});
  Tensor fe = Tensor::from_vector<float>({4}, {5, 0.5f, 3, -2});
  Tensor pf = run_op("Pow", {{ib}, {fe}})[0];
  ASSERT_EQ(pf.dtype(), DType::kInt32);
  EXPECT_EQ(values<int32_t>(pf), (std::vector<int32_t>{32, 1, -8, 1}));
  Tensor ie2 = Tensor::from_vector<int32_t>({4}, {10, 0, 3, -3});
  EXPECT_EQ(values<int32_t>(run_op("Pow", {{ib}, {ie2}})[0]),
            (std::vector<int32_t>{1024, 1, -8, 1}));
  Tensor half = Tensor::from_vector<float>({}, {0.5f});
  auto sq = values<float>(run_op("Pow", {{fb}, {half}})[0]);
  EXPECT_FLOAT_EQ(sq[0], std::sqrt(2.0f));
  EXPECT_TRUE(std::isnan(sq[2]));
}

TEST(ElementwiseBinary, ComparisonsAndLogic) {
  Tensor a = Tensor::from_vector<int32_t>({2, 2}, {1, 2, 3, 4});
  Tensor b = Tensor::from_vector<int32_t>({2}, {2, 2});
  EXPECT_EQ(values<bool>(run_op("Equal", {{a}, {b}})[0]),
            (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(values<bool>(run_op("Greater", {{a}, {b}})[0]),
            (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(values<bool>(run_op("LessOrEqual", {{a}, {b}})[0]),
            (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(values<bool>(run_op("GreaterOrEqual", {{a}, {b}})[0]),
            (std::vector<bool>{false, true, true, true}));
  Tensor p = Tensor::from_vector<bool>({2, 2}, {true, true, false, false});
  Tensor q = Tensor::from_vector<bool>({2}, {true, false});
  EXPECT_EQ(values<bool>(run_op("And", {{p}, {q}})[0]),
            (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(values<bool>(run_op("Or", {{p}, {q}})[0]),
            (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(values<bool>(run_op("Xor", {{p}, {q}})[0]),
            (std::vector<bool>{false, true, true, false}));
}

TEST(ElementwiseBinary, BitShift) {
  Tensor x = Tensor::from_vector<uint8_t>({3}, {16, 4, 1});
  Tensor s = Tensor::from_vector<uint8_t>({3}, {1, 2, 9});
  EXPECT_EQ(values<uint8_t>(run_op("BitShift", {{x}, {s}}, {{"direction", attr_s("RIGHT")}})[0]),
            (std::vector<uint8_t>{8, 1, 0}));
  EXPECT_EQ(values<uint8_t>(run_op("BitShift", {{x}, {s}}, {{"direction", attr_s("LEFT")}})[0]),
            (std::vector<uint8_t>{32, 16, 0}));
  EXPECT_EQ(error_kind_of([&] { run_op("BitShift", {{x}, {s}}); }), ErrorKind::kInvalidModel);
}

TEST(ElementwiseBinary, PReluBroadcastsSlopeOnly) {
  Tensor x = Tensor::from_vector<float>({2, 3}, {-1, 2, -3, 4, -5, 6});
  Tensor slope = Tensor::from_vector<float>({3}, {0.5f, 1, 2});
  EXPECT_EQ(values<float>(run_op("PRelu", {{x}, {slope}})[0]),
            (std::vector<float>{-0.5f, 2, -6, 4, -5, 6}));
  Tensor wide = Tensor::from_vector<float>({2, 2, 3}, std::vector<float>(12, 1));
  EXPECT_EQ(error_kind_of([&] { run_op("PRelu", {{x}, {wide}}); }), ErrorKind::kShape);
}

TEST(ElementwiseBinary, PReluBeforeOpset7HasPerChannelSlope) {
  Tensor x = Tensor::from_vector<float>({1, 2, 2}, {-1, -2, -3, 4});
  Tensor slope = Tensor::from_vector<float>({2}, {0.5f, 2});
  EXPECT_EQ(values<float>(run_op("PRelu", {{x}, {slope}}, {}, 1, 6)[0]),
            (std::vector<float>{-0.5f, -1, -6, 4}));
}

TEST(ElementwiseBinary, LegacyBroadcastWithAxis) {
  Tensor a = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::from_vector<float>({2}, {10, 20});
  auto y = run_op("Add", {{a}, {b}}, {{"broadcast", attr_i(1)}, {"axis", attr_i(0)}}, 1, 6)[0];
  EXPECT_EQ(values<float>(y), (std::vector<float>{11, 12, 13, 24, 25, 26}));
}

TEST(ElementwiseBinary, Errors) {
  Tensor a = Tensor::from_vector<float>({2, 3}, std::vector<float>(6, 1));
  Tensor b = Tensor::from_vector<float>({2}, {1, 2});
  Tensor i = Tensor::from_vector<int32_t>({3}, {1, 2, 3});
  EXPECT_EQ(error_kind_of([&] { run_op("Add", {{a}, {b}}); }), ErrorKind::kShape);
  EXPECT_EQ(error_kind_of([&] { run_op("Add", {{a}, {i}}); }), ErrorKind::kInvalidModel);
  EXPECT_EQ(error_kind_of([&] { run_op("Add", {{a}}); }), ErrorKind::kInvalidModel);
  EXPECT_EQ(error_kind_of([&] { run_op("And", {{a}, {a}}); }), ErrorKind::kUnsupported);
  Tensor half(DType::kFloat16, {3});
  EXPECT_EQ(error_kind_of([&] { run_op("Max", {{half}, {half}}); }), ErrorKind::kUnsupported);
}

TEST(ElementwiseVariadic, MaxMinSumMeanBroadcast) {
  Tensor a = Tensor::from_vector<float>({2, 2}, {1, 5, 3, 2});
  Tensor b = Tensor::from_vector<float>({2}, {4, 0});
  Tensor c = Tensor::from_vector<float>({}, {2});
  EXPECT_EQ(values<float>(run_op("Max", {{a}, {b}, {c}})[0]), (std::vector<float>{4, 5, 4, 2}));
  EXPECT_EQ(values<float>(run_op("Min", {{a}, {b}, {c}})[0]), (std::vector<float>{1, 0, 2, 0}));
  EXPECT_EQ(values<float>(run_op("Sum", {{a}, {b}, {c}})[0]), (std::vector<float>{7, 7, 9, 4}));
  EXPECT_EQ(values<float>(run_op("Mean", {{c}, {a}})[0]),
            (std::vector<float>{1.5f, 3.5f, 2.5f, 2}));
  EXPECT_EQ(values<float>(run_op("Sum", {{b}})[0]), (std::vector<float>{4, 0}));
  Tensor nan = Tensor::from_vector<float>({2}, {std::nanf(""), 1});
  auto m = values<float>(run_op("Max", {{b}, {nan}})[0]);
  EXPECT_TRUE(std::isnan(m[0]));
  EXPECT_EQ(m[1], 1);
  Tensor u = Tensor::from_vector<uint32_t>({2}, {7, 3000000000u});
  Tensor v = Tensor::from_vector<uint32_t>({2}, {9, 1});
  EXPECT_EQ(values<uint32_t>(run_op("Max", {{u}, {v}})[0]),
            (std::vector<uint32_t>{9, 3000000000u}));
}

// ---------------------------------------------------------------------------------------
// Where, Clip, Cast

TEST(ElementwiseWhere, ThreeWayBroadcast) {
  Tensor c = Tensor::from_vector<bool>({2, 1}, {true, false});
  Tensor x = Tensor::from_vector<int64_t>({3}, {1, 2, 3});
  Tensor y = Tensor::from_vector<int64_t>({}, {-1});
  auto out = run_op("Where", {{c}, {x}, {y}})[0];
  EXPECT_EQ(out.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int64_t>(out), (std::vector<int64_t>{1, 2, 3, -1, -1, -1}));
  EXPECT_EQ(error_kind_of([&] { run_op("Where", {{x}, {x}, {y}}); }), ErrorKind::kUnsupported);
}

TEST(ElementwiseClip, BoundsFromInputsAndAttributes) {
  Tensor x = Tensor::from_vector<float>({5}, {-3, -1, 0, 1, 3});
  Tensor lo = Tensor::from_vector<float>({}, {-1.5f});
  Tensor hi = Tensor::from_vector<float>({}, {2});
  EXPECT_EQ(values<float>(run_op("Clip", {{x}, {lo}, {hi}})[0]),
            (std::vector<float>{-1.5f, -1, 0, 1, 2}));
  EXPECT_EQ(values<float>(run_op("Clip", {{x}, {}, {hi}})[0]),
            (std::vector<float>{-3, -1, 0, 1, 2}));
  EXPECT_EQ(values<float>(run_op("Clip", {{x}, {lo}})[0]),
            (std::vector<float>{-1.5f, -1, 0, 1, 3}));
  EXPECT_EQ(
      values<float>(run_op("Clip", {{x}}, {{"min", attr_f(-2)}, {"max", attr_f(0.5f)}}, 1, 6)[0]),
      (std::vector<float>{-2, -1, 0, 0.5f, 0.5f}));
  // min above max: everything becomes max, as numpy.clip.
  EXPECT_EQ(values<float>(run_op("Clip", {{x}, {hi}, {lo}})[0]), (std::vector<float>(5, -1.5f)));
  Tensor xi = Tensor::from_vector<int8_t>({3}, {-128, 5, 127});
  Tensor li = Tensor::from_vector<int8_t>({}, {0});
  EXPECT_EQ(values<int8_t>(run_op("Clip", {{xi}, {li}})[0]), (std::vector<int8_t>{0, 5, 127}));
  Tensor vec = Tensor::from_vector<float>({2}, {0, 1});
  EXPECT_EQ(error_kind_of([&] { run_op("Clip", {{x}, {vec}}); }), ErrorKind::kShape);
}

uint16_t half_bits(const Tensor& t, int64_t i) {
  return static_cast<const uint16_t*>(t.raw())[i];
}

TEST(ElementwiseCast, NumericConversions) {
  const float nan = std::nanf("");
  Tensor x = Tensor::from_vector<float>({6}, {1.9f, -1.9f, 0, 1e20f, -1e20f, nan});
  EXPECT_EQ(values<int32_t>(run_op("Cast", {{x}}, {{"to", attr_i(6)}})[0]),
            (std::vector<int32_t>{1, -1, 0, std::numeric_limits<int32_t>::max(),
                                  std::numeric_limits<int32_t>::min(), 0}));
  EXPECT_EQ(values<bool>(run_op("Cast", {{x}}, {{"to", attr_i(9)}})[0]),
            (std::vector<bool>{true, true, false, true, true, true}));
  Tensor b = Tensor::from_vector<bool>({2}, {true, false});
  EXPECT_EQ(values<double>(run_op("Cast", {{b}}, {{"to", attr_i(11)}})[0]),
            (std::vector<double>{1, 0}));
  Tensor i = Tensor::from_vector<int64_t>({2}, {300, -1});
  EXPECT_EQ(values<uint8_t>(run_op("Cast", {{i}}, {{"to", attr_i(2)}})[0]),
            (std::vector<uint8_t>{44, 255}));
  Tensor like = Tensor::from_vector<int16_t>({1}, {0});
  EXPECT_EQ(values<int16_t>(run_op("CastLike", {{i}, {like}})[0]), (std::vector<int16_t>{300, -1}));
  EXPECT_EQ(error_kind_of([&] {
              run_op("Cast", {{x}}, {{"to", attr_i(8)}});
            }),
            ErrorKind::kUnsupported);
}

TEST(ElementwiseCast, SixteenBitFloats) {
  // Bit patterns from IEEE half: 1.0 = 0x3c00, -2.0 = 0xc000, 65504 = 0x7bff, the smallest
  // subnormal 2^-24 = 0x0001, 1/3 rounds to 0x3555; 1 + 2^-11 is a tie that rounds to even.
  Tensor x = Tensor::from_vector<double>(
      {7}, {1.0, -2.0, 65504.0, std::ldexp(1.0, -24), 1.0 / 3, 1 + std::ldexp(1.0, -11), 1e6});
  Tensor h = run_op("Cast", {{x}}, {{"to", attr_i(10)}})[0];
  ASSERT_EQ(h.dtype(), DType::kFloat16);
  std::vector<uint16_t> want = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x3555, 0x3c00, 0x7c00};
  for (int k = 0; k < 7; ++k) EXPECT_EQ(half_bits(h, k), want[k]) << k;
  auto back = values<float>(run_op("Cast", {{h}}, {{"to", attr_i(1)}})[0]);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.0f);
  EXPECT_EQ(back[2], 65504.0f);
  EXPECT_EQ(back[3], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(back[6]));
  // bfloat16 keeps the top 16 bits of a float (ONNX 1.12 truncates).
  Tensor f = Tensor::from_vector<float>({1}, {0.48033667f});
  Tensor bf = run_op("Cast", {{f}}, {{"to", attr_i(16)}})[0];
  EXPECT_EQ(half_bits(bf, 0), 0x3ef5);
  auto fb = values<float>(run_op("Cast", {{bf}}, {{"to", attr_i(1)}})[0]);
  EXPECT_EQ(fb[0], 0.478515625f);
}

}  // namespace
}  // namespace collage
