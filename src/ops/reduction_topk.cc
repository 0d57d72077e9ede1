// TopK and CumSum: ops that walk one axis of their input.
#include <algorithm>
#include <cmath>

#include "ops/elementwise_util.h"

namespace collage::ops::red {
namespace {

using elem::invalid;
using elem::require_dtype;

// The input viewed as [outer, len, inner] around `axis`.
struct AxisView {
  int64_t outer = 1, len = 1, inner = 1;
};

AxisView view_around(const Shape& shape, int64_t axis) {
  AxisView v;
  for (int64_t d = 0; d < axis; ++d) v.outer *= shape[d];
  v.len = shape[axis];
  for (size_t d = axis + 1; d < shape.size(); ++d) v.inner *= shape[d];
  return v;
}

// ---------------------------------------------------------------------------------------
// TopK: k comes from an attribute before opset 10 and from a constant input after.

int64_t topk_k(const Node& n, int64_t opset, const Tensor* k_input) {
  if (opset < 10) {
    if (!n.has_attr("k")) invalid(n, "attribute 'k' is required before opset 10");
    return n.attr_int("k", 0);
  }
  if (!k_input) invalid(n, "input K is required from opset 10");
  if (k_input->numel() != 1 || !elem::IntTypes::contains(k_input->dtype()))
    invalid(n, "K must hold one integer");
  return k_input->get_as_int(0);
}

// Orders values so NaN is above everything (numpy's sort puts NaN last).
template <typename T>
bool less_nan_last(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(b)) return !std::isnan(a);
    if (std::isnan(a)) return false;
  }
  return a < b;
}

void register_topk(OpRegistry& r) {
  OpDef def;
  def.name = "TopK";
  def.kind = OpKind::kOpaque;
  def.infer = [](InferContext& ctx) {
    const Node& n = ctx.node();
    elem::require_input_count(ctx, 1, 2);
    require_dtype<elem::NumericTypes>(ctx, 0);
    if (ctx.num_outputs() != 2) invalid(n, "has 2 outputs, got {}", ctx.num_outputs());
    const Tensor* k_input = ctx.has_input(1) ? &ctx.require_constant(1, "K") : nullptr;
    int64_t k = topk_k(n, ctx.opset(), k_input);
    Shape shape = ctx.input_shape(0);
    int64_t axis = ctx.normalize_axis(n.attr_int("axis", -1), shape.size());
    if (k < 0 || k > shape[axis])
      ctx.fail("k = {} is out of range for an axis of length {}", k, shape[axis]);
    shape[axis] = k;
    ctx.set_output(0, ctx.input_dtype(0), shape);
    ctx.set_output(1, DType::kInt64, shape);
  };
  def.reference = [](const Graph& g, const Node& n) -> RefKernel {
    const Shape& in = g.value(n.inputs[0]).shape;
    const Shape& out = g.value(n.outputs[0]).shape;
    int64_t axis = n.attr_int("axis", -1);
    if (axis < 0) axis += in.size();
    const AxisView v = view_around(in, axis);
    const int64_t k = out[axis];
    const bool largest = n.attr_int("largest", 1) != 0;
    // `sorted` = 0 leaves the order to the implementation; sorted output is one such order.
    return elem::NumericTypes::dispatch(g.value(n.inputs[0]).dtype, [&](auto tag) -> RefKernel {
      using T = decltype(tag);
      return [v, k, largest](std::span<const Tensor> in, std::span<const Tensor> out) {
        const T* x = in[0].data<T>();
        T* values = out[0].data<T>();
        int64_t* indices = out[1].data<int64_t>();
        std::vector<int64_t> order(v.len);
        for (int64_t o = 0; o < v.outer; ++o)
          for (int64_t i = 0; i < v.inner; ++i) {
            const T* p = x + o * v.len * v.inner + i;
            for (int64_t j = 0; j < v.len; ++j) order[j] = j;
            // Equal values keep the lower index first, as the ONNX spec asks.
            auto before = [&](int64_t a, int64_t b) {
              T va = p[a * v.inner], vb = p[b * v.inner];
              if (largest ? less_nan_last(vb, va) : less_nan_last(va, vb)) return true;
              if (less_nan_last(va, vb) || less_nan_last(vb, va)) return false;
              return a < b;
            };
            std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
            for (int64_t j = 0; j < k; ++j) {
              int64_t at = o * k * v.inner + j * v.inner + i;
              values[at] = p[order[j] * v.inner];
              indices[at] = order[j];
            }
          }
      };
    });
  };
  r.add(std::move(def));
}

// ---------------------------------------------------------------------------------------
// CumSum: the axis is a scalar input that may only be known at run time.

using CumSumTypes = elem::Types<float, double, int32_t, int64_t, uint32_t, uint64_t>;

void register_cumsum(OpRegistry& r) {
  OpDef def;
  def.name = "CumSum";
  def.kind = OpKind::kOpaque;
  def.infer = [](InferContext& ctx) {
    elem::require_input_count(ctx, 2, 2);
    require_dtype<CumSumTypes>(ctx, 0);
    require_dtype<elem::Types<int32_t, int64_t>>(ctx, 1);
    if (shape_numel(ctx.input_shape(1)) != 1)
      ctx.fail("axis must be a scalar, has shape {}", shape_to_string(ctx.input_shape(1)));
    if (ctx.input_rank(0) == 0) ctx.fail("input must have rank 1 or more");
    if (const Tensor* axis = ctx.input_constant(1))
      ctx.normalize_axis(axis->get_as_int(0), ctx.input_rank(0));
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  };
  def.reference = [](const Graph& g, const Node& n) -> RefKernel {
    const bool exclusive = n.attr_int("exclusive", 0) != 0;
    const bool reverse = n.attr_int("reverse", 0) != 0;
    const std::string name = n.name;
    return CumSumTypes::dispatch(g.value(n.inputs[0]).dtype, [&](auto tag) -> RefKernel {
      using T = decltype(tag);
      return [=](std::span<const Tensor> in, std::span<const Tensor> out) {
        const int64_t rank = in[0].rank();
        int64_t axis = in[1].get_as_int(0);
        if (axis < -rank || axis >= rank)
          fail(ErrorKind::kShape, "node '{}' (CumSum): axis {} is out of range for rank {}", name,
               axis, rank);
        if (axis < 0) axis += rank;
        const AxisView v = view_around(in[0].shape(), axis);
        const T* x = in[0].data<T>();
        T* y = out[0].data<T>();
        for (int64_t o = 0; o < v.outer; ++o)
          for (int64_t i = 0; i < v.inner; ++i) {
            const int64_t base = o * v.len * v.inner + i;
            T acc = 0;
            for (int64_t step = 0; step < v.len; ++step) {
              int64_t j = reverse ? v.len - 1 - step : step;
              int64_t at = base + j * v.inner;
              T value = x[at];
              if (!exclusive) acc = elem::wrap_add(acc, value);
              y[at] = acc;
              if (exclusive) acc = elem::wrap_add(acc, value);
            }
          }
      };
    });
  };
  r.add(std::move(def));
}

}  // namespace

void register_topk_ops(OpRegistry& registry) {
  register_topk(registry);
  register_cumsum(registry);
}

}  // namespace collage::ops::red
