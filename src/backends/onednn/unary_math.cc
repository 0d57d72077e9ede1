#include "backends/onednn/unary_math.h"

#include <omp.h>

#include <cmath>
#include <map>
#include <string>

#include "backends/onednn/dnnl_common.h"
#include "collage/error.h"
#include "ops/elementwise_util.h"

namespace collage::onednn {
namespace {

using ops::elem::kParallelThreshold;
using Function = float (*)(float);

// The reference's scalar functions, in float (ops/elementwise_unary.cc).
const std::map<std::string, Function>& functions() {
  static const std::map<std::string, Function> table = {
      {"Sin", [](float x) { return std::sin(x); }},
      {"Cos", [](float x) { return std::cos(x); }},
      {"Tan", [](float x) { return std::tan(x); }},
      {"Asin", [](float x) { return std::asin(x); }},
      {"Acos", [](float x) { return std::acos(x); }},
      {"Atan", [](float x) { return std::atan(x); }},
      {"Sinh", [](float x) { return std::sinh(x); }},
      {"Cosh", [](float x) { return std::cosh(x); }},
      {"Asinh", [](float x) { return std::asinh(x); }},
      {"Acosh", [](float x) { return std::acosh(x); }},
      {"Atanh", [](float x) { return std::atanh(x); }},
      {"Floor", [](float x) { return std::floor(x); }},
      {"Ceil", [](float x) { return std::ceil(x); }},
      {"Erf", [](float x) { return std::erf(x); }},
      {"Softsign", [](float x) { return x / (1.0f + std::fabs(x)); }},
      {"Sign",
       [](float x) { return std::isnan(x) ? x : static_cast<float>((0.0f < x) - (x < 0.0f)); }},
  };
  return table;
}

dnnl_status_t apply(Function f, const float* x, float* y, int64_t n) {
  // Under kParallelThreshold elements the loop takes microseconds: one thread (a lane of a
  // concurrent stage is one thread too).
  const int team = omp_in_parallel() || n < kParallelThreshold ? 1 : omp_get_max_threads();
#pragma omp parallel for num_threads(team) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
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
  const Function f = functions().at(n.op_type);
  values.program().add_custom(
      kUnaryMathStep,
      [f, numel](const dnnl_exec_arg_t* args, int count) {
        return apply(f, custom_step_data(args, count, DNNL_ARG_SRC),
                     custom_step_data(args, count, DNNL_ARG_DST), numel);
      },
      {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, dnnl::primitive::kind::eltwise);
  values.produced(y, dst);
}

}  // namespace collage::onednn
