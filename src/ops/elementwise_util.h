// Private helpers of the elementwise and reduction op groups: dtype lists that shape
// functions check and kernels dispatch over, wrap-around integer arithmetic, and a
// broadcast iteration plan that lets kernels run tight contiguous inner loops.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "collage/op_registry.h"

namespace collage::ops::elem {

// ---------------------------------------------------------------------------------------
// Type lists. A shape function accepts exactly the dtypes of a list, and the kernel factory
// instantiates the kernel only for them, so no kernel is compiled for a type it cannot
// handle (std::sin on bool, bit shifts on float...).

template <typename... Ts>
struct Types {
  static bool contains(DType t) { return ((DTypeOf<Ts>::value == t) || ...); }
  static std::string names() {
    std::string s;
    ((s += (s.empty() ? "" : ", ") + std::string(dtype_name(DTypeOf<Ts>::value))), ...);
    return s;
  }
  // Calls f(T{}) for the T whose dtype is `t` and returns its result.
  template <typename F>
  static auto dispatch(DType t, F&& f) {
    using R = decltype(f(std::tuple_element_t<0, std::tuple<Ts...>>{}));
    if constexpr (std::is_void_v<R>) {
      bool done = ((DTypeOf<Ts>::value == t ? (f(Ts{}), true) : false) || ...);
      if (!done) fail(ErrorKind::kInternal, "no kernel for element type {}", dtype_name(t));
    } else {
      R result{};
      bool done = ((DTypeOf<Ts>::value == t ? (result = f(Ts{}), true) : false) || ...);
      if (!done) fail(ErrorKind::kInternal, "no kernel for element type {}", dtype_name(t));
      return result;
    }
  }
};

using FloatTypes = Types<float, double>;
using SignedTypes = Types<float, double, int8_t, int16_t, int32_t, int64_t>;
using IntTypes = Types<int8_t, uint8_t, int16_t, uint16_t, int32_t, uint32_t, int64_t, uint64_t>;
using NumericTypes =
    Types<float, double, int8_t, uint8_t, int16_t, uint16_t, int32_t, uint32_t, int64_t, uint64_t>;
using AllTypes = Types<float, double, int8_t, uint8_t, int16_t, uint16_t, int32_t, uint32_t,
                       int64_t, uint64_t, bool>;
using UnsignedTypes = Types<uint8_t, uint16_t, uint32_t, uint64_t>;
using BoolTypes = Types<bool>;

// "node 'NAME' (Op): " — the prefix every error message of a node carries.
inline std::string node_prefix(const Node& n) {
  return "node '" + n.name + "' (" + n.op_type + "): ";
}

// Throws kUnsupported unless input `i` has one of the dtypes of `L`.
template <typename L>
void require_dtype(const InferContext& ctx, size_t i) {
  DType t = ctx.input_dtype(i);
  if (!L::contains(t))
    throw Error(ErrorKind::kUnsupported, node_prefix(ctx.node()) + "input " + std::to_string(i) +
                                             " has element type " + dtype_name(t) +
                                             "; supported: " + L::names());
}

// Throws kUnsupported naming the node.
template <typename... Args>
[[noreturn]] void unsupported(const Node& n, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(ErrorKind::kUnsupported,
              node_prefix(n) + fmt::format(format, std::forward<Args>(args)...));
}

// Throws kInvalidModel naming the node (wrong input counts and the like).
template <typename... Args>
[[noreturn]] void invalid(const Node& n, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(ErrorKind::kInvalidModel,
              node_prefix(n) + fmt::format(format, std::forward<Args>(args)...));
}

inline void require_input_count(const InferContext& ctx, size_t lo, size_t hi) {
  size_t n = ctx.num_inputs();
  if (n < lo || n > hi) invalid(ctx.node(), "expects {} to {} inputs, got {}", lo, hi, n);
  for (size_t i = 0; i < lo; ++i)
    if (!ctx.has_input(i)) invalid(ctx.node(), "required input {} is missing", i);
}

// ---------------------------------------------------------------------------------------
// Integer arithmetic that wraps instead of overflowing: signed overflow is undefined
// behaviour in C++, and small unsigned types promote to (signed) int.

template <typename T>
using WideUnsigned = std::conditional_t<(sizeof(T) <= 4), uint32_t, uint64_t>;

template <typename T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<WideUnsigned<T>>(a) + static_cast<WideUnsigned<T>>(b));
  else
    return a + b;
}
template <typename T>
T wrap_sub(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<WideUnsigned<T>>(a) - static_cast<WideUnsigned<T>>(b));
  else
    return a - b;
}
template <typename T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<WideUnsigned<T>>(a) * static_cast<WideUnsigned<T>>(b));
  else
    return a * b;
}
template <typename T>
T wrap_neg(T a) {
  return wrap_sub(T(0), a);
}

// Integer division truncating toward zero; x / 0 is defined as 0 (numpy's answer) and
// MIN / -1 wraps, so no input can trap.
template <typename T>
T int_div(T a, T b) {
  if (b == 0) return 0;
  if constexpr (std::is_signed_v<T>)
    if (b == -1) return wrap_neg(a);
  return static_cast<T>(a / b);
}

// Remainder with the sign of the dividend (C's %, ONNX Mod fmod=1); x % 0 is 0.
template <typename T>
T int_rem(T a, T b) {
  if (b == 0) return 0;
  if constexpr (std::is_signed_v<T>)
    if (b == -1) return 0;
  return static_cast<T>(a % b);
}

// Remainder with the sign of the divisor (Python's %, ONNX Mod fmod=0).
template <typename T>
T int_mod(T a, T b) {
  T r = int_rem(a, b);
  if constexpr (std::is_signed_v<T>)
    if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
  return r;
}

// Float to any arithmetic type without undefined behaviour: truncates toward zero,
// saturates out-of-range values, NaN becomes 0.
template <typename To, typename From>
To convert_value(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    if (std::isnan(v)) return 0;
    // 2^digits as a floating value is exact; anything at or beyond it does not fit.
    constexpr long double kHi = std::numeric_limits<To>::max() + 1.0L;
    constexpr long double kLo = static_cast<long double>(std::numeric_limits<To>::lowest());
    if (static_cast<long double>(v) >= kHi) return std::numeric_limits<To>::max();
    if (static_cast<long double>(v) <= kLo) return std::numeric_limits<To>::lowest();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

// ---------------------------------------------------------------------------------------
// Broadcasting. A plan collapses the output shape into as few dims as possible (adjacent
// dims merge when every operand steps through them contiguously or not at all), so a
// kernel runs an outer odometer over "rows" and a tight loop over the innermost run.

constexpr int kMaxOperands = 3;
// Below this many elements kernels run on one thread: a memory-bound loop over fewer
// elements takes microseconds, about what waking a thread team costs.
constexpr int64_t kParallelThreshold = int64_t{1} << 18;

struct BroadcastPlan {
  int num_operands = 0;
  int64_t numel = 0;
  int64_t inner = 1;                                 // length of the innermost run
  std::array<int64_t, kMaxOperands> inner_stride{};  // per operand, 0 or 1 (or a run stride)
  std::vector<int64_t> outer;                        // collapsed outer dims, row-major
  std::array<std::vector<int64_t>, kMaxOperands> outer_stride;  // per operand, per outer dim
  int64_t rows() const { return inner == 0 ? 0 : numel / inner; }
};

// `operands` are the operands' shapes; each must broadcast to `out` (checked by infer).
BroadcastPlan make_broadcast_plan(const Shape& out, const std::vector<Shape>& operands);

inline int parallel_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Calls row(out_offset, offsets, len) for runs of `len` output elements (a whole inner run,
// or a slice of it when the output is one long run), where offsets[k] is operand k's
// element offset at the run's start; inside a run operand k steps by plan.inner_stride[k].
// Runs in parallel for big outputs; `row` must only write its own run.
template <typename RowFn>
void for_each_row(const BroadcastPlan& plan, RowFn&& row) {
  const int64_t rows = plan.rows();
  const int nd = static_cast<int>(plan.outer.size());
  const int nops = plan.num_operands;
  const bool parallel = plan.numel >= kParallelThreshold && parallel_threads() > 1;
  if (rows == 1) {
    // One long run: split it so same-shape operations still use every thread.
    const int64_t n = plan.inner;
    const int64_t chunks = parallel ? std::min<int64_t>(n / 4096, 4 * parallel_threads()) : 1;
    auto run_chunk = [&](int64_t c, int64_t nc) {
      int64_t begin = n * c / nc, end = n * (c + 1) / nc;
      std::array<int64_t, kMaxOperands> off{};
      for (int k = 0; k < nops; ++k) off[k] = begin * plan.inner_stride[k];
      if (end > begin) row(begin, off, end - begin);
    };
    if (chunks <= 1) {
      run_chunk(0, 1);
      return;
    }
#pragma omp parallel for
    for (int64_t c = 0; c < chunks; ++c) run_chunk(c, chunks);
    return;
  }
  auto run_range = [&](int64_t begin, int64_t end) {
    if (begin >= end) return;
    std::array<int64_t, kMaxOperands> off{};
    std::array<int64_t, 16> small_idx{};
    std::vector<int64_t> big_idx(nd > 16 ? nd : 0);
    int64_t* idx = nd > 16 ? big_idx.data() : small_idx.data();
    int64_t rem = begin;
    for (int d = nd - 1; d >= 0; --d) {
      idx[d] = rem % plan.outer[d];
      rem /= plan.outer[d];
      for (int k = 0; k < nops; ++k) off[k] += idx[d] * plan.outer_stride[k][d];
    }
    for (int64_t r = begin; r < end; ++r) {
      row(r * plan.inner, off, plan.inner);
      for (int d = nd - 1; d >= 0; --d) {
        for (int k = 0; k < nops; ++k) off[k] += plan.outer_stride[k][d];
        if (++idx[d] < plan.outer[d]) break;
        for (int k = 0; k < nops; ++k) off[k] -= plan.outer[d] * plan.outer_stride[k][d];
        idx[d] = 0;
      }
    }
  };
  if (!parallel || rows < 2) {
    run_range(0, rows);
    return;
  }
  const int64_t chunks = std::min<int64_t>(rows, 4 * parallel_threads());
#pragma omp parallel for
  for (int64_t c = 0; c < chunks; ++c) run_range(rows * c / chunks, rows * (c + 1) / chunks);
}

// to[i] = the element of `from` (one operand's data) that output element i reads under
// one-operand `plan` (numpy broadcasting), converted to `To`.
template <typename T, typename To = T>
void broadcast_copy(const BroadcastPlan& plan, const T* from, To* to) {
  for_each_row(plan, [&](int64_t base, const std::array<int64_t, kMaxOperands>& off, int64_t n) {
    for (int64_t j = 0; j < n; ++j)
      to[base + j] = static_cast<To>(from[off[0] + j * plan.inner_stride[0]]);
  });
}

// `t`'s elements (of type T) in `out`'s shape as `To` (the shapes broadcast: checked by shape
// inference). Never a std::vector<bool>: for_each_row fills big outputs from several threads,
// and that vector's elements share bytes.
template <typename T, typename To = T>
std::vector<To> broadcast_elements(const Tensor& t, const Shape& out) {
  const BroadcastPlan plan = make_broadcast_plan(out, {t.shape()});
  std::vector<To> values(static_cast<size_t>(plan.numel));
  broadcast_copy(plan, t.data<T>(), values.data());
  return values;
}

// out[i] = f(a[i], b[i]) under `plan` (two operands). Contiguous and scalar operands get
// their own loops so the compiler can vectorise them.
template <typename A, typename B, typename O, typename F>
void broadcast_binary(const BroadcastPlan& plan, const A* a, const B* b, O* out, const F& f) {
  const int64_t sa = plan.inner_stride[0], sb = plan.inner_stride[1];
  for_each_row(plan, [&](int64_t o, const std::array<int64_t, kMaxOperands>& off, int64_t n) {
    const A* pa = a + off[0];
    const B* pb = b + off[1];
    O* po = out + o;
    if (sa == 1 && sb == 1) {
      for (int64_t j = 0; j < n; ++j) po[j] = static_cast<O>(f(pa[j], pb[j]));
    } else if (sa == 1 && sb == 0) {
      const B vb = *pb;
      for (int64_t j = 0; j < n; ++j) po[j] = static_cast<O>(f(pa[j], vb));
    } else if (sa == 0 && sb == 1) {
      const A va = *pa;
      for (int64_t j = 0; j < n; ++j) po[j] = static_cast<O>(f(va, pb[j]));
    } else {
      for (int64_t j = 0; j < n; ++j) po[j] = static_cast<O>(f(pa[j * sa], pb[j * sb]));
    }
  });
}

// The group's parts, called by register_elementwise_ops.
void register_unary_ops(OpRegistry& registry);   // math, activations, Not, IsNaN/IsInf
void register_binary_ops(OpRegistry& registry);  // arithmetic, compare, logic, Min/Max/Sum/Mean
void register_cast_ops(OpRegistry& registry);    // Cast, CastLike, Clip, Where

}  // namespace collage::ops::elem
