#include "backends/onednn/unary_math.h"

#include <omp.h>

#include <cmath>
#include <map>
#include <string>

#include "backends/onednn/dnnl_common.h"
#include "collage/error.h"
#include "ops/elementwise_util.h"
#include "util/fast_math.h"

namespace collage::onednn {
namespace {

using ops::elem::kParallelThreshold;
// y[i] = f(x[i]) for i < n; x and y do not overlap (the step reads x and writes y, which the
// program keeps apart).
using Loop = void (*)(const float* x, float* y, int64_t n);

template <float (*F)(float)>
void scalar_loop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = F(x[i]);
}

// Sin and Cos vectorized (util/fast_math.h), arguments past its range with libm's after.
template <bool kCosine>
void trig_loop(const float* x, float* y, int64_t n) {
  int32_t large = 0;  // a count, not a bool: GCC vectorizes an int reduction
  for (int64_t i = 0; i < n; ++i) {
    const bool in_range = std::fabs(x[i]) <= kFastTrigMax;  // false for NaN and inf too
    large += in_range ? 0 : 1;
    y[i] = fast_sin_or_cos(in_range ? x[i] : 0.0f, kCosine);
  }
  if (large == 0) return;
  for (int64_t i = 0; i < n; ++i)
    if (!(std::fabs(x[i]) <= kFastTrigMax)) y[i] = kCosine ? std::cos(x[i]) : std::sin(x[i]);
}

float sign(float x) {
  return std::isnan(x) ? x : static_cast<float>((0.0f < x) - (x < 0.0f));
}
float softsign(float x) {
  return x / (1.0f + std::fabs(x));
}

// The reference's functions (ops/elementwise_unary.cc) in float: libm's, but Sin and Cos.
const std::map<std::string, Loop>& functions() {
  static const std::map<std::string, Loop> table = {
      {"Sin", trig_loop<false>},           {"Cos", trig_loop<true>},
      {"Tan", scalar_loop<std::tan>},      {"Asin", scalar_loop<std::asin>},
      {"Acos", scalar_loop<std::acos>},    {"Atan", scalar_loop<std::atan>},
      {"Sinh", scalar_loop<std::sinh>},    {"Cosh", scalar_loop<std::cosh>},
      {"Asinh", scalar_loop<std::asinh>},  {"Acosh", scalar_loop<std::acosh>},
      {"Atanh", scalar_loop<std::atanh>},  {"Floor", scalar_loop<std::floor>},
      {"Ceil", scalar_loop<std::ceil>},    {"Erf", scalar_loop<std::erf>},
      {"Softsign", scalar_loop<softsign>}, {"Sign", scalar_loop<sign>},
  };
  return table;
}

dnnl_status_t apply(Loop f, const float* x, float* y, int64_t n) {
  // Under kParallelThreshold elements the loop takes microseconds: one thread (a lane of a
  // concurrent stage is one thread too).
  const int team = omp_in_parallel() || n < kParallelThreshold ? 1 : omp_get_max_threads();
#pragma omp parallel num_threads(team)
  {
    const int64_t parts = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t begin = n * t / parts, end = n * (t + 1) / parts;
    f(x + begin, y + begin, end - begin);
  }
  return dnnl_success;
}

}  // namespace

const std::vector<std::string>& unary_math_ops() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& [name, f] : functions()) v.push_back(name);
    return v;
  }();
  return names;
}

bool unary_math_takes(const Graph& g, const Node& n) {
  return n.domain.empty() && functions().count(n.op_type) && n.inputs.size() == 1 &&
         n.outputs.size() == 1 && is_f32(g, n.input(0)) && is_f32(g, n.outputs[0]) &&
         g.value(n.input(0)).shape_known &&
         g.value(n.input(0)).shape == g.value(n.outputs[0]).shape;
}

void emit_unary_math(const Graph& sub, ValueMemories& values) {
  if (sub.num_nodes() != 1 || !unary_math_takes(sub, sub.node(0)))
    fail(ErrorKind::kUnsupported, "onednn: {} is not one elementwise function of collage's",
         sub.node(0).op_type);
  const Node& n = sub.node(0);
  const ValueId x = n.input(0), y = n.outputs[0];
  if (!values.has(x))
    fail(ErrorKind::kUnsupported, "onednn: elementwise input is not a kernel input");
  const Shape& shape = sub.value(x).shape;
  const int64_t numel = shape_numel(shape);
  // The layout x has, unless it is no flat array: a blocked layout of a channel count that is
  // no multiple of the block pads (its padding must stay zero, and f(0) need not be: Cos), a
  // slice of a concatenation has gaps.
  dnnl::memory src = values.as_is(x, shape);
  if (!flat_f32(src, numel)) src = values.read(x, plain_md(shape));
  dnnl::memory dst = values.destination(y, src.get_desc());
  if (!flat_f32(dst, numel)) dst = values.fresh_destination(y, src.get_desc());
  const Loop f = functions().at(n.op_type);
  values.program().add_unary_custom(
      kUnaryMathStep, [f, numel](const float* x, float* y) { return apply(f, x, y, numel); }, src,
      dst, dnnl::primitive::kind::eltwise);
  values.produced(y, dst);
}

}  // namespace collage::onednn
