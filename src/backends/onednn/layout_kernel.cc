// The glue ops between a CNN's primitives, on oneDNN so that they stay inside a region
// instead of cutting it (each cut costs a reorder to row-major and back, and a step on
// `reference`): Concat (the concat primitive; it keeps the inputs' layout when they share one
// and oneDNN can, else it reorders each input into its slice of a result in one of their
// activation layouts, row-major last),
// Slice/Split (a reorder from a sub-memory of the input; a Slice with steps or a Gather of one
// constant index, from the input seen with strides), Transpose (a reorder into permuted
// strides), the channel shuffle Reshape -> Transpose -> Reshape (the shuffle primitive on
// channel-blocked layouts, where it is jit; one strided reorder within a whole-dim layout
// such as the channels-last one brgconv picks), DepthToSpace / SpaceToDepth (the same
// reorder over their 6-D view), constant Pad (a reorder into the interior of
// a buffer whose border is written once, at compile time), a ReduceMean/ReduceMax over all
// spatial axes (a global pooling) and ReduceMean/Max/Min/Sum/Prod over other axes (the reduction
// primitive). Zero Pads before convolutions and pools are folded into them instead
// (fold_pads).
#include <algorithm>
#include <numeric>
#include <optional>

#include "backends/onednn/dense_concat.h"
#include "backends/onednn/epilogue.h"
#include "backends/onednn/kernels.h"
#include "backends/onednn/small_reduction.h"
#include "ops/tensor_util.h"

namespace collage::onednn {
namespace {

bool is_constant(const Graph& g, ValueId v) {
  return v != kNoValue && g.value(v).is_constant();
}

bool single_output(const Node& n) {
  if (n.outputs.empty() || n.outputs[0] == kNoValue) return false;
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (n.outputs[i] != kNoValue) return false;
  return true;
}

int64_t normalize_axis(int64_t axis, size_t rank) {
  return axis < 0 ? axis + static_cast<int64_t>(rank) : axis;
}

// The blocked or channels-last layouts oneDNN's primitives choose for activations.
std::optional<tag> activation_tag(const dnnl::memory::desc& md) {
  static const std::vector<tag> rank3 = {tag::nCw16c, tag::nCw8c, tag::nwc};
  static const std::vector<tag> rank4 = {tag::nChw16c, tag::nChw8c, tag::nhwc};
  static const std::vector<tag> rank5 = {tag::nCdhw16c, tag::nCdhw8c, tag::ndhwc};
  const Dims d = md.dims();
  const std::vector<tag>* tags = d.size() == 3   ? &rank3
                                 : d.size() == 4 ? &rank4
                                 : d.size() == 5 ? &rank5
                                                 : nullptr;
  if (!tags || md.data_type() != dt::f32) return std::nullopt;
  for (tag t : *tags)
    if (md == dnnl::memory::desc(d, dt::f32, t)) return t;
  return std::nullopt;
}

// Constant int64 input `i` of `n`, or the attribute `attr` (older opsets), or `def`.
std::vector<int64_t> ints_of(const Graph& g, const Node& n, size_t i, const char* attr,
                             std::vector<int64_t> def = {}) {
  if (n.input(i) != kNoValue) {
    if (!is_constant(g, n.input(i)))
      fail(ErrorKind::kUnsupported, "onednn: {}'s {} is computed at run time", n.op_type, attr);
    return g.value(n.input(i)).constant.to_int_vector();
  }
  return n.attr_ints(attr, std::move(def));
}

// Where each output of a Slice/Split/Gather starts in its input, the steps it takes there
// (a Slice's), and the input axis its shape drops (a Gather's scalar index), if any.
struct Cut {
  ValueId out = kNoValue;
  Dims offsets;
  Dims steps;  // empty: 1 along every axis
  int64_t dropped_axis = -1;
  bool strided() const {
    return dropped_axis >= 0 ||
           std::any_of(steps.begin(), steps.end(), [](int64_t s) { return s != 1; });
  }
};

// Slice with positive steps: where it starts in its input and its steps.
std::optional<Cut> slice_cut(const Graph& g, const Node& n) {
  ops::SliceSpec spec;
  try {
    spec = ops::slice_spec(InferContext(g, n));
  } catch (const Error&) {
    return std::nullopt;  // starts/ends/axes/steps computed at run time
  }
  if (std::any_of(spec.step.begin(), spec.step.end(), [](int64_t s) { return s < 1; }))
    return std::nullopt;
  return Cut{n.outputs[0], Dims(spec.start.begin(), spec.start.end()),
             Dims(spec.step.begin(), spec.step.end())};
}

// Gather of one constant index: the input's slice of width 1 along the axis (dropped from
// the shape for a scalar index). Swin's q, k, v = qkv[0], qkv[1], qkv[2].
std::optional<Cut> gather_cut(const Graph& g, const Node& n) {
  const ValueId indices = n.input(1);
  if (indices == kNoValue || !is_constant(g, indices) || g.value(indices).constant.numel() != 1 ||
      g.value(indices).shape.size() > 1)
    return std::nullopt;
  const Shape& in = g.value(n.input(0)).shape;
  if (in.size() < 2 && g.value(indices).shape.empty()) return std::nullopt;  // a scalar out
  const int64_t axis = normalize_axis(n.attr_int("axis", 0), in.size());
  if (axis < 0 || axis >= static_cast<int64_t>(in.size())) return std::nullopt;
  int64_t index = g.value(indices).constant.to_int_vector()[0];
  if (index < 0) index += in[axis];
  if (index < 0 || index >= in[axis]) return std::nullopt;
  Cut cut{n.outputs[0], Dims(in.size(), 0)};
  cut.offsets[axis] = index;
  if (g.value(indices).shape.empty()) cut.dropped_axis = axis;
  return cut;
}

// Split: each output starts where the previous one ended along the axis.
std::optional<std::vector<Cut>> split_cuts(const Graph& g, const Node& n) {
  const Shape& in = g.value(n.input(0)).shape;
  const int64_t axis = normalize_axis(n.attr_int("axis", 0), in.size());
  if (axis < 0 || axis >= static_cast<int64_t>(in.size())) return std::nullopt;
  std::vector<Cut> cuts;
  int64_t at = 0;
  for (ValueId out : n.outputs) {
    if (out == kNoValue) return std::nullopt;  // its share of the input is not in its shape
    Cut cut{out, Dims(in.size(), 0)};
    cut.offsets[axis] = at;
    at += g.value(out).shape[axis];
    cuts.push_back(cut);
  }
  if (at != in[axis]) return std::nullopt;
  return cuts;
}

std::optional<std::vector<Cut>> cuts_of(const Graph& g, const Node& n) {
  if (n.op_type == "Split") return split_cuts(g, n);
  std::optional<Cut> cut = n.op_type == "Gather" ? gather_cut(g, n) : slice_cut(g, n);
  if (!cut) return std::nullopt;
  return std::vector<Cut>{*cut};
}

struct PadSpec {
  Dims begin, end;
  float value = 0;
};

// A constant-mode Pad with constant pads and value (negative pads crop: not taken).
std::optional<PadSpec> pad_spec(const Graph& g, const Node& n) {
  ops::PadSpec spec;
  try {
    spec = ops::pad_spec(InferContext(g, n));
  } catch (const Error&) {
    return std::nullopt;
  }
  if (spec.mode != ops::PadMode::kConstant) return std::nullopt;
  PadSpec s{Dims(spec.begin.begin(), spec.begin.end()), Dims(spec.end.begin(), spec.end.end()),
            static_cast<float>(spec.attr_value)};
  if (n.input(2) != kNoValue && g.opset >= 11) {
    if (!is_constant(g, n.input(2)) || g.value(n.input(2)).constant.numel() != 1)
      return std::nullopt;
    s.value = static_cast<float>(g.value(n.input(2)).constant.get_as_double(0));
  }
  const auto negative = [](int64_t p) { return p < 0; };
  if (std::any_of(s.begin.begin(), s.begin.end(), negative) ||
      std::any_of(s.end.begin(), s.end.end(), negative))
    return std::nullopt;
  return s;
}

}  // namespace

std::optional<std::vector<int64_t>> reduced_axes(const Graph& g, const Node& n) {
  const size_t rank = g.value(n.input(0)).shape.size();
  std::vector<int64_t> axes;
  try {
    // An input from opset 18 (ReduceSum: 13), an attribute before.
    const bool from_input = g.opset >= 18 || (n.op_type == "ReduceSum" && g.opset >= 13);
    axes = from_input ? (n.input(1) == kNoValue ? std::vector<int64_t>{} : ints_of(g, n, 1, "axes"))
                      : n.attr_ints("axes");
    for (int64_t& a : axes) a = normalize_axis(a, rank);
  } catch (const Error&) {
    return std::nullopt;
  }
  if (axes.empty()) {
    // No axes: every axis, unless noop_with_empty_axes makes it the identity.
    if (n.attr_int("noop_with_empty_axes", 0) != 0) return std::nullopt;
    axes.resize(rank);
    std::iota(axes.begin(), axes.end(), 0);
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) return std::nullopt;
  return axes;
}

bool spatial_reduce(const Graph& g, const Node& n) {
  const size_t rank = g.value(n.input(0)).shape.size();
  if (rank < 3 || rank > 5 || (n.op_type != "ReduceMean" && n.op_type != "ReduceMax")) return false;
  const std::optional<std::vector<int64_t>> axes = reduced_axes(g, n);
  std::vector<int64_t> spatial(rank - 2);
  std::iota(spatial.begin(), spatial.end(), 2);
  return axes && *axes == spatial;
}

namespace {

// ShuffleNet's channel shuffle: x [N, C, S...] -> Reshape [N, g, C/g, S...] ->
// Transpose(0, 2, 1, 3...) -> Reshape back to x's shape. The group size oneDNN's shuffle
// takes (C/g), when node `r1` heads exactly that (each value read by the next node alone).
struct ShuffleSpec {
  NodeId transpose = -1, reshape = -1;
  int64_t group_size = 0;
};

std::optional<ShuffleSpec> shuffle_spec(const Graph& g,
                                        const std::vector<std::vector<NodeId>>& readers,
                                        NodeId r1) {
  const Node& a = g.node(r1);
  if (a.op_type != "Reshape" || !a.domain.empty() || !single_output(a) || !is_f32(g, a.input(0)))
    return std::nullopt;
  const Shape& xs = g.value(a.input(0)).shape;
  const Shape& split = g.value(a.outputs[0]).shape;
  if (xs.size() < 3 || split.size() != xs.size() + 1 || split[0] != xs[0] ||
      split[1] * split[2] != xs[1] || !std::equal(xs.begin() + 2, xs.end(), split.begin() + 3))
    return std::nullopt;
  auto sole = [&](ValueId v, const char* type) -> NodeId {
    if (readers[v].size() != 1 || is_graph_output(g, v)) return -1;
    const Node& n = g.node(readers[v][0]);
    return n.op_type == type && n.domain.empty() && single_output(n) && n.input(0) == v
               ? readers[v][0]
               : -1;
  };
  ShuffleSpec s;
  s.transpose = sole(a.outputs[0], "Transpose");
  if (s.transpose < 0) return std::nullopt;
  const Node& t = g.node(s.transpose);
  std::vector<int64_t> perm(split.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[1], perm[2]);
  if (t.attr_ints("perm") != perm) return std::nullopt;
  s.reshape = sole(t.outputs[0], "Reshape");
  if (s.reshape < 0 || g.value(g.node(s.reshape).outputs[0]).shape != xs) return std::nullopt;
  s.group_size = split[2];
  return s;
}

// The stride of each dim of `md` when its layout has no inner blocks (row-major,
// channels-last, any order of whole dims), else nullopt.
std::optional<Dims> dim_strides(const dnnl::memory::desc& md) {
  if (md.data.offset0 != 0) return std::nullopt;
  return plain_strides(md);
}

// The strides of `dims` (strides `strides`) with dim `at` split into `parts`, outer first.
Dims split_strides(const Dims& strides, size_t at, const Dims& parts) {
  Dims out(strides.begin(), strides.begin() + at);
  for (size_t i = 0; i < parts.size(); ++i) {
    int64_t s = strides[at];
    for (size_t k = i + 1; k < parts.size(); ++k) s *= parts[k];
    out.push_back(s);
  }
  out.insert(out.end(), strides.begin() + at + 1, strides.end());
  return out;
}

// One reorder from `src` (dims `in`, in any strides) into `dst`'s buffer, element i of the
// source going where `dst_strides[perm]` puts it: a transposition written straight into the
// destination's layout.
void permute_into(ValueMemories& values, const dnnl::memory& src, const Dims& in,
                  const std::vector<int64_t>& perm, const dnnl::memory& dst,
                  const Dims& dst_strides) {
  Dims strides(in.size());
  for (size_t k = 0; k < perm.size(); ++k) strides[perm[k]] = dst_strides[k];
  const dnnl::memory view(dnnl::memory::desc(in, dt::f32, strides), cpu_engine(),
                          dst.get_data_handle());
  values.program().copy(src, view);
}

// y = x with its dims permuted by `perm` (`in` is x's shape as the permutation sees it, a
// reshaped view of row-major x; y's bytes are the permuted tensor's, row-major).
void emit_permutation(ValueMemories& values, ValueId x, const Shape& in,
                      const std::vector<int64_t>& perm, ValueId y, const Shape& ys) {
  Shape permuted(in.size());
  for (size_t k = 0; k < perm.size(); ++k) permuted[k] = in[perm[k]];
  const dnnl::memory::desc x_md = values.as_is(x, in).get_desc();
  // x as it is when its layout has whole dims (channels-last too), else row-major.
  const dnnl::memory src = x_md.dims() == to_dims(in) && dim_strides(x_md)
                               ? values.as_is(x, in)
                               : values.view(x, plain_md(in));
  const dnnl::memory dst = values.fresh_destination(y, plain_md(ys));
  permute_into(values, src, to_dims(in), perm, dst, *dim_strides(plain_md(permuted)));
  values.produced(y, dst);
}

// The layout a direct convolution reading `shape` (rank 3-5) picks, or nullopt: what the
// readers of a concatenation in a CNN usually want.
std::optional<dnnl::memory::desc> conv_source_layout(const Shape& shape) {
  if (shape.size() < 3 || shape.size() > 5) return std::nullopt;
  const Dims src = to_dims(shape);
  Dims weights = {src[1], src[1]};
  weights.insert(weights.end(), src.size() - 2, 1);
  const Dims ones(src.size() - 2, 1), zeros(src.size() - 2, 0);
  try {
    const dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
            dnnl::memory::desc(src, dt::f32, tag::any),
            dnnl::memory::desc(weights, dt::f32, tag::any), dnnl::memory::desc(),
            dnnl::memory::desc(src, dt::f32, tag::any), ones, zeros, zeros),
        base_attr(), cpu_engine());
    return pd.src_desc();
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

}  // namespace

// The layouts to try for a concatenation of `mds` into `ys`, best first. The inputs' common
// layout when they share one (the simple concat then copies whole blocks; oneDNN refuses it
// when a slice would split a block). Inputs in different layouts (a Winograd branch beside
// direct ones) are reordered each into its slice of the result: in the layout a convolution
// reading it picks when one of them is already in it, else in each input's own activation
// layout, most elements first. Measured on GoogLeNet's inception blocks (channels-last and
// channel-blocked branches): a row-major result cost the concat's reorders plus a reorder
// back to channels-last for every reader. Row-major last.
std::vector<dnnl::memory::desc> concat_layouts(const std::vector<dnnl::memory::desc>& mds,
                                               const Shape& ys, int64_t axis) {
  std::vector<dnnl::memory::desc> candidates;
  auto add = [&](const dnnl::memory::desc& md) {
    if (!is_plain(md) && std::find(candidates.begin(), candidates.end(), md) == candidates.end())
      candidates.push_back(md);
  };
  const std::optional<tag> first = activation_tag(mds[0]);
  const bool shared = first && std::all_of(mds.begin(), mds.end(), [&](const auto& md) {
                        return activation_tag(md) == first;
                      });
  if (shared) add(layout_like(mds[0], ys));
  if (!shared && axis == 1) {
    std::vector<const dnnl::memory::desc*> by_size;
    for (const dnnl::memory::desc& md : mds)
      if (activation_tag(md)) by_size.push_back(&md);
    std::stable_sort(by_size.begin(), by_size.end(),
                     [](const auto* a, const auto* b) { return a->get_size() > b->get_size(); });
    if (std::optional<dnnl::memory::desc> conv = conv_source_layout(ys))
      if (std::any_of(by_size.begin(), by_size.end(),
                      [&](const auto* md) { return activation_tag(*md) == activation_tag(*conv); }))
        add(*conv);
    for (const dnnl::memory::desc* md : by_size) add(layout_like(*md, ys));
  }
  candidates.push_back(plain_md(ys));
  return candidates;
}

namespace {

void emit_concat(const Graph& sub, ValueMemories& values) {
  const Node& n = sub.node(0);
  const ValueId y = n.outputs[0];
  const Shape& ys = sub.value(y).shape;
  const int64_t axis = normalize_axis(n.attr_int("axis", 0), ys.size());
  // Its inputs already side by side in their slices of one buffer (concat_in_place.h).
  if (values.concat_in_place(y, n.inputs)) return;
  std::vector<dnnl::memory> srcs;
  std::vector<dnnl::memory::desc> mds;
  for (ValueId x : n.inputs) {
    require_f32(sub, x, "Concat input");
    const Shape& shape = sub.value(x).shape;
    if (shape_numel(shape) == 0) continue;  // oneDNN has no empty memories
    if (sub.value(x).is_constant()) {
      // A constant joined to computed values (a class token): packed once, row-major.
      srcs.push_back(
          values.program().constant(sub.value(x).constant, plain_md(shape), plain_md(shape)));
    } else {
      if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: Concat input is not available");
      srcs.push_back(values.as_is(x, shape));
    }
    mds.push_back(srcs.back().get_desc());
  }
  if (srcs.empty()) fail(ErrorKind::kUnsupported, "onednn: Concat of empty inputs");
  // Dense parts of one plain layout: copies of their runs (dense_concat.h).
  const dnnl::memory::desc like_parts = layout_like(mds[0], ys);
  if (std::optional<DenseConcat> join = dense_concat(mds, like_parts, static_cast<int>(axis))) {
    const dnnl::memory dst = values.fresh_destination(y, like_parts);
    std::vector<std::pair<int, dnnl::memory>> args = {{DNNL_ARG_DST, dst}};
    for (size_t i = 0; i < srcs.size(); ++i)
      args.emplace_back(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), srcs[i]);
    const int parts = static_cast<int>(srcs.size());
    values.program().add_custom(
        kDenseConcatStep,
        [join = std::move(*join), parts](const dnnl_exec_arg_t* args, int count) {
          std::vector<const float*> in(static_cast<size_t>(parts));
          for (int i = 0; i < parts; ++i)
            in[static_cast<size_t>(i)] = custom_step_data(args, count, DNNL_ARG_MULTIPLE_SRC + i);
          join(in, custom_step_data(args, count, DNNL_ARG_DST));
          return dnnl_success;
        },
        std::move(args), dnnl::primitive::kind::concat);
    values.produced(y, dst);
    return;
  }
  std::vector<dnnl::memory::desc> candidates = concat_layouts(mds, ys, axis);
  // The first layout oneDNN concatenates into with an optimized kernel, else the first it
  // takes at all: row-major inputs (CBAM's channel mean and max maps) into the channels-last
  // layout a conv reading them picks ran as `ref:any`, into row-major as `simple:any`.
  std::optional<dnnl::concat::primitive_desc> pd;
  for (const dnnl::memory::desc& dst_md : candidates) {
    try {
      dnnl::concat::primitive_desc made(dst_md, static_cast<int>(axis), mds, cpu_engine(),
                                        base_attr());
      const bool optimized = !is_reference_impl(made.impl_info_str());
      if (!pd || optimized) pd = made;
      if (optimized) break;
    } catch (const dnnl::error&) {
    }
  }
  if (!pd) fail(ErrorKind::kUnsupported, "onednn: no concat for these inputs");
  const dnnl::memory dst = values.destination(y, pd->dst_desc());
  std::vector<std::pair<int, dnnl::memory>> args = {{DNNL_ARG_DST, dst}};
  for (size_t i = 0; i < srcs.size(); ++i)
    args.emplace_back(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), srcs[i]);
  values.program().add(dnnl::concat(*pd), *pd, std::move(args));
  values.produced(y, dst);
}

void emit_cuts(const Graph& sub, ValueMemories& values) {
  const Node& n = sub.node(0);
  const ValueId x = n.input(0);
  require_f32(sub, x, "sliced value");
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: sliced value is not available");
  std::optional<std::vector<Cut>> cuts = cuts_of(sub, n);
  if (!cuts)
    fail(ErrorKind::kUnsupported, "onednn: {} '{}' is not a cut of constant bounds", n.op_type,
         n.name);
  const Shape& xs = sub.value(x).shape;
  const dnnl::memory::desc x_md = values.as_is(x, xs).get_desc();
  for (const Cut& cut : *cuts) {
    const Shape& shape = sub.value(cut.out).shape;
    if (shape_numel(shape) == 0) fail(ErrorKind::kUnsupported, "onednn: an empty slice");
    // A Split output nobody reads is not among the kernel's outputs.
    if (std::find(sub.outputs.begin(), sub.outputs.end(), cut.out) == sub.outputs.end()) continue;
    if (cut.strided()) {
      // x's row-major data seen with the cut's strides (each axis's times its step) from
      // its first element: one reorder gathers it into a row-major output.
      Dims row_major(xs.size(), 1), dims, strides;
      for (size_t d = xs.size() - 1; d-- > 0;) row_major[d] = row_major[d + 1] * xs[d + 1];
      int64_t first = 0;
      for (size_t d = 0; d < xs.size(); ++d) {
        first += cut.offsets[d] * row_major[d];
        if (static_cast<int64_t>(d) == cut.dropped_axis) continue;
        dims.push_back(shape[dims.size()]);
        strides.push_back(row_major[d] * (cut.steps.empty() ? 1 : cut.steps[d]));
      }
      dnnl::memory::desc md(dims, dt::f32, strides);
      md.data.offset0 = first;
      const dnnl::memory dst = values.destination(cut.out, plain_md(shape));
      values.program().copy(values.view(x, md), dst);
      values.produced(cut.out, dst);
      continue;
    }
    // One reorder cuts and, from a row-major view of a blocked input, restores its layout.
    const dnnl::memory src = values.sub_view(x, xs, to_dims(shape), cut.offsets);
    const dnnl::memory dst = values.destination(cut.out, layout_like(x_md, shape));
    values.program().copy(src, dst);
    values.produced(cut.out, dst);
  }
}

void emit_transpose(const Graph& sub, ValueMemories& values) {
  const Node& n = sub.node(0);
  const ValueId x = n.input(0), y = n.outputs[0];
  require_f32(sub, x, "Transpose input");
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: Transpose input is not available");
  const Shape& xs = sub.value(x).shape;
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (perm.empty())
    for (size_t k = xs.size(); k-- > 0;) perm.push_back(static_cast<int64_t>(k));
  emit_permutation(values, x, xs, perm, y, sub.value(y).shape);
}

// DepthToSpace (DCR or CRD) and SpaceToDepth of a [N, C, H, W] value: the 6-D view and the
// permutation of it that they are (as the ONNX spec defines them), or nullopt.
struct SpaceDepthSpec {
  Shape view;
  std::vector<int64_t> perm;
};

std::optional<SpaceDepthSpec> space_depth_spec(const Graph& g, const Node& n) {
  const Shape& xs = g.value(n.input(0)).shape;
  const int64_t b = n.attr_int("blocksize", 0);
  if (xs.size() != 4 || b < 1) return std::nullopt;
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  if (n.op_type == "SpaceToDepth") {
    if (H % b || W % b) return std::nullopt;
    return SpaceDepthSpec{{N, C, H / b, b, W / b, b}, {0, 3, 5, 1, 2, 4}};
  }
  if (n.op_type != "DepthToSpace" || C % (b * b)) return std::nullopt;
  const std::string mode = n.attr_string("mode", "DCR");
  if (mode == "DCR") return SpaceDepthSpec{{N, b, b, C / (b * b), H, W}, {0, 3, 4, 1, 5, 2}};
  if (mode == "CRD") return SpaceDepthSpec{{N, C / (b * b), b, b, H, W}, {0, 1, 4, 2, 5, 3}};
  return std::nullopt;
}

// PixelShuffle (super-resolution, some decoders) and its inverse: one permuting reorder.
void emit_space_depth(const Graph& sub, ValueMemories& values) {
  const Node& n = sub.node(0);
  const ValueId x = n.input(0), y = n.outputs[0];
  require_f32(sub, x, "DepthToSpace or SpaceToDepth input");
  const std::optional<SpaceDepthSpec> spec = space_depth_spec(sub, n);
  if (!spec) fail(ErrorKind::kUnsupported, "onednn: {} '{}' of this form", n.op_type, n.name);
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: {} input is not available", n.op_type);
  emit_permutation(values, x, spec->view, spec->perm, y, sub.value(y).shape);
}

void emit_shuffle(const Graph& sub, ValueMemories& values) {
  const std::optional<ShuffleSpec> s = shuffle_spec(sub, sub.consumers(), 0);
  if (!s || sub.num_nodes() != 3)
    fail(ErrorKind::kUnsupported, "onednn: not a channel shuffle (Reshape, Transpose, Reshape)");
  const ValueId x = sub.node(0).input(0), y = sub.node(s->reshape).outputs[0];
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: shuffled value is not available");
  const Shape& xs = sub.value(x).shape;
  const dnnl::memory src = values.as_is(x, xs);
  if (!is_plain(src.get_desc())) {
    // oneDNN's shuffle is jit on blocked layouts only (its row-major one is a plain loop).
    auto pd = create_pd("shuffle", [&] {
      return dnnl::shuffle_forward::primitive_desc(
          dnnl::shuffle_forward::desc(dnnl::prop_kind::forward_inference, src.get_desc(), 1,
                                      static_cast<int>(s->group_size)),
          cpu_engine(), base_attr());
    });
    if (!is_reference_impl(pd.impl_info_str())) {
      const dnnl::memory dst = values.destination(y, pd.dst_desc());
      values.program().add(dnnl::shuffle_forward(pd), pd,
                           {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
      values.produced(y, dst);
      return;
    }
  }
  const Shape& split = sub.value(sub.node(0).outputs[0]).shape;
  std::vector<int64_t> perm(split.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[1], perm[2]);
  if (const std::optional<Dims> sx = dim_strides(src.get_desc())) {
    // Whole-dim layouts (channels-last as brgconv picks it, row-major): the shuffle is one
    // reorder within that layout; x's channels seen as [g, C/g], y's as [C/g, g].
    const int64_t groups = split[1], size = split[2];
    const dnnl::memory in = values.reinterpret(
        x, dnnl::memory::desc(to_dims(split), dt::f32, split_strides(*sx, 1, {groups, size})));
    const dnnl::memory dst = values.fresh_destination(y, src.get_desc());
    permute_into(values, in, to_dims(split), perm, dst, split_strides(*sx, 1, {size, groups}));
    values.produced(y, dst);
    return;
  }
  emit_permutation(values, x, split, perm, y, xs);
}

void emit_pad(const Graph& sub, ValueMemories& values) {
  const Node& n = sub.node(0);
  const ValueId x = n.input(0), y = n.outputs[0];
  require_f32(sub, x, "Pad input");
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: Pad input is not available");
  const std::optional<PadSpec> s = pad_spec(sub, n);
  if (!s) fail(ErrorKind::kUnsupported, "onednn: Pad '{}' is not a constant, growing pad", n.name);
  const Shape& xs = sub.value(x).shape;
  const Shape& ys = sub.value(y).shape;
  if (shape_numel(xs) == 0) fail(ErrorKind::kUnsupported, "onednn: Pad of an empty tensor");
  const dnnl::memory src = values.as_is(x, xs);
  // The input's blocked layout when the border is zeros and no channel is added (a blocked
  // layout's own channel padding must stay zero); else row-major.
  const bool keep_layout = s->value == 0.0f && xs.size() >= 2 && s->begin[1] == 0 && s->end[1] == 0;
  const dnnl::memory::desc md = keep_layout ? layout_like(src.get_desc(), ys) : plain_md(ys);
  const dnnl::memory dst = values.fresh_destination(y, md);
  if (s->value != 0.0f) {
    float* d = static_cast<float*>(dst.get_data_handle());
    std::fill(d, d + shape_numel(ys), s->value);
  }
  const dnnl::memory interior(md.submemory_desc(to_dims(xs), s->begin), cpu_engine(),
                              dst.get_data_handle());
  values.program().copy(src, interior);
  values.produced(y, dst);
  values.keep_intact(y);
}

void emit_spatial_reduce(const Graph& sub, ValueMemories& values) {
  const Node& n = sub.node(0);
  const ValueId x = n.input(0), y = n.outputs[0];
  require_f32(sub, x, "reduced value");
  if (!spatial_reduce(sub, n) || sub.num_nodes() != 1)
    fail(ErrorKind::kUnsupported, "onednn: {} '{}' is not over the spatial axes", n.op_type,
         n.name);
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: reduced value is not available");
  const Shape& xs = sub.value(x).shape;
  Shape pooled(xs.begin(), xs.begin() + 2);
  pooled.resize(xs.size(), 1);
  dnnl::memory src = values.as_is(x, xs);
  const size_t nd = xs.size() - 2;
  const Dims kernel(xs.begin() + 2, xs.end()), ones(nd, 1), zeros(nd, 0);
  dnnl::memory::desc dst_md = is_plain(src.get_desc())
                                  ? plain_md(pooled)
                                  : dnnl::memory::desc(to_dims(pooled), dt::f32, tag::any);
  const auto alg = n.op_type == "ReduceMax" ? dnnl::algorithm::pooling_max
                                            : dnnl::algorithm::pooling_avg_exclude_padding;
  auto make_pd = [&] {
    return create_pd("spatial reduction", [&] {
      return dnnl::pooling_v2_forward::primitive_desc(
          dnnl::pooling_v2_forward::desc(dnnl::prop_kind::forward_inference, alg, src.get_desc(),
                                         dst_md, ones, kernel, zeros, zeros, zeros),
          base_attr(), cpu_engine());
    });
  };
  auto pd = make_pd();
  // Where oneDNN 2.6 has no jit pooling for a row-major source (large planes: a ReduceMax
  // over 64x147x147 ran 1.8 ms on "simple_nchw"), the source is read channel-blocked, as in
  // emit_pool.
  if (is_plain(src.get_desc()) && is_reference_impl(pd.impl_info_str())) {
    src = values.read(x, channel_blocked_md(to_dims(xs)));
    dst_md = dnnl::memory::desc(to_dims(pooled), dt::f32, tag::any);
    pd = make_pd();
  }
  const bool keepdims = n.attr_int("keepdims", 1) != 0;
  // keepdims = 0 drops the unit dims: y is the row-major form of the pooled values.
  const dnnl::memory dst = keepdims || is_plain(pd.dst_desc())
                               ? values.destination(y, pd.dst_desc())
                               : values.program().buffer(pd.dst_desc());
  values.program().add(dnnl::pooling_v2_forward(pd), pd,
                       {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
  if (keepdims || is_plain(pd.dst_desc())) {
    values.produced(y, dst);
    return;
  }
  const dnnl::memory out = values.destination(y, plain_md(pooled));
  values.program().copy(dst, out);
  values.produced(y, out);
}

// The reduction ops a region takes, and oneDNN's algorithm for each.
std::optional<dnnl::algorithm> reduction_algorithm(const std::string& op) {
  if (op == "ReduceMean") return dnnl::algorithm::reduction_mean;
  if (op == "ReduceMax") return dnnl::algorithm::reduction_max;
  if (op == "ReduceMin") return dnnl::algorithm::reduction_min;
  if (op == "ReduceSum") return dnnl::algorithm::reduction_sum;
  if (op == "ReduceProd") return dnnl::algorithm::reduction_mul;
  return std::nullopt;
}

// A reduction over other axes than the spatial ones (CBAM's channel mean and max, a mean over
// tokens, a sum over everything): oneDNN's reduction primitive. Its jit kernel (2.6) reduces
// only the innermost dims of a dense layout, so the input is seen with its dims permuted,
// kept axes first and reduced ones last: a free view where its strides allow (a channel
// reduction of a channels-last value, a trailing one of a row-major value), else a
// transposing copy into that order. The result is row-major: kept dims in their order, so
// its bytes are the value's with or without keepdims.
void emit_reduce(const Graph& sub, ValueMemories& values) {
  const Node& n = sub.node(0);
  const ValueId x = n.input(0), y = n.outputs[0];
  require_f32(sub, x, "reduced value");
  const std::optional<dnnl::algorithm> alg = reduction_algorithm(n.op_type);
  const std::optional<std::vector<int64_t>> axes = reduced_axes(sub, n);
  if (!alg || !axes || sub.num_nodes() != 1)
    fail(ErrorKind::kUnsupported, "onednn: no reduction kernel for {} '{}'", n.op_type, n.name);
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: reduced value is not available");
  const Shape& xs = sub.value(x).shape;
  std::vector<int64_t> perm;
  for (int64_t a = 0; a < static_cast<int64_t>(xs.size()); ++a)
    if (!std::binary_search(axes->begin(), axes->end(), a)) perm.push_back(a);
  perm.insert(perm.end(), axes->begin(), axes->end());
  Dims in_order(xs.size()), out_order(xs.size(), 1);
  for (size_t k = 0; k < perm.size(); ++k) {
    in_order[k] = xs[static_cast<size_t>(perm[k])];
    if (k < xs.size() - axes->size()) out_order[k] = in_order[k];
  }
  const dnnl::memory::desc out_md = plain_md(Shape(out_order.begin(), out_order.end()));
  auto jit_reduction = [&](const dnnl::memory::desc& src) {
    std::optional<dnnl::reduction::primitive_desc> pd;
    try {
      pd.emplace(dnnl::reduction::desc(*alg, src, out_md, 0.0f, 0.0f), base_attr(), cpu_engine());
      if (is_reference_impl(pd->impl_info_str())) pd.reset();
    } catch (const dnnl::error&) {
    }
    return pd;
  };
  const dnnl::memory as_is = values.as_is(x, xs);
  const bool mean = *alg == dnnl::algorithm::reduction_mean;
  if (*alg == dnnl::algorithm::reduction_sum || mean) {
    // A few elements per output: collage's step (small_reduction.h), read where x lies.
    std::optional<SmallReduction> step;
    if (as_is.get_desc().dims() == to_dims(xs))
      step = small_reduction(as_is.get_desc(), *axes, mean, n.attr_int("keepdims", 1) != 0);
    if (step && step->out.dims() == to_dims(sub.value(y).shape)) {
      const dnnl::memory dst = values.fresh_destination(y, step->out);
      values.program().add_custom(
          kSmallReductionStep,
          [run = step->run](const dnnl_exec_arg_t* args, int count) {
            run(custom_step_data(args, count, DNNL_ARG_FROM),
                custom_step_data(args, count, DNNL_ARG_TO));
            return dnnl_success;
          },
          {{DNNL_ARG_FROM, as_is}, {DNNL_ARG_TO, dst}}, dnnl::primitive::kind::reduction);
      values.produced(y, dst);
      return;
    }
  }
  const std::optional<Dims> strides = dim_strides(as_is.get_desc());
  const bool whole_dims = strides && as_is.get_desc().dims() == to_dims(xs);
  std::optional<dnnl::reduction::primitive_desc> pd;
  dnnl::memory src;
  if (whole_dims) {
    Dims in_strides(xs.size());
    for (size_t k = 0; k < perm.size(); ++k) in_strides[k] = (*strides)[perm[k]];
    const dnnl::memory::desc view(in_order, dt::f32, in_strides);
    if ((pd = jit_reduction(view))) src = values.reinterpret(x, view);
  }
  if (!pd) {
    const dnnl::memory::desc dense = plain_md(Shape(in_order.begin(), in_order.end()));
    if (!(pd = jit_reduction(dense)))
      fail(ErrorKind::kUnsupported, "onednn: {} '{}' has no jit reduction kernel", n.op_type,
           n.name);
    src = values.program().buffer(dense);
    permute_into(values, whole_dims ? as_is : values.view(x, plain_md(xs)), to_dims(xs), perm, src,
                 *dim_strides(dense));
  }
  const dnnl::memory dst = values.fresh_destination(y, plain_md(sub.value(y).shape));
  const dnnl::memory out(out_md, cpu_engine(), dst.get_data_handle());
  values.program().add(dnnl::reduction(*pd), *pd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, out}});
  values.produced(y, dst);
}

// Whether reader `r` of zero-padded `v` (spatial pads only) computes the same from the
// unpadded input with the pads added to its own: a convolution, or an average pool that
// counts padding (or has none of its own, so that counting it changes nothing).
bool folds_pad(const Graph& g, const Node& r, ValueId v) {
  if (!r.domain.empty() || r.input(0) != v ||
      std::count(r.inputs.begin(), r.inputs.end(), v) != 1 ||
      r.attr_string("auto_pad", "NOTSET") != "NOTSET")
    return false;
  if (r.op_type == "Conv") return true;
  if (r.op_type != "AveragePool" || r.attr_int("ceil_mode", 0) != 0) return false;
  const std::vector<int64_t> pads = r.attr_ints("pads");
  return r.attr_int("count_include_pad", 0) != 0 ||
         std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; });
}

}  // namespace

dnnl::memory::desc layout_like(const dnnl::memory::desc& like, const Shape& shape) {
  if (std::optional<tag> t = activation_tag(like); t && like.dims().size() == shape.size())
    return dnnl::memory::desc(to_dims(shape), dt::f32, *t);
  return plain_md(shape);
}

std::optional<dnnl::memory::desc> channels_last_md(const Shape& shape) {
  static const tag tags[] = {tag::nwc, tag::nhwc, tag::ndhwc};
  if (shape.size() < 3 || shape.size() > 5) return std::nullopt;
  return dnnl::memory::desc(to_dims(shape), dt::f32, tags[shape.size() - 3]);
}

Graph fold_pads(const Graph& region) {
  Graph g = region;
  const std::vector<std::vector<NodeId>> readers = g.consumers();
  std::vector<bool> folded(g.num_nodes(), false);
  bool any = false;
  for (size_t i = 0; i < g.num_nodes(); ++i) {
    const Node& pad = g.node(static_cast<NodeId>(i));
    if (pad.op_type != "Pad" || !pad.domain.empty() || !layout_head(g, pad)) continue;
    const std::optional<PadSpec> s = pad_spec(g, pad);
    const ValueId v = pad.outputs[0];
    const size_t rank = s ? s->begin.size() : 0;
    if (!s || s->value != 0.0f || rank < 3 || s->begin[0] || s->begin[1] || s->end[0] ||
        s->end[1] || is_graph_output(g, v) || readers[v].empty() ||
        !std::all_of(readers[v].begin(), readers[v].end(),
                     [&](NodeId r) { return folds_pad(g, g.node(r), v); }))
      continue;
    const size_t nd = rank - 2;
    for (NodeId r : readers[v]) {
      Node& reader = g.node(r);
      std::vector<int64_t> pads = reader.attr_ints("pads", std::vector<int64_t>(2 * nd, 0));
      if (pads.size() != 2 * nd) pads.assign(2 * nd, 0);
      for (size_t k = 0; k < nd; ++k) {
        pads[k] += s->begin[k + 2];
        pads[k + nd] += s->end[k + 2];
      }
      reader.attrs["pads"] = Attribute::from_ints(pads);
      if (reader.op_type == "AveragePool")
        reader.attrs["count_include_pad"] = Attribute::from_int(1);
      reader.inputs[0] = pad.input(0);
    }
    folded[i] = true;
    any = true;
  }
  if (any) g.prune(folded);
  return g;
}

bool layout_head(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.inputs.empty() || !is_f32(g, n.input(0))) return false;
  for (ValueId out : n.outputs)
    if (out != kNoValue && (!is_f32(g, out) || shape_numel(g.value(out).shape) == 0)) return false;
  const std::string& t = n.op_type;
  if (shape_numel(g.value(n.input(0)).shape) == 0) return false;
  // A glue op of constants alone is folded on import; only Concat mixes them in.
  if (t != "Concat" && is_constant(g, n.input(0))) return false;
  if (t == "Concat") {
    if (!single_output(n)) return false;
    return std::all_of(n.inputs.begin(), n.inputs.end(), [&](ValueId v) { return is_f32(g, v); });
  }
  if (t == "Slice" || t == "Split" || t == "Gather") {
    if (t != "Split" && !single_output(n)) return false;
    return cuts_of(g, n).has_value();
  }
  if (t == "Transpose") return single_output(n) && g.value(n.input(0)).shape.size() <= 6;
  if (t == "DepthToSpace" || t == "SpaceToDepth")
    return single_output(n) && space_depth_spec(g, n).has_value();
  if (t == "Pad") return single_output(n) && pad_spec(g, n).has_value();
  if (reduction_algorithm(t))
    return single_output(n) && shape_numel(g.value(n.outputs[0]).shape) > 0 &&
           reduced_axes(g, n).has_value();
  return false;
}

std::optional<std::vector<NodeId>> channel_shuffle(const Graph& g,
                                                   const std::vector<std::vector<NodeId>>& readers,
                                                   NodeId reshape) {
  std::optional<ShuffleSpec> s = shuffle_spec(g, readers, reshape);
  if (!s) return std::nullopt;
  return std::vector<NodeId>{s->transpose, s->reshape};
}

void emit_layout(const Graph& sub, ValueMemories& values) {
  const std::string& t = sub.node(0).op_type;
  if (t == "Reshape") return emit_shuffle(sub, values);
  if (sub.num_nodes() != 1) fail(ErrorKind::kUnsupported, "onednn: {} fuses nothing after it", t);
  if (t == "Concat") return emit_concat(sub, values);
  if (t == "Slice" || t == "Split" || t == "Gather") return emit_cuts(sub, values);
  if (t == "Transpose") return emit_transpose(sub, values);
  if (t == "DepthToSpace" || t == "SpaceToDepth") return emit_space_depth(sub, values);
  if (t == "Pad") return emit_pad(sub, values);
  if (spatial_reduce(sub, sub.node(0))) return emit_spatial_reduce(sub, values);
  if (reduction_algorithm(t)) return emit_reduce(sub, values);
  fail(ErrorKind::kUnsupported, "onednn: no layout kernel for {}", t);
}

std::unique_ptr<Kernel> compile_layout(const Graph& sub) {
  return compile_group(sub, emit_layout);
}

}  // namespace collage::onednn
