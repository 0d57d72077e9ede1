// Tensor (shape/injective) ops, part 1: ops that only relabel a tensor's shape, report
// shapes, or create tensors from attributes and scalars. The other parts live in
// tensor_layout.cc, tensor_index.cc and tensor_resize.cc; all share ops/tensor_util.h.
#include <cmath>
#include <cstring>

#include "ops/register.h"
#include "ops/tensor_util.h"

namespace collage::ops {
namespace {

// ---- Reshape -----------------------------------------------------------------------

Shape reshape_target(const InferContext& ctx, const std::vector<int64_t>& spec, bool allow_zero) {
  const Shape& in = ctx.input_shape(0);
  Shape out(spec.size());
  int infer_at = -1;
  int64_t known = 1;
  bool has_zero = false;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == -1) {
      if (infer_at >= 0) ctx.fail("shape {} has more than one -1", fmt::join(spec, ","));
      infer_at = static_cast<int>(i);
      continue;
    }
    if (d < -1) ctx.fail("shape {} has a negative dimension", fmt::join(spec, ","));
    if (d == 0 && !allow_zero) {
      if (i >= in.size())
        ctx.fail("shape {} copies dimension {} of a rank-{} input", fmt::join(spec, ","), i,
                 in.size());
      d = in[i];
    }
    if (d == 0) has_zero = true;
    out[i] = d;
    // The spec comes from the model unchecked: a wrapped product (UB) could pass the
    // element-count check below with a bogus -1 dimension.
    if (d != 0 && __builtin_mul_overflow(known, d, &known))
      fail(ErrorKind::kLimit, "node '{}' ({}): shape {} has more elements than fit in 64 bits",
           ctx.node().name, ctx.node().op_type, fmt::join(spec, ","));
  }
  int64_t numel = shape_numel(in);
  if (infer_at >= 0) {
    if (has_zero)
      ctx.fail("shape {} combines -1 with a zero dimension: the -1 is ambiguous",
               fmt::join(spec, ","));
    if (numel % known != 0)
      ctx.fail("cannot reshape {} to {}", shape_to_string(in), fmt::join(spec, ","));
    out[infer_at] = numel / known;
  }
  if (shape_numel(out) != numel)
    ctx.fail("cannot reshape {} ({} elements) to {}", shape_to_string(in), numel,
             shape_to_string(out));
  return out;
}

void infer_reshape(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  const Node& n = ctx.node();
  std::vector<int64_t> spec;
  if (ctx.has_input(1)) {
    tensor_require_int64(ctx, 1, "shape");
    spec = ctx.require_constant(1, "shape").to_int_vector();
  } else if (n.has_attr("shape")) {  // Reshape-1
    spec = n.attr_ints("shape");
  } else {
    ctx.fail("has no shape input");
  }
  bool allow_zero = n.attr_int("allowzero", 0) != 0;
  ctx.set_output(0, ctx.input_dtype(0), reshape_target(ctx, spec, allow_zero));
}

// ---- Flatten, Squeeze, Unsqueeze, Identity -------------------------------------------

void infer_flatten(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  const Shape& in = ctx.input_shape(0);
  int64_t rank = static_cast<int64_t>(in.size());
  int64_t axis = ctx.node().attr_int("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) ctx.fail("axis {} is out of range for rank {}", axis, rank);
  Shape outer(in.begin(), in.begin() + axis), inner(in.begin() + axis, in.end());
  ctx.set_output(0, ctx.input_dtype(0), {shape_numel(outer), shape_numel(inner)});
}

// Squeeze/Unsqueeze take `axes` as an attribute before opset 13 and an input after.
std::optional<std::vector<int64_t>> axes_attr_or_input(const InferContext& ctx, size_t input) {
  if (ctx.has_input(input)) return ctx.require_constant(input, "axes").to_int_vector();
  if (ctx.node().has_attr("axes")) return ctx.node().attr_ints("axes");
  return std::nullopt;
}

void infer_squeeze(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  const Shape& in = ctx.input_shape(0);
  int64_t rank = static_cast<int64_t>(in.size());
  std::vector<bool> drop(in.size(), false);
  if (auto axes = axes_attr_or_input(ctx, 1)) {
    for (int64_t a : *axes) {
      int64_t k = ctx.normalize_axis(a, rank);
      if (in[k] != 1) ctx.fail("cannot squeeze axis {} of shape {}", a, shape_to_string(in));
      drop[k] = true;
    }
  } else {
    for (size_t k = 0; k < in.size(); ++k) drop[k] = in[k] == 1;
  }
  Shape out;
  for (size_t k = 0; k < in.size(); ++k)
    if (!drop[k]) out.push_back(in[k]);
  ctx.set_output(0, ctx.input_dtype(0), out);
}

void infer_unsqueeze(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  const Shape& in = ctx.input_shape(0);
  auto axes = axes_attr_or_input(ctx, 1);
  if (!axes) ctx.fail("has no axes");
  int64_t out_rank = static_cast<int64_t>(in.size() + axes->size());
  std::vector<bool> inserted(out_rank, false);
  for (int64_t a : *axes) {
    int64_t k = ctx.normalize_axis(a, out_rank);
    if (inserted[k]) ctx.fail("axis {} appears twice", a);
    inserted[k] = true;
  }
  Shape out;
  size_t next = 0;
  for (int64_t k = 0; k < out_rank; ++k) out.push_back(inserted[k] ? 1 : in[next++]);
  ctx.set_output(0, ctx.input_dtype(0), out);
}

void infer_identity(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
}

// ---- Shape, Size -------------------------------------------------------------------

// Shape-15's start/end select a slice of the dims; both clamp like Python slicing.
std::pair<int64_t, int64_t> shape_range(const Node& n, int64_t rank) {
  auto clamp = [rank](int64_t v) { return tensor_clamp(v < 0 ? v + rank : v, 0, rank); };
  int64_t start = clamp(n.attr_int("start", 0));
  int64_t end = n.has_attr("end") ? clamp(n.attr_int("end", rank)) : rank;
  return {start, std::max(start, end)};
}

void infer_shape(InferContext& ctx) {
  auto [start, end] = shape_range(ctx.node(), ctx.input_rank(0));
  ctx.set_output(0, DType::kInt64, {end - start});
}

RefKernel shape_kernel(const Graph& g, const Node& n) {
  const Shape& in = tensor_input_shape(g, n, 0);
  auto [start, end] = shape_range(n, static_cast<int64_t>(in.size()));
  std::vector<int64_t> dims(in.begin() + start, in.begin() + end);
  return [dims](std::span<const Tensor>, std::span<const Tensor> out) {
    std::copy(dims.begin(), dims.end(), out[0].data<int64_t>());
  };
}

void infer_size(InferContext& ctx) {
  (void)ctx.input_dtype(0);
  ctx.set_output(0, DType::kInt64, {});
}

RefKernel size_kernel(const Graph& g, const Node& n) {
  int64_t numel = shape_numel(tensor_input_shape(g, n, 0));
  return [numel](std::span<const Tensor>, std::span<const Tensor> out) {
    *out[0].data<int64_t>() = numel;
  };
}

// ---- Constant, ConstantOfShape -----------------------------------------------------

Tensor constant_value(const Node& n) {
  for (const char* key : {"value_string", "value_strings", "sparse_value"})
    if (n.has_attr(key)) tensor_unsupported(n, "attribute '{}' is not supported", key);
  if (n.attrs.size() != 1)
    fail(ErrorKind::kInvalidModel, "node '{}' (Constant): needs exactly one value attribute",
         n.name);
  if (const Tensor* t = n.attr_tensor("value")) {
    if (dtype_size(t->dtype()) == 0)
      tensor_unsupported(n, "value of element type {}", dtype_name(t->dtype()));
    return *t;
  }
  if (n.has_attr("value_float")) return Tensor::scalar<float>(n.attr_float("value_float", 0));
  if (n.has_attr("value_int")) return Tensor::scalar<int64_t>(n.attr_int("value_int", 0));
  if (n.has_attr("value_floats")) {
    auto v = n.attr_floats("value_floats");
    return Tensor::from_vector<float>({static_cast<int64_t>(v.size())}, v);
  }
  if (n.has_attr("value_ints")) {
    auto v = n.attr_ints("value_ints");
    return Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v);
  }
  tensor_unsupported(n, "attribute '{}' is not supported", n.attrs.begin()->first);
}

void infer_constant(InferContext& ctx) {
  Tensor t = constant_value(ctx.node());
  ctx.set_output(0, t.dtype(), t.shape());
}

RefKernel constant_kernel(const Graph&, const Node& n) {
  Tensor t = constant_value(n);
  return [t](std::span<const Tensor>, std::span<const Tensor> out) {
    if (t.nbytes()) std::memcpy(out[0].raw(), t.raw(), t.nbytes());
  };
}

Tensor constant_of_shape_value(const Node& n) {
  const Tensor* v = n.attr_tensor("value");
  if (!v) return Tensor::scalar<float>(0.0f);
  if (v->numel() != 1)
    fail(ErrorKind::kInvalidModel, "node '{}' (ConstantOfShape): value must hold one element",
         n.name);
  if (dtype_size(v->dtype()) == 0)
    tensor_unsupported(n, "value of element type {}", dtype_name(v->dtype()));
  return *v;
}

void infer_constant_of_shape(InferContext& ctx) {
  Shape shape = ctx.require_constant(0, "shape").to_int_vector();
  for (int64_t d : shape)
    if (d < 0) ctx.fail("negative dimension in shape {}", shape_to_string(shape));
  ctx.set_output(0, constant_of_shape_value(ctx.node()).dtype(), shape);
}

RefKernel constant_of_shape_kernel(const Graph&, const Node& n) {
  Tensor v = constant_of_shape_value(n);
  return [v](std::span<const Tensor>, std::span<const Tensor> out) {
    size_t elem = v.nbytes();
    auto* dst = static_cast<std::byte*>(out[0].raw());
    for (int64_t i = 0; i < out[0].numel(); ++i) std::memcpy(dst + i * elem, v.raw(), elem);
  };
}

// ---- Range -------------------------------------------------------------------------

template <typename T>
int64_t range_count(T start, T limit, T delta) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::max<int64_t>(0, static_cast<int64_t>(std::ceil((limit - start) / delta)));
  } else {
    // Exact ceiling division in 64 bits, so int64 ranges near the limits stay right.
    int64_t span = static_cast<int64_t>(limit) - static_cast<int64_t>(start);
    int64_t d = static_cast<int64_t>(delta);
    int64_t q = span / d;
    if (span % d != 0 && ((span < 0) == (d < 0))) ++q;
    return std::max<int64_t>(0, q);
  }
}

void infer_range(InferContext& ctx) {
  DType t = ctx.input_dtype(0);
  tensor_require_dtype_in(
      ctx, 0, {DType::kFloat32, DType::kFloat64, DType::kInt16, DType::kInt32, DType::kInt64});
  for (size_t i = 1; i < 3; ++i)
    if (ctx.input_dtype(i) != t) ctx.fail("start, limit and delta must share one type");
  const Tensor& start = ctx.require_constant(0, "start");
  const Tensor& limit = ctx.require_constant(1, "limit");
  const Tensor& delta = ctx.require_constant(2, "delta");
  for (const Tensor* s : {&start, &limit, &delta})
    if (s->numel() != 1) ctx.fail("start, limit and delta must be scalars");
  int64_t n = dispatch_dtype(t, [&](auto tag) -> int64_t {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return 0;  // excluded above; only here so the dispatch compiles
    } else {
      T d = delta.data<T>()[0];
      if (d == T{0}) ctx.fail("delta is zero");
      return range_count<T>(start.data<T>()[0], limit.data<T>()[0], d);
    }
  });
  ctx.set_output(0, t, {n});
}

RefKernel range_kernel(const Graph& g, const Node& n) {
  DType t = tensor_input_dtype(g, n, 0);
  return [t](std::span<const Tensor> in, std::span<const Tensor> out) {
    dispatch_dtype(t, [&](auto tag) {
      using T = decltype(tag);
      T start = in[0].data<T>()[0], delta = in[2].data<T>()[0];
      T* dst = out[0].data<T>();
      for (int64_t i = 0; i < out[0].numel(); ++i) dst[i] = static_cast<T>(start + i * delta);
    });
  };
}

// ---- EyeLike, Trilu ----------------------------------------------------------------

void infer_eye_like(InferContext& ctx) {
  if (ctx.input_rank(0) != 2) ctx.fail("input must be 2-D, got rank {}", ctx.input_rank(0));
  DType t =
      static_cast<DType>(ctx.node().attr_int("dtype", static_cast<int64_t>(ctx.input_dtype(0))));
  if (!dtype_is_supported(t)) tensor_unsupported(ctx.node(), "dtype {}", dtype_name(t));
  ctx.set_output(0, t, ctx.input_shape(0));
}

RefKernel eye_like_kernel(const Graph& g, const Node& n) {
  DType t = tensor_output_dtype(g, n, 0);
  int64_t k = n.attr_int("k", 0);
  return [t, k](std::span<const Tensor>, std::span<const Tensor> out) {
    int64_t rows = out[0].dim(0), cols = out[0].dim(1);
    dispatch_dtype(t, [&](auto tag) {
      using T = decltype(tag);
      T* dst = out[0].data<T>();
      std::fill(dst, dst + rows * cols, T{});
      for (int64_t i = 0; i < rows; ++i)
        if (i + k >= 0 && i + k < cols) dst[i * cols + i + k] = T{1};
    });
  };
}

void infer_trilu(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  if (ctx.input_rank(0) < 2) ctx.fail("input must have rank >= 2");
  if (ctx.has_input(1) && shape_numel(ctx.input_shape(1)) != 1) ctx.fail("k must be a scalar");
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
}

RefKernel trilu_kernel(const Graph& g, const Node& n) {
  bool upper = n.attr_int("upper", 1) != 0;
  const Shape& shape = tensor_input_shape(g, n, 0);
  int64_t rows = shape[shape.size() - 2], cols = shape.back();
  size_t elem = dtype_size(tensor_input_dtype(g, n, 0));
  return [=](std::span<const Tensor> in, std::span<const Tensor> out) {
    int64_t k = in.size() > 1 && in[1].defined() ? in[1].get_as_int(0) : 0;
    auto* src = static_cast<const std::byte*>(in[0].raw());
    auto* dst = static_cast<std::byte*>(out[0].raw());
    int64_t matrix = rows * cols;
    int64_t matrices = matrix != 0 ? in[0].numel() / matrix : 0;
    for (int64_t m = 0; m < matrices * rows; ++m) {
      int64_t i = m % rows;
      for (int64_t j = 0; j < cols; ++j) {
        size_t off = (m * cols + j) * elem;
        bool keep = upper ? j - i >= k : j - i <= k;
        if (keep)
          std::memcpy(dst + off, src + off, elem);
        else
          std::memset(dst + off, 0, elem);
      }
    }
  };
}

}  // namespace

void register_tensor_shape_ops(OpRegistry& r) {
  r.add(tensor_op("Reshape", OpKind::kInjective, infer_reshape, tensor_memcpy_factory));
  r.add(tensor_op("Flatten", OpKind::kInjective, infer_flatten, tensor_memcpy_factory));
  r.add(tensor_op("Squeeze", OpKind::kInjective, infer_squeeze, tensor_memcpy_factory));
  r.add(tensor_op("Unsqueeze", OpKind::kInjective, infer_unsqueeze, tensor_memcpy_factory));
  r.add(tensor_op("Identity", OpKind::kElementwise, infer_identity, tensor_memcpy_factory));
  r.add(tensor_op("Shape", OpKind::kOpaque, infer_shape, shape_kernel));
  r.add(tensor_op("Size", OpKind::kOpaque, infer_size, size_kernel));
  r.add(tensor_op("Constant", OpKind::kOpaque, infer_constant, constant_kernel));
  r.add(tensor_op("ConstantOfShape", OpKind::kOpaque, infer_constant_of_shape,
                  constant_of_shape_kernel, true));
  r.add(tensor_op("Range", OpKind::kOpaque, infer_range, range_kernel, true));
  r.add(tensor_op("EyeLike", OpKind::kOpaque, infer_eye_like, eye_like_kernel));
  r.add(tensor_op("Trilu", OpKind::kInjective, infer_trilu, trilu_kernel));
}

void register_tensor_ops(OpRegistry& registry) {
  register_tensor_shape_ops(registry);
  register_tensor_layout_ops(registry);
  register_tensor_index_ops(registry);
  register_tensor_resize_ops(registry);
}

}  // namespace collage::ops
