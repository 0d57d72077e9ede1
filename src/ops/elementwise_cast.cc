// Cast and CastLike (including float16/bfloat16 storage), Clip and Where: elementwise ops
// whose operands play different roles.
#include <cmath>
#include <cstring>

#include "ops/elementwise_util.h"

namespace collage::ops::elem {
namespace {

// ---------------------------------------------------------------------------------------
// 16-bit floats, held as raw uint16 bit patterns.

float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

float half_to_float(uint16_t h) {
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -24);
  if (exp == 31) return mant ? std::numeric_limits<float>::quiet_NaN() : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(mant + 1024), exp - 25);
}

// Rounds to the nearest half, ties to even, straight from double (no double rounding).
uint16_t double_to_half(double v) {
  if (std::isnan(v)) return 0x7e00;
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  auto round_even = [](double x) {
    double r = std::floor(x);
    double frac = x - r;
    if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0)) r += 1;
    return static_cast<int64_t>(r);
  };
  if (a >= 65520.0) return sign | 0x7c00;  // 65520 is where rounding reaches infinity
  if (a < std::ldexp(1.0, -14)) {  // subnormal: units of 2^-24; 1024 units is the min normal
    return sign | static_cast<uint16_t>(round_even(std::ldexp(a, 24)));
  }
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int exp = e - 1;
  int64_t mant = round_even((std::ldexp(a, -exp) - 1.0) * 1024.0);
  if (mant == 1024) {
    mant = 0;
    ++exp;
  }
  if (exp + 15 >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(((exp + 15) << 10) | mant);
}

float bfloat16_to_float(uint16_t b) {
  return bits_to_float(static_cast<uint32_t>(b) << 16);
}

// Truncates the low mantissa bits, as ONNX 1.12's reference (and its test data) does.
uint16_t float_to_bfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x0040);  // stay a NaN
  return static_cast<uint16_t>(bits >> 16);
}

bool is_half(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16;
}

bool castable(DType t) {
  return AllTypes::contains(t) || is_half(t);
}

// Reads element i of a 16-bit float tensor.
float half_at(const Tensor& t, int64_t i) {
  uint16_t bits = static_cast<const uint16_t*>(t.raw())[i];
  return t.dtype() == DType::kFloat16 ? half_to_float(bits) : bfloat16_to_float(bits);
}

RefKernel make_cast_kernel(DType from, DType to) {
  if (is_half(to)) {
    const bool bf16 = to == DType::kBFloat16;
    if (is_half(from))
      return [bf16](std::span<const Tensor> in, std::span<const Tensor> out) {
        auto* y = static_cast<uint16_t*>(out[0].raw());
        for (int64_t i = 0; i < in[0].numel(); ++i) {
          float v = half_at(in[0], i);
          y[i] = bf16 ? float_to_bfloat16(v) : double_to_half(v);
        }
      };
    return AllTypes::dispatch(from, [&](auto tag) -> RefKernel {
      using S = decltype(tag);
      return [bf16](std::span<const Tensor> in, std::span<const Tensor> out) {
        const S* x = in[0].data<S>();
        auto* y = static_cast<uint16_t*>(out[0].raw());
        for (int64_t i = 0; i < in[0].numel(); ++i) {
          double v = static_cast<double>(x[i]);
          y[i] = bf16 ? float_to_bfloat16(static_cast<float>(v)) : double_to_half(v);
        }
      };
    });
  }
  return AllTypes::dispatch(to, [&](auto to_tag) -> RefKernel {
    using D = decltype(to_tag);
    if (is_half(from))
      return [](std::span<const Tensor> in, std::span<const Tensor> out) {
        D* y = out[0].data<D>();
        for (int64_t i = 0; i < in[0].numel(); ++i) y[i] = convert_value<D>(half_at(in[0], i));
      };
    return AllTypes::dispatch(from, [&](auto from_tag) -> RefKernel {
      using S = decltype(from_tag);
      return [](std::span<const Tensor> in, std::span<const Tensor> out) {
        const S* x = in[0].data<S>();
        D* y = out[0].data<D>();
        const int64_t n = in[0].numel();
#pragma omp parallel for if (n >= kParallelThreshold)
        for (int64_t i = 0; i < n; ++i) y[i] = convert_value<D>(x[i]);
      };
    });
  });
}

void check_castable(const InferContext& ctx, DType t, const char* what) {
  if (!castable(t)) unsupported(ctx.node(), "cannot cast {} element type {}", what, dtype_name(t));
}

void register_cast(OpRegistry& r) {
  OpDef cast;
  cast.name = "Cast";
  cast.kind = OpKind::kElementwise;
  cast.infer = [](InferContext& ctx) {
    require_input_count(ctx, 1, 1);
    if (!ctx.node().has_attr("to")) invalid(ctx.node(), "attribute 'to' is required");
    auto to = static_cast<DType>(ctx.node().attr_int("to", 0));
    check_castable(ctx, ctx.input_dtype(0), "from");
    check_castable(ctx, to, "to");
    ctx.set_output(0, to, ctx.input_shape(0));
  };
  cast.reference = [](const Graph& g, const Node& n) {
    return make_cast_kernel(g.value(n.inputs[0]).dtype, g.value(n.outputs[0]).dtype);
  };
  r.add(std::move(cast));

  OpDef like;
  like.name = "CastLike";
  like.kind = OpKind::kElementwise;
  like.infer = [](InferContext& ctx) {
    require_input_count(ctx, 2, 2);
    check_castable(ctx, ctx.input_dtype(0), "from");
    check_castable(ctx, ctx.input_dtype(1), "to");
    ctx.set_output(0, ctx.input_dtype(1), ctx.input_shape(0));
  };
  like.reference = [](const Graph& g, const Node& n) {
    return make_cast_kernel(g.value(n.inputs[0]).dtype, g.value(n.outputs[0]).dtype);
  };
  r.add(std::move(like));
}

// ---------------------------------------------------------------------------------------
// Clip: bounds are attributes before opset 11 and optional scalar inputs from 11 on (they
// may be computed at run time, so the kernel reads them).

template <typename T>
T lowest_bound() {
  if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
  return std::numeric_limits<T>::lowest();
}
template <typename T>
T highest_bound() {
  if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
  return std::numeric_limits<T>::max();
}

void register_clip(OpRegistry& r) {
  OpDef def;
  def.name = "Clip";
  def.kind = OpKind::kElementwise;
  def.infer = [](InferContext& ctx) {
    const Node& n = ctx.node();
    require_input_count(ctx, 1, 3);
    if (ctx.opset() < 11) {
      require_dtype<FloatTypes>(ctx, 0);
      if (ctx.num_inputs() > 1) invalid(n, "takes one input before opset 11");
      (void)n.attr_float("min", 0);
      (void)n.attr_float("max", 0);
    } else {
      require_dtype<NumericTypes>(ctx, 0);
      for (size_t i = 1; i < 3; ++i) {
        if (!ctx.has_input(i)) continue;
        if (ctx.input_dtype(i) != ctx.input_dtype(0))
          invalid(n, "bound {} has element type {}, input has {}", i,
                  dtype_name(ctx.input_dtype(i)), dtype_name(ctx.input_dtype(0)));
        if (shape_numel(ctx.input_shape(i)) != 1)
          ctx.fail("bound {} must be a scalar, has shape {}", i,
                   shape_to_string(ctx.input_shape(i)));
      }
    }
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  };
  def.reference = [](const Graph& g, const Node& n) -> RefKernel {
    const bool from_attrs = g.opset < 11;
    const bool has_min = n.has_attr("min"), has_max = n.has_attr("max");
    const double attr_min = n.attr_float("min", 0), attr_max = n.attr_float("max", 0);
    return NumericTypes::dispatch(g.value(n.inputs[0]).dtype, [&](auto tag) -> RefKernel {
      using T = decltype(tag);
      return [=](std::span<const Tensor> in, std::span<const Tensor> out) {
        T lo = lowest_bound<T>(), hi = highest_bound<T>();
        if (from_attrs) {
          if (has_min) lo = static_cast<T>(attr_min);
          if (has_max) hi = static_cast<T>(attr_max);
        } else {
          if (in.size() > 1 && in[1].defined()) lo = in[1].data<T>()[0];
          if (in.size() > 2 && in[2].defined()) hi = in[2].data<T>()[0];
        }
        const T* x = in[0].data<T>();
        T* y = out[0].data<T>();
        const int64_t count = in[0].numel();
        // min(max(x, lo), hi): gives hi when lo > hi (as numpy.clip) and keeps NaN.
#pragma omp parallel for if (count >= kParallelThreshold)
        for (int64_t i = 0; i < count; ++i) {
          T v = x[i] < lo ? lo : x[i];
          y[i] = hi < v ? hi : v;
        }
      };
    });
  };
  r.add(std::move(def));
}

// ---------------------------------------------------------------------------------------
// Where: three-way broadcast of condition, x and y.

void register_where(OpRegistry& r) {
  OpDef def;
  def.name = "Where";
  def.kind = OpKind::kBroadcast;
  def.infer = [](InferContext& ctx) {
    require_input_count(ctx, 3, 3);
    require_dtype<BoolTypes>(ctx, 0);
    require_dtype<AllTypes>(ctx, 1);
    if (ctx.input_dtype(2) != ctx.input_dtype(1))
      invalid(ctx.node(), "x and y have different element types {} and {}",
              dtype_name(ctx.input_dtype(1)), dtype_name(ctx.input_dtype(2)));
    std::optional<Shape> out = broadcast_shapes(ctx.input_shape(0), ctx.input_shape(1));
    if (out) out = broadcast_shapes(*out, ctx.input_shape(2));
    if (!out)
      ctx.fail("shapes {}, {} and {} do not broadcast", shape_to_string(ctx.input_shape(0)),
               shape_to_string(ctx.input_shape(1)), shape_to_string(ctx.input_shape(2)));
    ctx.set_output(0, ctx.input_dtype(1), *out);
  };
  def.reference = [](const Graph& g, const Node& n) -> RefKernel {
    BroadcastPlan plan = make_broadcast_plan(
        g.value(n.outputs[0]).shape,
        {g.value(n.inputs[0]).shape, g.value(n.inputs[1]).shape, g.value(n.inputs[2]).shape});
    return AllTypes::dispatch(g.value(n.inputs[1]).dtype, [&](auto tag) -> RefKernel {
      using T = decltype(tag);
      return [plan](std::span<const Tensor> in, std::span<const Tensor> out) {
        const bool* c = in[0].data<bool>();
        const T* x = in[1].data<T>();
        const T* y = in[2].data<T>();
        T* o = out[0].data<T>();
        const int64_t sc = plan.inner_stride[0], sx = plan.inner_stride[1],
                      sy = plan.inner_stride[2];
        for_each_row(plan,
                     [&](int64_t base, const std::array<int64_t, kMaxOperands>& off, int64_t len) {
                       const bool* pc = c + off[0];
                       const T* px = x + off[1];
                       const T* py = y + off[2];
                       T* po = o + base;
                       for (int64_t j = 0; j < len; ++j)
                         po[j] = pc[j * sc] ? px[j * sx] : py[j * sy];
                     });
      };
    });
  };
  r.add(std::move(def));
}

}  // namespace

void register_cast_ops(OpRegistry& registry) {
  register_cast(registry);
  register_clip(registry);
  register_where(registry);
}

}  // namespace collage::ops::elem
