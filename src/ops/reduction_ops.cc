// The reduction op group: Reduce* over a set of axes, ArgMax/ArgMin along one axis (this
// file), TopK and CumSum (reduction_topk.cc).
#include <cmath>

#include "ops/elementwise_util.h"
#include "ops/register.h"

namespace collage::ops {
namespace red {

void register_topk_ops(OpRegistry& registry);  // reduction_topk.cc

namespace {

using elem::invalid;
using elem::require_dtype;
using elem::Types;
using elem::unsupported;

using SumTypes = Types<float, double, int32_t, int64_t, uint32_t, uint64_t>;
using MinMaxTypes = Types<float, double, int8_t, uint8_t, int32_t, int64_t, uint32_t, uint64_t>;
using FloatTypes = elem::FloatTypes;

[[noreturn]] void shape_error(const Node& n, const std::string& message) {
  throw Error(ErrorKind::kShape, elem::node_prefix(n) + message);
}

// Which input dims a Reduce* node reduces. The axes come from the second input when present
// (ReduceSum from opset 13) or else the `axes` attribute; none means all dims, unless
// noop_with_empty_axes asks for none.
std::vector<bool> reduced_dims(const Node& n, int rank, const Tensor* axes_input) {
  std::vector<int64_t> axes = axes_input ? axes_input->to_int_vector() : n.attr_ints("axes");
  std::vector<bool> mask(rank, false);
  if (axes.empty()) {
    if (n.attr_int("noop_with_empty_axes", 0) == 0) mask.assign(rank, true);
    return mask;
  }
  for (int64_t a : axes) {
    int64_t d = a < 0 ? a + rank : a;
    if (d < 0 || d >= rank)
      shape_error(n, fmt::format("axis {} is out of range for rank {}", a, rank));
    if (mask[d]) shape_error(n, fmt::format("axis {} is listed twice", a));
    mask[d] = true;
  }
  return mask;
}

Shape reduced_shape(const Shape& in, const std::vector<bool>& mask, bool keepdims) {
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!mask[d])
      out.push_back(in[d]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

// Where each output element's inputs lie. Adjacent dims that are both kept or both reduced
// are merged; kept groups give the output order, reduced groups the elements to combine.
struct ReducePlan {
  int64_t out_count = 1;
  std::vector<int64_t> kept_dims, kept_strides;  // outer to inner
  int64_t red_count = 1;
  int64_t red_stride = 0;            // when reduced dims form one strided run
  std::vector<int64_t> red_offsets;  // otherwise, every reduced element's offset
  bool single_run = true;
};

ReducePlan make_reduce_plan(const Shape& in, const std::vector<bool>& mask) {
  ReducePlan plan;
  std::vector<int64_t> strides = shape_strides(in);
  std::vector<std::pair<int64_t, int64_t>> kept, reduced;  // (size, stride) groups
  int last = -1;                                           // 0 kept, 1 reduced
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == 1) continue;
    int kind = mask[d] ? 1 : 0;
    auto& groups = kind ? reduced : kept;
    if (kind == last) {
      groups.back().first *= in[d];
      groups.back().second = strides[d];
    } else {
      groups.push_back({in[d], strides[d]});
    }
    last = kind;
  }
  for (auto [size, stride] : kept) {
    plan.kept_dims.push_back(size);
    plan.kept_strides.push_back(stride);
    plan.out_count *= size;
  }
  for (auto [size, stride] : reduced) plan.red_count *= size;
  if (reduced.size() == 1) plan.red_stride = reduced[0].second;
  if (reduced.size() > 1) {
    plan.single_run = false;
    plan.red_offsets.assign(1, 0);
    for (auto [size, stride] : reduced) {
      std::vector<int64_t> next;
      next.reserve(plan.red_offsets.size() * size);
      for (int64_t base : plan.red_offsets)
        for (int64_t i = 0; i < size; ++i) next.push_back(base + i * stride);
      plan.red_offsets = std::move(next);
    }
  }
  return plan;
}

// Calls fn(value) for each input element that output `o` combines.
template <typename T, typename F>
void visit_reduced(const ReducePlan& plan, const T* x, int64_t o, const F& fn) {
  int64_t base = 0;
  for (size_t g = plan.kept_dims.size(); g-- > 0;) {
    base += (o % plan.kept_dims[g]) * plan.kept_strides[g];
    o /= plan.kept_dims[g];
  }
  const T* p = x + base;
  if (plan.single_run) {
    const int64_t s = plan.red_stride;
    if (s == 1)
      for (int64_t i = 0; i < plan.red_count; ++i) fn(p[i]);
    else
      for (int64_t i = 0; i < plan.red_count; ++i) fn(p[i * s]);
  } else {
    for (int64_t off : plan.red_offsets) fn(p[off]);
  }
}

// Accumulator type: double for floats (sums over thousands of elements), the element type
// (with wrap-around arithmetic) for integers.
template <typename T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;

template <typename T>
T nan_max(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  return a < b ? b : a;
}
template <typename T>
T nan_min(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  return b < a ? b : a;
}

template <typename T>
T abs_value(T v) {
  if constexpr (std::is_unsigned_v<T>)
    return v;
  else
    return v < 0 ? elem::wrap_neg(v) : v;
}

// One output element of each Reduce* op, given a visitor over its inputs.
enum class Reducer { kSum, kMean, kProd, kSumSquare, kL1, kL2, kLogSum, kLogSumExp, kMax, kMin };

template <typename T, typename Visit>
T reduce_one(Reducer r, int64_t count, const Visit& visit) {
  using A = Acc<T>;
  A acc{};
  switch (r) {
    case Reducer::kSum:
    case Reducer::kMean:
    case Reducer::kLogSum:
      visit([&](T v) { acc = elem::wrap_add(acc, static_cast<A>(v)); });
      break;
    case Reducer::kSumSquare:
    case Reducer::kL2:
      visit([&](T v) { acc = elem::wrap_add(acc, elem::wrap_mul(A(v), A(v))); });
      break;
    case Reducer::kL1:
      visit([&](T v) { acc = elem::wrap_add(acc, static_cast<A>(abs_value(v))); });
      break;
    case Reducer::kProd:
      acc = 1;
      visit([&](T v) { acc = elem::wrap_mul(acc, static_cast<A>(v)); });
      break;
    case Reducer::kMax:
    case Reducer::kMin: {
      // Over nothing, max is -inf (lowest for integers) and min is +inf, as ONNX defines.
      const bool is_max = r == Reducer::kMax;
      T best = is_max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
      if constexpr (std::is_floating_point_v<T>)
        best = is_max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
      visit([&](T v) { best = is_max ? nan_max(best, v) : nan_min(best, v); });
      return best;
    }
    case Reducer::kLogSumExp: {
      if constexpr (std::is_floating_point_v<T>) {
        // Shift by the max so exp cannot overflow.
        double m = -std::numeric_limits<double>::infinity();
        visit([&](T v) { m = nan_max<double>(m, v); });
        if (std::isnan(m) || std::isinf(m)) return static_cast<T>(m);
        visit([&](T v) { acc += std::exp(static_cast<double>(v) - m); });
        return static_cast<T>(std::log(acc) + m);
      }
      return T{};
    }
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (r == Reducer::kMean) return static_cast<T>(acc / static_cast<double>(count));
    if (r == Reducer::kL2) return static_cast<T>(std::sqrt(acc));
    if (r == Reducer::kLogSum) return static_cast<T>(std::log(acc));
  } else {
    if (r == Reducer::kMean) return elem::int_div(acc, static_cast<T>(count));
  }
  return static_cast<T>(acc);
}

template <typename L>
void add_reduce(OpRegistry& registry, const char* name, Reducer reducer) {
  OpDef def;
  def.name = name;
  def.kind = OpKind::kReduction;
  def.infer = [](InferContext& ctx) {
    const Node& n = ctx.node();
    elem::require_input_count(ctx, 1, 2);
    require_dtype<L>(ctx, 0);
    const Tensor* axes = ctx.has_input(1) ? &ctx.require_constant(1, "axes") : nullptr;
    if (axes && !elem::IntTypes::contains(axes->dtype()))
      invalid(n, "axes must be integers, not {}", dtype_name(axes->dtype()));
    std::vector<bool> mask = reduced_dims(n, ctx.input_rank(0), axes);
    ctx.set_output(0, ctx.input_dtype(0),
                   reduced_shape(ctx.input_shape(0), mask, n.attr_int("keepdims", 1) != 0));
  };
  def.reference = [reducer](const Graph& g, const Node& n) -> RefKernel {
    const Shape& in_shape = g.value(n.inputs[0]).shape;
    const Tensor* axes = n.input(1) != kNoValue ? &g.value(n.inputs[1]).constant : nullptr;
    if (axes && !axes->defined()) fail(ErrorKind::kInternal, "{}: axes not constant", n.name);
    ReducePlan plan =
        make_reduce_plan(in_shape, reduced_dims(n, static_cast<int>(in_shape.size()), axes));
    return L::dispatch(g.value(n.inputs[0]).dtype, [&](auto tag) -> RefKernel {
      using T = decltype(tag);
      return [plan, reducer](std::span<const Tensor> in, std::span<const Tensor> out) {
        const T* x = in[0].data<T>();
        T* y = out[0].data<T>();
        const int64_t outs = out[0].numel();
        const bool parallel = outs > 1 && outs * plan.red_count >= elem::kParallelThreshold;
#pragma omp parallel for if (parallel)
        for (int64_t o = 0; o < outs; ++o) {
          auto visit = [&](const auto& fn) { visit_reduced(plan, x, o, fn); };
          y[o] = reduce_one<T>(reducer, plan.red_count, visit);
        }
      };
    });
  };
  registry.add(std::move(def));
}

// ---------------------------------------------------------------------------------------
// ArgMax / ArgMin along one axis; ties go to the first index, or the last with
// select_last_index. A NaN counts as the extreme value (numpy's argmax/argmin).

template <bool kMax>
void add_arg(OpRegistry& registry, const char* name) {
  OpDef def;
  def.name = name;
  def.kind = OpKind::kReduction;
  def.infer = [](InferContext& ctx) {
    elem::require_input_count(ctx, 1, 1);
    require_dtype<elem::NumericTypes>(ctx, 0);
    const Shape& in = ctx.input_shape(0);
    int64_t axis = ctx.normalize_axis(ctx.node().attr_int("axis", 0), in.size());
    if (in[axis] == 0) ctx.fail("cannot take {} over an empty axis", ctx.node().op_type);
    std::vector<bool> mask(in.size(), false);
    mask[axis] = true;
    ctx.set_output(0, DType::kInt64,
                   reduced_shape(in, mask, ctx.node().attr_int("keepdims", 1) != 0));
  };
  def.reference = [](const Graph& g, const Node& n) -> RefKernel {
    const Shape& in = g.value(n.inputs[0]).shape;
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += in.size();
    int64_t outer = 1, inner = 1, len = in[axis];
    for (int64_t d = 0; d < axis; ++d) outer *= in[d];
    for (size_t d = axis + 1; d < in.size(); ++d) inner *= in[d];
    const bool last = n.attr_int("select_last_index", 0) != 0;
    return elem::NumericTypes::dispatch(g.value(n.inputs[0]).dtype, [&](auto tag) -> RefKernel {
      using T = decltype(tag);
      return [=](std::span<const Tensor> in, std::span<const Tensor> out) {
        const T* x = in[0].data<T>();
        int64_t* y = out[0].data<int64_t>();
        // Whether v should replace the current best b (ties only with select_last_index).
        auto better = [last](T v, T b) {
          if constexpr (std::is_floating_point_v<T>) {
            if (std::isnan(b)) return last && std::isnan(v);
            if (std::isnan(v)) return true;
          }
          if constexpr (kMax) return last ? v >= b : v > b;
          return last ? v <= b : v < b;
        };
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            const T* p = x + o * len * inner + i;
            int64_t best = 0;
            for (int64_t k = 1; k < len; ++k)
              if (better(p[k * inner], p[best * inner])) best = k;
            y[o * inner + i] = best;
          }
      };
    });
  };
  registry.add(std::move(def));
}

}  // namespace
}  // namespace red

void register_reduction_ops(OpRegistry& registry) {
  using red::Reducer;
  red::add_reduce<red::SumTypes>(registry, "ReduceSum", Reducer::kSum);
  red::add_reduce<red::SumTypes>(registry, "ReduceMean", Reducer::kMean);
  red::add_reduce<red::SumTypes>(registry, "ReduceProd", Reducer::kProd);
  red::add_reduce<red::SumTypes>(registry, "ReduceSumSquare", Reducer::kSumSquare);
  red::add_reduce<red::SumTypes>(registry, "ReduceL1", Reducer::kL1);
  red::add_reduce<red::FloatTypes>(registry, "ReduceL2", Reducer::kL2);
  red::add_reduce<red::FloatTypes>(registry, "ReduceLogSum", Reducer::kLogSum);
  red::add_reduce<red::FloatTypes>(registry, "ReduceLogSumExp", Reducer::kLogSumExp);
  red::add_reduce<red::MinMaxTypes>(registry, "ReduceMax", Reducer::kMax);
  red::add_reduce<red::MinMaxTypes>(registry, "ReduceMin", Reducer::kMin);
  red::add_arg<true>(registry, "ArgMax");
  red::add_arg<false>(registry, "ArgMin");
  red::register_topk_ops(registry);
}

}  // namespace collage::ops
