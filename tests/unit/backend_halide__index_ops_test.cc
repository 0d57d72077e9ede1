// Halide's index and mask ops against the reference backend, on randomized shapes: the ops
// only the reference ran before (GatherElements, GatherND, ScatterElements / Scatter,
// ScatterND, OneHot, Trilu, Hardmax, a float Mod, Casts from integers and bools), each
// compiled as a whole graph with the op it feeds (so nothing runs elsewhere) and proposed
// alone. Indices are drawn in range, negative ones included, with duplicates for the
// scatters (their order decides what stays); one out of range fails the kernel.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "collage/backend.h"
#include "collage/session.h"
#include "unit/backend_test_util.h"
#include "unit/graph_builder.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::attr_s;
using testing::expect_like_reference;
using testing::GraphBuilder;
using testing::has_match;
using testing::pick;

Backend& halide() {
  return BackendRegistry::global().get("halide");
}

Shape random_shape(std::mt19937& rng, int rank, int64_t lo, int64_t hi) {
  Shape s;
  for (int d = 0; d < rank; ++d) s.push_back(pick(rng, lo, hi));
  return s;
}

Tensor random_floats(Shape shape, std::mt19937& rng) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = static_cast<float>(pick(rng, -400, 400)) / 64.0f;
  return t;
}

// Indices in [-dim, dim) (negative ones count from the end), as int64 or int32.
Tensor random_indices(Shape shape, std::mt19937& rng, int64_t dim, DType dtype) {
  Tensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = pick(rng, -dim, dim - 1);
    if (dtype == DType::kInt32)
      t.data<int32_t>()[i] = static_cast<int32_t>(v);
    else
      t.data<int64_t>()[i] = v;
  }
  return t;
}

// The op's output, scaled by 2 (so the compiled graph computes past it), as the graph's
// output; float outputs only.
void output_doubled(GraphBuilder& b, ValueId y) {
  b.output(b.add1("Mul", {y, b.constant("two", Tensor::scalar(2.0f))}));
}

TEST(HalideIndexOps, GatherElementsLikeReference) {
  std::mt19937 rng(61);
  for (int trial = 0; trial < 12; ++trial) {
    const int rank = static_cast<int>(pick(rng, 1, 4));
    const Shape data = random_shape(rng, rank, 1, 9);
    const int64_t axis = pick(rng, -rank, rank - 1);
    const size_t a = static_cast<size_t>(axis < 0 ? axis + rank : axis);
    Shape ishape = data;  // no larger than data, except along the axis
    for (int d = 0; d < rank; ++d)
      ishape[d] = d == static_cast<int>(a) ? pick(rng, 1, 12) : pick(rng, 1, data[d]);
    const DType itype = trial % 3 == 0 ? DType::kInt32 : DType::kInt64;
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, data);
    ValueId idx = b.input("idx", itype, ishape);
    ValueId y = b.add1("GatherElements", {x, idx}, {{"axis", attr_i(axis)}});
    output_doubled(b, y);
    const std::string what = fmt::format("GatherElements {} axis {} indices {}",
                                         shape_to_string(data), axis, shape_to_string(ishape));
    EXPECT_TRUE(has_match(halide(), b.graph(), {y})) << what;
    expect_like_reference(halide(), b.graph(),
                          {random_floats(data, rng), random_indices(ishape, rng, data[a], itype)},
                          what);
  }
}

TEST(HalideIndexOps, GatherNDLikeReference) {
  std::mt19937 rng(67);
  for (int trial = 0; trial < 12; ++trial) {
    const int rank = static_cast<int>(pick(rng, 1, 4));
    const Shape data = random_shape(rng, rank, 1, 7);
    const int64_t batch = pick(rng, 0, rank - 1);
    const int64_t depth = pick(rng, 1, rank - batch);  // index tuples of this length
    Shape ishape(data.begin(), data.begin() + batch);
    for (int64_t d = 0, extra = pick(rng, 0, 2); d < extra; ++d) ishape.push_back(pick(rng, 1, 4));
    ishape.push_back(depth);
    Tensor idx(DType::kInt64, ishape);
    for (int64_t i = 0; i < idx.numel(); ++i) {
      const int64_t dim = data[batch + i % depth];
      idx.data<int64_t>()[i] = pick(rng, -dim, dim - 1);
    }
    const bool int_data = trial % 4 == 3;  // the data may be any type a buffer holds
    GraphBuilder b;
    ValueId x = b.input("x", int_data ? DType::kInt64 : DType::kFloat32, data);
    ValueId indices = b.input("idx", DType::kInt64, ishape);
    ValueId y = b.add1("GatherND", {x, indices}, {{"batch_dims", attr_i(batch)}});
    const std::string what =
        fmt::format("GatherND {} batch_dims {} indices {}{}", shape_to_string(data), batch,
                    shape_to_string(ishape), int_data ? " (int64 data)" : "");
    Tensor xs = random_floats(data, rng);
    if (int_data) {
      xs = random_indices(data, rng, 1000, DType::kInt64);
      b.output(y);
    } else {
      output_doubled(b, y);
    }
    EXPECT_TRUE(has_match(halide(), b.graph(), {y})) << what;
    expect_like_reference(halide(), b.graph(), {xs, idx}, what);
  }
}

// Few distinct indices, so most trials write one element several times: with reduction
// "none" the last write must win (the reference's order), with add and mul every update
// counts, in the reference's order (so the sums are exact).
TEST(HalideIndexOps, ScatterElementsLikeReferenceWithDuplicates) {
  std::mt19937 rng(71);
  const char* reductions[] = {"none", "add", "mul"};
  for (int trial = 0; trial < 15; ++trial) {
    const int rank = static_cast<int>(pick(rng, 1, 3));
    const Shape data = random_shape(rng, rank, 1, 8);
    const int64_t axis = pick(rng, -rank, rank - 1);
    const size_t a = static_cast<size_t>(axis < 0 ? axis + rank : axis);
    // Along the axis, up to twice as many updates as data has there (a scatter_add of edge
    // messages into nodes).
    Shape ishape;
    for (int d = 0; d < rank; ++d)
      ishape.push_back(pick(rng, 1, static_cast<size_t>(d) == a ? 2 * data[d] : data[d]));
    const std::string reduction = reductions[trial % 3];
    const bool old_name = trial == 4;  // Scatter, opsets 9-10
    GraphBuilder b(old_name ? 10 : 16);
    ValueId x = b.input("x", DType::kFloat32, data);
    ValueId idx = b.input("idx", trial % 2 ? DType::kInt32 : DType::kInt64, ishape);
    ValueId upd = b.input("upd", DType::kFloat32, ishape);
    std::map<std::string, Attribute> attrs = {{"axis", attr_i(axis)}};
    if (!old_name) attrs["reduction"] = attr_s(reduction);
    ValueId y = b.add1(old_name ? "Scatter" : "ScatterElements", {x, idx, upd}, attrs);
    output_doubled(b, y);
    const std::string what =
        fmt::format("{} {} axis {} indices {} reduction {}", old_name ? "Scatter" : "Elements",
                    shape_to_string(data), axis, shape_to_string(ishape), reduction);
    EXPECT_TRUE(has_match(halide(), b.graph(), {y})) << what;
    const int64_t dim = std::min<int64_t>(data[a], 2);  // two distinct targets per row
    expect_like_reference(
        halide(), b.graph(),
        {random_floats(data, rng), random_indices(ishape, rng, dim, b.graph().value(idx).dtype),
         random_floats(ishape, rng)},
        what);
  }
}

TEST(HalideIndexOps, ScatterNDLikeReferenceWithDuplicates) {
  std::mt19937 rng(73);
  // max and min (opset 18) on data and updates holding NaNs: std::max's and std::min's
  // choices (the element stays unless the update compares greater or less).
  const char* reductions[] = {"none", "add", "mul", "max", "min"};
  for (int trial = 0; trial < 15; ++trial) {
    const int rank = static_cast<int>(pick(rng, 1, 4));
    const Shape data = random_shape(rng, rank, 1, 6);
    const int64_t depth = pick(rng, 1, rank);
    Shape ishape;
    for (int64_t d = 0, lead = pick(rng, 1, 2); d < lead; ++d) ishape.push_back(pick(rng, 1, 5));
    ishape.push_back(depth);
    Shape ushape(ishape.begin(), ishape.end() - 1);
    ushape.insert(ushape.end(), data.begin() + depth, data.end());
    Tensor idx(DType::kInt64, ishape);
    for (int64_t i = 0; i < idx.numel(); ++i) {
      const int64_t dim = std::min<int64_t>(data[i % depth], 2);
      idx.data<int64_t>()[i] = pick(rng, -dim, dim - 1);
    }
    const std::string reduction = reductions[trial % 5];
    GraphBuilder b(16);
    ValueId x = b.input("x", DType::kFloat32, data);
    ValueId indices = b.input("idx", DType::kInt64, ishape);
    ValueId upd = b.input("upd", DType::kFloat32, ushape);
    ValueId y = b.add1("ScatterND", {x, indices, upd}, {{"reduction", attr_s(reduction)}});
    output_doubled(b, y);
    const std::string what = fmt::format("ScatterND {} indices {} reduction {}",
                                         shape_to_string(data), shape_to_string(ishape), reduction);
    EXPECT_TRUE(has_match(halide(), b.graph(), {y})) << what;
    Tensor xs = random_floats(data, rng), us = random_floats(ushape, rng);
    if (trial % 5 >= 3) {
      xs.data<float>()[0] = NAN;
      us.data<float>()[us.numel() - 1] = NAN;
    }
    auto [got, want] = testing::run_backend_and_reference(halide(), b.graph(), {xs, idx, us});
    EXPECT_TRUE(testing::outputs_match(got, want)) << what;
  }
}

// An index past the axis, or one that only a 32-bit wrap would bring into range (2^32 + 1),
// fails the kernel with an error instead of reading or writing another element.
TEST(HalideIndexOps, IndexOutOfRangeFailsTheKernel) {
  const int64_t wraps = (int64_t{1} << 32) + 1;
  for (const std::string op : {"GatherElements", "ScatterElements", "GatherND", "ScatterND"}) {
    const bool nd = op.size() > 2 && op.substr(op.size() - 2) == "ND";
    const bool scatter = op[0] == 'S';
    GraphBuilder b(16);
    ValueId x = b.input("x", DType::kFloat32, {4, 3});
    const Shape ishape = nd ? Shape{2, 1} : Shape{2, 3};
    ValueId idx = b.input("idx", DType::kInt64, ishape);
    std::vector<ValueId> ins = {x, idx};
    const Shape ushape = nd ? Shape{2, 3} : ishape;
    if (scatter) ins.push_back(b.input("upd", DType::kFloat32, ushape));
    ValueId y = b.add1(op, ins);
    b.output(y);
    const Graph g = b.finish();
    std::unique_ptr<Kernel> kernel = halide().compile(g, testing::test_options());
    std::vector<Tensor> out = {Tensor(DType::kFloat32, g.value(y).shape)};
    std::vector<Tensor> inputs = {Tensor(DType::kFloat32, {4, 3}), Tensor(DType::kInt64, ishape)};
    if (scatter) inputs.push_back(Tensor(DType::kFloat32, ushape));
    for (Tensor& t : inputs)
      for (int64_t i = 0; i < t.numel(); ++i)
        if (t.dtype() == DType::kFloat32) t.data<float>()[i] = 1.0f;
    int64_t* k = inputs[1].data<int64_t>();
    for (int64_t i = 0; i < inputs[1].numel(); ++i) k[i] = -1;  // in range: the last row
    EXPECT_NO_THROW(kernel->run(inputs, out)) << op;
    for (int64_t bad : {int64_t{4}, int64_t{-5}, wraps}) {
      k[inputs[1].numel() - 1] = bad;
      EXPECT_THROW(kernel->run(inputs, out), Error) << op << " index " << bad;
    }
  }
}

// OneHot with float and integer indices (negative ones count from the end, ones out of
// range give an all-off row) along every axis, and integer values.
TEST(HalideIndexOps, OneHotLikeReference) {
  std::mt19937 rng(79);
  for (int trial = 0; trial < 10; ++trial) {
    const int rank = static_cast<int>(pick(rng, 0, 3));
    const Shape ishape = random_shape(rng, rank, 1, 6);
    const int64_t depth = pick(rng, 1, 9);
    const int64_t axis = pick(rng, -rank - 1, rank);
    const DType itype = trial % 3 == 0 ? DType::kFloat32 : DType::kInt64;
    const DType vtype = trial % 4 == 1 ? DType::kInt64 : DType::kFloat32;
    GraphBuilder b(11);
    ValueId idx = b.input("idx", itype, ishape);
    ValueId values = b.input("values", vtype, {2});
    ValueId d = b.constant("depth", Tensor::scalar<int64_t>(depth));
    ValueId y = b.add1("OneHot", {idx, d, values}, {{"axis", attr_i(axis)}});
    if (vtype == DType::kFloat32)
      output_doubled(b, y);
    else
      b.output(y);
    Tensor indices(itype, ishape);
    for (int64_t i = 0; i < indices.numel(); ++i) {
      const int64_t v = pick(rng, -depth - 2, depth + 2);  // some out of range
      if (itype == DType::kFloat32)
        indices.data<float>()[i] = static_cast<float>(v) + (v < 0 ? -0.5f : 0.5f);  // truncated
      else
        indices.data<int64_t>()[i] = v;
    }
    Tensor vals = vtype == DType::kFloat32 ? Tensor::from_vector<float>({2}, {-1.5f, 3.0f})
                                           : Tensor::from_vector<int64_t>({2}, {7, -9});
    const std::string what = fmt::format("OneHot {} depth {} axis {} {} indices",
                                         shape_to_string(ishape), depth, axis, dtype_name(itype));
    EXPECT_TRUE(has_match(halide(), b.graph(), {y})) << what;
    expect_like_reference(halide(), b.graph(), {indices, vals}, what);
  }
}

// Trilu, upper and lower, with diagonals inside and past the matrix, on float and int64 data.
TEST(HalideIndexOps, TriluLikeReference) {
  std::mt19937 rng(83);
  for (int trial = 0; trial < 12; ++trial) {
    const int rank = static_cast<int>(pick(rng, 2, 4));
    const Shape s = random_shape(rng, rank, 1, 9);
    const int64_t k = trial % 5 == 4 ? 0 : pick(rng, -10, 10);
    const bool upper = trial % 2 == 0, int_data = trial % 6 == 5, no_k = trial % 5 == 4;
    GraphBuilder b(14);
    ValueId x = b.input("x", int_data ? DType::kInt64 : DType::kFloat32, s);
    std::vector<ValueId> ins = {x};
    if (!no_k) ins.push_back(b.constant("k", Tensor::scalar<int64_t>(k)));
    ValueId y = b.add1("Trilu", ins, {{"upper", attr_i(upper)}});
    Tensor xs = int_data ? random_indices(s, rng, 100, DType::kInt64) : random_floats(s, rng);
    if (int_data)
      b.output(y);
    else
      output_doubled(b, y);
    const std::string what =
        fmt::format("Trilu {} {} k {}", shape_to_string(s), upper ? "upper" : "lower",
                    no_k ? "absent" : fmt::format("{}", k));
    EXPECT_TRUE(has_match(halide(), b.graph(), {y})) << what;
    expect_like_reference(halide(), b.graph(), {xs}, what);
  }
}

// Hardmax on values with ties (a coarse grid), infinities and NaNs (first or later along the
// axis), before opset 13 (the dims from `axis` on, flattened) and after (one axis).
TEST(HalideIndexOps, HardmaxLikeReferenceWithTiesAndNaNs) {
  std::mt19937 rng(89);
  const float inf = std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 12; ++trial) {
    const int rank = static_cast<int>(pick(rng, 1, 4));
    const Shape s = random_shape(rng, rank, 1, 7);
    const int64_t axis = pick(rng, -rank, rank - 1);
    const int64_t opset = trial % 2 ? 11 : 13;
    GraphBuilder b(opset);
    ValueId x = b.input("x", DType::kFloat32, s);
    ValueId y = b.add1("Hardmax", {x}, {{"axis", attr_i(axis)}});
    output_doubled(b, y);
    Tensor xs(DType::kFloat32, s);
    for (int64_t i = 0; i < xs.numel(); ++i) {
      const int64_t r = pick(rng, 0, 99);
      xs.data<float>()[i] = r < 3   ? inf
                            : r < 6 ? -inf
                            : (trial % 3 == 0 && r < 20)
                                ? NAN
                                : 0.5f * static_cast<float>(pick(rng, -2, 2));
    }
    const std::string what =
        fmt::format("Hardmax {} axis {} opset {}", shape_to_string(s), axis, opset);
    EXPECT_TRUE(has_match(halide(), b.graph(), {y})) << what;
    expect_like_reference(halide(), b.graph(), {xs}, what);
  }
}

// TopK on values with ties (a coarse grid), signed zeros, infinities and NaNs, largest and
// smallest, along random axes, k from 1 to the axis (a full sort) within the kernel's limit:
// the reference's order exactly (NaN above everything, equal values lower index first),
// values and indices. A k past the limit is left to the reference.
TEST(HalideIndexOps, TopKLikeReferenceWithTiesAndNaNs) {
  std::mt19937 rng(101);
  const float inf = std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 14; ++trial) {
    const int rank = static_cast<int>(pick(rng, 1, 3));
    Shape s = random_shape(rng, rank, 1, 9);
    const int64_t axis = pick(rng, -rank, rank - 1);
    const size_t a = static_cast<size_t>(axis < 0 ? axis + rank : axis);
    if (trial == 0) s[a] = 40;  // long enough for the vectorised reduction over the axis
    const int64_t k =
        trial % 5 == 4 ? std::min<int64_t>(s[a], 16) : pick(rng, 1, std::min<int64_t>(s[a], 6));
    const bool largest = trial % 2 == 0;
    GraphBuilder b(11);
    ValueId x = b.input("x", DType::kFloat32, s);
    const std::vector<ValueId> out =
        b.add("TopK", {x, b.constant("k", Tensor::from_vector<int64_t>({1}, {k}))},
              {{"axis", attr_i(axis)}, {"largest", attr_i(largest)}}, 2);
    output_doubled(b, out[0]);
    b.output(out[1]);
    Tensor xs(DType::kFloat32, s);
    for (int64_t i = 0; i < xs.numel(); ++i) {
      const int64_t r = pick(rng, 0, 99);
      xs.data<float>()[i] = r < 4    ? inf
                            : r < 8  ? -inf
                            : r < 12 ? -0.0f
                            : (trial % 3 == 0 && r < 24)
                                ? (r % 2 ? NAN : -NAN)
                                : 0.5f * static_cast<float>(pick(rng, -3, 3));
    }
    const std::string what = fmt::format("TopK {} axis {} k {} {}", shape_to_string(s), axis, k,
                                         largest ? "largest" : "smallest");
    EXPECT_TRUE(has_match(halide(), b.graph(), {out[0]})) << what;
    auto [got, want] = testing::run_backend_and_reference(halide(), b.graph(), {xs});
    EXPECT_TRUE(testing::outputs_match(got, want, Tolerance{0, 0})) << what;
  }
  GraphBuilder b(11);
  ValueId x = b.input("x", DType::kFloat32, {2, 40});
  const std::vector<ValueId> out =
      b.add("TopK", {x, b.constant("k", Tensor::from_vector<int64_t>({1}, {17}))}, {}, 2);
  b.output(out[0]);
  b.output(out[1]);
  testing::expect_unsupported(halide(), b.graph(), "TopK with k 17", "partial sort");
}

// Mod of floats of mixed signs (both conventions; fmod's result is exact, so equal bits),
// and Casts from int64, int32 and bool to float and back, saturating and NaN included.
TEST(HalideIndexOps, FloatModAndCastsLikeReference) {
  std::mt19937 rng(97);
  for (int fmod = 0; fmod < 2; ++fmod) {
    GraphBuilder b(13);
    ValueId x = b.input("x", DType::kFloat32, {5, 33});
    ValueId d = b.input("d", DType::kFloat32, {1, 33});
    ValueId y = b.add1("Mod", {x, d}, {{"fmod", attr_i(fmod)}});
    output_doubled(b, y);
    Tensor ds = random_floats({1, 33}, rng);
    for (int64_t i = 0; i < ds.numel(); ++i)
      if (ds.data<float>()[i] == 0.0f) ds.data<float>()[i] = 0.75f;
    Tensor xs = random_floats({5, 33}, rng);
    xs.data<float>()[0] = 1e9f;  // many multiples of the divisor: a rounded a - b*floor(a/b) errs
    const std::string what = fmt::format("Mod fmod {}", fmod);
    EXPECT_TRUE(has_match(halide(), b.graph(), {y})) << what;
    auto [got, want] = testing::run_backend_and_reference(halide(), b.graph(), {xs, ds});
    EXPECT_TRUE(testing::outputs_match(got, want, Tolerance{0, 0})) << what;
  }
  const float inf = std::numeric_limits<float>::infinity();
  {
    // ThresholdedRelu and Shrink on NaNs and infinities: a NaN compares false (0 out).
    GraphBuilder b(13);
    ValueId x = b.input("x", DType::kFloat32, {8});
    b.output(b.add1("ThresholdedRelu", {x}, {{"alpha", testing::attr_f(0.5f)}}));
    b.output(b.add1("Shrink", {x},
                    {{"lambd", testing::attr_f(0.5f)}, {"bias", testing::attr_f(0.25f)}}));
    Tensor xs = Tensor::from_vector<float>({8}, {NAN, -NAN, inf, -inf, 0.5f, -0.5f, 0.75f, -2.0f});
    auto [got, want] = testing::run_backend_and_reference(halide(), b.graph(), {xs});
    EXPECT_TRUE(testing::outputs_match(got, want, Tolerance{0, 0})) << "ThresholdedRelu, Shrink";
  }
  for (const DType to : {DType::kInt32, DType::kInt64, DType::kBool}) {
    GraphBuilder b(13);
    ValueId x = b.input("x", DType::kFloat32, {20});
    ValueId c = b.add1("Cast", {x}, {{"to", attr_i(static_cast<int64_t>(to))}});
    ValueId back = b.add1("Cast", {c}, {{"to", attr_i(static_cast<int64_t>(DType::kFloat32))}});
    b.output(back);
    b.output(c);
    Tensor xs = Tensor::from_vector<float>(
        {20},
        {0.0f,          -0.0f,          0.5f,          -0.5f,   1.99f,    -1.99f,  3e9f, -3e9f,
         2147483520.0f, -2147483648.0f, 2147483648.0f, 9.3e18f, -9.3e18f, 9.2e18f, inf,  -inf,
         NAN,           7.0f,           -123456.7f,    1e-30f});
    // CastLike (the type of its second input) to the same type.
    ValueId like = b.add1("CastLike", {x, b.input("target", to, {1})});
    b.output(like);
    const std::string what = fmt::format("Cast float32 -> {} -> float32", dtype_name(to));
    EXPECT_TRUE(has_match(halide(), b.graph(), {c})) << what;
    EXPECT_TRUE(has_match(halide(), b.graph(), {like})) << what;
    Tensor target(to, {1});
    std::memset(target.raw(), 0, target.nbytes());
    auto [got, want] = testing::run_backend_and_reference(halide(), b.graph(), {xs, target});
    EXPECT_TRUE(testing::outputs_match(got, want, Tolerance{0, 0})) << what;
  }
}

}  // namespace
}  // namespace collage
