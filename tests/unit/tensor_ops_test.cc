// Tests of the tensor (shape/injective) op group: hand-computed small cases, randomized
// cases against naive formulas written here, and the errors each op must raise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "unit/op_test_util.h"

namespace collage {
namespace {

using testing::attr_f;
using testing::attr_floats;
using testing::attr_i;
using testing::attr_ints;
using testing::attr_s;
using testing::attr_t;
using testing::OpInput;
using testing::run_op;

Tensor iota_f(Shape shape, float start = 0) {
  std::vector<float> v(shape_numel(shape));
  std::iota(v.begin(), v.end(), start);
  return Tensor::from_vector<float>(std::move(shape), v);
}

Tensor ints(std::vector<int64_t> v) {
  return Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v);
}

OpInput in(Tensor t) {
  return {std::move(t), false};
}
OpInput cst(Tensor t) {
  return {std::move(t), true};
}

template <typename T>
std::vector<T> values(const Tensor& t) {
  auto s = t.span<T>();
  return {s.begin(), s.end()};
}

ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no Error thrown";
  return ErrorKind::kInternal;
}

// Row-major coordinates of flat index `e` in `shape`.
std::vector<int64_t> coords(int64_t e, const Shape& shape) {
  std::vector<int64_t> c(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    c[k] = e % shape[k];
    e /= shape[k];
  }
  return c;
}

int64_t flat(const std::vector<int64_t>& c, const Shape& shape) {
  int64_t e = 0;
  for (size_t k = 0; k < shape.size(); ++k) e = e * shape[k] + c[k];
  return e;
}

// ---- Reshape family ----------------------------------------------------------------

TEST(TensorOpsTest, ReshapeZeroAndMinusOne) {
  auto out = run_op("Reshape", {in(iota_f({2, 3, 4})), cst(ints({0, -1}))});
  EXPECT_EQ(out[0].shape(), (Shape{2, 12}));
  EXPECT_EQ(values<float>(out[0]), values<float>(iota_f({24})));
}

TEST(TensorOpsTest, ReshapeAllowZeroKeepsZero) {
  auto out = run_op("Reshape", {in(iota_f({0, 3})), cst(ints({3, 0}))}, {{"allowzero", attr_i(1)}});
  EXPECT_EQ(out[0].shape(), (Shape{3, 0}));
  // Without allowzero the 0 copies the input's dim 1 (= 3): 9 != 0 elements.
  EXPECT_EQ(kind_of([] {
              run_op("Reshape", {in(iota_f({0, 3})), cst(ints({3, 0}))});
            }),
            ErrorKind::kShape);
}

TEST(TensorOpsTest, ReshapeErrors) {
  EXPECT_EQ(kind_of([] {
              run_op("Reshape", {in(iota_f({6})), cst(ints({4, -1}))});
            }),
            ErrorKind::kShape);
  EXPECT_EQ(kind_of([] {
              run_op("Reshape", {in(iota_f({6})), cst(ints({-1, -1}))});
            }),
            ErrorKind::kShape);
  EXPECT_EQ(kind_of([] {
              run_op("Reshape", {in(iota_f({6})), in(ints({6}))});
            }),
            ErrorKind::kShape);  // shape not constant
}

TEST(TensorOpsTest, FlattenAxes) {
  EXPECT_EQ(run_op("Flatten", {in(iota_f({2, 3, 4}))})[0].shape(), (Shape{2, 12}));
  EXPECT_EQ(run_op("Flatten", {in(iota_f({2, 3, 4}))}, {{"axis", attr_i(0)}})[0].shape(),
            (Shape{1, 24}));
  EXPECT_EQ(run_op("Flatten", {in(iota_f({2, 3, 4}))}, {{"axis", attr_i(-1)}})[0].shape(),
            (Shape{6, 4}));
  EXPECT_EQ(run_op("Flatten", {in(iota_f({2, 3, 4}))}, {{"axis", attr_i(3)}})[0].shape(),
            (Shape{24, 1}));
}

TEST(TensorOpsTest, SqueezeUnsqueezeBothOpsetForms) {
  EXPECT_EQ(run_op("Squeeze", {in(iota_f({1, 3, 1, 2}))})[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(run_op("Squeeze", {in(iota_f({1, 3, 1, 2})), cst(ints({-2}))})[0].shape(),
            (Shape{1, 3, 2}));
  EXPECT_EQ(
      run_op("Squeeze", {in(iota_f({1, 3, 1, 2}))}, {{"axes", attr_ints({0})}}, 1, 11)[0].shape(),
      (Shape{3, 1, 2}));
  EXPECT_EQ(kind_of([] {
              run_op("Squeeze", {in(iota_f({1, 3})), cst(ints({1}))});
            }),
            ErrorKind::kShape);
  auto u = run_op("Unsqueeze", {in(iota_f({3, 4})), cst(ints({3, 0}))});
  EXPECT_EQ(u[0].shape(), (Shape{1, 3, 4, 1}));
  EXPECT_EQ(values<float>(u[0]), values<float>(iota_f({12})));
  EXPECT_EQ(run_op("Unsqueeze", {in(iota_f({3}))}, {{"axes", attr_ints({-1})}}, 1, 11)[0].shape(),
            (Shape{3, 1}));
  EXPECT_EQ(kind_of([] {
              run_op("Unsqueeze", {in(iota_f({3})), cst(ints({0, 0}))});
            }),
            ErrorKind::kShape);
}

TEST(TensorOpsTest, IdentityCopiesAnyDtype) {
  auto t = Tensor::from_vector<int8_t>({3}, {-1, 2, 7});
  EXPECT_EQ(values<int8_t>(run_op("Identity", {in(t)})[0]), (std::vector<int8_t>{-1, 2, 7}));
}

// ---- Shape, Size, Constant, ConstantOfShape, Range, EyeLike, Trilu -------------------

TEST(TensorOpsTest, ShapeWithStartEnd) {
  Tensor x = iota_f({2, 3, 4, 5});
  EXPECT_EQ(values<int64_t>(run_op("Shape", {in(x)})[0]), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(
      values<int64_t>(run_op("Shape", {in(x)}, {{"start", attr_i(1)}, {"end", attr_i(-1)}})[0]),
      (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(
      values<int64_t>(run_op("Shape", {in(x)}, {{"start", attr_i(-10)}, {"end", attr_i(10)}})[0]),
      (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(run_op("Shape", {in(x)}, {{"start", attr_i(3)}, {"end", attr_i(1)}})[0].numel(), 0);
  EXPECT_EQ(values<int64_t>(run_op("Size", {in(x)})[0]), (std::vector<int64_t>{120}));
}

TEST(TensorOpsTest, ConstantForms) {
  auto t = run_op("Constant", {}, {{"value", attr_t(ints({4, 5}))}});
  EXPECT_EQ(values<int64_t>(t[0]), (std::vector<int64_t>{4, 5}));
  auto f = run_op("Constant", {}, {{"value_float", attr_f(2.5f)}});
  EXPECT_EQ(f[0].shape(), Shape{});
  EXPECT_EQ(values<float>(f[0]), (std::vector<float>{2.5f}));
  auto fs = run_op("Constant", {}, {{"value_floats", attr_floats({1, 2})}});
  EXPECT_EQ(values<float>(fs[0]), (std::vector<float>{1, 2}));
  auto is = run_op("Constant", {}, {{"value_ints", attr_ints({7})}});
  EXPECT_EQ(values<int64_t>(is[0]), (std::vector<int64_t>{7}));
  EXPECT_EQ(kind_of([] {
              run_op("Constant", {}, {{"value_string", attr_s("x")}});
            }),
            ErrorKind::kUnsupported);
}

TEST(TensorOpsTest, ConstantOfShape) {
  auto z = run_op("ConstantOfShape", {cst(ints({2, 3}))});
  EXPECT_EQ(z[0].dtype(), DType::kFloat32);
  EXPECT_EQ(values<float>(z[0]), std::vector<float>(6, 0.0f));
  auto v = run_op("ConstantOfShape", {cst(ints({2, 0}))},
                  {{"value", attr_t(Tensor::from_vector<int32_t>({1}, {3}))}});
  EXPECT_EQ(v[0].shape(), (Shape{2, 0}));
  auto w = run_op("ConstantOfShape", {cst(ints({3}))},
                  {{"value", attr_t(Tensor::from_vector<int64_t>({1}, {-4}))}});
  EXPECT_EQ(values<int64_t>(w[0]), (std::vector<int64_t>{-4, -4, -4}));
  EXPECT_TRUE(OpRegistry::global().find("ConstantOfShape")->value_dependent_shape);
}

TEST(TensorOpsTest, RangeFloatAndInt) {
  auto f = run_op("Range", {cst(Tensor::scalar<float>(1)), cst(Tensor::scalar<float>(2)),
                            cst(Tensor::scalar<float>(0.3f))});
  ASSERT_EQ(f[0].shape(), (Shape{4}));  // 1, 1.3, 1.6, 1.9
  EXPECT_NEAR(f[0].data<float>()[3], 1.9f, 1e-6);
  auto i = run_op("Range", {cst(Tensor::scalar<int32_t>(10)), cst(Tensor::scalar<int32_t>(4)),
                            cst(Tensor::scalar<int32_t>(-3))});
  EXPECT_EQ(values<int32_t>(i[0]), (std::vector<int32_t>{10, 7}));
  auto e = run_op("Range", {cst(Tensor::scalar<int64_t>(5)), cst(Tensor::scalar<int64_t>(1)),
                            cst(Tensor::scalar<int64_t>(1))});
  EXPECT_EQ(e[0].numel(), 0);
  EXPECT_EQ(kind_of([] {
              run_op("Range", {cst(Tensor::scalar<int64_t>(0)), cst(Tensor::scalar<int64_t>(1)),
                               cst(Tensor::scalar<int64_t>(0))});
            }),
            ErrorKind::kShape);
  EXPECT_TRUE(OpRegistry::global().find("Range")->value_dependent_shape);
}

TEST(TensorOpsTest, EyeLikeAndTrilu) {
  auto e = run_op("EyeLike", {in(iota_f({2, 3}))}, {{"k", attr_i(1)}, {"dtype", attr_i(7)}});
  EXPECT_EQ(values<int64_t>(e[0]), (std::vector<int64_t>{0, 1, 0, 0, 0, 1}));
  Tensor x = iota_f({3, 3}, 1);
  auto up = run_op("Trilu", {in(x)});
  EXPECT_EQ(values<float>(up[0]), (std::vector<float>{1, 2, 3, 0, 5, 6, 0, 0, 9}));
  auto lo = run_op("Trilu", {in(x), cst(Tensor::scalar<int64_t>(-1))}, {{"upper", attr_i(0)}});
  EXPECT_EQ(values<float>(lo[0]), (std::vector<float>{0, 0, 0, 4, 0, 0, 7, 8, 0}));
}

// ---- Transpose ---------------------------------------------------------------------

TEST(TensorOpsTest, TransposeDefaultReverses) {
  auto out = run_op("Transpose", {in(iota_f({2, 3}))});
  EXPECT_EQ(out[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(TensorOpsTest, TransposeRandomMatchesNaive) {
  std::mt19937 rng(1);
  std::vector<Shape> shapes = {{2, 3, 4}, {1, 5, 2, 3}, {3, 1, 2, 2, 2}, {4}};
  for (const Shape& shape : shapes) {
    std::vector<int64_t> perm(shape.size());
    std::iota(perm.begin(), perm.end(), 0);
    for (int trial = 0; trial < 4; ++trial) {
      std::shuffle(perm.begin(), perm.end(), rng);
      Tensor x = iota_f(shape);
      auto out = run_op("Transpose", {in(x)}, {{"perm", attr_ints(perm)}});
      Shape os;
      for (int64_t p : perm) os.push_back(shape[p]);
      ASSERT_EQ(out[0].shape(), os);
      for (int64_t e = 0; e < out[0].numel(); ++e) {
        auto oc = coords(e, os);
        std::vector<int64_t> ic(shape.size());
        for (size_t k = 0; k < perm.size(); ++k) ic[perm[k]] = oc[k];
        ASSERT_EQ(out[0].data<float>()[e], x.data<float>()[flat(ic, shape)]);
      }
    }
  }
}

TEST(TensorOpsTest, TransposeRejectsBadPerm) {
  EXPECT_EQ(kind_of([] {
              run_op("Transpose", {in(iota_f({2, 3}))}, {{"perm", attr_ints({0, 0})}});
            }),
            ErrorKind::kShape);
}

// ---- Concat, Split -----------------------------------------------------------------

TEST(TensorOpsTest, ConcatMiddleAxis) {
  Tensor a = iota_f({2, 1, 2}), b = iota_f({2, 2, 2}, 10), e = iota_f({2, 0, 2});
  auto out = run_op("Concat", {in(a), in(e), in(b)}, {{"axis", attr_i(-2)}});
  EXPECT_EQ(out[0].shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(values<float>(out[0]),
            (std::vector<float>{0, 1, 10, 11, 12, 13, 2, 3, 14, 15, 16, 17}));
  EXPECT_EQ(kind_of([&] {
              run_op("Concat", {in(a), in(iota_f({3, 1, 2}))}, {{"axis", attr_i(1)}});
            }),
            ErrorKind::kShape);
}

TEST(TensorOpsTest, SplitForms) {
  Tensor x = iota_f({2, 6});
  auto eq = run_op("Split", {in(x)}, {{"axis", attr_i(1)}}, 3);
  EXPECT_EQ(values<float>(eq[1]), (std::vector<float>{2, 3, 8, 9}));
  auto var = run_op("Split", {in(x), cst(ints({1, 0, 5}))}, {{"axis", attr_i(-1)}}, 3);
  EXPECT_EQ(var[1].shape(), (Shape{2, 0}));
  EXPECT_EQ(values<float>(var[2]), (std::vector<float>{1, 2, 3, 4, 5, 7, 8, 9, 10, 11}));
  auto old = run_op("Split", {in(x)}, {{"axis", attr_i(0)}, {"split", attr_ints({1, 1})}}, 2, 11);
  EXPECT_EQ(values<float>(old[1]), (std::vector<float>{6, 7, 8, 9, 10, 11}));
  auto uneven = run_op("Split", {in(iota_f({5}))}, {{"num_outputs", attr_i(2)}}, 2, 18);
  EXPECT_EQ(values<float>(uneven[1]), (std::vector<float>{3, 4}));
  EXPECT_EQ(kind_of([&] { run_op("Split", {in(iota_f({5}))}, {}, 2); }), ErrorKind::kShape);
  EXPECT_EQ(kind_of([&] {
              run_op("Split", {in(x), cst(ints({2, 2}))}, {{"axis", attr_i(1)}}, 2);
            }),
            ErrorKind::kShape);
}

// ---- Slice -------------------------------------------------------------------------

// The indices one dimension's slice selects, per the ONNX Slice spec. Unlike numpy, a
// negative step clamps the start to [0, d - 1] (so a start before the beginning still
// selects element 0).
std::vector<int64_t> naive_slice(int64_t d, int64_t start, int64_t end, int64_t step) {
  std::vector<int64_t> idx;
  auto norm = [d](int64_t v) { return v < 0 ? v + d : v; };
  int64_t s = norm(start), e = norm(end);
  if (step > 0) {
    s = std::clamp<int64_t>(s, 0, d);
    e = std::clamp<int64_t>(e, 0, d);
    for (int64_t i = s; i < e; i += step) idx.push_back(i);
  } else {
    s = std::clamp<int64_t>(s, 0, d - 1);
    e = std::clamp<int64_t>(e, -1, d - 1);
    for (int64_t i = s; i > e; i += step) idx.push_back(i);
  }
  return idx;
}

TEST(TensorOpsTest, SliceHandCases) {
  Tensor x = iota_f({3, 4});
  auto a = run_op("Slice", {in(x), cst(ints({1, -3})), cst(ints({1000, -1}))});
  EXPECT_EQ(a[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(a[0]), (std::vector<float>{5, 6, 9, 10}));
  auto r = run_op(
      "Slice", {in(x), cst(ints({-1})), cst(ints({INT64_MIN})), cst(ints({1})), cst(ints({-2}))});
  EXPECT_EQ(values<float>(r[0]), (std::vector<float>{3, 1, 7, 5, 11, 9}));
  auto old = run_op(
      "Slice", {in(x)},
      {{"starts", attr_ints({1})}, {"ends", attr_ints({2})}, {"axes", attr_ints({0})}}, 1, 9);
  EXPECT_EQ(values<float>(old[0]), (std::vector<float>{4, 5, 6, 7}));
  EXPECT_EQ(
      kind_of([&] {
        run_op("Slice", {in(x), cst(ints({0})), cst(ints({1})), cst(ints({0})), cst(ints({0}))});
      }),
      ErrorKind::kShape);
}

TEST(TensorOpsTest, SliceRandomMatchesNaive) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> pos(-7, 7), stepd(-3, 3);
  Shape shape = {4, 5, 3};
  Tensor x = iota_f(shape);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int64_t> starts, ends, axes = {0, 1, 2}, steps;
    std::shuffle(axes.begin(), axes.end(), rng);
    axes.resize(1 + trial % 3);
    std::vector<std::vector<int64_t>> sel(3);
    for (int64_t k = 0; k < 3; ++k) {
      sel[k].resize(shape[k]);
      std::iota(sel[k].begin(), sel[k].end(), 0);
    }
    for (int64_t a : axes) {
      int64_t st = stepd(rng);
      if (st == 0) st = 1;
      starts.push_back(pos(rng));
      ends.push_back(pos(rng));
      steps.push_back(st);
      sel[a] = naive_slice(shape[a], starts.back(), ends.back(), st);
    }
    auto out = run_op(
        "Slice", {in(x), cst(ints(starts)), cst(ints(ends)), cst(ints(axes)), cst(ints(steps))});
    Shape os = {static_cast<int64_t>(sel[0].size()), static_cast<int64_t>(sel[1].size()),
                static_cast<int64_t>(sel[2].size())};
    ASSERT_EQ(out[0].shape(), os);
    for (int64_t e = 0; e < out[0].numel(); ++e) {
      auto c = coords(e, os);
      ASSERT_EQ(out[0].data<float>()[e],
                x.data<float>()[flat({sel[0][c[0]], sel[1][c[1]], sel[2][c[2]]}, shape)]);
    }
  }
}

// ---- Expand, Tile ------------------------------------------------------------------

TEST(TensorOpsTest, ExpandBidirectional) {
  auto out = run_op("Expand", {in(iota_f({3, 1})), cst(ints({2, 1, 2}))});
  EXPECT_EQ(out[0].shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(kind_of([] {
              run_op("Expand", {in(iota_f({3})), cst(ints({2}))});
            }),
            ErrorKind::kShape);
}

TEST(TensorOpsTest, TileMatchesModulo) {
  Shape shape = {2, 3};
  Tensor x = iota_f(shape);
  auto out = run_op("Tile", {in(x), cst(ints({2, 3}))});
  Shape os = {4, 9};
  ASSERT_EQ(out[0].shape(), os);
  for (int64_t e = 0; e < out[0].numel(); ++e) {
    auto c = coords(e, os);
    ASSERT_EQ(out[0].data<float>()[e], x.data<float>()[(c[0] % 2) * 3 + c[1] % 3]);
  }
}

// ---- Pad ---------------------------------------------------------------------------

TEST(TensorOpsTest, PadModes) {
  Tensor x = iota_f({1, 3}, 1);  // [1, 2, 3]
  auto c = run_op("Pad", {in(x), cst(ints({0, 2, 0, 1})), cst(Tensor::scalar<float>(9))});
  EXPECT_EQ(values<float>(c[0]), (std::vector<float>{9, 9, 1, 2, 3, 9}));
  auto r = run_op("Pad", {in(x), cst(ints({0, 2, 0, 3}))}, {{"mode", attr_s("reflect")}});
  EXPECT_EQ(values<float>(r[0]), (std::vector<float>{3, 2, 1, 2, 3, 2, 1, 2}));
  auto e = run_op("Pad", {in(x), cst(ints({0, 2, 0, 1}))}, {{"mode", attr_s("edge")}});
  EXPECT_EQ(values<float>(e[0]), (std::vector<float>{1, 1, 1, 2, 3, 3}));
  auto crop = run_op("Pad", {in(x), cst(ints({0, -1, 0, 1}))});
  EXPECT_EQ(values<float>(crop[0]), (std::vector<float>{2, 3, 0}));
  auto old =
      run_op("Pad", {in(x)}, {{"pads", attr_ints({1, 0, 0, 0})}, {"value", attr_f(4)}}, 1, 2);
  EXPECT_EQ(values<float>(old[0]), (std::vector<float>{4, 4, 4, 1, 2, 3}));
  auto i32 = run_op("Pad", {in(Tensor::from_vector<int32_t>({2}, {5, 6})), cst(ints({1, 1}))});
  EXPECT_EQ(values<int32_t>(i32[0]), (std::vector<int32_t>{0, 5, 6, 0}));
  EXPECT_EQ(kind_of([&] {
              run_op("Pad", {in(x), cst(ints({0, 0, 0, 0}))}, {{"mode", attr_s("wrap")}});
            }),
            ErrorKind::kUnsupported);
}

// ---- DepthToSpace, SpaceToDepth ----------------------------------------------------

TEST(TensorOpsTest, DepthToSpaceModesMatchNaive) {
  const int64_t n = 1, c = 8, h = 2, w = 3, b = 2, oc = c / (b * b);
  Tensor x = iota_f({n, c, h, w});
  for (std::string mode : {"DCR", "CRD"}) {
    auto out = run_op("DepthToSpace", {in(x)}, {{"blocksize", attr_i(b)}, {"mode", attr_s(mode)}});
    ASSERT_EQ(out[0].shape(), (Shape{n, oc, h * b, w * b}));
    for (int64_t e = 0; e < out[0].numel(); ++e) {
      auto co = coords(e, out[0].shape());
      int64_t ch = co[1], y = co[2] / b, bi = co[2] % b, xx = co[3] / b, bj = co[3] % b;
      int64_t src_c = mode == "DCR" ? (bi * b + bj) * oc + ch : ch * b * b + bi * b + bj;
      ASSERT_EQ(out[0].data<float>()[e], x.data<float>()[flat({0, src_c, y, xx}, x.shape())])
          << mode;
    }
    // SpaceToDepth undoes DepthToSpace in DCR mode.
    if (mode == "DCR") {
      auto back = run_op("SpaceToDepth", {in(out[0])}, {{"blocksize", attr_i(b)}});
      EXPECT_EQ(values<float>(back[0]), values<float>(x));
    }
  }
}

// ---- Gather family -----------------------------------------------------------------

TEST(TensorOpsTest, GatherAxis1NegativeIndices) {
  Tensor x = iota_f({2, 3});
  auto out = run_op("Gather", {in(x), in(Tensor::from_vector<int32_t>({2, 2}, {2, -3, 1, -1}))},
                    {{"axis", attr_i(1)}});
  EXPECT_EQ(out[0].shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{2, 0, 1, 2, 5, 3, 4, 5}));
  EXPECT_EQ(kind_of([&] {
              run_op("Gather", {in(x), in(ints({3}))}, {{"axis", attr_i(1)}});
            }),
            ErrorKind::kInvalidArgument);
}

TEST(TensorOpsTest, GatherElementsAndND) {
  Tensor x = iota_f({2, 2}, 1);  // [[1,2],[3,4]]
  auto ge =
      run_op("GatherElements", {in(x), in(Tensor::from_vector<int64_t>({2, 2}, {0, 0, 1, -2}))},
             {{"axis", attr_i(1)}});
  EXPECT_EQ(values<float>(ge[0]), (std::vector<float>{1, 1, 4, 3}));
  auto nd = run_op("GatherND", {in(x), in(Tensor::from_vector<int64_t>({2, 1}, {1, 0}))});
  EXPECT_EQ(values<float>(nd[0]), (std::vector<float>{3, 4, 1, 2}));
  auto nd2 = run_op("GatherND", {in(x), in(Tensor::from_vector<int64_t>({2, 2}, {1, 1, 0, 1}))});
  EXPECT_EQ(values<float>(nd2[0]), (std::vector<float>{4, 2}));
  Tensor y = iota_f({2, 2, 2});
  auto bd = run_op("GatherND", {in(y), in(Tensor::from_vector<int64_t>({2, 1}, {1, 0}))},
                   {{"batch_dims", attr_i(1)}});
  EXPECT_EQ(values<float>(bd[0]), (std::vector<float>{2, 3, 4, 5}));
}

TEST(TensorOpsTest, ScatterElementsAndND) {
  Tensor x = Tensor::from_vector<float>({1, 5}, {1, 2, 3, 4, 5});
  Tensor idx = Tensor::from_vector<int64_t>({1, 2}, {1, 1});
  Tensor upd = Tensor::from_vector<float>({1, 2}, {1.1f, 2.1f});
  auto add = run_op("ScatterElements", {in(x), in(idx), in(upd)},
                    {{"axis", attr_i(1)}, {"reduction", attr_s("add")}});
  EXPECT_EQ(values<float>(add[0]), (std::vector<float>{1, 2 + 1.1f + 2.1f, 3, 4, 5}));
  auto neg = run_op("ScatterElements",
                    {in(x), in(Tensor::from_vector<int64_t>({1, 1}, {-1})),
                     in(Tensor::from_vector<float>({1, 1}, {9}))},
                    {{"axis", attr_i(1)}});
  EXPECT_EQ(values<float>(neg[0]), (std::vector<float>{1, 2, 3, 4, 9}));
  Tensor d = iota_f({4});
  auto nd = run_op("ScatterND",
                   {in(d), in(Tensor::from_vector<int64_t>({2, 1}, {3, 0})),
                    in(Tensor::from_vector<float>({2}, {7, 8}))},
                   {{"reduction", attr_s("mul")}});
  EXPECT_EQ(values<float>(nd[0]), (std::vector<float>{0, 1, 2, 21}));
  // More updates along the axis than data has there (a graph network's scatter_add of edge
  // messages into nodes): each lands where its index says; off the axis, more is an error.
  auto gather_edges = run_op("ScatterElements",
                             {in(Tensor::from_vector<float>({3, 1}, {0, 0, 0})),
                              in(Tensor::from_vector<int64_t>({5, 1}, {0, 2, 0, 1, 0})),
                              in(Tensor::from_vector<float>({5, 1}, {1, 2, 3, 4, 5}))},
                             {{"axis", attr_i(0)}, {"reduction", attr_s("add")}});
  EXPECT_EQ(values<float>(gather_edges[0]), (std::vector<float>{9, 4, 2}));
  EXPECT_EQ(kind_of([] {
              run_op("ScatterElements",
                     {in(Tensor::from_vector<float>({3, 1}, {0, 0, 0})),
                      in(Tensor::from_vector<int64_t>({1, 2}, {0, 0})),
                      in(Tensor::from_vector<float>({1, 2}, {1, 2}))},
                     {{"axis", attr_i(0)}});
            }),
            ErrorKind::kShape);
}

TEST(TensorOpsTest, OneHotNonZeroCompress) {
  auto oh = run_op("OneHot",
                   {in(Tensor::from_vector<int64_t>({3}, {0, -1, 5})),
                    cst(Tensor::scalar<int64_t>(3)), in(Tensor::from_vector<float>({2}, {0, 1}))},
                   {{"axis", attr_i(0)}});
  EXPECT_EQ(oh[0].shape(), (Shape{3, 3}));
  EXPECT_EQ(values<float>(oh[0]), (std::vector<float>{1, 0, 0, 0, 0, 0, 0, 1, 0}));
  Tensor m = Tensor::from_vector<int32_t>({2, 2}, {1, 0, 0, 3});
  auto nz = run_op("NonZero", {cst(m)});
  EXPECT_EQ(values<int64_t>(nz[0]), (std::vector<int64_t>{0, 1, 0, 1}));
  Tensor cond = Tensor::from_vector<bool>({2}, {false, true});
  auto cp = run_op("Compress", {in(iota_f({2, 2})), cst(cond)}, {{"axis", attr_i(1)}});
  EXPECT_EQ(values<float>(cp[0]), (std::vector<float>{1, 3}));
  auto flatc = run_op("Compress", {in(iota_f({2, 2})), cst(cond)});
  EXPECT_EQ(values<float>(flatc[0]), (std::vector<float>{1}));
}

// ---- Resize, Upsample --------------------------------------------------------------

Tensor scales(std::vector<float> v) {
  return Tensor::from_vector<float>({static_cast<int64_t>(v.size())}, v);
}

TEST(TensorOpsTest, ResizeNearestUpsample) {
  Tensor x = iota_f({1, 1, 2, 2}, 1);
  auto out = run_op("Resize", {in(x), OpInput{}, cst(scales({1, 1, 2, 3}))},
                    {{"mode", attr_s("nearest")}});
  ASSERT_EQ(out[0].shape(), (Shape{1, 1, 4, 6}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2,
                                                       3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}));
  auto up = run_op("Upsample", {in(x), cst(scales({1, 1, 2, 3}))}, {}, 1, 9);
  EXPECT_EQ(values<float>(up[0]), values<float>(out[0]));
}

TEST(TensorOpsTest, ResizeLinearHalfPixelMatchesFormula) {
  // 1-D check of bilinear half_pixel: x = (o + 0.5) / 2 - 0.5, clamped neighbours.
  Tensor x = Tensor::from_vector<float>({1, 1, 1, 3}, {1, 4, 2});
  auto out =
      run_op("Resize", {in(x), OpInput{}, cst(scales({1, 1, 1, 2}))}, {{"mode", attr_s("linear")}});
  std::vector<float> in_v = {1, 4, 2}, expect;
  for (int o = 0; o < 6; ++o) {
    double xs = (o + 0.5) / 2 - 0.5, fl = std::floor(xs), r = xs - fl;
    auto at = [&](double i) { return in_v[std::clamp<int>(static_cast<int>(i), 0, 2)]; };
    expect.push_back(static_cast<float>((1 - r) * at(fl) + r * at(fl + 1)));
  }
  EXPECT_EQ(values<float>(out[0]), expect);
}

TEST(TensorOpsTest, ResizeSizesAlignCorners) {
  Tensor x = Tensor::from_vector<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  auto out = run_op(
      "Resize", {in(x), OpInput{}, OpInput{}, cst(ints({1, 1, 3, 3}))},
      {{"mode", attr_s("linear")}, {"coordinate_transformation_mode", attr_s("align_corners")}});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4}));
}

TEST(TensorOpsTest, ResizeRejectsWhatItDoesNotImplement) {
  Tensor x = iota_f({1, 1, 2, 2});
  EXPECT_EQ(kind_of([&] {
              run_op("Resize", {in(x), OpInput{}, cst(scales({1, 1, 2, 2}))},
                     {{"antialias", attr_i(1)}, {"mode", attr_s("linear")}}, 1, 18);
            }),
            ErrorKind::kUnsupported);
  Tensor xi = Tensor::from_vector<int32_t>({1, 2}, {1, 2});
  EXPECT_EQ(
      kind_of([&] {
        run_op("Resize", {in(xi), OpInput{}, cst(scales({1, 2}))}, {{"mode", attr_s("linear")}});
      }),
      ErrorKind::kUnsupported);
  // Nearest on integers only moves elements, so it is allowed.
  auto ok = run_op("Resize", {in(xi), OpInput{}, cst(scales({1, 2}))});
  EXPECT_EQ(values<int32_t>(ok[0]), (std::vector<int32_t>{1, 1, 2, 2}));
}

}  // namespace
}  // namespace collage
