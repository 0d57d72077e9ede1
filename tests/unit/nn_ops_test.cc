// Tests of the nn op group's shape functions and reference kernels: small hand-computed
// cases, randomized cases against naive formulas written here, and error kinds.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "unit/op_test_util.h"

namespace collage {
namespace {

using testing::attr_f;
using testing::attr_i;
using testing::attr_ints;
using testing::attr_s;
using testing::OpInput;
using testing::run_op;

using Attrs = std::map<std::string, Attribute>;

Tensor f32(Shape shape, std::vector<float> values) {
  return Tensor::from_vector<float>(std::move(shape), values);
}

Tensor random_tensor(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t(DType::kFloat32, std::move(shape));
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

void expect_values(const Tensor& t, const std::vector<float>& expected, float tol = 1e-5f) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(expected.size()));
  std::vector<float> got = t.to_float_vector();
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(got[i], expected[i], tol * (1 + std::abs(expected[i]))) << "at " << i;
}

ErrorKind error_kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "expected a collage::Error";
  return ErrorKind::kInternal;
}

// ---------------------------------------------------------------- Conv

// Direct definition of a grouped 3-D convolution over (N, C, D, H, W); 1-D and 2-D cases
// are the same computation with unit leading spatial axes.
struct ConvSpec {
  int64_t group = 1;
  std::array<int64_t, 3> stride{1, 1, 1}, dilation{1, 1, 1}, pad_begin{0, 0, 0}, pad_end{0, 0, 0};
};

std::vector<float> naive_conv(const Tensor& x, const Tensor& w, const float* bias,
                              const ConvSpec& s, Shape* out_shape) {
  const auto& xs = x.shape();
  const auto& ws = w.shape();
  int64_t n = xs[0], c = xs[1], m = ws[0], cg = ws[1];
  int64_t od[3];
  for (int a = 0; a < 3; ++a)
    od[a] = (xs[2 + a] + s.pad_begin[a] + s.pad_end[a] - ((ws[2 + a] - 1) * s.dilation[a] + 1)) /
                s.stride[a] +
            1;
  *out_shape = {n, m, od[0], od[1], od[2]};
  std::vector<float> y;
  const float* xd = x.data<float>();
  const float* wd = w.data<float>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < m; ++oc)
      for (int64_t z = 0; z < od[0]; ++z)
        for (int64_t yy = 0; yy < od[1]; ++yy)
          for (int64_t xx = 0; xx < od[2]; ++xx) {
            double sum = bias ? bias[oc] : 0.0;
            int64_t g = oc / (m / s.group);
            for (int64_t ic = 0; ic < cg; ++ic)
              for (int64_t kz = 0; kz < ws[2]; ++kz)
                for (int64_t ky = 0; ky < ws[3]; ++ky)
                  for (int64_t kx = 0; kx < ws[4]; ++kx) {
                    int64_t iz = z * s.stride[0] - s.pad_begin[0] + kz * s.dilation[0];
                    int64_t iy = yy * s.stride[1] - s.pad_begin[1] + ky * s.dilation[1];
                    int64_t ix = xx * s.stride[2] - s.pad_begin[2] + kx * s.dilation[2];
                    if (iz < 0 || iy < 0 || ix < 0 || iz >= xs[2] || iy >= xs[3] || ix >= xs[4])
                      continue;
                    int64_t channel = g * cg + ic;
                    sum += xd[(((b * c + channel) * xs[2] + iz) * xs[3] + iy) * xs[4] + ix] *
                           wd[(((oc * cg + ic) * ws[2] + kz) * ws[3] + ky) * ws[4] + kx];
                  }
            y.push_back(static_cast<float>(sum));
          }
  return y;
}

TEST(NnConv, HandComputed2x2Kernel) {
  Tensor x = f32({1, 1, 3, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8});
  Tensor w = f32({1, 1, 2, 2}, {1, 1, 1, 1});
  auto out = run_op("Conv", {{x}, {w}});
  EXPECT_EQ(out[0].shape(), (Shape{1, 1, 2, 2}));
  expect_values(out[0], {8, 12, 20, 24});
}

TEST(NnConv, BiasAndStride) {
  Tensor x = f32({1, 1, 1, 5}, {1, 2, 3, 4, 5});
  Tensor w = f32({2, 1, 1, 2}, {1, -1, 2, 0});
  Tensor b = f32({2}, {10, 20});
  auto out = run_op("Conv", {{x}, {w}, {b}}, {{"strides", attr_ints({1, 2})}});
  EXPECT_EQ(out[0].shape(), (Shape{1, 2, 1, 2}));
  // Channel 0: x0-x1, x2-x3 (+10); channel 1: 2*x0, 2*x2 (+20).
  expect_values(out[0], {9, 9, 22, 26});
}

TEST(NnConv, AutoPadSameUpperAndLower) {
  Tensor x = f32({1, 1, 4}, {1, 2, 3, 4});
  Tensor w = f32({1, 1, 2}, {1, 1});
  auto upper = run_op("Conv", {{x}, {w}}, {{"auto_pad", attr_s("SAME_UPPER")}});
  expect_values(upper[0], {3, 5, 7, 4});  // the odd pad goes to the end
  auto lower = run_op("Conv", {{x}, {w}}, {{"auto_pad", attr_s("SAME_LOWER")}});
  expect_values(lower[0], {1, 3, 5, 7});  // ...or to the start
  auto valid = run_op("Conv", {{x}, {w}}, {{"auto_pad", attr_s("VALID")}});
  expect_values(valid[0], {3, 5, 7});
}

struct ConvCase {
  Shape x, w;
  ConvSpec spec;
  bool bias;
};

TEST(NnConv, RandomizedAgainstNaive) {
  std::vector<ConvCase> cases = {
      {{2, 3, 1, 7, 6}, {4, 3, 1, 3, 3}, {}, true},
      {{1, 4, 1, 8, 8}, {6, 2, 1, 3, 2}, {2, {1, 2, 1}, {1, 1, 2}, {0, 1, 0}, {0, 2, 1}}, true},
      {{1, 4, 1, 6, 6}, {4, 1, 1, 3, 3}, {4, {1, 1, 1}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}}, false},
      {{1, 4, 1, 6, 6}, {8, 1, 1, 3, 3}, {4, {1, 2, 2}, {1, 2, 1}, {0, 2, 0}, {0, 0, 1}}, true},
      {{2, 2, 5, 4, 6}, {3, 2, 2, 3, 2}, {1, {2, 1, 2}, {2, 1, 1}, {1, 0, 1}, {0, 1, 1}}, true},
      {{1, 3, 1, 1, 11}, {2, 3, 1, 1, 4}, {1, {1, 1, 3}, {1, 1, 2}, {0, 0, 3}, {0, 0, 2}}, true},
      // Output planes over the kernel's tile of 128 positions, ending in a partial tile, with
      // tiles that start and end mid-row and mid-plane: 19x23 = 437, 6x4x11 = 264 (3-D,
      // strided, dilated, padded), 16x10 = 160 in two groups.
      {{1, 3, 1, 19, 23}, {5, 3, 1, 3, 3}, {1, {1, 1, 1}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}}, true},
      {{1, 2, 6, 9, 11}, {4, 2, 3, 3, 3}, {1, {1, 2, 1}, {1, 1, 2}, {1, 1, 2}, {1, 0, 2}}, true},
      {{2, 4, 1, 16, 20}, {6, 2, 1, 3, 3}, {2, {1, 1, 2}, {1, 1, 1}, {0, 1, 0}, {0, 1, 1}}, false},
  };
  uint32_t seed = 1;
  for (const auto& cc : cases) {
    Tensor x = random_tensor(cc.x, seed++);
    Tensor w = random_tensor(cc.w, seed++);
    Tensor b = random_tensor({cc.w[0]}, seed++);
    Shape expected_shape;
    auto expected = naive_conv(x, w, cc.bias ? b.data<float>() : nullptr, cc.spec, &expected_shape);

    // Run at the case's true spatial rank: drop leading unit spatial axes.
    size_t skip = (cc.x[2] == 1 && cc.w[2] == 1) ? ((cc.x[3] == 1 && cc.w[3] == 1) ? 2 : 1) : 0;
    size_t nd = 3 - skip;
    auto strip = [&](const Shape& s) {
      Shape r{s[0], s[1]};
      r.insert(r.end(), s.begin() + 2 + skip, s.end());
      return r;
    };
    auto tail = [&](const std::array<int64_t, 3>& a) {
      return std::vector<int64_t>(a.begin() + skip, a.end());
    };
    std::vector<int64_t> pads = tail(cc.spec.pad_begin);
    std::vector<int64_t> pad_end = tail(cc.spec.pad_end);
    pads.insert(pads.end(), pad_end.begin(), pad_end.end());
    Attrs attrs = {{"group", attr_i(cc.spec.group)},
                   {"strides", attr_ints(tail(cc.spec.stride))},
                   {"dilations", attr_ints(tail(cc.spec.dilation))},
                   {"pads", attr_ints(pads)}};
    std::vector<OpInput> inputs = {{x.reshaped(strip(cc.x))}, {w.reshaped(strip(cc.w))}};
    if (cc.bias) inputs.push_back({b});
    auto out = run_op("Conv", inputs, attrs);
    ASSERT_EQ(out[0].shape(), strip(expected_shape)) << "case with seed " << seed << " nd " << nd;
    expect_values(out[0], expected, 1e-4f);
  }
}

TEST(NnConv, Errors) {
  Tensor x = random_tensor({1, 3, 5, 5}, 1);
  EXPECT_EQ(error_kind_of([&] {
              run_op("Conv", {{x}, {random_tensor({2, 2, 3, 3}, 2)}});
            }),
            ErrorKind::kShape);  // channel mismatch
  EXPECT_EQ(error_kind_of([&] {
              run_op("Conv", {{x}, {random_tensor({2, 3, 6, 6}, 2)}});
            }),
            ErrorKind::kShape);  // kernel larger than the input
  EXPECT_EQ(error_kind_of([&] {
              run_op("Conv", {{x}, {random_tensor({2, 3, 3, 3}, 2)}, {random_tensor({3}, 3)}});
            }),
            ErrorKind::kShape);  // bias length
  Tensor xi = Tensor::from_vector<int32_t>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor wi = Tensor::from_vector<int32_t>({1, 1, 1, 1}, {1});
  EXPECT_EQ(error_kind_of([&] { run_op("Conv", {{xi}, {wi}}); }), ErrorKind::kUnsupported);
  Tensor x4 = random_tensor({1, 1, 2, 2, 2, 2}, 4);
  Tensor w4 = random_tensor({1, 1, 1, 1, 1, 1}, 5);
  EXPECT_EQ(error_kind_of([&] { run_op("Conv", {{x4}, {w4}}); }), ErrorKind::kUnsupported);
}

// ---------------------------------------------------------------- ConvTranspose

TEST(NnConvTranspose, HandComputed1D) {
  Tensor x = f32({1, 1, 2}, {1, 2});
  Tensor w = f32({1, 1, 3}, {1, 1, 1});
  Attrs s2 = {{"strides", attr_ints({2})}};
  expect_values(run_op("ConvTranspose", {{x}, {w}}, s2)[0], {1, 1, 3, 2, 2});

  Attrs pads = s2;
  pads["pads"] = attr_ints({1, 1});
  expect_values(run_op("ConvTranspose", {{x}, {w}}, pads)[0], {1, 3, 2});

  Attrs out_pad = s2;
  out_pad["output_padding"] = attr_ints({1});
  expect_values(run_op("ConvTranspose", {{x}, {w}}, out_pad)[0], {1, 1, 3, 2, 2, 0});

  // output_shape 6 needs -1 total padding: the extra position is appended at the end.
  Attrs out_shape = s2;
  out_shape["output_shape"] = attr_ints({6});
  expect_values(run_op("ConvTranspose", {{x}, {w}}, out_shape)[0], {1, 1, 3, 2, 2, 0});

  // SAME_UPPER: output = input * stride = 4, one unit of padding removed at the end.
  Attrs same = s2;
  same["auto_pad"] = attr_s("SAME_UPPER");
  expect_values(run_op("ConvTranspose", {{x}, {w}}, same)[0], {1, 1, 3, 2});
}

TEST(NnConvTranspose, RandomizedAgainstNaiveScatter) {
  // 2-D, groups, strides, dilations, pads, output_padding and bias together.
  const int64_t n = 2, c = 4, h = 3, wd = 4, group = 2, mg = 3, kh = 2, kw = 3;
  const int64_t sh = 2, sw = 3, dh = 2, dw = 1, pt = 1, pl = 0, pb = 0, pr = 2, oph = 1, opw = 0;
  Tensor x = random_tensor({n, c, h, wd}, 11);
  Tensor w = random_tensor({c, mg, kh, kw}, 12);
  Tensor b = random_tensor({group * mg}, 13);
  const int64_t m = group * mg, cg = c / group;
  const int64_t oh = sh * (h - 1) + oph + (kh - 1) * dh + 1 - pt - pb;
  const int64_t ow = sw * (wd - 1) + opw + (kw - 1) * dw + 1 - pl - pr;
  std::vector<double> y(n * m * oh * ow);
  for (int64_t bi = 0; bi < n; ++bi)
    for (int64_t oc = 0; oc < m; ++oc)
      for (int64_t i = 0; i < oh * ow; ++i) y[(bi * m + oc) * oh * ow + i] = b.data<float>()[oc];
  for (int64_t bi = 0; bi < n; ++bi)
    for (int64_t ic = 0; ic < c; ++ic)
      for (int64_t iy = 0; iy < h; ++iy)
        for (int64_t ix = 0; ix < wd; ++ix)
          for (int64_t k = 0; k < mg; ++k)
            for (int64_t ky = 0; ky < kh; ++ky)
              for (int64_t kx = 0; kx < kw; ++kx) {
                int64_t oy = iy * sh + ky * dh - pt, ox = ix * sw + kx * dw - pl;
                if (oy < 0 || ox < 0 || oy >= oh || ox >= ow) continue;
                int64_t oc = (ic / cg) * mg + k;
                y[((bi * m + oc) * oh + oy) * ow + ox] +=
                    x.data<float>()[((bi * c + ic) * h + iy) * wd + ix] *
                    w.data<float>()[((ic * mg + k) * kh + ky) * kw + kx];
              }
  auto out = run_op("ConvTranspose", {{x}, {w}, {b}},
                    {{"group", attr_i(group)},
                     {"strides", attr_ints({sh, sw})},
                     {"dilations", attr_ints({dh, dw})},
                     {"pads", attr_ints({pt, pl, pb, pr})},
                     {"output_padding", attr_ints({oph, opw})}});
  ASSERT_EQ(out[0].shape(), (Shape{n, m, oh, ow}));
  expect_values(out[0], std::vector<float>(y.begin(), y.end()), 1e-4f);
}

TEST(NnConvTranspose, Errors) {
  Tensor x = random_tensor({1, 2, 3, 3}, 1);
  EXPECT_EQ(error_kind_of([&] {
              run_op("ConvTranspose", {{x}, {random_tensor({3, 1, 2, 2}, 2)}});
            }),
            ErrorKind::kShape);
  EXPECT_EQ(error_kind_of([&] {
              run_op("ConvTranspose", {{x}, {random_tensor({2, 1, 3, 3}, 2)}},
                     {{"pads", attr_ints({3, 3, 3, 3})}});
            }),
            ErrorKind::kShape);  // pads consume the whole output
}

// ---------------------------------------------------------------- Gemm / MatMul

std::vector<float> naive_matmul(const float* a, const float* b, int64_t m, int64_t k, int64_t n) {
  std::vector<float> y(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a[i * k + p] * b[p * n + j];
      y[i * n + j] = static_cast<float>(s);
    }
  return y;
}

TEST(NnGemm, HandComputed) {
  Tensor a = f32({2, 2}, {1, 2, 3, 4});
  Tensor b = f32({2, 2}, {5, 6, 7, 8});
  Tensor c = f32({2}, {1, 10});
  auto out = run_op("Gemm", {{a}, {b}, {c}}, {{"alpha", attr_f(2)}, {"beta", attr_f(0.5f)}});
  // A*B = [[19, 22], [43, 50]]; 2*AB + 0.5*[1, 10] broadcast over rows.
  expect_values(out[0], {38.5f, 49, 86.5f, 105});
}

TEST(NnGemm, RandomizedTransposesAndBroadcastC) {
  const int64_t m = 5, k = 7, n = 3;
  Tensor a = random_tensor({m, k}, 21);
  Tensor b = random_tensor({k, n}, 22);
  std::vector<float> ab = naive_matmul(a.data<float>(), b.data<float>(), m, k, n);
  auto transpose = [](const Tensor& t) {
    Tensor r(DType::kFloat32, {t.dim(1), t.dim(0)});
    for (int64_t i = 0; i < t.dim(0); ++i)
      for (int64_t j = 0; j < t.dim(1); ++j)
        r.data<float>()[j * t.dim(0) + i] = t.data<float>()[i * t.dim(1) + j];
    return r;
  };
  for (Shape c_shape : {Shape{}, Shape{1}, Shape{n}, Shape{m, 1}, Shape{1, n}, Shape{m, n}}) {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        Tensor c = random_tensor(c_shape, 23);
        auto out = run_op("Gemm", {{ta ? transpose(a) : a}, {tb ? transpose(b) : b}, {c}},
                          {{"transA", attr_i(ta)},
                           {"transB", attr_i(tb)},
                           {"alpha", attr_f(0.75f)},
                           {"beta", attr_f(-1.5f)}});
        ASSERT_EQ(out[0].shape(), (Shape{m, n}));
        std::vector<float> expected(m * n);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            int64_t ci = c_shape.size() == 2 && c_shape[0] != 1 ? i : 0;
            int64_t cj = !c_shape.empty() && c_shape.back() != 1 ? j : 0;
            float cv = c.data<float>()[ci * (c_shape.size() == 2 ? c_shape[1] : 1) + cj];
            expected[i * n + j] = 0.75f * ab[i * n + j] - 1.5f * cv;
          }
        expect_values(out[0], expected, 1e-5f);
      }
  }
  // No C at all.
  expect_values(run_op("Gemm", {{a}, {b}})[0], ab, 1e-5f);
}

// transB is computed from B's rows in place (no transposed copy), its columns split across
// threads: the same sums in the same order as transB=0 on B transposed, bit for bit, on
// shapes with several column ranges, a ragged last range and one row (a batch-1 classifier).
TEST(NnGemm, TransposedBLikeBTransposedBitForBit) {
  for (auto [m, k, n] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 70, 600}, {13, 33, 301}, {9, 5, 7}}) {
    Tensor a = random_tensor({m, k}, 31);
    Tensor bt = random_tensor({n, k}, 32);  // B as transB reads it
    Tensor b(DType::kFloat32, {k, n});
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) b.data<float>()[p * n + j] = bt.data<float>()[j * k + p];
    Tensor c = random_tensor({n}, 33);
    const auto attrs = [](int tb) {
      return std::map<std::string, Attribute>{{"transB", attr_i(tb)}, {"beta", attr_f(0.5f)}};
    };
    const Tensor got = run_op("Gemm", {{a}, {bt}, {c}}, attrs(1))[0];
    const Tensor want = run_op("Gemm", {{a}, {b}, {c}}, attrs(0))[0];
    ASSERT_EQ(got.shape(), (Shape{m, n}));
    EXPECT_TRUE(std::equal(got.data<float>(), got.data<float>() + got.numel(), want.data<float>()))
        << m << "x" << k << "x" << n;
    std::vector<float> expected = naive_matmul(a.data<float>(), b.data<float>(), m, k, n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) expected[i * n + j] += 0.5f * c.data<float>()[j];
    expect_values(got, expected, 1e-4f);
  }
}

TEST(NnGemm, Errors) {
  EXPECT_EQ(error_kind_of([] {
              run_op("Gemm", {{random_tensor({2, 3}, 1)}, {random_tensor({4, 2}, 2)}});
            }),
            ErrorKind::kShape);
  EXPECT_EQ(error_kind_of([] {
              run_op("Gemm", {{random_tensor({2, 3}, 1)},
                              {random_tensor({3, 4}, 2)},
                              {random_tensor({3, 4}, 3)}});
            }),
            ErrorKind::kShape);
  Tensor ai = Tensor::from_vector<int64_t>({1, 1}, {1});
  EXPECT_EQ(error_kind_of([&] { run_op("Gemm", {{ai}, {ai}}); }), ErrorKind::kUnsupported);
}

TEST(NnMatMul, VectorsAndMatrices) {
  Tensor v = f32({3}, {1, 2, 3});
  Tensor m = f32({3, 2}, {1, 0, 0, 1, 1, 1});
  auto dot = run_op("MatMul", {{v}, {v}});
  EXPECT_EQ(dot[0].shape(), Shape{});
  expect_values(dot[0], {14});
  auto vm = run_op("MatMul", {{v}, {m}});
  EXPECT_EQ(vm[0].shape(), (Shape{2}));
  expect_values(vm[0], {4, 5});
  Tensor mt = f32({2, 3}, {1, 0, 1, 0, 1, 1});
  auto mv = run_op("MatMul", {{mt}, {v}});
  EXPECT_EQ(mv[0].shape(), (Shape{2}));
  expect_values(mv[0], {4, 5});
}

TEST(NnMatMul, BroadcastBatchesAgainstNaive) {
  Tensor a = random_tensor({2, 1, 3, 4}, 31);
  Tensor b = random_tensor({5, 4, 2}, 32);
  auto out = run_op("MatMul", {{a}, {b}});
  ASSERT_EQ(out[0].shape(), (Shape{2, 5, 3, 2}));
  std::vector<float> expected;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      auto y = naive_matmul(a.data<float>() + i * 12, b.data<float>() + j * 8, 3, 4, 2);
      expected.insert(expected.end(), y.begin(), y.end());
    }
  expect_values(out[0], expected, 1e-5f);
}

TEST(NnMatMul, Errors) {
  EXPECT_EQ(error_kind_of([] {
              run_op("MatMul", {{random_tensor({2, 3}, 1)}, {random_tensor({2, 3}, 2)}});
            }),
            ErrorKind::kShape);
  EXPECT_EQ(error_kind_of([] {
              run_op("MatMul", {{random_tensor({2, 2, 3}, 1)}, {random_tensor({3, 3, 2}, 2)}});
            }),
            ErrorKind::kShape);  // batch 2 vs 3
  Tensor ai = Tensor::from_vector<int32_t>({1, 1}, {1});
  EXPECT_EQ(error_kind_of([&] { run_op("MatMul", {{ai}, {ai}}); }), ErrorKind::kUnsupported);
}

// ---------------------------------------------------------------- Normalizations

TEST(NnBatchNorm, HandComputed) {
  Tensor x = f32({1, 2, 2}, {1, 2, 3, 4});
  Tensor scale = f32({2}, {2, 1});
  Tensor bias = f32({2}, {0, 1});
  Tensor mean = f32({2}, {1, 3});
  Tensor var = f32({2}, {4, 1});
  auto out =
      run_op("BatchNormalization", {{x}, {scale}, {bias}, {mean}, {var}}, {{"epsilon", attr_f(0)}});
  // Channel 0: 2 * (x - 1) / 2; channel 1: (x - 3) / 1 + 1.
  expect_values(out[0], {0, 1, 1, 2});
}

TEST(NnBatchNorm, TrainingIsUnsupported) {
  Tensor x = random_tensor({2, 3, 4}, 1);
  Tensor p = f32({3}, {1, 1, 1});
  std::vector<OpInput> in = {{x}, {p}, {p}, {p}, {p}};
  EXPECT_EQ(error_kind_of([&] {
              run_op("BatchNormalization", in, {{"training_mode", attr_i(1)}}, 1, 15);
            }),
            ErrorKind::kUnsupported);
  EXPECT_EQ(error_kind_of([&] { run_op("BatchNormalization", in, {}, 3, 15); }),
            ErrorKind::kUnsupported);
  EXPECT_EQ(error_kind_of([&] {
              run_op("BatchNormalization", in, {{"spatial", attr_i(0)}}, 1, 7);
            }),
            ErrorKind::kUnsupported);
  Tensor q = f32({2}, {1, 1});
  EXPECT_EQ(error_kind_of([&] {
              run_op("BatchNormalization", {{x}, {q}, {p}, {p}, {p}});
            }),
            ErrorKind::kShape);
}

TEST(NnInstanceNorm, HandComputed) {
  // Plane (n=0, c=0) = [1, 3]: mean 2, var 1. Plane (0, 1) = [2, 4]: mean 3, var 1.
  Tensor x = f32({1, 2, 2}, {1, 3, 2, 4});
  auto out = run_op("InstanceNormalization", {{x}, {f32({2}, {2, 1})}, {f32({2}, {0, 5})}},
                    {{"epsilon", attr_f(0)}});
  expect_values(out[0], {-2, 2, 4, 6});
}

TEST(NnGroupNorm, HandComputedPerGroupAndPerChannel) {
  // Two groups of two channels: {1, 3, 5, 7} (mean 4, var 5) and {2, 2, 4, 4} (mean 3, var 1).
  Tensor x = f32({1, 4, 2}, {1, 3, 5, 7, 2, 2, 4, 4});
  const float r5 = 1.0f / std::sqrt(5.0f);
  // Opset 18: scale and bias per group.
  auto per_group = run_op("GroupNormalization", {{x}, {f32({2}, {1, 2})}, {f32({2}, {0, 10})}},
                          {{"epsilon", attr_f(0)}, {"num_groups", attr_i(2)}}, 1, 18);
  expect_values(per_group[0], {-3 * r5, -r5, r5, 3 * r5, 8, 8, 12, 12});
  // Opset 21: per channel.
  auto per_channel =
      run_op("GroupNormalization", {{x}, {f32({4}, {1, 2, 3, -1})}, {f32({4}, {0, 1, 0, 0})}},
             {{"epsilon", attr_f(0)}, {"num_groups", attr_i(2)}}, 1, 21);
  expect_values(per_channel[0], {-3 * r5, -r5, 2 * r5 + 1, 6 * r5 + 1, -3, -3, -1, -1});
}

TEST(NnLayerNorm, RandomizedWithStatistics) {
  Tensor x = random_tensor({2, 3, 4}, 41);
  for (int64_t axis : {-1, 1, 0, -2}) {
    int64_t a = axis < 0 ? axis + 3 : axis;
    Shape block(x.shape().begin() + a, x.shape().end());
    int64_t inner = 1;
    for (int64_t d : block) inner *= d;
    int64_t outer = 24 / inner;
    Tensor scale = random_tensor(block, 42);
    Tensor bias = random_tensor(block, 43);
    auto out = run_op("LayerNormalization", {{x}, {scale}, {bias}},
                      {{"axis", attr_i(axis)}, {"epsilon", attr_f(1e-3f)}}, 3);
    Shape stats = x.shape();
    for (size_t i = a; i < 3; ++i) stats[i] = 1;
    EXPECT_EQ(out[1].shape(), stats);
    EXPECT_EQ(out[2].dtype(), DType::kFloat32);
    std::vector<float> y, mean, inv;
    const float* xd = x.data<float>();
    for (int64_t r = 0; r < outer; ++r) {
      double mu = 0, var = 0;
      for (int64_t i = 0; i < inner; ++i) mu += xd[r * inner + i];
      mu /= inner;
      for (int64_t i = 0; i < inner; ++i) var += std::pow(xd[r * inner + i] - mu, 2);
      var /= inner;
      double is = 1 / std::sqrt(var + 1e-3);
      for (int64_t i = 0; i < inner; ++i)
        y.push_back((xd[r * inner + i] - mu) * is * scale.data<float>()[i] + bias.data<float>()[i]);
      mean.push_back(mu);
      inv.push_back(is);
    }
    expect_values(out[0], y, 1e-5f);
    expect_values(out[1], mean, 1e-5f);
    expect_values(out[2], inv, 1e-5f);
  }
}

TEST(NnLayerNorm, BroadcastScaleAndErrors) {
  Tensor x = f32({1, 2, 2}, {1, 3, 0, 2});
  // Normalize over the last two axes: mean 1.5, var 1.25.
  auto out = run_op("LayerNormalization", {{x}, {f32({1}, {2})}},
                    {{"axis", attr_i(1)}, {"epsilon", attr_f(0)}});
  float is = 1 / std::sqrt(1.25f);
  expect_values(out[0], {-1 * is, 3 * is, -3 * is, 1 * is});
  EXPECT_EQ(error_kind_of([&] {
              run_op("LayerNormalization", {{x}, {f32({3}, {1, 1, 1})}});
            }),
            ErrorKind::kShape);
  EXPECT_EQ(error_kind_of([&] {
              run_op("LayerNormalization", {{x}, {f32({2}, {1, 1})}}, {{"stash_type", attr_i(11)}});
            }),
            ErrorKind::kUnsupported);
}

TEST(NnLrn, AgainstFormula) {
  Tensor x = random_tensor({1, 5, 2}, 51);
  const float alpha = 0.5f, beta = 0.75f, bias = 2.0f;
  const int64_t size = 3;
  auto out = run_op("LRN", {{x}},
                    {{"alpha", attr_f(alpha)},
                     {"beta", attr_f(beta)},
                     {"bias", attr_f(bias)},
                     {"size", attr_i(size)}});
  std::vector<float> expected;
  const float* xd = x.data<float>();
  for (int c = 0; c < 5; ++c)
    for (int i = 0; i < 2; ++i) {
      double sq = 0;
      for (int k = std::max(0, c - 1); k <= std::min(4, c + 1); ++k)
        sq += xd[k * 2 + i] * xd[k * 2 + i];
      expected.push_back(xd[c * 2 + i] / std::pow(bias + alpha / size * sq, beta));
    }
  expect_values(out[0], expected, 1e-5f);
}

// ---------------------------------------------------------------- Softmax family

std::vector<float> naive_softmax(const std::vector<float>& x, int64_t outer, int64_t n,
                                 int64_t inner, bool log) {
  std::vector<float> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += std::exp(x[(o * n + k) * inner + j]);
      for (int64_t k = 0; k < n; ++k) {
        double v = x[(o * n + k) * inner + j];
        y[(o * n + k) * inner + j] = log ? v - std::log(sum) : std::exp(v) / sum;
      }
    }
  return y;
}

TEST(NnSoftmax, AxisSemanticsByOpset) {
  Tensor x = random_tensor({2, 3, 4}, 61);
  std::vector<float> xv = x.to_float_vector();
  // Opset 13: along axis 1 only.
  expect_values(run_op("Softmax", {{x}}, {{"axis", attr_i(1)}}, 1, 13)[0],
                naive_softmax(xv, 2, 3, 4, false));
  // Opset 11: flattened to (2, 12) at axis 1.
  expect_values(run_op("Softmax", {{x}}, {{"axis", attr_i(1)}}, 1, 11)[0],
                naive_softmax(xv, 2, 12, 1, false));
  // Defaults: -1 from opset 13, 1 before.
  expect_values(run_op("LogSoftmax", {{x}}, {}, 1, 13)[0], naive_softmax(xv, 6, 4, 1, true));
  expect_values(run_op("LogSoftmax", {{x}}, {}, 1, 12)[0], naive_softmax(xv, 2, 12, 1, true));
}

TEST(NnSoftmax, LargeValuesAreStable) {
  Tensor x = f32({1, 3}, {1000, 1001, 1002});
  auto out = run_op("Softmax", {{x}});
  double e0 = std::exp(-2.0), e1 = std::exp(-1.0), s = e0 + e1 + 1;
  expect_values(out[0], {float(e0 / s), float(e1 / s), float(1 / s)});
  auto log_out = run_op("LogSoftmax", {{x}});
  expect_values(log_out[0],
                {float(-2 - std::log(s)), float(-1 - std::log(s)), float(-std::log(s))});
}

TEST(NnHardmax, FirstMaximumWins) {
  Tensor x = f32({2, 3}, {1, 5, 5, -1, -2, -3});
  expect_values(run_op("Hardmax", {{x}})[0], {0, 1, 0, 1, 0, 0});
  // Axis 0 at opset 13: per column.
  expect_values(run_op("Hardmax", {{x}}, {{"axis", attr_i(0)}}, 1, 13)[0], {1, 1, 1, 0, 0, 0});
  EXPECT_EQ(error_kind_of([&] {
              run_op("Hardmax", {{x}}, {{"axis", attr_i(2)}});
            }),
            ErrorKind::kShape);
}

// ---------------------------------------------------------------- Pools

TEST(NnMaxPool, HandComputedWithIndices) {
  Tensor x = f32({1, 1, 3, 4}, {1, 9, 2, 3, 4, 5, 8, 6, 7, 0, 1, 2});
  auto out = run_op("MaxPool", {{x}}, {{"kernel_shape", attr_ints({2, 2})}}, 2);
  EXPECT_EQ(out[0].shape(), (Shape{1, 1, 2, 3}));
  expect_values(out[0], {9, 9, 8, 7, 8, 8});
  EXPECT_EQ(out[1].to_int_vector(), (std::vector<int64_t>{1, 1, 6, 8, 6, 6}));
  // Column-major indices: h + w * H.
  auto col = run_op("MaxPool", {{x}},
                    {{"kernel_shape", attr_ints({2, 2})}, {"storage_order", attr_i(1)}}, 2);
  EXPECT_EQ(col[1].to_int_vector(), (std::vector<int64_t>{3, 3, 7, 2, 7, 7}));
}

TEST(NnMaxPool, CeilModePadsDilations) {
  Tensor x = f32({1, 1, 5}, {1, 2, 3, 4, 5});
  Attrs base = {{"kernel_shape", attr_ints({2})}, {"strides", attr_ints({2})}};
  EXPECT_EQ(run_op("MaxPool", {{x}}, base)[0].shape(), (Shape{1, 1, 2}));
  Attrs ceil = base;
  ceil["ceil_mode"] = attr_i(1);
  expect_values(run_op("MaxPool", {{x}}, ceil)[0], {2, 4, 5});
  Attrs pads = base;
  pads["pads"] = attr_ints({1, 1});
  expect_values(run_op("MaxPool", {{x}}, pads)[0], {1, 3, 5});
  Attrs dil = {{"kernel_shape", attr_ints({2})}, {"dilations", attr_ints({3})}};
  expect_values(run_op("MaxPool", {{x}}, dil)[0], {4, 5});
  Tensor xu = Tensor::from_vector<uint8_t>({1, 1, 3}, {3, 200, 7});
  EXPECT_EQ(run_op("MaxPool", {{xu}}, {{"kernel_shape", attr_ints({2})}})[0].to_int_vector(),
            (std::vector<int64_t>{200, 200}));
}

TEST(NnAveragePool, PadsWithAndWithoutCountIncludePad) {
  Tensor x = f32({1, 1, 3}, {3, 6, 9});
  Attrs attrs = {{"kernel_shape", attr_ints({3})}, {"pads", attr_ints({1, 1})}};
  expect_values(run_op("AveragePool", {{x}}, attrs)[0], {4.5f, 6, 7.5f});
  attrs["count_include_pad"] = attr_i(1);
  expect_values(run_op("AveragePool", {{x}}, attrs)[0], {3, 6, 5});
  // ceil_mode: the last window is cut at the input's end and averages what it covers.
  Tensor y = f32({1, 1, 4}, {1, 2, 3, 4});
  Attrs ceil = {
      {"kernel_shape", attr_ints({3})}, {"strides", attr_ints({2})}, {"ceil_mode", attr_i(1)}};
  expect_values(run_op("AveragePool", {{y}}, ceil)[0], {2, 3.5f});
}

TEST(NnAveragePool, SameUpper2DAgainstNaive) {
  Tensor x = random_tensor({2, 3, 5, 6}, 71);
  auto out = run_op("AveragePool", {{x}},
                    {{"kernel_shape", attr_ints({3, 2})},
                     {"strides", attr_ints({2, 2})},
                     {"auto_pad", attr_s("SAME_UPPER")}});
  // Output 3x3; pads: H total (3-1)*2+3-5 = 2 -> 1/1, W total (3-1)*2+2-6 = 0.
  ASSERT_EQ(out[0].shape(), (Shape{2, 3, 3, 3}));
  std::vector<float> expected;
  const float* xd = x.data<float>();
  for (int p = 0; p < 6; ++p)
    for (int oy = 0; oy < 3; ++oy)
      for (int ox = 0; ox < 3; ++ox) {
        double sum = 0;
        int count = 0;
        for (int ky = 0; ky < 3; ++ky)
          for (int kx = 0; kx < 2; ++kx) {
            int iy = oy * 2 - 1 + ky, ix = ox * 2 + kx;
            if (iy < 0 || iy >= 5 || ix >= 6) continue;
            sum += xd[p * 30 + iy * 6 + ix];
            ++count;
          }
        expected.push_back(sum / count);
      }
  expect_values(out[0], expected, 1e-5f);
}

TEST(NnPool, GlobalAndLp) {
  Tensor x = f32({1, 2, 2, 2}, {1, 2, 3, 4, -5, 0, 0, 0});
  auto avg = run_op("GlobalAveragePool", {{x}});
  EXPECT_EQ(avg[0].shape(), (Shape{1, 2, 1, 1}));
  expect_values(avg[0], {2.5f, -1.25f});
  expect_values(run_op("GlobalMaxPool", {{x}})[0], {4, 0});
  expect_values(run_op("GlobalLpPool", {{x}})[0], {std::sqrt(30.0f), 5});
  expect_values(run_op("LpPool", {{x}}, {{"kernel_shape", attr_ints({1, 2})}, {"p", attr_i(1)}})[0],
                {3, 7, 5, 0});
}

TEST(NnPool, Errors) {
  Tensor x = random_tensor({1, 1, 4, 4}, 1);
  EXPECT_EQ(error_kind_of([&] {
              run_op("MaxPool", {{x}}, {{"kernel_shape", attr_ints({5, 5})}});
            }),
            ErrorKind::kShape);
  EXPECT_EQ(error_kind_of([&] {
              run_op("MaxPool", {{x}}, {{"kernel_shape", attr_ints({2})}});
            }),
            ErrorKind::kShape);
  Tensor xi = Tensor::from_vector<int32_t>({1, 1, 2}, {1, 2});
  EXPECT_EQ(error_kind_of([&] {
              run_op("AveragePool", {{xi}}, {{"kernel_shape", attr_ints({2})}});
            }),
            ErrorKind::kUnsupported);
}

// ---------------------------------------------------------------- Dropout

TEST(NnDropout, InferenceIsIdentity) {
  Tensor x = f32({2, 2}, {1, -2, 3, 4});
  auto out = run_op("Dropout", {{x}}, {}, 2, 13);
  expect_values(out[0], {1, -2, 3, 4});
  EXPECT_EQ(out[1].dtype(), DType::kBool);
  EXPECT_EQ(out[1].to_int_vector(), (std::vector<int64_t>{1, 1, 1, 1}));
  // Before opset 10 the mask has the input's type.
  auto old = run_op("Dropout", {{x}}, {{"ratio", attr_f(0.3f)}}, 2, 7);
  EXPECT_EQ(old[1].dtype(), DType::kFloat32);
  expect_values(old[1], {1, 1, 1, 1});
  // training_mode=false given as a constant, and training with ratio 0, are identities.
  Tensor no = Tensor::from_vector<bool>({}, {false});
  Tensor yes = Tensor::from_vector<bool>({}, {true});
  expect_values(run_op("Dropout", {{x}, {f32({}, {0.5f})}, {no, true}}, {}, 1, 13)[0],
                {1, -2, 3, 4});
  expect_values(run_op("Dropout", {{x}, {f32({}, {0}), true}, {yes, true}}, {}, 1, 13)[0],
                {1, -2, 3, 4});
}

TEST(NnDropout, TrainingIsUnsupported) {
  Tensor x = f32({2}, {1, 2});
  Tensor yes = Tensor::from_vector<bool>({}, {true});
  EXPECT_EQ(error_kind_of([&] {
              run_op("Dropout", {{x}, {f32({}, {0.5f}), true}, {yes, true}}, {}, 1, 13);
            }),
            ErrorKind::kUnsupported);
  EXPECT_EQ(error_kind_of([&] {
              run_op("Dropout", {{x}, {f32({}, {0.5f})}, {yes}}, {}, 1, 13);
            }),
            ErrorKind::kUnsupported);  // training_mode only known at run time
}

}  // namespace
}  // namespace collage
