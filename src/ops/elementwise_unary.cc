// Unary elementwise ops: out[i] = f(in[i]). Each op is a functor factory that parses the
// node's attributes once; the kernel is the same contiguous loop for all of them.
#include <cmath>

#include "ops/elementwise_util.h"

namespace collage::ops::elem {
namespace {

// Same-shape map over a contiguous tensor.
template <typename T, typename O, typename F>
void map_unary(const T* x, O* y, int64_t n, const F& f) {
#pragma omp parallel for if (n >= kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<O>(f(x[i]));
}

// Registers op `name` over the dtypes `L`. `make(node)` returns a generic functor; the
// output has the input's dtype, or bool when `BoolOut`.
template <typename L, bool BoolOut = false, typename Make>
void add_unary(OpRegistry& registry, const char* name, Make make) {
  OpDef def;
  def.name = name;
  def.kind = OpKind::kElementwise;
  def.infer = [make](InferContext& ctx) {
    require_input_count(ctx, 1, 1);
    require_dtype<L>(ctx, 0);
    (void)make(ctx.node());  // surfaces bad attributes at load time
    DType dt = BoolOut ? DType::kBool : ctx.input_dtype(0);
    ctx.set_output(0, dt, ctx.input_shape(0));
  };
  def.reference = [make](const Graph& g, const Node& n) -> RefKernel {
    auto f = make(n);
    return L::dispatch(g.value(n.inputs[0]).dtype, [&](auto tag) -> RefKernel {
      using T = decltype(tag);
      using O = std::conditional_t<BoolOut, bool, T>;
      return [f](std::span<const Tensor> in, std::span<const Tensor> out) {
        map_unary(in[0].data<T>(), out[0].data<O>(), in[0].numel(), f);
      };
    });
  };
  registry.add(std::move(def));
}

// A functor factory for ops without attributes.
template <typename F>
auto no_attrs(F f) {
  return [f](const Node&) { return f; };
}

// Rounds half to even regardless of the floating-point environment.
template <typename T>
T round_half_even(T x) {
  T r = std::round(x);  // half away from zero
  if (std::fabs(x - std::trunc(x)) == T(0.5)) r = T(2) * std::round(x / T(2));
  return r;
}

template <typename T>
T sigmoid(T x) {
  // Split by sign so exp never overflows.
  if (x >= 0) return T(1) / (T(1) + std::exp(-x));
  T e = std::exp(x);
  return e / (T(1) + e);
}

// log(1 + e^x), written so neither branch overflows (Softplus, and inside Mish).
template <typename T>
T softplus(T x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

void register_activations(OpRegistry& r) {
  add_unary<SignedTypes>(r, "Relu", no_attrs([](auto x) { return x < 0 ? decltype(x)(0) : x; }));
  add_unary<FloatTypes>(r, "LeakyRelu", [](const Node& n) {
    float alpha = n.attr_float("alpha", 0.01f);
    return [alpha](auto x) { return x < 0 ? static_cast<decltype(x)>(alpha) * x : x; };
  });
  add_unary<FloatTypes>(r, "ThresholdedRelu", [](const Node& n) {
    float alpha = n.attr_float("alpha", 1.0f);
    return [alpha](auto x) {
      using T = decltype(x);
      return x > static_cast<T>(alpha) ? x : static_cast<T>(0);
    };
  });
  add_unary<FloatTypes>(r, "Shrink", [](const Node& n) {
    float bias = n.attr_float("bias", 0.0f), lambd = n.attr_float("lambd", 0.5f);
    return [bias, lambd](auto x) {
      using T = decltype(x);
      const T l = static_cast<T>(lambd), b = static_cast<T>(bias);
      return x < -l ? static_cast<T>(x + b) : x > l ? static_cast<T>(x - b) : static_cast<T>(0);
    };
  });
  add_unary<FloatTypes>(r, "Elu", [](const Node& n) {
    float alpha = n.attr_float("alpha", 1.0f);
    return [alpha](auto x) {
      using T = decltype(x);
      return x < 0 ? static_cast<T>(alpha) * std::expm1(x) : x;
    };
  });
  add_unary<FloatTypes>(r, "Selu", [](const Node& n) {
    float alpha = n.attr_float("alpha", 1.67326319217681884765625f);
    float gamma = n.attr_float("gamma", 1.05070102214813232421875f);
    return [alpha, gamma](auto x) {
      using T = decltype(x);
      return static_cast<T>(gamma) * (x > 0 ? x : static_cast<T>(alpha) * std::expm1(x));
    };
  });
  add_unary<FloatTypes>(r, "Celu", [](const Node& n) {
    float alpha = n.attr_float("alpha", 1.0f);
    if (alpha == 0) unsupported(n, "alpha must not be 0");
    return [alpha](auto x) {
      using T = decltype(x);
      T a = static_cast<T>(alpha);
      return x > 0 ? x : a * std::expm1(x / a);
    };
  });
  add_unary<FloatTypes>(r, "Sigmoid", no_attrs([](auto x) { return sigmoid(x); }));
  add_unary<FloatTypes>(r, "HardSigmoid", [](const Node& n) {
    float alpha = n.attr_float("alpha", 0.2f), beta = n.attr_float("beta", 0.5f);
    return [alpha, beta](auto x) {
      using T = decltype(x);
      T v = static_cast<T>(alpha) * x + static_cast<T>(beta);
      return std::max(T(0), std::min(T(1), v));
    };
  });
  add_unary<FloatTypes>(r, "HardSwish", no_attrs([](auto x) {
                          using T = decltype(x);
                          return x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5)));
                        }));
  add_unary<FloatTypes>(r, "Softplus", no_attrs([](auto x) { return softplus(x); }));
  add_unary<FloatTypes>(r, "Softsign",
                        no_attrs([](auto x) { return x / (decltype(x)(1) + std::fabs(x)); }));
  // Mish (opset 18): x * tanh(softplus(x)).
  add_unary<FloatTypes>(r, "Mish", no_attrs([](auto x) { return x * std::tanh(softplus(x)); }));
  // Gelu (opset 20): 0.5 x (1 + erf(x / sqrt(2))), or with approximate = "tanh"
  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
  add_unary<FloatTypes>(r, "Gelu", [](const Node& n) {
    const std::string approximate = n.attr_string("approximate", "none");
    if (approximate != "none" && approximate != "tanh")
      unsupported(n, "approximate '{}' (ONNX defines 'none' and 'tanh')", approximate);
    const bool tanh_form = approximate == "tanh";
    return [tanh_form](auto x) {
      using T = decltype(x);
      const double v = static_cast<double>(x);
      const double inner = tanh_form ? std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))
                                     : std::erf(v / M_SQRT2);
      return static_cast<T>(0.5 * v * (1 + inner));
    };
  });
  add_unary<FloatTypes>(r, "Tanh", no_attrs([](auto x) { return std::tanh(x); }));
}

void register_math(OpRegistry& r) {
  add_unary<FloatTypes>(r, "Erf", no_attrs([](auto x) { return std::erf(x); }));
  add_unary<FloatTypes>(r, "Exp", no_attrs([](auto x) { return std::exp(x); }));
  add_unary<FloatTypes>(r, "Log", no_attrs([](auto x) { return std::log(x); }));
  add_unary<FloatTypes>(r, "Sqrt", no_attrs([](auto x) { return std::sqrt(x); }));
  add_unary<FloatTypes>(r, "Reciprocal", no_attrs([](auto x) { return decltype(x)(1) / x; }));
  add_unary<FloatTypes>(r, "Floor", no_attrs([](auto x) { return std::floor(x); }));
  add_unary<FloatTypes>(r, "Ceil", no_attrs([](auto x) { return std::ceil(x); }));
  add_unary<FloatTypes>(r, "Round", no_attrs([](auto x) { return round_half_even(x); }));
  add_unary<FloatTypes>(r, "Sin", no_attrs([](auto x) { return std::sin(x); }));
  add_unary<FloatTypes>(r, "Cos", no_attrs([](auto x) { return std::cos(x); }));
  add_unary<FloatTypes>(r, "Tan", no_attrs([](auto x) { return std::tan(x); }));
  add_unary<FloatTypes>(r, "Asin", no_attrs([](auto x) { return std::asin(x); }));
  add_unary<FloatTypes>(r, "Acos", no_attrs([](auto x) { return std::acos(x); }));
  add_unary<FloatTypes>(r, "Atan", no_attrs([](auto x) { return std::atan(x); }));
  add_unary<FloatTypes>(r, "Sinh", no_attrs([](auto x) { return std::sinh(x); }));
  add_unary<FloatTypes>(r, "Cosh", no_attrs([](auto x) { return std::cosh(x); }));
  add_unary<FloatTypes>(r, "Asinh", no_attrs([](auto x) { return std::asinh(x); }));
  add_unary<FloatTypes>(r, "Acosh", no_attrs([](auto x) { return std::acosh(x); }));
  add_unary<FloatTypes>(r, "Atanh", no_attrs([](auto x) { return std::atanh(x); }));
  add_unary<SignedTypes>(r, "Neg", no_attrs([](auto x) { return wrap_neg(x); }));
  add_unary<NumericTypes>(r, "Abs", no_attrs([](auto x) {
                            using T = decltype(x);
                            if constexpr (std::is_unsigned_v<T>)
                              return x;
                            else
                              return x < 0 ? wrap_neg(x) : x;
                          }));
  add_unary<NumericTypes>(r, "Sign", no_attrs([](auto x) {
                            using T = decltype(x);
                            if constexpr (std::is_floating_point_v<T>)
                              if (std::isnan(x)) return x;
                            return static_cast<T>((T(0) < x) - (x < T(0)));
                          }));
}

void register_predicates(OpRegistry& r) {
  add_unary<BoolTypes>(r, "Not", no_attrs([](bool x) { return !x; }));
  add_unary<FloatTypes, true>(r, "IsNaN", no_attrs([](auto x) { return std::isnan(x); }));
  add_unary<FloatTypes, true>(r, "IsInf", [](const Node& n) {
    bool neg = n.attr_int("detect_negative", 1) != 0, pos = n.attr_int("detect_positive", 1) != 0;
    return [neg, pos](auto x) { return std::isinf(x) && (x > 0 ? pos : neg); };
  });
}

}  // namespace

void register_unary_ops(OpRegistry& registry) {
  register_activations(registry);
  register_math(registry);
  register_predicates(registry);
}

}  // namespace collage::ops::elem
