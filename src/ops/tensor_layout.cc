// Tensor ops, part 2: ops that rearrange, cut, join or repeat a tensor's elements. Most
// are a TensorGatherPlan built in the kernel factory; Concat and Split copy blocks.
#include <cstring>

#include "ops/tensor_util.h"

namespace collage::ops {
namespace {

const std::byte* tensor_bytes(const Tensor& t) {
  return static_cast<const std::byte*>(t.raw());
}
std::byte* tensor_bytes_mut(const Tensor& t) {
  return static_cast<std::byte*>(t.raw());
}

RefKernel plan_kernel(TensorGatherPlan plan) {
  return [plan = std::move(plan)](std::span<const Tensor> in, std::span<const Tensor> out) {
    plan.run(tensor_bytes(in[0]), tensor_bytes_mut(out[0]));
  };
}

// ---- Transpose ---------------------------------------------------------------------

std::vector<int64_t> transpose_perm(const Node& n, size_t rank) {
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (!n.has_attr("perm"))
    for (size_t i = 0; i < rank; ++i) perm.push_back(static_cast<int64_t>(rank - 1 - i));
  return perm;
}

void infer_transpose(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  const Shape& in = ctx.input_shape(0);
  std::vector<int64_t> perm = transpose_perm(ctx.node(), in.size());
  if (perm.size() != in.size())
    ctx.fail("perm has {} entries for a rank-{} input", perm.size(), in.size());
  std::vector<bool> seen(in.size(), false);
  Shape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(in.size()) || seen[p])
      ctx.fail("perm [{}] is not a permutation", fmt::join(perm, ","));
    seen[p] = true;
    out.push_back(in[p]);
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
}

RefKernel transpose_kernel(const Graph& g, const Node& n) {
  const Shape& in = tensor_input_shape(g, n, 0);
  std::vector<int64_t> perm = transpose_perm(n, in.size());
  std::vector<int64_t> in_strides = shape_strides(in), strides;
  for (int64_t p : perm) strides.push_back(in_strides[p]);
  size_t elem = dtype_size(tensor_input_dtype(g, n, 0));
  return plan_kernel(TensorGatherPlan::strided(tensor_output_shape(g, n, 0), strides, 0, elem));
}

// ---- Concat, Split -----------------------------------------------------------------

void infer_concat(InferContext& ctx) {
  if (ctx.num_inputs() == 0) ctx.fail("has no inputs");
  tensor_require_movable(ctx, 0);
  const Shape& first = ctx.input_shape(0);
  int64_t rank = static_cast<int64_t>(first.size());
  if (!ctx.node().has_attr("axis") && ctx.opset() >= 4) ctx.fail("has no axis attribute");
  int64_t axis = ctx.normalize_axis(ctx.node().attr_int("axis", 1), rank);
  Shape out = first;
  out[axis] = 0;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Shape& s = ctx.input_shape(i);
    if (ctx.input_dtype(i) != ctx.input_dtype(0)) ctx.fail("inputs have different types");
    bool same = static_cast<int64_t>(s.size()) == rank;
    for (int64_t k = 0; same && k < rank; ++k) same = k == axis || s[k] == first[k];
    if (!same)
      ctx.fail("cannot concatenate {} and {} on axis {}", shape_to_string(first),
               shape_to_string(s), axis);
    out[axis] += s[axis];
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
}

// Both Concat and Split move, per outer index, one block of `axis_len * inner` elements
// per part: they only differ in which side is split into parts.
struct BlockLayout {
  int64_t outer = 1;
  std::vector<size_t> part_bytes;  // bytes of one block of each part
  size_t whole_bytes = 0;          // bytes of one block of the joined tensor
};

BlockLayout block_layout(const Shape& whole, const std::vector<Shape>& parts, int64_t axis,
                         size_t elem) {
  BlockLayout b;
  b.outer = tensor_product(whole, 0, axis);
  size_t inner = static_cast<size_t>(tensor_product(whole, axis + 1, whole.size())) * elem;
  for (const Shape& p : parts) b.part_bytes.push_back(p[axis] * inner);
  b.whole_bytes = whole[axis] * inner;
  return b;
}

RefKernel concat_kernel(const Graph& g, const Node& n) {
  const Shape& out = tensor_output_shape(g, n, 0);
  int64_t axis = n.attr_int("axis", 1);
  if (axis < 0) axis += static_cast<int64_t>(out.size());
  std::vector<Shape> parts;
  for (size_t i = 0; i < n.inputs.size(); ++i) parts.push_back(tensor_input_shape(g, n, i));
  BlockLayout b = block_layout(out, parts, axis, dtype_size(tensor_output_dtype(g, n, 0)));
  return [b](std::span<const Tensor> in, std::span<const Tensor> out) {
    std::byte* dst = tensor_bytes_mut(out[0]);
    for (int64_t o = 0; o < b.outer; ++o)
      for (size_t i = 0; i < in.size(); ++i) {
        size_t len = b.part_bytes[i];
        if (len) std::memcpy(dst, tensor_bytes(in[i]) + o * len, len);
        dst += len;
      }
  };
}

std::vector<int64_t> split_sizes(const InferContext& ctx, int64_t dim) {
  const Node& n = ctx.node();
  std::vector<int64_t> sizes;
  if (ctx.has_input(1)) {
    sizes = ctx.require_constant(1, "split").to_int_vector();
  } else if (n.has_attr("split")) {
    sizes = n.attr_ints("split");
  } else {
    int64_t parts = n.has_attr("num_outputs") ? n.attr_int("num_outputs", 1)
                                              : static_cast<int64_t>(ctx.num_outputs());
    if (parts <= 0 || static_cast<size_t>(parts) != ctx.num_outputs())
      ctx.fail("num_outputs {} does not match {} outputs", parts, ctx.num_outputs());
    // Split-18 with num_outputs lets the last part be smaller; before, parts are equal.
    int64_t chunk = n.has_attr("num_outputs") ? (dim + parts - 1) / parts : dim / parts;
    if (!n.has_attr("num_outputs") && dim % parts != 0)
      ctx.fail("cannot split a dimension of {} into {} equal parts", dim, parts);
    for (int64_t i = 0; i < parts; ++i)
      sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - i * chunk)));
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) ctx.fail("negative split size {}", s);
    total += s;
  }
  if (sizes.size() != ctx.num_outputs())
    ctx.fail("{} split sizes for {} outputs", sizes.size(), ctx.num_outputs());
  if (total != dim) ctx.fail("split sizes sum to {}, not the dimension {}", total, dim);
  return sizes;
}

void infer_split(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  const Shape& in = ctx.input_shape(0);
  int64_t axis = ctx.normalize_axis(ctx.node().attr_int("axis", 0), in.size());
  std::vector<int64_t> sizes = split_sizes(ctx, in[axis]);
  for (size_t i = 0; i < sizes.size(); ++i) {
    Shape s = in;
    s[axis] = sizes[i];
    ctx.set_output(i, ctx.input_dtype(0), s);
  }
}

RefKernel split_kernel(const Graph& g, const Node& n) {
  const Shape& in = tensor_input_shape(g, n, 0);
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(in.size());
  // Sizes come from the node again: an omitted output still owns its share of the input.
  InferContext ctx(g, n);
  std::vector<Shape> parts;
  for (int64_t size : split_sizes(ctx, in[axis])) {
    Shape s = in;
    s[axis] = size;
    parts.push_back(s);
  }
  BlockLayout b = block_layout(in, parts, axis, dtype_size(tensor_input_dtype(g, n, 0)));
  return [b](std::span<const Tensor> in, std::span<const Tensor> out) {
    const std::byte* src = tensor_bytes(in[0]);
    for (int64_t o = 0; o < b.outer; ++o)
      for (size_t i = 0; i < out.size(); ++i) {
        size_t len = b.part_bytes[i];
        if (len && out[i].defined()) std::memcpy(tensor_bytes_mut(out[i]) + o * len, src, len);
        src += len;
      }
  };
}

// ---- Slice -------------------------------------------------------------------------

std::vector<int64_t> slice_param(const InferContext& ctx, size_t input, const char* attr,
                                 const char* what) {
  if (ctx.opset() < 10 || !ctx.has_input(1)) return ctx.node().attr_ints(attr);
  if (!ctx.has_input(input)) return {};
  return ctx.require_constant(input, what).to_int_vector();
}

}  // namespace

SliceSpec slice_spec(const InferContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  int64_t rank = static_cast<int64_t>(in.size());
  std::vector<int64_t> starts = slice_param(ctx, 1, "starts", "starts");
  std::vector<int64_t> ends = slice_param(ctx, 2, "ends", "ends");
  std::vector<int64_t> axes = slice_param(ctx, 3, "axes", "axes");
  std::vector<int64_t> steps = slice_param(ctx, 4, "steps", "steps");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    ctx.fail("starts, ends, axes and steps have different lengths");
  SliceSpec s{in, std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 1)};
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t a = ctx.normalize_axis(axes[i], rank);
    if (seen[a]) ctx.fail("axis {} appears twice", axes[i]);
    seen[a] = true;
    int64_t d = in[a], step = steps[i];
    if (step == 0) ctx.fail("step is zero");
    int64_t b = starts[i] < 0 ? starts[i] + d : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + d : ends[i];
    int64_t len;
    if (step > 0) {
      b = tensor_clamp(b, 0, d);
      e = tensor_clamp(e, 0, d);
      len = e > b ? (e - b + step - 1) / step : 0;
    } else {
      b = tensor_clamp(b, 0, d - 1);
      e = tensor_clamp(e, -1, d - 1);
      len = b > e ? (b - e - step - 1) / -step : 0;
    }
    s.out[a] = len;
    s.start[a] = len ? b : 0;
    s.step[a] = step;
  }
  return s;
}

namespace {

void infer_slice(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  ctx.set_output(0, ctx.input_dtype(0), slice_spec(ctx).out);
}

RefKernel slice_kernel(const Graph& g, const Node& n) {
  InferContext ctx(g, n);  // re-reads the constant starts/ends/axes/steps
  SliceSpec s = slice_spec(ctx);
  std::vector<int64_t> in_strides = shape_strides(tensor_input_shape(g, n, 0)), strides;
  int64_t offset = 0;
  for (size_t k = 0; k < in_strides.size(); ++k) {
    offset += s.start[k] * in_strides[k];
    strides.push_back(in_strides[k] * s.step[k]);
  }
  size_t elem = dtype_size(tensor_input_dtype(g, n, 0));
  return plan_kernel(TensorGatherPlan::strided(s.out, strides, offset, elem));
}

// ---- Expand, Tile ------------------------------------------------------------------

void infer_expand(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  tensor_require_int64(ctx, 1, "shape");
  Shape target = ctx.require_constant(1, "shape").to_int_vector();
  auto out = broadcast_shapes(ctx.input_shape(0), target);
  if (!out)
    ctx.fail("cannot expand {} to {}", shape_to_string(ctx.input_shape(0)),
             shape_to_string(target));
  ctx.set_output(0, ctx.input_dtype(0), *out);
}

RefKernel expand_kernel(const Graph& g, const Node& n) {
  const Shape& in = tensor_input_shape(g, n, 0);
  const Shape& out = tensor_output_shape(g, n, 0);
  std::vector<int64_t> in_strides = shape_strides(in), strides(out.size(), 0);
  size_t lead = out.size() - in.size();
  for (size_t k = 0; k < in.size(); ++k) strides[lead + k] = in[k] == 1 ? 0 : in_strides[k];
  size_t elem = dtype_size(tensor_input_dtype(g, n, 0));
  return plan_kernel(TensorGatherPlan::strided(out, strides, 0, elem));
}

void infer_tile(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  const Shape& in = ctx.input_shape(0);
  tensor_require_int64(ctx, 1, "repeats");
  std::vector<int64_t> repeats = ctx.require_constant(1, "repeats").to_int_vector();
  if (repeats.size() != in.size())
    ctx.fail("{} repeats for a rank-{} input", repeats.size(), in.size());
  Shape out;
  for (size_t k = 0; k < in.size(); ++k) {
    if (repeats[k] < 0) ctx.fail("negative repeat {}", repeats[k]);
    // The repeats come from the model unchecked: a wrapped product would read as a valid
    // (negative or small) dimension.
    int64_t d = 0;
    if (__builtin_mul_overflow(in[k], repeats[k], &d))
      fail(ErrorKind::kLimit, "node '{}' ({}): repeating dimension {} of {} {} times overflows",
           ctx.node().name, ctx.node().op_type, k, shape_to_string(in), repeats[k]);
    out.push_back(d);
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
}

// Tile viewed as [r0, d0, r1, d1, ...]: each repeat dimension has input stride 0.
RefKernel tile_kernel(const Graph& g, const Node& n) {
  const Shape& in = tensor_input_shape(g, n, 0);
  const Shape& out = tensor_output_shape(g, n, 0);
  std::vector<int64_t> in_strides = shape_strides(in), strides;
  Shape view;
  for (size_t k = 0; k < in.size(); ++k) {
    view.push_back(in[k] ? out[k] / in[k] : 0);
    strides.push_back(0);
    view.push_back(in[k]);
    strides.push_back(in_strides[k]);
  }
  size_t elem = dtype_size(tensor_input_dtype(g, n, 0));
  return plan_kernel(TensorGatherPlan::strided(view, strides, 0, elem));
}

// ---- Pad ---------------------------------------------------------------------------

}  // namespace

PadSpec pad_spec(const InferContext& ctx) {
  const Node& n = ctx.node();
  int64_t rank = ctx.input_rank(0);
  PadSpec s;
  std::string mode = n.attr_string("mode", "constant");
  if (mode == "constant")
    s.mode = PadMode::kConstant;
  else if (mode == "reflect")
    s.mode = PadMode::kReflect;
  else if (mode == "edge")
    s.mode = PadMode::kEdge;
  else
    tensor_unsupported(n, "mode '{}'", mode);
  std::vector<int64_t> pads;
  std::vector<int64_t> axes;
  if (ctx.opset() < 11 && !ctx.has_input(1)) {
    pads = n.has_attr("pads") ? n.attr_ints("pads") : n.attr_ints("paddings");
    s.attr_value = n.attr_float("value", 0.0f);
  } else {
    pads = ctx.require_constant(1, "pads").to_int_vector();
    if (ctx.has_input(3)) axes = ctx.require_constant(3, "axes").to_int_vector();
  }
  if (axes.empty())
    for (int64_t k = 0; k < rank; ++k) axes.push_back(k);
  if (pads.size() != 2 * axes.size()) ctx.fail("{} pads for {} axes", pads.size(), axes.size());
  s.begin.assign(rank, 0);
  s.end.assign(rank, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = ctx.normalize_axis(axes[i], rank);
    s.begin[a] = pads[i];
    s.end[a] = pads[i + axes.size()];
  }
  return s;
}

namespace {

void infer_pad(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  PadSpec s = pad_spec(ctx);
  const Shape& in = ctx.input_shape(0);
  if (s.mode == PadMode::kConstant && ctx.has_input(2)) {
    if (ctx.input_dtype(2) != ctx.input_dtype(0)) ctx.fail("constant_value has another type");
    if (shape_numel(ctx.input_shape(2)) != 1) ctx.fail("constant_value must be a scalar");
  }
  if (s.mode == PadMode::kConstant && !ctx.has_input(2) && s.attr_value != 0 &&
      !dtype_is_supported(ctx.input_dtype(0)))
    tensor_unsupported(ctx.node(), "a pad value for element type {}",
                       dtype_name(ctx.input_dtype(0)));
  Shape out;
  for (size_t k = 0; k < in.size(); ++k) {
    int64_t d = 0;
    if (__builtin_add_overflow(in[k], s.begin[k], &d) || __builtin_add_overflow(d, s.end[k], &d))
      fail(ErrorKind::kLimit, "node '{}' ({}): padding dimension {} overflows", ctx.node().name,
           ctx.node().op_type, k);
    if (d < 0) ctx.fail("pads remove more than dimension {} holds", k);
    bool pads_empty = in[k] == 0 && d > 0;
    if (pads_empty && s.mode != PadMode::kConstant)
      ctx.fail("cannot {}-pad an empty dimension", s.mode == PadMode::kEdge ? "edge" : "reflect");
    out.push_back(d);
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
}

}  // namespace

// See tensor_util.h.
int64_t pad_source(PadMode mode, int64_t o, int64_t begin, int64_t d) {
  int64_t i = o - begin;
  if (i >= 0 && i < d) return i;
  switch (mode) {
    case PadMode::kConstant:
      return -1;
    case PadMode::kEdge:
      return i < 0 ? 0 : d - 1;
    case PadMode::kReflect: {
      if (d == 1) return 0;
      int64_t period = 2 * (d - 1);
      int64_t m = ((i % period) + period) % period;
      return m < d ? m : period - m;
    }
  }
  return -1;
}

namespace {

RefKernel pad_kernel(const Graph& g, const Node& n) {
  InferContext ctx(g, n);
  PadSpec s = pad_spec(ctx);
  const Shape& in = tensor_input_shape(g, n, 0);
  const Shape& out = tensor_output_shape(g, n, 0);
  DType t = tensor_input_dtype(g, n, 0);
  std::vector<int64_t> strides = shape_strides(in);
  std::vector<std::vector<int64_t>> maps(out.size());
  for (size_t k = 0; k < out.size(); ++k)
    for (int64_t o = 0; o < out[k]; ++o) {
      int64_t src = pad_source(s.mode, o, s.begin[k], in[k]);
      maps[k].push_back(src < 0 ? kTensorFill : src * strides[k]);
    }
  TensorGatherPlan plan(out, std::move(maps), dtype_size(t));
  // The fill element: Pad-2's float attribute, else the optional input, else zero.
  Tensor attr_fill(t, {});
  if (s.attr_value != 0)
    dispatch_dtype(t, [&](auto tag) {
      using T = decltype(tag);
      *attr_fill.data<T>() = static_cast<T>(s.attr_value);
    });
  return [plan, attr_fill](std::span<const Tensor> in, std::span<const Tensor> out) {
    const Tensor& fill = in.size() > 2 && in[2].defined() ? in[2] : attr_fill;
    plan.run(tensor_bytes(in[0]), tensor_bytes_mut(out[0]), tensor_bytes(fill));
  };
}

// ---- DepthToSpace, SpaceToDepth ----------------------------------------------------

int64_t block_size(const InferContext& ctx) {
  int64_t b = ctx.node().attr_int("blocksize", 0);
  if (b <= 0) ctx.fail("blocksize must be positive, got {}", b);
  if (ctx.input_rank(0) != 4) ctx.fail("input must be 4-D, got rank {}", ctx.input_rank(0));
  return b;
}

bool depth_to_space_crd(const Node& n) {
  std::string mode = n.attr_string("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") tensor_unsupported(n, "mode '{}'", mode);
  return mode == "CRD";
}

void infer_depth_to_space(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  int64_t b = block_size(ctx);
  depth_to_space_crd(ctx.node());
  const Shape& in = ctx.input_shape(0);
  if (in[1] % (b * b) != 0) ctx.fail("channels {} not divisible by blocksize^2", in[1]);
  ctx.set_output(0, ctx.input_dtype(0), {in[0], in[1] / (b * b), in[2] * b, in[3] * b});
}

// The output viewed as [N, C', H, b, W, b]; each view dimension's input stride depends on
// where the mode puts the two block indices inside the input channel.
RefKernel depth_to_space_kernel(const Graph& g, const Node& n) {
  const Shape& in = tensor_input_shape(g, n, 0);
  int64_t b = n.attr_int("blocksize", 1);
  int64_t c = in[1] / (b * b), h = in[2], w = in[3], hw = h * w;
  int64_t s_c, s_b1, s_b2;
  if (depth_to_space_crd(n)) {  // channel = (c * b + b1) * b + b2
    s_c = b * b * hw, s_b1 = b * hw, s_b2 = hw;
  } else {  // channel = (b1 * b + b2) * C' + c
    s_c = hw, s_b1 = b * c * hw, s_b2 = c * hw;
  }
  Shape view = {in[0], c, h, b, w, b};
  std::vector<int64_t> strides = {in[1] * hw, s_c, w, s_b1, 1, s_b2};
  size_t elem = dtype_size(tensor_input_dtype(g, n, 0));
  return plan_kernel(TensorGatherPlan::strided(view, strides, 0, elem));
}

void infer_space_to_depth(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  int64_t b = block_size(ctx);
  const Shape& in = ctx.input_shape(0);
  if (in[2] % b != 0 || in[3] % b != 0)
    ctx.fail("spatial dims {} not divisible by blocksize {}", shape_to_string(in), b);
  ctx.set_output(0, ctx.input_dtype(0), {in[0], in[1] * b * b, in[2] / b, in[3] / b});
}

// The output viewed as [N, b1, b2, C, H', W'] reads input [N, C, H' * b + b1, W' * b + b2].
RefKernel space_to_depth_kernel(const Graph& g, const Node& n) {
  const Shape& in = tensor_input_shape(g, n, 0);
  int64_t b = n.attr_int("blocksize", 1);
  int64_t c = in[1], h = in[2], w = in[3];
  Shape view = {in[0], b, b, c, h / b, w / b};
  std::vector<int64_t> strides = {c * h * w, w, 1, h * w, b * w, b};
  size_t elem = dtype_size(tensor_input_dtype(g, n, 0));
  return plan_kernel(TensorGatherPlan::strided(view, strides, 0, elem));
}

}  // namespace

SliceWindow slice_window(const Graph& g, const Node& n) {
  InferContext ctx(g, n);
  SliceSpec s = slice_spec(ctx);
  return {s.out, s.start, s.step};
}

void register_tensor_layout_ops(OpRegistry& r) {
  r.add(tensor_op("Transpose", OpKind::kInjective, infer_transpose, transpose_kernel));
  r.add(tensor_op("Concat", OpKind::kInjective, infer_concat, concat_kernel));
  r.add(tensor_op("Split", OpKind::kInjective, infer_split, split_kernel));
  r.add(tensor_op("Slice", OpKind::kInjective, infer_slice, slice_kernel));
  r.add(tensor_op("Expand", OpKind::kInjective, infer_expand, expand_kernel));
  r.add(tensor_op("Tile", OpKind::kInjective, infer_tile, tile_kernel));
  r.add(tensor_op("Pad", OpKind::kInjective, infer_pad, pad_kernel));
  r.add(tensor_op("DepthToSpace", OpKind::kInjective, infer_depth_to_space, depth_to_space_kernel));
  r.add(tensor_op("SpaceToDepth", OpKind::kInjective, infer_space_to_depth, space_to_depth_kernel));
}

}  // namespace collage::ops
