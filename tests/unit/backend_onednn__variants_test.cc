// The onednn backends' variants (other algorithms for the same nodes) against the reference
// backend, with the tuner's own check (compare.h's Tolerance::backend_vs_reference): the
// Winograd convolution as a `onednn` variant, and inside `onednn-graph` regions as a plain
// ("winograd": every Conv it takes) or a composed variant ("winograd@I,J": those nodes),
// onednn-graph's channel-blocked layouts ("blocked", "blocked@I,J", composed with Winograd),
// which variants each backend offers, and what compile() must refuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/kernels.h"
#include "backends/onednn/region_kernel.h"
#include "backends/onednn/winograd_conv.h"
#include "collage/backend.h"
#include "collage/placement_view.h"
#include "collage/plan.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "onednn_test_util.h"
#include "util/compare.h"

namespace collage {
namespace {

using testing::attr_f;
using testing::attr_i;
using testing::attr_ints;
using testing::GraphBuilder;
using testing::onednn;
using testing::onednn_graph;
using testing::pick;
using testing::ProgramSteps;
using testing::steps_of;

struct Outputs {
  std::vector<Tensor> got, want;
};

// `g` compiled as one onednn-graph region.
ProgramSteps region_steps(const Graph& g) {
  return steps_of(*onednn::compile_region(g));
}
// `g` compiled whole on `backend` as `variant`.
ProgramSteps compiled_steps(Backend& backend, const Graph& g, const std::string& variant) {
  CompileOptions options = testing::test_options();
  options.variant = variant;
  return steps_of(*backend.compile(g, options));
}

// The whole graph compiled on `backend` as `variant`, and the reference, on the same inputs.
Outputs run_variant(Backend& backend, const Graph& g, const std::string& variant,
                    uint64_t seed = 5) {
  std::vector<Tensor> inputs = random_inputs(g, seed);
  CompileOptions options = testing::test_options();
  options.variant = variant;
  std::unique_ptr<Kernel> kernel = backend.compile(g, options);
  Outputs out;
  for (ValueId v : g.outputs) out.got.emplace_back(g.value(v).dtype, g.value(v).shape);
  kernel->run(inputs, out.got);
  Session reference(g, SessionOptions{});
  out.want = reference.run(inputs);
  return out;
}

// max |got - want| / max |want| over every output: the error on the outputs' scale.
double scaled_error(const Outputs& o) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < o.want.size(); ++i)
    for (int64_t k = 0; k < o.want[i].numel(); ++k) {
      const double a = o.got[i].get_as_double(k), b = o.want[i].get_as_double(k);
      if (std::isnan(a)) return INFINITY;
      err = std::max(err, std::fabs(a - b));
      scale = std::max(scale, std::fabs(b));
    }
  return scale > 0 ? err / scale : err;
}

// Passes the check the tuner applies to every candidate before it may be placed.
void expect_like_reference(Backend& backend, const Graph& g, const std::string& variant,
                           const std::string& what) {
  SCOPED_TRACE(what);
  Outputs o = run_variant(backend, g, variant);
  EXPECT_EQ(compare_outputs(o.got, o.want, Tolerance::backend_vs_reference()), "") << what;
}

ValueId conv(GraphBuilder& b, ValueId x, int64_t in, int64_t out, int64_t k, int64_t stride = 1,
             int64_t pad = -1, int64_t group = 1) {
  const int64_t p = pad >= 0 ? pad : k / 2;
  return b.add1(
      "Conv",
      {x, b.random_constant("w", {out, in / group, k, k}, 0.2f), b.random_constant("b", {out})},
      {{"pads", attr_ints({p, p, p, p})},
       {"strides", attr_ints({stride, stride})},
       {"group", attr_i(group)}});
}

std::vector<std::string> variants_of(const Backend& backend, GraphBuilder& b) {
  return backend.variants(b.graph());
}

// --------------------------------------------------------------------- which variants

TEST(OnednnVariants, WinogradOfferedOnlyWhereOnednnTakesIt) {
  const std::vector<std::string> both = {"", "winograd"}, plain = {""},
                                 both_tiles = {"", "winograd", "winograd2x2"},
                                 all_region = {"", "winograd", "winograd2x2", "blocked"},
                                 blocked_region = {"", "blocked"};
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 16, 8, 8});
    b.output(b.add1("Relu", {conv(b, x, 16, 16, 3)}));
    EXPECT_EQ(variants_of(onednn(), b), both) << "3x3 stride 1 + Relu";
  }
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 16, 8, 8});
    b.output(
        b.add1("Add", {conv(b, x, 16, 16, 3, 1, 0), b.input("r", DType::kFloat32, {1, 16, 6, 6})}));
    EXPECT_EQ(variants_of(onednn(), b), both) << "3x3 pad 0 + residual Add";
  }
  struct Case {
    const char* what;
    int64_t k, stride, pad, group;
  };
  for (Case c :
       {Case{"1x1", 1, 1, 0, 1}, Case{"stride 2", 3, 2, 1, 1}, Case{"5x5", 5, 1, 2, 1},
        Case{"pad 3", 3, 1, 3, 1}, Case{"grouped", 3, 1, 1, 2}, Case{"depthwise", 3, 1, 1, 16}}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 16, 8, 8});
    b.output(conv(b, x, 16, 16, c.k, c.stride, c.pad, c.group));
    EXPECT_EQ(variants_of(onednn(), b), plain) << c.what;
  }
  for (auto [dilation, pad] : {std::pair{1, 2}, std::pair{2, 2}, std::pair{3, 6}}) {
    // Collage's Winograd (not oneDNN's) takes pads up to the dilated taps' span.
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 16, 8, 8});
    b.output(b.add1("Relu", {b.add1("Conv", {x, b.random_constant("w", {16, 16, 3, 3})},
                                    {{"pads", attr_ints({pad, pad, pad, pad})},
                                     {"dilations", attr_ints({dilation, dilation})}})}));
    EXPECT_EQ(variants_of(onednn(), b), both) << "dilation " << dilation << ", pad " << pad;
    EXPECT_EQ(variants_of(onednn_graph(), b), both_tiles)
        << "dilation " << dilation << ", pad " << pad;
  }
  {
    // oneDNN's Winograd primitive takes no Clip post-op, collage's F(4x4, 3x3) does, after a
    // residual Add too; a Sigmoid neither: not offered (it would only fail).
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 16, 8, 8});
    b.output(b.add1("Clip", {conv(b, x, 16, 16, 3), b.constant("lo", Tensor::scalar(0.0f)),
                             b.constant("hi", Tensor::scalar(6.0f))}));
    EXPECT_EQ(variants_of(onednn(), b), both) << "3x3 + Clip";
    GraphBuilder r;
    ValueId rx = r.input("x", DType::kFloat32, {1, 16, 8, 8});
    ValueId sum =
        r.add1("Add", {conv(r, rx, 16, 16, 3), r.input("r", DType::kFloat32, {1, 16, 8, 8})});
    r.output(r.add1("Clip", {sum, r.constant("lo", Tensor::scalar(0.0f)),
                             r.constant("hi", Tensor::scalar(6.0f))}));
    EXPECT_EQ(variants_of(onednn(), r), both) << "3x3 + residual Add + Clip";
    GraphBuilder sig;
    ValueId sx = sig.input("x", DType::kFloat32, {1, 16, 8, 8});
    sig.output(sig.add1("Sigmoid", {conv(sig, sx, 16, 16, 3)}));
    EXPECT_EQ(variants_of(onednn(), sig), plain) << "3x3 + Sigmoid";
  }
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 16, 8, 8});
    b.output(b.add1("Relu", {b.add1("MaxPool", {x}, {{"kernel_shape", attr_ints({2, 2})}})}));
    EXPECT_EQ(variants_of(onednn(), b), plain) << "no conv";
    EXPECT_EQ(variants_of(onednn_graph(), b), plain) << "region without a conv";
  }
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 16, 8, 8});
    ValueId y = b.add1("Relu", {conv(b, x, 16, 32, 1)});
    b.output(b.add1("Relu", {conv(b, y, 32, 32, 3)}));
    EXPECT_EQ(variants_of(onednn_graph(), b), both_tiles) << "region with a 3x3 conv";
    EXPECT_EQ(onednn_graph().region_variants(b.graph()), all_region) << "region with a 3x3 conv";
  }
  {
    // Inception's factorized convs: 1x7, 7x1, 1x3, 3x1 stride 1 (collage's Winograd along one
    // axis), onednn-graph only; not 1x5, not strided, not padded past the taps.
    auto factorized = [](int64_t kh, int64_t kw, int64_t stride, int64_t pad) {
      GraphBuilder b;
      ValueId x = b.input("x", DType::kFloat32, {1, 16, 17, 17});
      const int64_t ph = kh > 1 ? pad : 0, pw = kw > 1 ? pad : 0;
      b.output(b.add1("Relu", {b.add1("Conv", {x, b.random_constant("w", {16, 16, kh, kw})},
                                      {{"pads", attr_ints({ph, pw, ph, pw})},
                                       {"strides", attr_ints({stride, stride})}})}));
      return b;
    };
    for (auto [kh, kw] : {std::pair{1, 7}, std::pair{7, 1}, std::pair{1, 3}, std::pair{3, 1}}) {
      GraphBuilder b = factorized(kh, kw, 1, std::max(kh, kw) / 2);
      EXPECT_EQ(variants_of(onednn_graph(), b), both) << kh << "x" << kw << ": 2x2 for 3x3 only";
      EXPECT_EQ(variants_of(onednn(), b), plain) << kh << "x" << kw << " op-level";
    }
    for (auto [kh, kw, stride, pad] :
         {std::tuple{1, 5, 1, 2}, std::tuple{1, 7, 2, 3}, std::tuple{7, 1, 1, 7}}) {
      GraphBuilder b = factorized(kh, kw, stride, pad);
      EXPECT_EQ(variants_of(onednn_graph(), b), plain)
          << kh << "x" << kw << " stride " << stride << " pad " << pad;
    }
  }
  {
    // Both tiles before a residual Add too (collage's Winograd adds it).
    GraphBuilder residual;
    ValueId rx = residual.input("x", DType::kFloat32, {1, 16, 8, 8});
    residual.output(
        residual.add1("Relu", {residual.add1("Add", {conv(residual, rx, 16, 16, 3), rx})}));
    EXPECT_EQ(variants_of(onednn_graph(), residual), both_tiles) << "3x3 conv + residual Add";
  }
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 16, 8, 8});
    b.output(b.add1("Relu", {conv(b, x, 16, 32, 1)}));
    EXPECT_EQ(variants_of(onednn_graph(), b), plain) << "blocked is never a candidate alone";
    EXPECT_EQ(onednn_graph().region_variants(b.graph()), blocked_region) << "region, 1x1 conv";
    EXPECT_EQ(onednn().region_variants(b.graph()), plain) << "blocked is onednn-graph's only";
  }
}

// ------------------------------------------------------------------- onednn/winograd

TEST(OnednnVariants, WinogradConvRandomizedLikeReference) {
  // Shapes around what oneDNN's Winograd kernels tile (channels not multiples of 16,
  // spatial sizes not multiples of the 2x2 / 4x4 output tiles), pads 0 and 1, batch 1-2,
  // with and without bias, Relu, residual sum.
  std::mt19937 rng(11);
  for (int trial = 0; trial < 10; ++trial) {
    const int64_t n = pick(rng, 1, 2), c = pick(rng, 1, 40), m = pick(rng, 1, 40),
                  h = pick(rng, 3, 19), w = pick(rng, 3, 19), pad = pick(rng, 0, 1);
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {n, c, h, w});
    std::vector<ValueId> in = {x, b.random_constant("w", {m, c, 3, 3}, 0.3f)};
    if (trial % 3 != 0) in.push_back(b.random_constant("b", {m}));
    ValueId y = b.add1("Conv", in, {{"pads", attr_ints({pad, pad, pad, pad})}});
    const Shape ys = b.graph().value(y).shape;
    if (trial % 4 == 1) y = b.add1("Add", {y, b.input("r", DType::kFloat32, ys)});
    if (trial % 2 == 0) y = b.add1("Relu", {y});
    b.output(y);
    const std::string what =
        fmt::format("trial {}: n{} c{} m{} {}x{} pad {}", trial, n, c, m, h, w, pad);
    ASSERT_EQ(variants_of(onednn(), b).back(), "winograd") << what;
    expect_like_reference(onednn(), b.graph(), "winograd", what);
  }
}

TEST(OnednnVariants, WinogradIsAnotherAlgorithmWithinTolerance) {
  // ResNet-50's 3x3 shapes (stage 2-4 widths at reduced spatial size): Winograd must pass the
  // tuner's check, and must really be another algorithm (its rounding differs from direct's;
  // a silent fallback to direct would give bit-equal outputs). The error seen here on
  // unit-scale random data is ~1e-6 of the output's scale for direct, up to ~1e-5 for
  // Winograd (docs/DESIGN.md).
  for (int64_t c : {64, 128, 256}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, c, 14, 14});
    b.output(b.add1("Relu", {conv(b, x, c, c, 3)}));
    Outputs wino = run_variant(onednn(), b.graph(), "winograd");
    Outputs direct = run_variant(onednn(), b.graph(), "");
    EXPECT_EQ(compare_outputs(wino.got, wino.want, Tolerance::backend_vs_reference()), "") << c;
    EXPECT_LT(scaled_error(wino), 1e-4) << c;
    bool differs = false;
    for (int64_t i = 0; i < direct.got[0].numel() && !differs; ++i)
      differs = direct.got[0].data<float>()[i] != wino.got[0].data<float>()[i];
    EXPECT_TRUE(differs) << c << " channels: Winograd gave direct's exact outputs";
  }
}

TEST(OnednnVariants, RefusesWhatItCannotBuild) {
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 8, 8, 8});
    b.output(conv(b, x, 8, 8, 3, 2));
    CompileOptions o = testing::test_options();
    o.variant = "winograd";
    EXPECT_THROW(
        {
          try {
            onednn().compile(b.graph(), o);
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
            throw;
          }
        },
        Error)
        << "Winograd of a stride-2 conv";
    o.variant = "no-such-variant";
    try {
      onednn().compile(b.graph(), o);
      ADD_FAILURE() << "unknown variant compiled";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    }
  }
  {
    GraphBuilder b;
    b.output(b.add1("Relu", {b.input("x", DType::kFloat32, {4, 4})}));
    CompileOptions o = testing::test_options();
    o.variant = "winograd";
    try {
      onednn().compile(b.graph(), o);
      ADD_FAILURE() << "winograd Relu compiled";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    }
  }
}

// ------------------------------------------------------------- onednn-graph regions

// conv3x3 -> relu -> conv3x3 -> add(x) -> relu -> conv1x1 -> relu: a ResNet-like block
// whose two 3x3 convs (nodes 0 and 2) take Winograd and whose 1x1 (node 5) does not.
GraphBuilder residual_region(int64_t channels, int64_t size) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, channels, size, size});
  ValueId y = b.add1("Relu", {conv(b, x, channels, channels, 3)});
  y = b.add1("Relu", {b.add1("Add", {conv(b, y, channels, channels, 3), x})});
  b.output(b.add1("Relu", {conv(b, y, channels, channels, 1)}));
  return b;
}

TEST(OnednnVariants, RegionWinogradPlainAndComposedLikeReference) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 4; ++trial) {
    const int64_t c = pick(rng, 8, 48), s = pick(rng, 5, 17);
    GraphBuilder b = residual_region(c, s);
    ASSERT_EQ(b.graph().node(0).op_type, "Conv");
    ASSERT_EQ(b.graph().node(2).op_type, "Conv");
    const std::string what = fmt::format("{} channels {}x{}", c, s, s);
    for (const char* variant : {"", "winograd", "winograd@0,1", "winograd@2,3,4", "winograd@0,5"})
      expect_like_reference(onednn_graph(), b.graph(), variant,
                            what + ", variant '" + variant + "'");
  }
}

TEST(OnednnVariants, RegionComposedVariantReallyChangesTheListedConvs) {
  // Winograd on node 0 only changes the outputs against direct; listing only the 1x1 conv
  // (not a Winograd shape) leaves them bit-equal to the default.
  GraphBuilder b = residual_region(32, 14);
  auto got = [&](const std::string& v) { return run_variant(onednn_graph(), b.graph(), v).got; };
  const std::vector<Tensor> direct = got(""), first = got("winograd@0"),
                            one_by_one = got("winograd@5");
  auto equal = [](const Tensor& a, const Tensor& c) {
    return std::equal(a.data<float>(), a.data<float>() + a.numel(), c.data<float>());
  };
  EXPECT_FALSE(equal(direct[0], first[0]));
  EXPECT_TRUE(equal(direct[0], one_by_one[0]));
}

// Inception-style branches, one on Winograd (channel-blocked only in oneDNN 2.6) beside
// direct ones (channels-last where brgconv runs), joined by a Concat that convolutions read:
// the result is right, and the concatenation is laid out as an activation layout of its
// inputs, the convolutions' own first where an input has it, never row-major first (a
// row-major result cost GoogLeNet a reorder back for every reader: 9.6 -> 8.8 ms).
TEST(OnednnVariants, ConcatOfWinogradAndDirectBranches) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 4; ++trial) {
    const int64_t c = 16 * pick(rng, 1, 3), s = pick(rng, 6, 15);
    const int64_t wide = 16 * pick(rng, 1, 4), narrow = pick(rng, 5, 40);
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, c, s, s});
    ValueId wino = b.add1("Relu", {conv(b, x, c, wide, 3)});
    ValueId direct = b.add1("Relu", {conv(b, x, c, narrow, 1)});
    ValueId pool = b.add1("MaxPool", {x},
                          {{"kernel_shape", attr_ints({3, 3})}, {"pads", attr_ints({1, 1, 1, 1})}});
    ValueId cat = b.add1("Concat", {direct, wino, pool}, {{"axis", attr_i(1)}});
    b.output(b.add1("Relu", {conv(b, cat, narrow + wide + c, 24, 1)}));
    const std::string what =
        fmt::format("{} channels {}x{}, branches {}/{}", c, s, s, wide, narrow);
    ASSERT_EQ(b.graph().node(0).op_type, "Conv") << what;
    expect_like_reference(onednn_graph(), b.graph(), "winograd@0", what);
  }
  const Shape ys = {1, 80, 9, 9};
  const dnnl::memory::desc last(onednn::Dims{1, 32, 9, 9}, onednn::dt::f32, onednn::tag::nhwc),
      blocked(onednn::Dims{1, 48, 9, 9}, onednn::dt::f32, onednn::tag::nChw16c);
  const std::vector<dnnl::memory::desc> layouts = onednn::concat_layouts({last, blocked}, ys, 1);
  ASSERT_GE(layouts.size(), 3u);
  EXPECT_FALSE(onednn::is_plain(layouts.front()));
  EXPECT_TRUE(onednn::is_plain(layouts.back()));
  const dnnl::memory::desc as_last(onednn::to_dims(ys), onednn::dt::f32, onednn::tag::nhwc),
      as_blocked(onednn::to_dims(ys), onednn::dt::f32, onednn::tag::nChw16c);
  EXPECT_TRUE((layouts[0] == as_last && layouts[1] == as_blocked) ||
              (layouts[0] == as_blocked && layouts[1] == as_last));
}

TEST(OnednnVariants, RegionRefusesUnknownAndMalformedVariants) {
  GraphBuilder b = residual_region(8, 6);
  for (const char* variant : {"direct", "winograd@", "winograd@99", "winograd@1,x", "other@1",
                              "winograd@1;fast@2", "blocked@99", "blocked@0;fast@2"}) {
    CompileOptions o = testing::test_options();
    o.variant = variant;
    try {
      onednn_graph().compile(b.graph(), o);
      ADD_FAILURE() << "compiled variant '" << variant << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << variant << ": " << e.what();
    }
  }
}

// ----------------------------------------------------------------- single-backend runs

TEST(OnednnVariants, SessionBuildsTheNamedVariantWhereOffered) {
  // `run --backend onednn/winograd`: the 3x3 conv groups are built as winograd, the 1x1 as
  // the default; the outputs match the reference.
  GraphBuilder b = residual_region(16, 10);
  SessionOptions options;
  options.backend = "onednn/winograd";
  Session session(b.graph(), options);
  int winograd = 0, other = 0;
  for (const PlanGroup& g : session.plan().groups) {
    EXPECT_EQ(g.backend, "onednn");
    (g.variant == "winograd" ? winograd : other)++;
  }
  EXPECT_EQ(winograd, 2);
  EXPECT_EQ(other, 1);
  std::vector<Tensor> inputs = random_inputs(b.graph(), 2);
  Session reference(b.graph(), SessionOptions{});
  EXPECT_EQ(compare_outputs(session.run(inputs), reference.run(inputs),
                            Tolerance::backend_vs_reference()),
            "");

  options.backend = "onednn-graph/winograd";
  Session region(b.graph(), options);
  ASSERT_EQ(region.plan().groups.size(), 1u);
  EXPECT_EQ(region.plan().groups[0].variant, "winograd");
}

TEST(OnednnVariants, PlanKeepsComposedVariantsThroughJson) {
  // A plan naming a composed region variant is written, read back and run as written: the
  // session's own plan reports the same variant, and the outputs are right.
  GraphBuilder b = residual_region(16, 10);
  SessionOptions options;
  options.backend = "onednn-graph";
  Plan plan = Session(b.graph(), options).plan();
  ASSERT_EQ(plan.groups.size(), 1u);
  plan.groups[0].variant = "winograd@2,3,4";
  const Plan loaded = Plan::from_json(plan.to_json());
  ASSERT_EQ(loaded.groups[0].variant, "winograd@2,3,4");
  Session session(b.graph(), loaded, SessionOptions{});
  EXPECT_EQ(session.plan().groups[0].variant, "winograd@2,3,4");
  std::vector<Tensor> inputs = random_inputs(b.graph(), 6);
  Session reference(b.graph(), SessionOptions{});
  EXPECT_EQ(compare_outputs(session.run(inputs), reference.run(inputs),
                            Tolerance::backend_vs_reference()),
            "");
  // `collage show` names the variant in its table and its picture.
  const std::string table = placement_table(b.graph(), loaded);
  EXPECT_NE(table.find("onednn-graph/winograd(3 nodes)"), std::string::npos) << table;
  EXPECT_NE(placement_to_dot(b.graph(), loaded).find("onednn-graph/winograd(3 nodes)"),
            std::string::npos);
  // A variant the backend does not build is refused when the plan is loaded, not run wrong.
  Plan bad = loaded;
  bad.groups[0].variant = "winograd@99";
  try {
    Session s(b.graph(), bad, SessionOptions{});
    ADD_FAILURE() << "a plan with a bad variant loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
  }
}

// ------------------------------------------------------------ 1x1 conv + depthwise conv

ValueId relu6(GraphBuilder& b, ValueId v) {
  return b.add1(
      "Clip", {v, b.constant("lo", Tensor::scalar(0.0f)), b.constant("hi", Tensor::scalar(6.0f))});
}

// A MobileNetV2 inverted residual on `x` (c channels): 1x1 expansion to m with a bias, its
// 3x3 depthwise conv at `stride` (ReLU6 after each), the 1x1 projection back to c, and at
// stride 1 the residual Add of `x`.
ValueId inverted_residual(GraphBuilder& b, ValueId x, int64_t c, int64_t m, int64_t stride) {
  ValueId y = relu6(b, b.add1("Conv", {x, b.random_constant("w1", {m, c, 1, 1}, 0.4f),
                                       b.random_constant("b1", {m})}));
  y = relu6(
      b,
      b.add1("Conv", {y, b.random_constant("wd", {m, 1, 3, 3}, 0.4f), b.random_constant("bd", {m})},
             {{"group", attr_i(m)},
              {"strides", attr_ints({stride, stride})},
              {"pads", attr_ints({1, 1, 1, 1})}}));
  y = b.add1("Conv", {y, b.random_constant("w2", {c, m, 1, 1}, 0.4f)});
  return stride == 1 ? b.add1("Add", {y, x}) : y;
}

// A MobileNetV2 inverted-residual front: 1x1 expand (+ tail) -> 3x3 depthwise (+ tail).
// `tail` 0: none, 1: Relu, 2: Clip(0, 6) (ReLU6), 3: channel-bias Add then ReLU6.
GraphBuilder expand_dw(int64_t n, int64_t c, int64_t m, int64_t h, int64_t w, int64_t stride,
                       int tail_before, int tail_after, bool bias) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {n, c, h, w});
  auto tail = [&](ValueId v, int kind) {
    if (kind == 3) v = b.add1("Add", {v, b.random_constant("cb", {m, 1, 1})});
    if (kind == 1) v = b.add1("Relu", {v});
    if (kind >= 2) v = relu6(b, v);
    return v;
  };
  std::vector<ValueId> in = {x, b.random_constant("w1", {m, c, 1, 1}, 0.4f)};
  if (bias) in.push_back(b.random_constant("b1", {m}));
  ValueId y = tail(b.add1("Conv", in), tail_before);
  std::vector<ValueId> dw_in = {y, b.random_constant("wd", {m, 1, 3, 3}, 0.4f)};
  if (bias) dw_in.push_back(b.random_constant("bd", {m}));
  y = b.add1("Conv", dw_in,
             {{"group", attr_i(m)},
              {"strides", attr_ints({stride, stride})},
              {"pads", attr_ints({1, 1, 1, 1})}});
  b.output(tail(y, tail_after));
  return b;
}

bool proposes_whole(const Backend& backend, const Graph& g) {
  std::vector<NodeId> all(g.num_nodes());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<NodeId>(i);
  for (const Match& m : find_matches(g, backend))
    if (m.nodes == all) return true;
  return false;
}

TEST(OnednnConvDepthwise, RandomizedLikeReferenceOrRefusedHonestly) {
  std::mt19937 rng(29);
  int compiled = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t n = pick(rng, 1, 2), c = pick(rng, 1, 40), m = pick(rng, 1, 64),
                  h = pick(rng, 3, 20), w = pick(rng, 3, 20), stride = pick(rng, 1, 2);
    // No Relu before and ReLU6 after: oneDNN 2.6 would evaluate both with the first's
    // parameters (a different alg is fine, the same alg twice must match).
    const int before = trial % 4, after = (trial / 4) % 3;
    GraphBuilder b = expand_dw(n, c, m, h, w, stride, before, after, trial % 3 != 0);
    const std::string what = fmt::format("trial {}: n{} c{} m{} {}x{} stride {} tails {}/{}", trial,
                                         n, c, m, h, w, stride, before, after);
    ASSERT_TRUE(proposes_whole(onednn(), b.graph())) << what;
    try {
      Outputs o = run_variant(onednn(), b.graph(), "");
      ++compiled;
      EXPECT_EQ(compare_outputs(o.got, o.want, Tolerance::backend_vs_reference()), "") << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << what << ": " << e.what();
      ADD_FAILURE() << what << ": refused: " << e.what();
    }
  }
  EXPECT_EQ(compiled, 12);
}

TEST(OnednnConvDepthwise, MobileNetV2ShapesLikeReference) {
  // MobileNetV2's expansions at 224 (ref_fused_convolution of two jit primitives here) and a
  // large intermediate oneDNN fuses in one jit 1x1 kernel (16 -> 192 at 112x112).
  struct Case {
    int64_t c, m, hw, stride;
  };
  for (Case k : {Case{24, 144, 56, 1}, Case{24, 144, 56, 2}, Case{96, 576, 14, 1},
                 Case{160, 960, 7, 1}, Case{16, 192, 112, 1}}) {
    GraphBuilder b = expand_dw(1, k.c, k.m, k.hw, k.hw, k.stride, 2, 2, true);
    expect_like_reference(onednn(), b.graph(), "",
                          fmt::format("{} -> {} at {} stride {}", k.c, k.m, k.hw, k.stride));
  }
}

TEST(OnednnConvDepthwise, InsideRegionsLikeReference) {
  // onednn-graph regions run a 1x1 conv, its tail and the depthwise conv as one primitive:
  // whole inverted-residual blocks (expand, depthwise, project, residual Add) on randomized
  // shapes, and a depthwise conv whose tail the fused primitive cannot take (a residual Add
  // of the block input right after it): the region then splits the group, still correct.
  std::mt19937 rng(31);
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t c = pick(rng, 4, 32), m = pick(rng, 8, 96), s = pick(rng, 5, 24),
                  stride = trial % 3 == 2 ? 2 : 1;
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, c, s, s});
    ValueId y = inverted_residual(b, x, c, m, stride);
    b.output(y);
    expect_like_reference(
        onednn_graph(), b.graph(), "",
        fmt::format("block {}: c{} m{} {}x{} stride {}", trial, c, m, s, s, stride));
  }
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 9, 9});
  ValueId y = b.add1("Conv", {x, b.random_constant("w1", {16, 16, 1, 1}, 0.4f)});
  y = b.add1("Conv", {y, b.random_constant("wd", {16, 1, 3, 3}, 0.4f)},
             {{"group", attr_i(16)}, {"pads", attr_ints({1, 1, 1, 1})}});
  b.output(b.add1("Relu", {b.add1("Add", {y, x})}));
  expect_like_reference(onednn_graph(), b.graph(), "", "depthwise + residual Add in a region");
}

// A 3x3 conv, then MobileNetV2's second block: 16 -> 96 expansion at 112x112, its 3x3
// depthwise conv at stride 2 (ReLU6 after each), the 96 -> 24 projection.
GraphBuilder conv_expand_dw_project() {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 112, 112});
  ValueId y = b.add1("Relu", {b.add1("Conv", {x, b.random_constant("w0", {16, 16, 3, 3}, 0.2f)},
                                     {{"pads", attr_ints({1, 1, 1, 1})}})});
  y = relu6(b, b.add1("Conv", {y, b.random_constant("w1", {96, 16, 1, 1}, 0.4f)}));
  y = relu6(b, b.add1("Conv", {y, b.random_constant("wd", {96, 1, 3, 3}, 0.4f)},
                      {{"group", attr_i(96)},
                       {"strides", attr_ints({2, 2})},
                       {"pads", attr_ints({1, 1, 1, 1})}}));
  b.output(b.add1("Conv", {y, b.random_constant("w2", {24, 96, 1, 1}, 0.4f)}));
  return b;
}

// In a region whose convs write channels-last, the 1x1 + depthwise pair that oneDNN would
// fuse only as its one-pass nChw16c kernel (16 -> 96 at 112x112, stride 2: MobileNetV2's
// second block) is split instead of reordered in and out: the program reorders only at the
// region's boundary. With the pair kept, two more reorders (and MobileNetV2 ~5 % slower).
TEST(OnednnConvDepthwise, RegionSplitsAPairThatWouldChangeLayouts) {
  GraphBuilder b = conv_expand_dw_project();
  expect_like_reference(onednn_graph(), b.graph(), "", "conv, expand, depthwise s2, project");
  const ProgramSteps steps = region_steps(b.graph());
  EXPECT_EQ(steps.count(dnnl::primitive::kind::reorder), 2)
      << ::testing::PrintToString(steps.implementations);
}

// oneDNN builds a small pair (MobileNetV2's 160 -> 960 at 7x7, 96 -> 576 at 14x14) as
// ref_fused_convolution: two jit primitives through a scratchpad. The onednn backend's pair
// kernel takes that form (against two kernels with a plain boundary between them); a region
// refuses it and runs the 1x1 and the depthwise conv as two primitives of its program (20-30 %
// faster per pair at 2 threads). A large pair (16 -> 192 at 112x112) that oneDNN builds in
// one pass stays one primitive in the region. Fails if regions took the two-primitive form,
// or refused the one-pass one.
TEST(OnednnConvDepthwise, RegionTakesOnlyTheOnePassPair) {
  struct Case {
    int64_t c, m, hw;
  };
  for (Case k : {Case{160, 960, 7}, Case{96, 576, 14}, Case{16, 192, 112}}) {
    const std::string what = fmt::format("{} -> {} at {}x{}", k.c, k.m, k.hw, k.hw);
    GraphBuilder b = expand_dw(1, k.c, k.m, k.hw, k.hw, 1, 2, 2, true);
    expect_like_reference(onednn_graph(), b.graph(), "", what);
    const ProgramSteps alone = compiled_steps(onednn(), b.graph(), "");
    const ProgramSteps region = region_steps(b.graph());
    const std::string listed = ::testing::PrintToString(region.implementations);
    ASSERT_EQ(alone.count(dnnl::primitive::kind::convolution), 1) << what;
    const std::string pair = alone.implementations[std::find(alone.kinds.begin(), alone.kinds.end(),
                                                             dnnl::primitive::kind::convolution) -
                                                   alone.kinds.begin()];
    const bool two_primitive_form = pair.rfind("ref_fused", 0) == 0;
    EXPECT_EQ(region.count(dnnl::primitive::kind::convolution), two_primitive_form ? 2 : 1)
        << what << ": " << listed;
    for (const std::string& impl : region.implementations)
      EXPECT_EQ(impl.find("ref_fused"), std::string::npos) << what << ": " << listed;
    if (k.hw == 112)
      EXPECT_FALSE(two_primitive_form) << what << ": " << pair;
    else
      EXPECT_TRUE(two_primitive_form) << what << ": " << pair;
  }
}

// The same four convs as the "blocked" variant: every conv writes nChw16c, so the pair runs
// as oneDNN's one-pass jit kernel instead of being split (3 conv primitives, not 4), nothing
// runs on channels-last brgconv, and the program still reorders only at the boundary. Fails
// if the variant were ignored (4 convs, brgconv) or changed layouts between convs.
TEST(OnednnVariants, RegionBlockedKeepsTheDepthwisePairInOnePass) {
  GraphBuilder b = conv_expand_dw_project();
  expect_like_reference(onednn_graph(), b.graph(), "blocked", "blocked: conv, pair, project");
  const ProgramSteps direct = compiled_steps(onednn_graph(), b.graph(), "");
  const ProgramSteps blocked = compiled_steps(onednn_graph(), b.graph(), "blocked");
  const std::string listed = ::testing::PrintToString(blocked.implementations);
  EXPECT_EQ(direct.count(dnnl::primitive::kind::convolution), 4);
  EXPECT_EQ(blocked.count(dnnl::primitive::kind::convolution), 3) << listed;
  EXPECT_LE(blocked.count(dnnl::primitive::kind::reorder), 2) << listed;
  for (const std::string& impl : blocked.implementations)
    EXPECT_EQ(impl.find("brgconv"), std::string::npos) << listed;
}

// Blocked regions, whole and composed with Winograd and direct parts, on randomized
// inverted-residual blocks (expand, depthwise, project, residual Add), ResNet-like blocks, a
// grouped conv, a pooled concatenation and a 3-D conv: like reference with the tuner's check.
TEST(OnednnVariants, RegionBlockedPlainAndComposedLikeReference) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 4; ++trial) {
    const int64_t c = pick(rng, 8, 40), m = pick(rng, 16, 96), s = pick(rng, 5, 21);
    const int64_t stride = trial % 2 ? 2 : 1;
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, c, s, s});
    ValueId y = inverted_residual(b, x, c, m, stride);
    ValueId grouped = b.add1("Relu", {conv(b, y, c, 2 * c, 3, 1, 1, c % 2 ? 1 : 2)});
    ValueId pool = b.add1("MaxPool", {y},
                          {{"kernel_shape", attr_ints({3, 3})}, {"pads", attr_ints({1, 1, 1, 1})}});
    b.output(b.add1("Concat", {grouped, pool}, {{"axis", attr_i(1)}}));
    const std::string what =
        fmt::format("block {}: c{} m{} {}x{} stride {}", trial, c, m, s, s, stride);
    for (const char* variant : {"blocked", "blocked@0,1", "blocked@2,3,4", "blocked@5"})
      expect_like_reference(onednn_graph(), b.graph(), variant,
                            what + ", variant '" + variant + "'");
  }
  for (int trial = 0; trial < 3; ++trial) {
    const int64_t c = pick(rng, 8, 48), s = pick(rng, 5, 17);
    GraphBuilder b = residual_region(c, s);
    const std::string what = fmt::format("residual {} channels {}x{}", c, s, s);
    for (const char* variant :
         {"blocked", "winograd@0,1;blocked@5,6", "blocked@0,1;winograd@2,3,4"})
      expect_like_reference(onednn_graph(), b.graph(), variant,
                            what + ", variant '" + variant + "'");
  }
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 8, 6, 7, 5});
  ValueId y = b.add1("Relu", {b.add1("Conv", {x, b.random_constant("w", {24, 8, 3, 3, 3}, 0.2f)},
                                     {{"pads", attr_ints({1, 1, 1, 1, 1, 1})}})});
  b.output(b.add1("Conv", {y, b.random_constant("w2", {16, 24, 1, 1, 1}, 0.2f)}));
  expect_like_reference(onednn_graph(), b.graph(), "blocked", "3-D convs, blocked");
}

// A ConvTranspose's bias and tail run as one binary primitive after it, the deconvolution
// with neither: oneDNN 2.6 adds a deconvolution's bias and applies its post-ops in slow loops
// (emit_conv; DCGAN's last layer with its Tanh fused measured 1.8 ms, 0.13 ms without). A
// DCGAN generator's last two layers (the first with a bias) in a region, and alone.
TEST(OnednnConvTranspose, BiasAndTailRunAfterTheDeconvolution) {
  GraphBuilder b;
  const std::map<std::string, Attribute> up = {{"strides", attr_ints({2, 2})},
                                               {"pads", attr_ints({1, 1, 1, 1})}};
  ValueId x = b.input("x", DType::kFloat32, {1, 32, 8, 8});
  ValueId y =
      b.add1("ConvTranspose",
             {x, b.random_constant("w1", {32, 16, 4, 4}, 0.2f), b.random_constant("b1", {16})}, up);
  y = b.add1("Relu", {testing::batch_norm(b, y, 16)});
  y = b.add1("ConvTranspose", {y, b.random_constant("w2", {16, 3, 4, 4}, 0.2f)}, up);
  b.output(b.add1("Tanh", {y}));
  expect_like_reference(onednn_graph(), b.graph(), "", "two DCGAN layers");
  const ProgramSteps steps = region_steps(b.graph());
  EXPECT_EQ(steps.count(dnnl::primitive::kind::deconvolution), 2);
  EXPECT_EQ(steps.count(dnnl::primitive::kind::binary), 2)
      << ::testing::PrintToString(steps.implementations);
  for (const std::string& impl : steps.implementations)
    EXPECT_EQ(impl.find("ref"), std::string::npos) << impl;
}

// A grouped conv between channels-last 1x1 convs (RegNetX's block: groups of 16 channels)
// reads and writes channels-last where oneDNN runs the same kernel there as in the nChw16c it
// would pick: the program reorders only at the region's boundary (4 reorders without).
TEST(OnednnConvLayouts, RegionKeepsTheLayoutWhereTheKernelIsTheSame) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 64, 14, 14});
  ValueId y = b.add1("Relu", {b.add1("Conv", {x, b.random_constant("w1", {160, 64, 1, 1}, 0.2f)})});
  y = b.add1("Relu", {b.add1("Conv", {y, b.random_constant("wg", {160, 16, 3, 3}, 0.2f)},
                             {{"group", attr_i(10)}, {"pads", attr_ints({1, 1, 1, 1})}})});
  b.output(b.add1("Conv", {y, b.random_constant("w2", {160, 160, 1, 1}, 0.2f)}));
  expect_like_reference(onednn_graph(), b.graph(), "", "1x1, grouped 3x3, 1x1");
  const ProgramSteps steps = region_steps(b.graph());
  EXPECT_EQ(steps.count(dnnl::primitive::kind::reorder), 2)
      << ::testing::PrintToString(steps.implementations);
}

TEST(OnednnConvDepthwise, ProposesOnlyTheLegalChains) {
  // expand 1x1 -> ReLU6 -> dw 3x3 -> ReLU6 -> project 1x1: the fusion covers the first four
  // nodes (with and without the last ReLU6), never the projection.
  GraphBuilder b = expand_dw(1, 8, 32, 10, 10, 1, 2, 2, true);
  Graph g = b.graph();
  std::set<std::vector<NodeId>> fused;
  for (const Match& m : find_matches(g, onednn()))
    if (std::count_if(m.nodes.begin(), m.nodes.end(),
                      [&](NodeId n) { return g.node(n).op_type == "Conv"; }) == 2)
      fused.insert(m.nodes);
  EXPECT_EQ(fused, (std::set<std::vector<NodeId>>{{0, 1, 2}, {0, 1, 2, 3}}));

  // Not a depthwise post-op: pads 0, a 5x5 window, stride 3, a 3x3 head, a head read twice.
  auto with_dw = [](int64_t k, int64_t pad, int64_t stride) {
    GraphBuilder d;
    ValueId x = d.input("x", DType::kFloat32, {1, 8, 12, 12});
    ValueId y = d.add1("Conv", {x, d.random_constant("w1", {16, 8, 1, 1})});
    d.output(d.add1("Conv", {y, d.random_constant("wd", {16, 1, k, k})},
                    {{"group", attr_i(16)},
                     {"strides", attr_ints({stride, stride})},
                     {"pads", attr_ints({pad, pad, pad, pad})}}));
    return d;
  };
  for (auto [k, pad, stride] : {std::tuple{3, 0, 1}, std::tuple{5, 2, 1}, std::tuple{3, 1, 3}}) {
    GraphBuilder d = with_dw(k, pad, stride);
    EXPECT_FALSE(proposes_whole(onednn(), d.graph())) << k << " " << pad << " " << stride;
    testing::expect_unsupported(onednn(), d.graph(), "dw that append_dw can't take");
  }
  GraphBuilder twice;
  ValueId x = twice.input("x", DType::kFloat32, {1, 8, 6, 6});
  ValueId y = twice.add1("Conv", {x, twice.random_constant("w1", {8, 8, 1, 1})});
  ValueId z = twice.add1("Conv", {y, twice.random_constant("wd", {8, 1, 3, 3})},
                         {{"group", attr_i(8)}, {"pads", attr_ints({1, 1, 1, 1})}});
  twice.output(twice.add1("Add", {y, z}));
  for (const Match& m : find_matches(twice.graph(), onednn()))
    EXPECT_FALSE(m.nodes.size() >= 2 && m.nodes[0] == 0 && m.nodes[1] == 1)
        << "the 1x1's output is read outside the fusion";
}

// ------------------------------------------ collage's F(4x4, 3x3) and F(2x2, 3x3) in a program

bool runs_f43(Backend& backend, const Graph& g, const std::string& variant) {
  return compiled_steps(backend, g, variant).count(onednn::kWinogradF43Step) != 0;
}

// Channel counts off the 16-lane blocks, spatial sizes off the tiles, asymmetric pads 0-1
// (what the variants are offered for), batch 1-2, each activation the output transform
// applies and a residual Add (either operand order, then Relu): `variant` of `backend` must run
// collage's Winograd `step` (not oneDNN's kernel, not direct) and match the reference, its error
// under `most_error` of the output's scale. A wrong transform matrix, tile offset, pad or channel
// tail fails here.
void expect_winograd_randomized_like_reference(Backend& backend, const std::string& variant,
                                               const char* step, unsigned seed, double most_error) {
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 14; ++trial) {
    const int64_t n = pick(rng, 1, 2), c = pick(rng, 1, 70), m = pick(rng, 1, 70),
                  h = pick(rng, 3, 30), w = pick(rng, 3, 30);
    const std::vector<int64_t> pads = {pick(rng, 0, 1), pick(rng, 0, 1), pick(rng, 0, 1),
                                       pick(rng, 0, 1)};
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {n, c, h, w});
    std::vector<ValueId> in = {x, b.random_constant("w", {m, c, 3, 3}, 0.3f)};
    if (trial % 3 != 0) in.push_back(b.random_constant("b", {m}));
    ValueId y = b.add1("Conv", in, {{"pads", attr_ints(pads)}});
    const char* tail = "none";
    switch (trial % 5) {
      case 1:
        tail = "Relu";
        y = b.add1("Relu", {y});
        break;
      case 2:
        tail = "Clip";
        y = b.add1("Clip", {y, b.constant("lo", Tensor::scalar(-0.5f)),
                            b.constant("hi", Tensor::scalar(0.7f))});
        break;
      case 3:
        tail = "LeakyRelu";
        y = b.add1("LeakyRelu", {y}, {{"alpha", attr_f(0.1f)}});
        break;
      case 4: {
        tail = "residual Add + Relu";
        ValueId r = b.input("r", DType::kFloat32,
                            {n, m, h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2});
        y = b.add1("Relu", {b.add1("Add", trial % 2 ? std::vector{r, y} : std::vector{y, r})});
        break;
      }
    }
    b.output(y);
    const std::string what =
        fmt::format("{} trial {}: n{} c{} m{} {}x{} pads {},{},{},{} tail {}", variant, trial, n, c,
                    m, h, w, pads[0], pads[1], pads[2], pads[3], tail);
    EXPECT_EQ(compiled_steps(backend, b.graph(), variant).count(step), 1) << what;
    expect_like_reference(backend, b.graph(), variant, what);
    EXPECT_LT(scaled_error(run_variant(backend, b.graph(), variant)), most_error) << what;
  }
}

TEST(OnednnVariants, WinogradF43RandomizedLikeReference) {
  expect_winograd_randomized_like_reference(onednn(), "winograd", onednn::kWinogradF43Step, 29,
                                            1e-4);
}

TEST(OnednnVariants, WinogradF23RandomizedLikeReference) {
  // F(2x2, 3x3) (onednn-graph's "winograd2x2"): points 0 and +-1 only, so it rounds almost as
  // the direct conv does; a transform that was F(4x4)'s, or a tile side of 4, fails.
  expect_winograd_randomized_like_reference(onednn_graph(), "winograd2x2", onednn::kWinogradF23Step,
                                            31, 2e-5);
}

TEST(OnednnVariants, WinogradFactorizedConvsRandomizedLikeReference) {
  // Inception's 1x7 / 7x1 (F(4, 7) and F(2, 7) along one axis) and 1x3 / 3x1 convs: channels
  // off the 16-lane blocks, sizes off the tiles, pads 0 .. taps - 1 on either side of the
  // filtered axis, an activation or a residual Add: one Winograd step of the variant's tile,
  // the reference's outputs, and F(4, 7)'s float32 rounding (points up to +-2) under 1e-4
  // of the output's scale. A wrong transform row, axis or pad fails here.
  std::mt19937 rng(47);
  for (auto [kh, kw] : {std::pair{1, 7}, std::pair{7, 1}, std::pair{1, 3}, std::pair{3, 1}}) {
    for (int trial = 0; trial < 4; ++trial) {
      const int64_t taps = std::max(kh, kw), c = pick(rng, 1, 40), m = pick(rng, 1, 40),
                    n = pick(rng, 1, 2), h = pick(rng, kh, 19), w = pick(rng, kw, 19);
      std::vector<int64_t> pads = {0, 0, 0, 0};
      const int axis = kh > 1 ? 0 : 1;
      pads[axis] = pick(rng, 0, taps - 1);
      pads[axis + 2] = pick(rng, 0, taps - 1);
      GraphBuilder b;
      ValueId x = b.input("x", DType::kFloat32, {n, c, h, w});
      ValueId y = b.add1(
          "Conv", {x, b.random_constant("w", {m, c, kh, kw}, 0.3f), b.random_constant("b", {m})},
          {{"pads", attr_ints(pads)}});
      const bool residual = trial % 2 == 1;
      if (residual)
        y = b.add1(
            "Add",
            {y, b.input("r", DType::kFloat32,
                        {n, m, h + pads[0] + pads[2] - kh + 1, w + pads[1] + pads[3] - kw + 1})});
      b.output(b.add1("Relu", {y}));
      for (auto [variant, step] : {std::pair{"winograd", onednn::kWinogradF43Step},
                                   std::pair{"winograd2x2", onednn::kWinogradF23Step}}) {
        const std::string what =
            fmt::format("{} {}x{}: n{} c{} m{} {}x{} pads {},{},{},{}{}", variant, kh, kw, n, c, m,
                        h, w, pads[0], pads[1], pads[2], pads[3], residual ? " + residual" : "");
        EXPECT_EQ(compiled_steps(onednn_graph(), b.graph(), variant).count(step), 1) << what;
        expect_like_reference(onednn_graph(), b.graph(), variant, what);
        EXPECT_LT(scaled_error(run_variant(onednn_graph(), b.graph(), variant)), 1e-4) << what;
      }
    }
  }
}

TEST(OnednnVariants, WinogradDilatedConvsRandomizedLikeReference) {
  // Atrous convs (DeepLab, FCN): each phase of the dilation an undilated conv of its own.
  // Dilations 1-6 per axis (one axis only in some), sizes off the tiles and under a phase's
  // tile, pads 0 .. the dilated span on either side, a bias, Relu or a residual Add: one
  // Winograd step of the variant's tile, the reference's outputs. A tile's stride, its
  // phase, or an input row read one phase off fails here.
  std::mt19937 rng(53);
  for (int trial = 0; trial < 16; ++trial) {
    const auto [kh, kw] = trial % 4 == 3 ? std::pair{1, 3} : std::pair{3, 3};
    const int64_t dh = pick(rng, 1, 6), dw = trial % 4 == 1 ? 1 : pick(rng, 2, 6);
    const int64_t c = pick(rng, 1, 40), m = pick(rng, 1, 40), n = pick(rng, 1, 2);
    const std::vector<int64_t> pads = {pick(rng, 0, dh * (kh - 1)), pick(rng, 0, dw * (kw - 1)),
                                       pick(rng, 0, dh * (kh - 1)), pick(rng, 0, dw * (kw - 1))};
    const int64_t h = pick(rng, std::max<int64_t>(1, dh * (kh - 1) + 1 - pads[0] - pads[2]), 26),
                  w = pick(rng, std::max<int64_t>(1, dw * (kw - 1) + 1 - pads[1] - pads[3]), 26);
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {n, c, h, w});
    ValueId y = b.add1(
        "Conv", {x, b.random_constant("w", {m, c, kh, kw}, 0.3f), b.random_constant("b", {m})},
        {{"pads", attr_ints(pads)}, {"dilations", attr_ints({dh, dw})}});
    const bool residual = trial % 2 == 1;
    if (residual) y = b.add1("Add", {b.input("r", DType::kFloat32, b.graph().value(y).shape), y});
    b.output(b.add1("Relu", {y}));
    for (auto [variant, step] : {std::pair{"winograd", onednn::kWinogradF43Step},
                                 std::pair{"winograd2x2", onednn::kWinogradF23Step}}) {
      const std::string what = fmt::format(
          "{} {}x{} dilated {}x{}: n{} c{} m{} {}x{} pads {},{},{},{}{}", variant, kh, kw, dh, dw,
          n, c, m, h, w, pads[0], pads[1], pads[2], pads[3], residual ? " + residual" : "");
      EXPECT_EQ(compiled_steps(onednn_graph(), b.graph(), variant).count(step), 1) << what;
      expect_like_reference(onednn_graph(), b.graph(), variant, what);
      EXPECT_LT(scaled_error(run_variant(onednn_graph(), b.graph(), variant)), 1e-4) << what;
    }
    if (kh == 3) {
      const std::string what = fmt::format("op-level onednn, dilated {}x{}", dh, dw);
      EXPECT_EQ(compiled_steps(onednn(), b.graph(), "winograd").count(onednn::kWinogradF43Step), 1)
          << what;
      expect_like_reference(onednn(), b.graph(), "winograd", what);
    }
  }
}

TEST(OnednnVariants, WinogradWithLargeWeightsLikeReference) {
  // Transformed weights over 8 MB (512 -> 512: 38 MB for F(4x4), 17 for F(2x2)): tile
  // blocks of a thread's share of the tiles, on 1-3 threads, undilated and dilated, with a
  // residual Add. A block that skips or repeats tiles fails here.
  for (int threads : {1, 2, 3}) {
    use_threads_on_this_thread(threads);  // the team the step's blocks are sized for
    for (int64_t dilation : {1, 2}) {
      GraphBuilder b;
      ValueId x = b.input("x", DType::kFloat32, {1, 512, 22, 26});
      ValueId y = b.add1(
          "Conv",
          {x, b.random_constant("w", {512, 512, 3, 3}, 0.05f), b.random_constant("b", {512})},
          {{"pads", attr_ints({dilation, dilation, dilation, dilation})},
           {"dilations", attr_ints({dilation, dilation})}});
      y = b.add1("Add", {y, b.input("r", DType::kFloat32, {1, 512, 22, 26})});
      b.output(b.add1("Relu", {y}));
      for (auto [variant, step] : {std::pair{"winograd", onednn::kWinogradF43Step},
                                   std::pair{"winograd2x2", onednn::kWinogradF23Step}}) {
        const std::string what =
            fmt::format("{} on {} threads, dilation {}", variant, threads, dilation);
        EXPECT_EQ(compiled_steps(onednn_graph(), b.graph(), variant).count(step), 1) << what;
        expect_like_reference(onednn_graph(), b.graph(), variant, what);
      }
    }
  }
  use_threads_on_this_thread(testing::test_options().threads);
}

TEST(OnednnVariants, WinogradTilesComposedInOneRegionLikeReference) {
  // Two 3x3 convs of one region, the first as F(4x4, 3x3), the second as F(2x2, 3x3) (the
  // composed variant the graph-level search writes), then the reverse: one step of each, and
  // the reference's outputs.
  std::mt19937 rng(43);
  for (int trial = 0; trial < 4; ++trial) {
    const int64_t c = pick(rng, 8, 40), k = pick(rng, 8, 40), s = pick(rng, 5, 19);
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, c, s, s});
    ValueId y = b.add1("Relu", {conv(b, x, c, k, 3)});
    b.output(b.add1("Relu", {conv(b, y, k, c, 3)}));
    for (const char* variant : {"winograd@0,1;winograd2x2@2,3", "winograd2x2@0,1;winograd@2,3"}) {
      const std::string what =
          fmt::format("{}: {} -> {} -> {} channels, {}x{}", variant, c, k, c, s, s);
      const ProgramSteps steps = compiled_steps(onednn_graph(), b.graph(), variant);
      EXPECT_EQ(steps.count(onednn::kWinogradF43Step), 1) << what;
      EXPECT_EQ(steps.count(onednn::kWinogradF23Step), 1) << what;
      expect_like_reference(onednn_graph(), b.graph(), variant, what);
    }
  }
}

TEST(OnednnVariants, WinogradTakesAResidualAddInItsOutputTransform) {
  // ResNet's basic block: 3x3 conv, residual Add, Relu. Collage's Winograd adds the residual in
  // its output transform (channels-last, like the direct kernels around it), with either
  // tile; oneDNN's Winograd kernel (nChw16c) is not used.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 8, 8});
  b.output(b.add1("Relu", {b.add1("Add", {conv(b, x, 16, 16, 3), x})}));
  EXPECT_TRUE(runs_f43(onednn(), b.graph(), "winograd"));
  expect_like_reference(onednn(), b.graph(), "winograd", "3x3 + residual Add + Relu");
  const ProgramSteps steps = compiled_steps(onednn_graph(), b.graph(), "winograd2x2");
  EXPECT_EQ(steps.count(onednn::kWinogradF23Step), 1);
  expect_like_reference(onednn_graph(), b.graph(), "winograd2x2", "3x3 + residual Add + Relu");
  EXPECT_FALSE(runs_f43(onednn(), b.graph(), ""));
}

TEST(OnednnVariants, WinogradF43BranchesConcurrentAndInPlaceLikeReference) {
  // Two F(4x4, 3x3) convs on one input, their outputs concatenated in place (each writes its
  // channel slice of the wider buffer through its strides), with every independent step run
  // concurrently (COLLAGE_ONEDNN_LANES=always: a step that ignored it was inside a lane would
  // fight its partner for the team, a wrong slice offset would overwrite the other branch).
  testing::WithLanes lanes("always");
  std::mt19937 rng(41);
  for (int trial = 0; trial < 4; ++trial) {
    const int64_t c = 16 * pick(rng, 1, 3), s = pick(rng, 6, 20), k1 = 16 * pick(rng, 1, 3),
                  k2 = 16 * pick(rng, 1, 3);
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, c, s, s});
    ValueId head = b.add1("Relu", {conv(b, x, c, c, 1)});
    ValueId left = b.add1("Relu", {conv(b, head, c, k1, 3)});
    ValueId right = b.add1("Relu", {conv(b, head, c, k2, 3)});
    ValueId cat = b.add1("Concat", {left, right}, {{"axis", attr_i(1)}});
    b.output(b.add1("Relu", {conv(b, cat, k1 + k2, 24, 1)}));
    for (auto [variant, step] : {std::pair{"winograd", onednn::kWinogradF43Step},
                                 std::pair{"winograd2x2", onednn::kWinogradF23Step}}) {
      const std::string what =
          fmt::format("{}: {} channels {}x{}, branches {}/{}", variant, c, s, s, k1, k2);
      const ProgramSteps steps = compiled_steps(onednn_graph(), b.graph(), variant);
      EXPECT_EQ(steps.count(step), 2) << what;
      EXPECT_GT(steps.concurrent_stages, 0) << what << ": the branches never ran side by side";
      expect_like_reference(onednn_graph(), b.graph(), variant, what);
    }
  }
}

}  // namespace
}  // namespace collage
