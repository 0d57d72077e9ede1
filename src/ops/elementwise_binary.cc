// Binary and variadic elementwise ops with numpy broadcasting: arithmetic, Pow, Mod,
// comparisons, logic, BitShift, PRelu, and Min/Max/Sum/Mean.
#include <cmath>

#include "ops/elementwise_util.h"

namespace collage::ops::elem {
namespace {

// Operand B's shape as numpy broadcasting should see it. Before opset 7, broadcasting was
// opt-in (`broadcast`=1) and `axis` aligned B at an axis of A instead of at the end, and
// PRelu's 1-D slope ran along the channel axis (1); B then gets trailing 1s so that numpy's
// rule says the same thing.
Shape legacy_b_shape(const Node& n, int64_t opset, const Shape& a, const Shape& b) {
  int64_t rank = static_cast<int64_t>(a.size());
  if (n.op_type == "PRelu" && opset < 7 && b.size() == 1 && b[0] != 1 && rank >= 2 &&
      b[0] == a[1]) {
    Shape padded = b;
    padded.resize(rank - 1, 1);
    return padded;
  }
  if (!n.has_attr("broadcast") || n.attr_int("broadcast", 0) == 0 || !n.has_attr("axis")) return b;
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis + static_cast<int64_t>(b.size()) > rank)
    invalid(n, "legacy broadcast axis {} does not fit B of rank {} into A of rank {}",
            n.attr_int("axis", 0), b.size(), rank);
  Shape padded = b;
  padded.resize(rank - axis, 1);
  return padded;
}

// Infers the broadcast output shape of a two-operand node; `unidirectional` requires the
// output to be A's shape (PRelu, legacy broadcasting).
Shape infer_broadcast2(InferContext& ctx, bool unidirectional) {
  const Node& n = ctx.node();
  const Shape& a = ctx.input_shape(0);
  Shape b = legacy_b_shape(n, ctx.opset(), a, ctx.input_shape(1));
  std::optional<Shape> out = broadcast_shapes(a, b);
  if (!out) ctx.fail("shapes {} and {} do not broadcast", shape_to_string(a), shape_to_string(b));
  bool legacy = n.has_attr("broadcast") && n.attr_int("broadcast", 0) != 0;
  if ((unidirectional || legacy) && *out != a)
    ctx.fail("{} must broadcast to {}", shape_to_string(b), shape_to_string(a));
  return *out;
}

BroadcastPlan plan_for_binary(const Graph& g, const Node& n) {
  const Shape& a = g.value(n.inputs[0]).shape;
  Shape b = legacy_b_shape(n, g.opset, a, g.value(n.inputs[1]).shape);
  return make_broadcast_plan(g.value(n.outputs[0]).shape, {a, b});
}

struct BinaryOptions {
  bool bool_output = false;
  bool unidirectional = false;
};

// Registers a two-operand op over the dtypes `L` (both operands of one dtype). `make(node)`
// returns a generic functor (T, T) -> value.
template <typename L, typename Make>
void add_binary(OpRegistry& registry, const char* name, Make make, BinaryOptions opts = {}) {
  OpDef def;
  def.name = name;
  def.kind = OpKind::kBroadcast;
  def.infer = [make, opts](InferContext& ctx) {
    require_input_count(ctx, 2, 2);
    require_dtype<L>(ctx, 0);
    if (ctx.input_dtype(1) != ctx.input_dtype(0))
      invalid(ctx.node(), "operands have different element types {} and {}",
              dtype_name(ctx.input_dtype(0)), dtype_name(ctx.input_dtype(1)));
    (void)make(ctx.node());
    Shape out = infer_broadcast2(ctx, opts.unidirectional);
    ctx.set_output(0, opts.bool_output ? DType::kBool : ctx.input_dtype(0), std::move(out));
  };
  def.reference = [make, opts](const Graph& g, const Node& n) -> RefKernel {
    auto f = make(n);
    BroadcastPlan plan = plan_for_binary(g, n);
    return L::dispatch(g.value(n.inputs[0]).dtype, [&](auto tag) -> RefKernel {
      using T = decltype(tag);
      if (opts.bool_output)
        return [f, plan](std::span<const Tensor> in, std::span<const Tensor> out) {
          broadcast_binary(plan, in[0].data<T>(), in[1].data<T>(), out[0].data<bool>(), f);
        };
      return [f, plan](std::span<const Tensor> in, std::span<const Tensor> out) {
        broadcast_binary(plan, in[0].data<T>(), in[1].data<T>(), out[0].data<T>(), f);
      };
    });
  };
  registry.add(std::move(def));
}

template <typename F>
auto no_attrs(F f) {
  return [f](const Node&) { return f; };
}

template <typename T>
constexpr bool kIsInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// numpy's maximum/minimum: a NaN operand wins.
template <typename T>
T max_nan(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return a < b ? b : a;
}
template <typename T>
T min_nan(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return b < a ? b : a;
}

void register_arithmetic(OpRegistry& r) {
  add_binary<NumericTypes>(r, "Add", no_attrs([](auto a, auto b) { return wrap_add(a, b); }));
  add_binary<NumericTypes>(r, "Sub", no_attrs([](auto a, auto b) { return wrap_sub(a, b); }));
  add_binary<NumericTypes>(r, "Mul", no_attrs([](auto a, auto b) { return wrap_mul(a, b); }));
  add_binary<NumericTypes>(r, "Div", no_attrs([](auto a, auto b) {
                             if constexpr (kIsInt<decltype(a)>)
                               return int_div(a, b);
                             else
                               return a / b;
                           }));
  add_binary<NumericTypes>(r, "Mod", [](const Node& n) {
    bool c_fmod = n.attr_int("fmod", 0) != 0;
    return [c_fmod](auto a, auto b) {
      using T = decltype(a);
      if constexpr (kIsInt<T>) {
        return c_fmod ? int_rem(a, b) : int_mod(a, b);
      } else {
        T rem = std::fmod(a, b);
        // fmod=0 means the remainder takes the divisor's sign, like Python's %.
        if (!c_fmod && rem != 0 && ((rem < 0) != (b < 0))) rem += b;
        return rem;
      }
    };
  });
  add_binary<SignedTypes>(
      r, "PRelu", no_attrs([](auto x, auto slope) { return x < 0 ? wrap_mul(x, slope) : x; }),
      {.unidirectional = true});
  add_binary<UnsignedTypes>(r, "BitShift", [](const Node& n) {
    std::string dir = n.attr_string("direction", "");
    if (dir != "LEFT" && dir != "RIGHT")
      invalid(n, "direction must be LEFT or RIGHT, got '{}'", dir);
    bool left = dir == "LEFT";
    return [left](auto x, auto s) {
      using T = decltype(x);
      // Shifting by the bit width or more is undefined in C++; every bit is shifted out.
      if (s >= sizeof(T) * 8) return T(0);
      auto wide = static_cast<WideUnsigned<T>>(x);
      return static_cast<T>(left ? wide << s : wide >> s);
    };
  });
}

void register_comparisons(OpRegistry& r) {
  BinaryOptions to_bool{.bool_output = true};
  add_binary<AllTypes>(r, "Equal", no_attrs([](auto a, auto b) { return a == b; }), to_bool);
  add_binary<NumericTypes>(r, "Less", no_attrs([](auto a, auto b) { return a < b; }), to_bool);
  add_binary<NumericTypes>(r, "Greater", no_attrs([](auto a, auto b) { return a > b; }), to_bool);
  add_binary<NumericTypes>(r, "LessOrEqual", no_attrs([](auto a, auto b) { return a <= b; }),
                           to_bool);
  add_binary<NumericTypes>(r, "GreaterOrEqual", no_attrs([](auto a, auto b) { return a >= b; }),
                           to_bool);
  add_binary<BoolTypes>(r, "And", no_attrs([](bool a, bool b) { return a && b; }), to_bool);
  add_binary<BoolTypes>(r, "Or", no_attrs([](bool a, bool b) { return a || b; }), to_bool);
  add_binary<BoolTypes>(r, "Xor", no_attrs([](bool a, bool b) { return a != b; }), to_bool);
}

// ---------------------------------------------------------------------------------------
// Pow: the exponent may have another dtype than the base; the result has the base's.

template <typename T, typename E>
T int_pow(T base, E exp) {
  if constexpr (std::is_signed_v<E>) {
    if (exp < 0) {
      // Only |base| == 1 has an integral reciprocal power; 0 ** -n is defined as 0 here.
      if (base == 1) return 1;
      if constexpr (std::is_signed_v<T>)
        if (base == -1) return (exp % 2 == 0) ? T(1) : T(-1);
      return 0;
    }
  }
  T result = 1;
  auto e = static_cast<uint64_t>(exp);
  while (e) {
    if (e & 1) result = wrap_mul(result, base);
    base = wrap_mul(base, base);
    e >>= 1;
  }
  return result;
}

template <typename T, typename E>
T pow_value(T base, E exp) {
  if constexpr (std::is_floating_point_v<T> && std::is_same_v<T, E>)
    return std::pow(base, exp);
  else if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  else if constexpr (std::is_integral_v<E>)
    return int_pow(base, exp);
  else
    return convert_value<T>(std::pow(static_cast<double>(base), static_cast<double>(exp)));
}

using PowBaseTypes = Types<float, double, int32_t, int64_t>;

void register_pow(OpRegistry& r) {
  OpDef def;
  def.name = "Pow";
  def.kind = OpKind::kBroadcast;
  def.infer = [](InferContext& ctx) {
    require_input_count(ctx, 2, 2);
    require_dtype<PowBaseTypes>(ctx, 0);
    require_dtype<NumericTypes>(ctx, 1);
    Shape out = infer_broadcast2(ctx, false);
    ctx.set_output(0, ctx.input_dtype(0), std::move(out));
  };
  def.reference = [](const Graph& g, const Node& n) -> RefKernel {
    BroadcastPlan plan = plan_for_binary(g, n);
    DType base_dtype = g.value(n.inputs[0]).dtype, exp_dtype = g.value(n.inputs[1]).dtype;
    return PowBaseTypes::dispatch(base_dtype, [&](auto base_tag) -> RefKernel {
      using T = decltype(base_tag);
      return NumericTypes::dispatch(exp_dtype, [&](auto exp_tag) -> RefKernel {
        using E = decltype(exp_tag);
        return [plan](std::span<const Tensor> in, std::span<const Tensor> out) {
          broadcast_binary(plan, in[0].data<T>(), in[1].data<E>(), out[0].data<T>(),
                           [](T b, E e) { return pow_value(b, e); });
        };
      });
    });
  };
  r.add(std::move(def));
}

// ---------------------------------------------------------------------------------------
// Variadic ops fold their operands into the output: out = in0 (broadcast), then
// out = f(out, in_k) for each further operand.

template <typename L, typename F>
void add_variadic(OpRegistry& registry, const char* name, F f, bool mean = false) {
  OpDef def;
  def.name = name;
  def.kind = OpKind::kBroadcast;
  def.infer = [](InferContext& ctx) {
    const Node& n = ctx.node();
    if (ctx.num_inputs() < 1) invalid(n, "needs at least one input");
    Shape out;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.has_input(i)) invalid(n, "input {} is missing", i);
      require_dtype<L>(ctx, i);
      if (ctx.input_dtype(i) != ctx.input_dtype(0))
        invalid(n, "inputs have different element types {} and {}", dtype_name(ctx.input_dtype(0)),
                dtype_name(ctx.input_dtype(i)));
      std::optional<Shape> b =
          i == 0 ? ctx.input_shape(0) : broadcast_shapes(out, ctx.input_shape(i));
      if (!b)
        ctx.fail("input {} of shape {} does not broadcast with {}", i,
                 shape_to_string(ctx.input_shape(i)), shape_to_string(out));
      out = *b;
    }
    ctx.set_output(0, ctx.input_dtype(0), std::move(out));
  };
  def.reference = [f, mean](const Graph& g, const Node& n) -> RefKernel {
    const Shape& out_shape = g.value(n.outputs[0]).shape;
    std::vector<BroadcastPlan> plans;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const Shape& s = g.value(n.inputs[i]).shape;
      plans.push_back(i == 0 ? make_broadcast_plan(out_shape, {s, s})
                             : make_broadcast_plan(out_shape, {out_shape, s}));
    }
    return L::dispatch(g.value(n.inputs[0]).dtype, [&](auto tag) -> RefKernel {
      using T = decltype(tag);
      return [f, plans, mean](std::span<const Tensor> in, std::span<const Tensor> out) {
        T* y = out[0].data<T>();
        const T* x0 = in[0].data<T>();
        broadcast_binary(plans[0], x0, x0, y, [](T a, T) { return a; });
        for (size_t k = 1; k < plans.size(); ++k)
          broadcast_binary(plans[k], static_cast<const T*>(y), in[k].data<T>(), y, f);
        if (mean) {
          const T count = static_cast<T>(plans.size());
          const int64_t len = out[0].numel();
          for (int64_t i = 0; i < len; ++i) y[i] /= count;
        }
      };
    });
  };
  registry.add(std::move(def));
}

void register_variadic(OpRegistry& r) {
  add_variadic<NumericTypes>(r, "Max", [](auto a, auto b) { return max_nan(a, b); });
  add_variadic<NumericTypes>(r, "Min", [](auto a, auto b) { return min_nan(a, b); });
  add_variadic<FloatTypes>(r, "Sum", [](auto a, auto b) { return a + b; });
  add_variadic<FloatTypes>(
      r, "Mean", [](auto a, auto b) { return a + b; }, /*mean=*/true);
}

}  // namespace

void register_binary_ops(OpRegistry& registry) {
  register_arithmetic(registry);
  register_comparisons(registry);
  register_pow(registry);
  register_variadic(registry);
}

}  // namespace collage::ops::elem
