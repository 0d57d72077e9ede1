#include "backends/halide/lower.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "backends/halide/halide_math.h"
#include "collage/error.h"
#include "collage/op_registry.h"
#include "ops/tensor_util.h"

namespace collage::halide_backend {
namespace {

using Halide::Expr;
using Halide::Func;
using Halide::Var;
using Index = std::vector<Expr>;  // ONNX order: outermost dim first

constexpr float kInf = std::numeric_limits<float>::infinity();
// Below this many elements a loop runs on one thread: a task handoff costs more.
constexpr int64_t kParallelMin = 32 * 1024;
// Elements per parallel task: big enough to amortise the handoff, small enough to balance.
constexpr int64_t kTaskElems = 16 * 1024;
// Rows of up to this many vectors are unrolled vector by vector (schedule_pointwise).
constexpr int64_t kUnrolledVectors = 8;

// clang-format off
const std::set<std::string> kUnary = {
    "Relu",     "LeakyRelu", "Elu",   "Selu",  "Celu",  "Sigmoid", "HardSigmoid", "HardSwish",
    "Softplus", "Softsign",  "Tanh",  "Erf",   "Exp",   "Log",     "Sqrt",        "Reciprocal",
    "Floor",    "Ceil",      "Round", "Sin",   "Cos",   "Tan",     "Asin",        "Acos",
    "Atan",     "Sinh",      "Cosh",  "Asinh", "Acosh", "Atanh",   "Neg",         "Abs",
    "Sign",     "Identity",  "Cast",  "Clip",  "ThresholdedRelu",  "Shrink"};
// clang-format on
const std::set<std::string> kBinary = {"Add", "Sub", "Mul", "Div",  "Pow", "PRelu",
                                       "Max", "Min", "Sum", "Mean", "Mod"};
const std::set<std::string> kReduce = {
    "ReduceSum", "ReduceMean", "ReduceMax",       "ReduceMin",    "ReduceProd",
    "ReduceL1",  "ReduceL2",   "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"};
const std::set<std::string> kSoftmax = {"Softmax", "LogSoftmax"};
const std::set<std::string> kReshape = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"};
const std::set<std::string> kLayout = {"Transpose", "Expand", "Slice", "Concat", "Split", "Tile"};
// Ops with a lowering of their own (no kind-wide rule).
const std::set<std::string> kOther = {
    "Gather", "Where", "LayerNormalization", "Resize", "Upsample", "Pad", "CumSum", "CastLike"};
// Ops producing a bool (stored as UInt(8), 0 or 1): comparisons of numbers (a mask from
// positions or ids, `x > 0`), logic on bools (masks combined). Exporters write them around
// a Where; on `reference` alone they cut the kernel that holds the Where.
const std::set<std::string> kCompare = {"Equal", "Greater", "GreaterOrEqual", "Less",
                                        "LessOrEqual"};
const std::set<std::string> kLogical = {"And", "Or", "Xor", "Not"};
// Tests of a float32 value's class (nan_to_num, masks of non-finite values).
const std::set<std::string> kFloatTests = {"IsNaN", "IsInf"};
// The index of the extreme along one axis (a segmentation map's classes, a classifier's
// label): float32 in, int64 out.
const std::set<std::string> kArgReduce = {"ArgMax", "ArgMin"};
// Ops that pick, place or mask elements by index or position (post-processing, one-hot
// masks, gathered or scattered rows, causal masks); their data may be any buffer type.
// ONNX's Scatter (opsets 9-10) is ScatterElements before its rename.
const std::set<std::string> kIndexed = {"GatherElements", "GatherND",  "ScatterElements",
                                        "Scatter",        "ScatterND", "Trilu"};
const std::set<std::string> kScatter = {"ScatterElements", "Scatter", "ScatterND"};
// float32 ops with a lowering of their own that no other backend runs (Hardmax) or that
// produce another type than they read (OneHot: the type of its values).
const std::set<std::string> kPositional = {"Hardmax", "OneHot", "TopK"};
// TopK runs one pass over the axis per element it keeps: beyond this many, the reference's
// partial sort (n log k) is the better algorithm.
constexpr int64_t kTopKMax = 16;

bool makes_bool(const std::string& op) {
  return kCompare.count(op) || kLogical.count(op) || kFloatTests.count(op);
}

bool number_dtype(DType t) {
  return t == DType::kFloat32 || t == DType::kInt64 || t == DType::kInt32;
}

// Ops that move elements without computing on them: their data may be any type a buffer
// holds (GPT-2 reshapes int64 input_ids, a bool mask may be transposed).
bool moves_data(const std::string& op) {
  return kReshape.count(op) || kLayout.count(op) || kIndexed.count(op) || op == "Gather";
}

bool buffer_dtype(DType t) {
  return t == DType::kFloat32 || t == DType::kInt64 || t == DType::kInt32 || t == DType::kBool;
}

Halide::Type halide_type(DType t) {
  switch (t) {
    case DType::kFloat32:
      return Halide::Float(32);
    case DType::kInt64:
      return Halide::Int(64);
    case DType::kInt32:
      return Halide::Int(32);
    case DType::kBool:
      return Halide::UInt(8);
    default:
      fail(ErrorKind::kUnsupported, "halide: element type {}", dtype_name(t));
  }
}

// A one-element constant as an immediate of its own type.
Expr scalar_expr(const Tensor& t) {
  switch (t.dtype()) {
    case DType::kFloat32:
      return Expr(t.data<float>()[0]);
    case DType::kInt64:
      return Expr(t.data<int64_t>()[0]);
    case DType::kInt32:
      return Expr(t.data<int32_t>()[0]);
    case DType::kBool:
      return Halide::cast<uint8_t>(t.data<bool>()[0] ? 1 : 0);
    default:
      fail(ErrorKind::kUnsupported, "halide: constant of type {}", dtype_name(t.dtype()));
  }
}

// Inputs that are shapes/axes/indices rather than data: the op reads them at lowering time
// (or not at all, when the graph's inferred shapes say everything).
bool is_param_input(const std::string& op, size_t i) {
  if (i == 0) return false;
  return kReshape.count(op) || kReduce.count(op) || op == "Expand" || op == "Slice" ||
         op == "Split" || op == "Tile" || op == "Resize" || op == "Upsample" || op == "Pad" ||
         op == "CumSum" || op == "Trilu" || op == "CastLike" || op == "TopK" ||
         (op == "OneHot" && i == 1);
}

// Inputs whose values lowering needs (they become loop bounds and offsets).
bool needs_constant(const std::string& op, size_t i) {
  return i > 0 &&
         (op == "Slice" || kReduce.count(op) || op == "Resize" || op == "Upsample" || op == "Pad" ||
          op == "CumSum" || op == "Trilu" || op == "TopK" || (op == "OneHot" && i == 1));
}

// Index inputs: Gather's, GatherElements' and ScatterElements' may be int32 or int64;
// GatherND's and ScatterND's tuples are int64 (ONNX allows no other).
std::optional<std::set<DType>> index_dtypes(const std::string& op, size_t i) {
  if (i != 1) return std::nullopt;
  if (op == "Gather" || op == "GatherElements" || op == "ScatterElements" || op == "Scatter")
    return std::set<DType>{DType::kInt32, DType::kInt64};
  if (op == "GatherND" || op == "ScatterND") return std::set<DType>{DType::kInt64};
  return std::nullopt;
}

std::vector<Var> dim_vars(size_t rank) {
  // Shared names: every Func's dimension k is the same Var, which keeps schedules uniform.
  static const std::vector<Var> vars = [] {
    std::vector<Var> v;
    for (int k = 0; k < 16; ++k) v.emplace_back("d" + std::to_string(k));
    return v;
  }();
  if (rank > vars.size()) fail(ErrorKind::kUnsupported, "halide: rank {} > 16", rank);
  return {vars.begin(), vars.begin() + static_cast<long>(rank)};
}

// Halide lists dimensions innermost first; ONNX outermost first.
std::vector<Expr> halide_args(const Index& idx) {
  return {idx.rbegin(), idx.rend()};
}

Index index_of(const std::vector<Var>& hv) {
  Index idx;
  for (size_t i = hv.size(); i-- > 0;) idx.push_back(hv[i]);
  return idx;
}

struct Val {
  Func f;
  Expr scalar;  // defined for scalar constants inlined into the code
  Shape shape;
  bool after_reduction = false;           // depends on some reduction
  bool reshaped_after_reduction = false;  // an injective op sits between it and a reduction
};

struct Reduction {
  Func f;
  Shape in_shape;
  std::vector<bool> mask;
  Shape out_shape;
  std::optional<Halide::RDom> rdom;
  std::vector<std::pair<Func, Shape>> producers;  // materialised with it (Softmax's exp)
};

// A scattered tensor (ScatterElements, ScatterND): a copy of the data, then a serial update
// over the updates.
struct Scatter {
  Func f;
  Shape shape;
};

// A running sum along one axis (CumSum): an update walking the axis in order.
struct Scan {
  Func f;
  Shape shape;
  size_t axis = 0;
  std::optional<Halide::RDom> walk;  // positions after the first (none when only one)
  bool is_output = false;            // its buffer is the pipeline's output (no copy into another)
};

std::string reduce_axes_reason(const Graph& g, const Node& n) {
  if (n.input(1) != kNoValue && !g.value(n.input(1)).is_constant()) return "axes not constant";
  return "";
}

std::vector<int64_t> int_values(const Graph& g, ValueId v) {
  return g.value(v).constant.to_int_vector();
}

class Lowerer {
 public:
  explicit Lowerer(const Graph& g) : g_(g) {}

  Lowered run() {
    Lowered out;
    for (size_t i = 0; i < g_.inputs.size(); ++i) {
      const Value& v = g_.value(g_.inputs[i]);
      vals_[g_.inputs[i]] = param(static_cast<int>(i), Tensor(), v.shape, v.dtype, out);
    }
    for (const Node& n : g_.nodes()) lower_node(n, out);
    std::vector<Func> outputs;
    std::vector<const Val*> output_vals;
    for (size_t k = 0; k < g_.outputs.size(); ++k) {
      const Val& v = data_value(g_.outputs[k], out);
      const DType dtype = g_.value(g_.outputs[k]).dtype;
      Func o(fmt::format("out{}", k));
      if (Scan* scan = output_scan(v, dtype)) {
        // The scan's buffer is the output itself: a copy would read and write it all again.
        scan->is_output = true;
        o = scan->f;
      } else {
        std::vector<Var> hv = dim_vars(v.shape.size());
        o(hv) = Halide::cast(halide_type(dtype), at(v, index_of(hv)));
      }
      constrain(o.output_buffer(), v.shape);
      outputs.push_back(o);
      output_vals.push_back(&v);
      out.output_shapes.push_back(v.shape);
      out.output_dtypes.push_back(dtype);
    }
    schedule(outputs, output_vals);
    out.pipeline = Halide::Pipeline(outputs);
    return out;
  }

 private:
  template <typename... Args>
  [[noreturn]] void unsupported(const Node& n, fmt::format_string<Args...> f, Args&&... args) {
    fail(ErrorKind::kUnsupported, "halide: node '{}' ({}): {}", n.name, n.op_type,
         fmt::format(f, std::forward<Args>(args)...));
  }

  template <typename Dim>
  static void constrain_dims(Dim dim_of, const Shape& shape) {
    int64_t stride = 1;
    for (size_t k = 0; k < shape.size(); ++k) {
      const int64_t extent = shape[shape.size() - 1 - k];
      dim_of(static_cast<int>(k))
          .set_bounds(0, static_cast<int>(extent))
          .set_stride(static_cast<int>(stride));
      stride *= extent;
    }
  }
  static void constrain(Halide::OutputImageParam p, const Shape& shape) {
    constrain_dims([&](int k) { return p.dim(k); }, shape);
  }

  Val param(int input, Tensor constant, const Shape& shape, DType dtype, Lowered& out) {
    const int k = static_cast<int>(out.params.size());
    Halide::ImageParam ip(halide_type(dtype), static_cast<int>(shape.size()),
                          fmt::format("in{}", k));
    constrain(ip, shape);
    out.arguments.push_back(ip);
    out.params.push_back({input, std::move(constant), shape, dtype});
    Val v;
    v.f = Func(fmt::format("in{}_f", k));
    std::vector<Var> hv = dim_vars(shape.size());
    v.f(hv) = ip(std::vector<Expr>(hv.begin(), hv.end()));
    v.shape = shape;
    return v;
  }

  // The Val of a data value: lowered earlier, a graph input, or a constant (scalars become
  // immediates; bigger ones buffer arguments).
  const Val& data_value(ValueId id, Lowered& out) {
    auto it = vals_.find(id);
    if (it != vals_.end()) return it->second;
    const Value& v = g_.value(id);
    if (!v.is_constant()) fail(ErrorKind::kInternal, "halide: value '{}' not lowered", v.name);
    if (v.constant.numel() == 1) {
      Val s;
      s.scalar = scalar_expr(v.constant);
      s.shape = v.shape;
      return vals_[id] = s;
    }
    return vals_[id] = param(-1, v.constant, v.shape, v.dtype, out);
  }

  // The scan whose values `v` is, in its own layout and type, when no output is it yet.
  Scan* output_scan(const Val& v, DType dtype) {
    if (dtype != DType::kFloat32 || !v.f.defined()) return nullptr;
    for (Scan& scan : scans_)
      if (!scan.is_output && scan.f.function().same_as(v.f.function()) && scan.shape == v.shape)
        return &scan;
    return nullptr;
  }

  static Expr at(const Val& v, const Index& idx) {
    if (v.scalar.defined()) return v.scalar;
    return v.f(halide_args(idx));
  }

  // `v` read at an index of the (numpy-broadcast) shape `out`.
  static Expr at_broadcast(const Val& v, const Shape& out, const Index& idx) {
    if (v.scalar.defined()) return v.scalar;
    Index in;
    const size_t lead = out.size() - v.shape.size();
    for (size_t j = 0; j < v.shape.size(); ++j)
      in.push_back(v.shape[j] == 1 ? Expr(0) : idx[lead + j]);
    return at(v, in);
  }

  static bool row_invariant(const Val& v, const Shape& out) {
    return !out.empty() && out.back() > 1 && (v.shape.empty() || v.shape.back() == 1);
  }

  Val define(const std::string& name, const Shape& shape,
             const std::function<Expr(const Index&)>& body) {
    Val v;
    v.f = Func(name);
    std::vector<Var> hv = dim_vars(shape.size());
    v.f(hv) = body(index_of(hv));
    v.shape = shape;
    return v;
  }

  // The Val of a Func computed in a buffer of its own after a reduction, scan or scatter
  // (which the schedule reads to keep row-wise reductions where they are valid).
  static Val computed(Func f, const Shape& shape) {
    Val v;
    v.f = std::move(f);
    v.shape = shape;
    v.after_reduction = true;
    return v;
  }

  // Reduces term(input index) over the dims in `mask` of `in_shape`.
  Val reduce(const std::string& name, const Shape& in_shape, const std::vector<bool>& mask,
             bool keepdims, Expr init, const std::function<Expr(Expr, Expr)>& combine,
             const std::function<Expr(const Index&)>& term) {
    const size_t rank = in_shape.size();
    std::vector<Halide::Range> ranges;
    std::vector<int> rpos(rank, -1);
    for (size_t i = rank; i-- > 0;)
      if (mask[i]) {
        rpos[i] = static_cast<int>(ranges.size());
        ranges.emplace_back(0, static_cast<int>(in_shape[i]));
      }
    Shape out_shape;
    for (size_t i = 0; i < rank; ++i)
      if (!mask[i])
        out_shape.push_back(in_shape[i]);
      else if (keepdims)
        out_shape.push_back(1);
    Reduction red;
    red.f = Func(name);
    red.in_shape = in_shape;
    red.mask = mask;
    red.out_shape = out_shape;
    std::vector<Var> hv = dim_vars(out_shape.size());
    Index oidx = index_of(hv);
    auto input_index = [&](const std::function<Expr(size_t)>& reduced) {
      Index in(rank);
      size_t k = 0;
      for (size_t i = 0; i < rank; ++i) {
        if (mask[i]) {
          in[i] = reduced(i);
          if (keepdims) ++k;
        } else {
          in[i] = oidx[k++];
        }
      }
      return in;
    };
    if (ranges.empty()) {
      red.f(hv) = combine(init, term(input_index([](size_t) { return Expr(0); })));
    } else {
      Halide::RDom r(ranges);
      red.rdom = r;
      red.f(hv) = init;
      red.f(hv) = combine(red.f(hv), term(input_index([&](size_t i) { return r[rpos[i]]; })));
    }
    reductions_.push_back(red);
    return computed(red.f, out_shape);
  }

  void lower_node(const Node& n, Lowered& out) {
    std::string why = unsupported_reason(g_, n);
    if (!why.empty()) unsupported(n, "{}", why);
    const std::string& op = n.op_type;
    const std::string name = fmt::format("n{}", counter_++);
    std::vector<const Val*> ins;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      ins.push_back(n.inputs[i] == kNoValue || is_param_input(op, i)
                        ? nullptr
                        : &data_value(n.inputs[i], out));
    bool after = false, reshaped = false;
    for (const Val* v : ins)
      if (v) after |= v->after_reduction, reshaped |= v->reshaped_after_reduction;
    const Shape& oshape = g_.value(n.outputs[0]).shape;

    std::vector<Val> results;
    if (op == "Cast" || op == "CastLike") {
      const DType to = g_.value(n.outputs[0]).dtype;
      const Val& x = *ins[0];
      results.push_back(
          define(name, oshape, [&](const Index& i) { return convert(at(x, i), to); }));
    } else if (kUnary.count(op)) {
      auto fn = unary(n, ins);
      const Val& x = *ins[0];
      results.push_back(define(name, oshape, [&](const Index& i) { return fn(at(x, i), i); }));
    } else if (op == "Div" && row_invariant(*ins[1], oshape)) {
      // The divisor is constant along the vectorised dim (LayerNorm's std, Softmax's sum):
      // its reciprocal is hoisted out of the inner loop, leaving one multiply per element.
      results.push_back(define(name, oshape, [&](const Index& i) {
        return at_broadcast(*ins[0], oshape, i) * (1.0f / at_broadcast(*ins[1], oshape, i));
      }));
    } else if (kBinary.count(op)) {
      results.push_back(define(name, oshape, [&](const Index& i) {
        std::vector<Expr> a;
        for (const Val* v : ins) a.push_back(at_broadcast(*v, oshape, i));
        return binary(n, a);
      }));
    } else if (kReduce.count(op)) {
      results.push_back(lower_reduce(n, *ins[0], name));
    } else if (kArgReduce.count(op)) {
      results.push_back(lower_arg_reduce(n, *ins[0], name));
    } else if (op == "CumSum") {
      results.push_back(lower_cumsum(n, *ins[0], name));
    } else if (op == "Hardmax") {
      results.push_back(lower_hardmax(n, *ins[0], name));
    } else if (op == "OneHot") {
      results.push_back(lower_one_hot(n, *ins[0], *ins[2], oshape, name));
    } else if (op == "TopK") {
      results = lower_topk(n, *ins[0], name);
    } else if (op == "Trilu") {
      results.push_back(lower_trilu(n, *ins[0], name));
    } else if (op == "GatherElements") {
      results.push_back(lower_gather_elements(n, *ins[0], *ins[1], name));
    } else if (op == "GatherND") {
      results.push_back(lower_gather_nd(n, *ins[0], *ins[1], oshape, name));
    } else if (kScatter.count(op)) {
      results.push_back(lower_scatter(n, *ins[0], *ins[1], *ins[2], name));
    } else if (kSoftmax.count(op)) {
      results.push_back(lower_softmax(n, *ins[0], name));
    } else if (makes_bool(op)) {
      results.push_back(define(name, oshape, [&](const Index& i) {
        std::vector<Expr> a;
        for (const Val* v : ins) a.push_back(at_broadcast(*v, oshape, i));
        return Halide::cast<uint8_t>(predicate(n, a));
      }));
    } else if (op == "Where") {
      results.push_back(define(name, oshape, [&](const Index& i) {
        Expr c = at_broadcast(*ins[0], oshape, i);
        return Halide::select(c != Halide::cast(c.type(), 0), at_broadcast(*ins[1], oshape, i),
                              at_broadcast(*ins[2], oshape, i));
      }));
    } else if (op == "Gather") {
      results.push_back(lower_gather(n, *ins[0], *ins[1], oshape, name));
    } else if (op == "LayerNormalization") {
      results.push_back(lower_layer_norm(n, ins, name));
    } else if (op == "Resize" || op == "Upsample") {
      results.push_back(lower_resize(n, *ins[0], oshape, name, out));
    } else if (op == "Pad") {
      results.push_back(lower_pad(n, *ins[0], oshape, name, out));
    } else {
      lower_layout(n, ins, name, results);
    }
    for (size_t k = 0; k < results.size(); ++k) {
      Val& v = results[k];
      v.after_reduction |= after;
      v.reshaped_after_reduction |=
          reshaped ||
          (after && (kReshape.count(op) || kLayout.count(op) || kIndexed.count(op) ||
                     op == "OneHot" || op == "Resize" || op == "Upsample" || op == "Pad"));
      if (n.outputs[k] != kNoValue) vals_[n.outputs[k]] = v;
    }
  }

  // f(x, index) for a unary op; Clip reads its (scalar) bounds through the index.
  std::function<Expr(Expr, const Index&)> unary(const Node& n, const std::vector<const Val*>& ins) {
    const std::string& op = n.op_type;
    auto f = [](std::function<Expr(Expr)> g) { return [g](Expr x, const Index&) { return g(x); }; };
    if (op == "Relu") return f([](Expr x) { return Halide::max(x, 0.0f); });
    if (op == "LeakyRelu") {
      float a = n.attr_float("alpha", 0.01f);
      return f([a](Expr x) { return Halide::select(x < 0.0f, a * x, x); });
    }
    if (op == "Elu") {
      float a = n.attr_float("alpha", 1.0f);
      return f([a](Expr x) { return Halide::select(x < 0.0f, a * (exp_f32(x) - 1.0f), x); });
    }
    if (op == "Selu") {
      float a = n.attr_float("alpha", 1.67326319217681884765625f);
      float gm = n.attr_float("gamma", 1.05070102214813232421875f);
      return f(
          [a, gm](Expr x) { return gm * Halide::select(x > 0.0f, x, a * (exp_f32(x) - 1.0f)); });
    }
    if (op == "Celu") {
      float a = n.attr_float("alpha", 1.0f);
      return f([a](Expr x) { return Halide::select(x > 0.0f, x, a * (exp_f32(x / a) - 1.0f)); });
    }
    if (op == "Sigmoid") return f(sigmoid_f32);
    if (op == "HardSigmoid") {
      float a = n.attr_float("alpha", 0.2f), b = n.attr_float("beta", 0.5f);
      return f([a, b](Expr x) { return Halide::clamp(a * x + b, 0.0f, 1.0f); });
    }
    if (op == "HardSwish")
      return f([](Expr x) { return x * Halide::clamp(x / 6.0f + 0.5f, 0.0f, 1.0f); });
    if (op == "ThresholdedRelu") {
      float a = n.attr_float("alpha", 1.0f);
      // NaN compares false in the reference (0 out); Halide's compares have no NaN rule.
      return f([a](Expr x) { return Halide::select(!Halide::is_nan(x) && x > a, x, 0.0f); });
    }
    if (op == "Shrink") {
      float bias = n.attr_float("bias", 0.0f), lambd = n.attr_float("lambd", 0.5f);
      return f([bias, lambd](Expr x) {
        Expr below = x < -lambd;
        Expr above = x > lambd;
        return Halide::select(Halide::is_nan(x), 0.0f, below, x + bias, above, x - bias, 0.0f);
      });
    }
    if (op == "Softplus")
      return f([](Expr x) {
        return Halide::select(x > 0.0f, x + Halide::log(1.0f + exp_f32(-x)),
                              Halide::log(1.0f + exp_f32(x)));
      });
    if (op == "Softsign") return f([](Expr x) { return x / (1.0f + Halide::abs(x)); });
    if (op == "Tanh") return f(tanh_f32);
    if (op == "Erf") return f(erf_f32);
    if (op == "Exp") return f(exp_f32);
    if (op == "Log") return f([](Expr x) { return Halide::log(x); });
    if (op == "Sqrt") return f([](Expr x) { return Halide::sqrt(x); });
    if (op == "Reciprocal") return f([](Expr x) { return 1.0f / x; });
    if (op == "Floor") return f([](Expr x) { return Halide::floor(x); });
    if (op == "Ceil") return f([](Expr x) { return Halide::ceil(x); });
    if (op == "Round") return f([](Expr x) { return Halide::round(x); });
    if (op == "Sin") return f([](Expr x) { return Halide::sin(x); });
    if (op == "Cos") return f([](Expr x) { return Halide::cos(x); });
    if (op == "Tan") return f([](Expr x) { return Halide::tan(x); });
    if (op == "Asin") return f([](Expr x) { return Halide::asin(x); });
    if (op == "Acos") return f([](Expr x) { return Halide::acos(x); });
    if (op == "Atan") return f([](Expr x) { return Halide::atan(x); });
    if (op == "Sinh") return f([](Expr x) { return Halide::sinh(x); });
    if (op == "Cosh") return f([](Expr x) { return Halide::cosh(x); });
    if (op == "Asinh") return f([](Expr x) { return Halide::asinh(x); });
    if (op == "Acosh") return f([](Expr x) { return Halide::acosh(x); });
    if (op == "Atanh") return f([](Expr x) { return Halide::atanh(x); });
    if (op == "Neg") return f([](Expr x) { return -x; });
    if (op == "Abs") return f([](Expr x) { return Halide::abs(x); });
    if (op == "Sign")
      return f([](Expr x) { return Halide::select(x > 0.0f, 1.0f, x < 0.0f, -1.0f, 0.0f * x); });
    if (op == "Identity") return f([](Expr x) { return x; });
    if (op == "Clip") {
      Expr lo_attr = -kInf, hi_attr = kInf;
      const Val *lo = nullptr, *hi = nullptr;
      if (g_.opset < 11) {
        lo_attr = n.attr_float("min", -kInf);
        hi_attr = n.attr_float("max", kInf);
      } else {
        lo = ins.size() > 1 ? ins[1] : nullptr;
        hi = ins.size() > 2 ? ins[2] : nullptr;
      }
      return [=](Expr x, const Index& i) {
        Expr l = lo ? at(*lo, Index(lo->shape.size(), Expr(0))) : lo_attr;
        Expr h = hi ? at(*hi, Index(hi->shape.size(), Expr(0))) : hi_attr;
        // min(max(x, lo), hi), as the reference: hi wins when lo > hi.
        return Halide::min(Halide::max(x, l), h);
      };
    }
    fail(ErrorKind::kInternal, "halide: no lowering for {}", op);
  }

  static Expr pow_expr(Expr base, const Val& exponent, Expr e) {
    if (exponent.scalar.defined()) {
      const double* k = Halide::Internal::as_const_float(exponent.scalar);
      if (k) {
        if (*k == 1.0) return base;
        if (*k == 2.0) return base * base;
        if (*k == 3.0) return base * base * base;
        if (*k == 0.5) return Halide::sqrt(base);
        if (*k == -1.0) return 1.0f / base;
      }
    }
    return Halide::pow(base, e);
  }

  // A comparison of two numbers, logic on bools (nonzero is true) or a test of a float's
  // class, as a boolean Expr.
  static Expr predicate(const Node& n, const std::vector<Expr>& a) {
    const std::string& op = n.op_type;
    if (op == "Equal") return a[0] == a[1];
    if (op == "Greater") return a[0] > a[1];
    if (op == "GreaterOrEqual") return a[0] >= a[1];
    if (op == "Less") return a[0] < a[1];
    if (op == "LessOrEqual") return a[0] <= a[1];
    if (op == "IsNaN") return Halide::is_nan(a[0]);
    if (op == "IsInf") {
      const bool negative = n.attr_int("detect_negative", 1) != 0,
                 positive = n.attr_int("detect_positive", 1) != 0;
      Expr sign = negative && positive ? Halide::cast<bool>(true)
                  : negative           ? a[0] < 0.0f
                  : positive           ? a[0] > 0.0f
                                       : Halide::cast<bool>(false);
      return Halide::is_inf(a[0]) && sign;
    }
    auto truth = [](const Expr& x) { return x != Halide::cast(x.type(), 0); };
    if (op == "Not") return !truth(a[0]);
    if (op == "And") return truth(a[0]) && truth(a[1]);
    if (op == "Or") return truth(a[0]) || truth(a[1]);
    return truth(a[0]) != truth(a[1]);  // Xor
  }

  Expr binary(const Node& n, const std::vector<Expr>& a) {
    const std::string& op = n.op_type;
    if (op == "Add") return a[0] + a[1];
    if (op == "Sub") return a[0] - a[1];
    if (op == "Mul") return a[0] * a[1];
    if (op == "Div") return a[0] / a[1];
    if (op == "Pow") return pow_expr(a[0], vals_.at(n.inputs[1]), a[1]);
    if (op == "PRelu") return Halide::select(a[0] < 0.0f, a[1] * a[0], a[0]);
    if (op == "Mod") {
      // C's fmodf, exact as the reference's std::fmod (Halide's float % is a - b*floor(a/b),
      // which rounds); with fmod=0 the remainder takes the divisor's sign, like Python's %.
      Expr rem = Halide::Internal::Call::make(Halide::Float(32), "fmodf", {a[0], a[1]},
                                              Halide::Internal::Call::PureExtern);
      if (n.attr_int("fmod", 0) != 0) return rem;
      return Halide::select(rem != 0.0f && ((rem < 0.0f) != (a[1] < 0.0f)), rem + a[1], rem);
    }
    Expr acc = a[0];
    for (size_t k = 1; k < a.size(); ++k) {
      if (op == "Max")
        acc = Halide::max(acc, a[k]);
      else if (op == "Min")
        acc = Halide::min(acc, a[k]);
      else
        acc = acc + a[k];
    }
    if (op == "Mean") acc = acc / static_cast<float>(a.size());
    return acc;
  }

  Val lower_reduce(const Node& n, const Val& x, const std::string& name) {
    const std::string& op = n.op_type;
    const size_t rank = x.shape.size();
    std::vector<int64_t> axes =
        n.input(1) != kNoValue ? int_values(g_, n.input(1)) : n.attr_ints("axes");
    std::vector<bool> mask(rank, false);
    if (axes.empty()) {
      if (n.attr_int("noop_with_empty_axes", 0) == 0) mask.assign(rank, true);
    } else {
      for (int64_t a : axes) mask[a < 0 ? a + static_cast<int64_t>(rank) : a] = true;
    }
    const bool keep = n.attr_int("keepdims", 1) != 0;
    int64_t count = 1;
    for (size_t i = 0; i < rank; ++i)
      if (mask[i]) count *= x.shape[i];
    auto add = [](Expr a, Expr b) { return a + b; };
    auto term = [&](std::function<Expr(Expr)> f) {
      return [&x, f](const Index& i) { return f(at(x, i)); };
    };
    auto id = [](Expr v) { return v; };
    auto post = [&](Val r, std::function<Expr(Expr)> f) {
      Val p = define(name + "_post", r.shape, [&](const Index& i) { return f(at(r, i)); });
      p.after_reduction = true;
      return p;
    };
    if (op == "ReduceSum") return reduce(name, x.shape, mask, keep, 0.0f, add, term(id));
    if (op == "ReduceMean") {
      return post(reduce(name, x.shape, mask, keep, 0.0f, add, term(id)),
                  [count](Expr s) { return s / static_cast<float>(count); });
    }
    if (op == "ReduceSumSquare" || op == "ReduceL2") {
      Val r = reduce(name, x.shape, mask, keep, 0.0f, add, term([](Expr v) { return v * v; }));
      return op == "ReduceL2" ? post(r, [](Expr s) { return Halide::sqrt(s); }) : r;
    }
    if (op == "ReduceL1")
      return reduce(name, x.shape, mask, keep, 0.0f, add,
                    term([](Expr v) { return Halide::abs(v); }));
    if (op == "ReduceLogSum")
      return post(reduce(name, x.shape, mask, keep, 0.0f, add, term(id)),
                  [](Expr s) { return Halide::log(s); });
    if (op == "ReduceProd")
      return reduce(
          name, x.shape, mask, keep, 1.0f, [](Expr a, Expr b) { return a * b; }, term(id));
    auto mx = [](Expr a, Expr b) { return Halide::max(a, b); };
    if (op == "ReduceMax") return reduce(name, x.shape, mask, keep, -kInf, mx, term(id));
    if (op == "ReduceMin")
      return reduce(
          name, x.shape, mask, keep, kInf, [](Expr a, Expr b) { return Halide::min(a, b); },
          term(id));
    // ReduceLogSumExp: shift by the max (kept dims) so exp cannot overflow.
    Val m = reduce(name + "_max", x.shape, mask, true, -kInf, mx, term(id));
    Val s = reduce(name, x.shape, mask, keep, 0.0f, add,
                   [&](const Index& i) { return exp_f32(at(x, i) - at_broadcast(m, x.shape, i)); });
    Val mk = m;
    return define(name + "_post", s.shape, [&](const Index& i) {
      // m has every input dim (size 1 where reduced); map s's index onto it.
      Index mi;
      size_t k = 0;
      for (size_t d = 0; d < rank; ++d) {
        if (mask[d]) {
          mi.push_back(0);
          if (keep) ++k;
        } else {
          mi.push_back(i[k++]);
        }
      }
      Expr mv = at(mk, mi);
      return Halide::log(at(s, i)) + mv;
    });
  }

  // ArgMax / ArgMin along one axis as the reference: the first extreme (the last with
  // select_last_index), a NaN counting as the extreme (numpy's rule). Three reductions over
  // the axis, as int32 positions: the first (last) NaN's, the extreme of the values, the
  // first (last) position holding it; the NaN's position wins where there is one.
  Val lower_arg_reduce(const Node& n, const Val& x, const std::string& name) {
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += rank;
    const bool keep = n.attr_int("keepdims", 1) != 0;
    const bool last = n.attr_int("select_last_index", 0) != 0;
    const bool is_max = n.op_type == "ArgMax";
    std::vector<bool> mask(rank, false);
    mask[axis] = true;
    const Expr none = last ? Expr(-1) : Expr(static_cast<int>(x.shape[axis]));
    auto pick = [last](Expr a, Expr b) { return last ? Halide::max(a, b) : Halide::min(a, b); };
    Val nan_at = reduce(name + "_nan", x.shape, mask, true, none, pick, [&](const Index& i) {
      return Halide::select(Halide::is_nan(at(x, i)), i[axis], none);
    });
    Val extreme = reduce(
        name + "_ext", x.shape, mask, true, is_max ? -kInf : kInf,
        [is_max](Expr a, Expr b) { return is_max ? Halide::max(a, b) : Halide::min(a, b); },
        [&](const Index& i) { return at(x, i); });
    Val held_at = reduce(name + "_at", x.shape, mask, true, none, pick, [&](const Index& i) {
      return Halide::select(at(x, i) == at_broadcast(extreme, x.shape, i), i[axis], none);
    });
    Shape out_shape = x.shape;
    if (keep)
      out_shape[axis] = 1;
    else
      out_shape.erase(out_shape.begin() + axis);
    Val out = define(name, out_shape, [&](const Index& i) {
      Index kept = i;
      if (!keep) kept.insert(kept.begin() + axis, Expr(0));
      Expr nan = at(nan_at, kept);
      return Halide::cast<int64_t>(Halide::select(nan != none, nan, at(held_at, kept)));
    });
    out.after_reduction = true;
    return out;
  }

  // CumSum along its (constant) axis, inclusive or exclusive, forwards or reversed: each
  // position is the previous one's sum plus one element, the reference's order of additions.
  Val lower_cumsum(const Node& n, const Val& x, const std::string& name) {
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    int64_t axis = int_values(g_, n.input(1)).at(0);
    if (axis < 0) axis += rank;
    const bool exclusive = n.attr_int("exclusive", 0) != 0;
    const bool reverse = n.attr_int("reverse", 0) != 0;
    const int len = static_cast<int>(x.shape[axis]);
    Scan scan;
    scan.f = Func(name);
    scan.shape = x.shape;
    scan.axis = static_cast<size_t>(axis);
    std::vector<Var> hv = dim_vars(x.shape.size());
    const Index i = index_of(hv);
    // No pure values: the first position is written by an update, the rest by the walk, so
    // each element is written once (a pure step over the whole buffer writes it twice).
    scan.f(hv) = Halide::undef<float>();
    Index first = i;
    first[axis] = Expr(reverse ? len - 1 : 0);
    scan.f(halide_args(first)) = exclusive ? Expr(0.0f) : at(x, first);
    if (len > 1) {
      Halide::RDom r(1, len - 1);
      scan.walk = r;
      Expr at_pos = reverse ? len - 1 - r.x : Expr(r.x);
      Expr before = reverse ? at_pos + 1 : at_pos - 1;
      Index pos = i, prev = i;
      pos[axis] = at_pos;
      prev[axis] = before;
      scan.f(halide_args(pos)) = scan.f(halide_args(prev)) + at(x, exclusive ? prev : pos);
    }
    scans_.push_back(scan);
    return computed(scan.f, x.shape);
  }

  // out[o.., j.., i..] = data[o.., indices[j..], i..]. Negative indices count from the end;
  // one out of range fails the kernel (as the reference does) instead of reading outside.
  Val lower_gather(const Node& n, const Val& data, const Val& indices, const Shape& out,
                   const std::string& name) {
    const Shape& ds = data.shape;
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(ds.size());
    const int dim = static_cast<int>(ds[axis]);
    const size_t q = indices.shape.size();
    return define(name, out, [&](const Index& i) {
      Index ii(i.begin() + axis, i.begin() + axis + static_cast<long>(q));
      const Resolved k = resolve_index(at(indices, ii), dim);
      Index src(i.begin(), i.begin() + axis);
      src.push_back(k.at);
      for (size_t d = static_cast<size_t>(axis) + 1; d < ds.size(); ++d)
        src.push_back(i[d - 1 + q]);
      return Halide::require(k.in_range, at(data, src),
                             "Gather: an index is out of range for an axis of", dim);
    });
  }

  // An index resolved against an axis of `dim` elements as the reference resolves it
  // (negative ones count from the end), in 64 bits so that no huge index wraps into range:
  // whether it is in range, and the position to read, clamped so that an index out of range
  // never reads outside (the kernel fails through `require` instead).
  struct Resolved {
    Expr in_range, at;
  };
  static Resolved resolve_index(Expr index, int64_t dim) {
    Expr k = Halide::cast<int64_t>(index);
    k = Halide::select(k < 0, k + Expr(dim), k);
    return {k >= 0 && k < Expr(dim),
            Halide::cast<int>(Halide::clamp(k, Expr(int64_t{0}), Expr(dim - 1)))};
  }

  // Where element `i` of ScatterElements' updates (GatherElements' output) goes in (comes
  // from) the data: `i` with its `axis` coordinate read from the indices, resolved.
  static std::pair<Index, Expr> elements_position(const Val& indices, const Shape& data,
                                                  int64_t axis, const Index& i) {
    const Resolved k = resolve_index(at(indices, i), data[axis]);
    Index pos = i;
    pos[axis] = k.at;
    return {pos, k.in_range};
  }

  // The same for ScatterND's updates and GatherND's output: the first `batch` dims of `i`
  // (shared with the indices), the index tuple at i's leading q-1 dims resolved, then i's
  // trailing dims (the slice); and whether the whole tuple is in range.
  static std::pair<Index, Expr> nd_position(const Val& indices, const Shape& data, size_t batch,
                                            const Index& i) {
    const size_t q = indices.shape.size(), k = static_cast<size_t>(indices.shape.back());
    Index pos(i.begin(), i.begin() + static_cast<long>(batch));
    Expr ok = Halide::cast<bool>(true);
    for (size_t m = 0; m < k; ++m) {
      Index tuple(i.begin(), i.begin() + static_cast<long>(q - 1));
      tuple.push_back(static_cast<int>(m));
      const Resolved r = resolve_index(at(indices, tuple), data[batch + m]);
      ok = ok && r.in_range;
      pos.push_back(r.at);
    }
    for (size_t d = batch + k; d < data.size(); ++d) pos.push_back(i[q - 1 + (d - batch - k)]);
    return {pos, ok};
  }

  // Cast as the reference converts (ops' convert_value): to bool, nonzero; a float to an
  // integer truncated toward zero, saturated at the type's range, NaN to 0; the rest as C.
  static Expr convert(Expr v, DType to) {
    const Halide::Type t = halide_type(to);
    if (to == DType::kBool) {
      Expr nonzero = v != Halide::cast(v.type(), 0);
      if (v.type().is_float()) nonzero = Halide::is_nan(v) || nonzero;  // NaN is true
      return Halide::cast<uint8_t>(nonzero);
    }
    if (!v.type().is_float() || !t.is_int()) return Halide::cast(t, v);
    const float hi = std::ldexp(1.0f, t.bits() - 1);  // 2^31 or 2^63, exact as a float
    Expr inside = Halide::cast(t, Halide::clamp(v, -hi, std::nextafter(hi, 0.0f)));
    return Halide::select(Halide::is_nan(v), Halide::cast(t, 0), v >= hi, t.max(), v <= -hi,
                          t.min(), inside);
  }

  // Trilu: the upper (col - row >= k) or lower (col - row <= k) triangle of each matrix in
  // the last two dims, zeros elsewhere.
  Val lower_trilu(const Node& n, const Val& x, const std::string& name) {
    const int64_t k = n.input(1) != kNoValue ? int_values(g_, n.input(1)).at(0) : 0;
    const bool upper = n.attr_int("upper", 1) != 0;
    const size_t r = x.shape.size();
    return define(name, x.shape, [&](const Index& i) {
      Expr diagonal = Halide::cast<int64_t>(i[r - 1]) - Halide::cast<int64_t>(i[r - 2]);
      Expr keep = upper ? diagonal >= Expr(k) : diagonal <= Expr(k);
      Expr v = at(x, i);
      return Halide::select(keep, v, Halide::cast(v.type(), 0));
    });
  }

  // Hardmax as the reference: 1 at the first largest value along the axis (the dims from
  // `axis` on, flattened, before opset 13), 0 elsewhere. The reference's scan keeps the
  // first element while nothing compares greater, so a NaN there wins and later NaNs never
  // do: the first position of the largest non-NaN value, unless the first value is NaN.
  Val lower_hardmax(const Node& n, const Val& x, const std::string& name) {
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    const bool coerce_2d = g_.opset < 13;
    int64_t axis = n.attr_int("axis", coerce_2d ? 1 : -1);
    if (axis < 0) axis += rank;
    const int64_t last = coerce_2d ? rank : axis + 1;
    std::vector<bool> mask(rank, false);
    int64_t count = 1;
    for (int64_t d = axis; d < last; ++d) mask[d] = true, count *= x.shape[d];
    auto position = [&](const Index& i) {
      Expr p = 0;
      for (int64_t d = axis; d < last; ++d) p = p * static_cast<int>(x.shape[d]) + i[d];
      return p;
    };
    const Expr none = static_cast<int>(count);
    Val largest = reduce(
        name + "_max", x.shape, mask, true, -kInf, [](Expr a, Expr b) { return Halide::max(a, b); },
        [&](const Index& i) {
          Expr v = at(x, i);
          return Halide::select(Halide::is_nan(v), -kInf, v);
        });
    Val first = reduce(
        name + "_at", x.shape, mask, true, none, [](Expr a, Expr b) { return Halide::min(a, b); },
        [&](const Index& i) {
          // Halide compiles float compares without NaN semantics: NaNs are excluded first.
          Expr v = at(x, i);
          return Halide::select(!Halide::is_nan(v) && v == at_broadcast(largest, x.shape, i),
                                position(i), none);
        });
    Val out = define(name, x.shape, [&](const Index& i) {
      Index origin = i;
      for (int64_t d = axis; d < last; ++d) origin[d] = 0;
      Expr pick = Halide::select(Halide::is_nan(at(x, origin)), 0, at_broadcast(first, x.shape, i));
      return Halide::select(position(i) == pick, 1.0f, 0.0f);
    });
    out.after_reduction = true;
    return out;
  }

  // TopK (k <= kTopKMax) as the reference orders: largest (or smallest) first, NaN above
  // everything, equal values lower index first. Each element gets an int64 key whose order
  // is exactly that one: its float's bits mapped to an int32 of the same order (-0 as +0,
  // every NaN the largest) times 2^30, plus its position (reversed when the largest come
  // first). Round j is then a plain max (min) reduction over the axis of the
  // keys below (above) round j-1's: k vectorisable passes, no float compare (Halide's have
  // no NaN semantics) and no tie left to chance.
  std::vector<Val> lower_topk(const Node& n, const Val& x, const std::string& name) {
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    int64_t axis = n.attr_int("axis", -1);
    if (axis < 0) axis += rank;
    const bool largest = n.attr_int("largest", 1) != 0;
    const ValueId any_output = n.outputs[0] != kNoValue ? n.outputs[0] : n.outputs[1];
    const Shape& out_shape = g_.value(any_output).shape;
    const int k = static_cast<int>(out_shape[axis]);
    // Keys in [-2^61, 2^61): Halide's simplifier folds differences of them (c < p as
    // c - p < 0), which must not overflow int64 even against the sentinel `none`.
    const int64_t low_mask = (int64_t{1} << 30) - 1;
    std::vector<bool> mask(rank, false);
    mask[axis] = true;
    auto key = [&](const Index& i) {
      Expr bits = Halide::reinterpret<int32_t>(at(x, i));
      Expr nan = (bits & 0x7fffffff) > 0x7f800000;
      Expr ordered = Halide::select(bits == std::numeric_limits<int32_t>::min(), 0, bits < 0,
                                    bits ^ 0x7fffffff, bits);
      ordered = Halide::select(nan, std::numeric_limits<int32_t>::max(), ordered);
      Expr pos = Halide::cast<int64_t>(i[axis]);
      return Halide::cast<int64_t>(ordered) * Expr(low_mask + 1) +
             (largest ? Expr(low_mask) - pos : pos);
    };
    const Expr none = largest ? Expr(-(int64_t{1} << 61) - 1) : Expr(int64_t{1} << 61);
    std::vector<Val> picks;
    picks.reserve(k);
    for (int j = 0; j < k; ++j) {
      const Val* prev = j ? &picks.back() : nullptr;
      Val pick = reduce(
          fmt::format("{}_{}", name, j), x.shape, mask, true, none,
          [largest](Expr a, Expr b) { return largest ? Halide::max(a, b) : Halide::min(a, b); },
          [&](const Index& i) {
            Expr c = key(i);
            if (!prev) return c;
            Expr p = at_broadcast(*prev, x.shape, i);
            return Halide::select(largest ? c < p : c > p, c, none);
          });
      picks.push_back(pick);
    }
    Val indices = define(name + "_i", out_shape, [&](const Index& i) {
      Index lane = i;
      lane[axis] = 0;
      Expr c = at(picks[k - 1], lane);
      for (int j = k - 2; j >= 0; --j) c = Halide::select(i[axis] == j, at(picks[j], lane), c);
      Expr low = c & Expr(low_mask);
      return largest ? Expr(low_mask) - low : low;
    });
    const int len = static_cast<int>(x.shape[axis]);
    Val values = define(name + "_v", out_shape, [&](const Index& i) {
      Index src = i;
      src[axis] = Halide::clamp(Halide::cast<int>(at(indices, i)), 0, len - 1);
      return at(x, src);
    });
    indices.after_reduction = values.after_reduction = true;
    return {values, indices};
  }

  // OneHot: `on` where the (truncated) index equals the position along the new axis,
  // negative indices counting from the end, `off` elsewhere (an index out of range gives
  // an all-off row).
  Val lower_one_hot(const Node& n, const Val& indices, const Val& values, const Shape& out,
                    const std::string& name) {
    int64_t axis = n.attr_int("axis", -1);
    if (axis < 0) axis += static_cast<int64_t>(out.size());
    const int64_t depth = out[axis];
    return define(name, out, [&](const Index& i) {
      Index ii = i;
      ii.erase(ii.begin() + axis);
      Expr k = Halide::cast<int64_t>(at(indices, ii));
      k = Halide::select(k < 0, k + Expr(depth), k);
      return Halide::select(k == Halide::cast<int64_t>(i[axis]), at(values, {Expr(1)}),
                            at(values, {Expr(0)}));
    });
  }

  // out[i] = data[i with its `axis` coordinate replaced by indices[i]].
  Val lower_gather_elements(const Node& n, const Val& data, const Val& indices,
                            const std::string& name) {
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(data.shape.size());
    const int64_t dim = data.shape[axis];
    return define(name, indices.shape, [&](const Index& i) {
      const auto [src, ok] = elements_position(indices, data.shape, axis, i);
      return Halide::require(ok, at(data, src),
                             "GatherElements: an index is out of range for an axis of",
                             static_cast<int>(dim));
    });
  }

  // GatherND: the slice of data at each index tuple (the last dim of indices), within the
  // batch (the first batch_dims dims, shared by data and indices).
  Val lower_gather_nd(const Node& n, const Val& data, const Val& indices, const Shape& out,
                      const std::string& name) {
    const size_t batch = static_cast<size_t>(n.attr_int("batch_dims", 0));
    return define(name, out, [&](const Index& i) {
      const auto [src, ok] = nd_position(indices, data.shape, batch, i);
      return Halide::require(ok, at(data, src), "GatherND: an index is out of range");
    });
  }

  // ScatterElements (Scatter) and ScatterND: the data copied, then each update written (or
  // combined: add, mul, max, min) where its index points, one after another in the
  // reference's order, so that duplicate indices end as the reference's do. The updates
  // stay serial; an index out of range fails the kernel.
  Val lower_scatter(const Node& n, const Val& data, const Val& indices, const Val& updates,
                    const std::string& name) {
    const Shape& ds = data.shape;
    const Shape& us = g_.value(n.inputs[2]).shape;
    Scatter sc{Func(name), ds};
    std::vector<Var> hv = dim_vars(ds.size());
    sc.f(hv) = at(data, index_of(hv));
    std::vector<Halide::Range> ranges;
    for (size_t d = us.size(); d-- > 0;) ranges.emplace_back(0, static_cast<int>(us[d]));
    Halide::RDom r(ranges);
    Index u(us.size());
    for (size_t d = 0; d < us.size(); ++d) u[d] = r[static_cast<int>(us.size() - 1 - d)];
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(ds.size());
    const auto [dst, ok] = n.op_type == "ScatterND" ? nd_position(indices, ds, 0, u)
                                                    : elements_position(indices, ds, axis, u);
    const std::string reduction = n.attr_string("reduction", "none");
    Expr cur = sc.f(halide_args(dst)), v = at(updates, u);
    if (reduction == "add") v = cur + v;
    if (reduction == "mul") v = cur * v;
    // std::max's and std::min's choices, NaNs included (they keep the element unless the
    // update compares greater or less; Halide's float compares have no NaN semantics).
    auto compares = [](Expr a, Expr b) {
      return a.type().is_float() ? !Halide::is_nan(a) && !Halide::is_nan(b)
                                 : Halide::cast<bool>(true);
    };
    if (reduction == "max")
      v = Halide::select(compares(cur, v) && cur < v, v, cur);
    else if (reduction == "min")
      v = Halide::select(compares(cur, v) && v < cur, v, cur);
    sc.f(halide_args(dst)) =
        Halide::require(ok, v, "Scatter: an index is out of range in", n.op_type);
    scatters_.push_back(sc);
    return computed(sc.f, ds);
  }

  // Resize/Upsample in any mode, by the reference's taps (ops::resize_taps: the same
  // coordinates and weights): per resized dimension, tables of each output index's input
  // indices and weights (arguments of the kernel), summed over every combination of taps.
  // A dimension the resize keeps is read straight through.
  Val lower_resize(const Node& n, const Val& x, const Shape& oshape, const std::string& name,
                   Lowered& out) {
    const ops::ResizeTaps taps = ops::resize_taps(g_, n);
    struct DimTables {
      int count = 0;  // taps per output index; 0: the dimension is kept
      bool weighted = false;
      Val index, weight;
    };
    std::vector<DimTables> dims(oshape.size());
    for (size_t k = 0; k < oshape.size(); ++k) {
      const ops::ResizeTaps::Dim& d = taps.dims[k];
      bool kept = x.shape[k] == oshape[k];
      for (int64_t o = 0; o < oshape[k]; ++o) {
        if (d.outside[o]) unsupported(n, "samples outside the input (extrapolation)");
        const size_t first = d.start[o], count = d.start[o + 1] - first;
        dims[k].count = std::max(dims[k].count, static_cast<int>(count));
        kept = kept && count == 1 && d.index[first] == o && d.weight[first] == 1;
        for (size_t j = first; j < first + count; ++j)
          dims[k].weighted = dims[k].weighted || d.weight[j] != 1;
      }
      if (kept) {
        dims[k].count = 0;
        continue;
      }
      const int count = dims[k].count;
      Tensor index(DType::kInt32, {oshape[k], count}), weight(DType::kFloat32, {oshape[k], count});
      std::fill_n(index.data<int32_t>(), index.numel(), 0);
      std::fill_n(weight.data<float>(), weight.numel(), 0.0f);
      for (int64_t o = 0; o < oshape[k]; ++o)
        for (size_t j = d.start[o]; j < d.start[o + 1]; ++j) {
          index.data<int32_t>()[o * count + (j - d.start[o])] = static_cast<int32_t>(d.index[j]);
          weight.data<float>()[o * count + (j - d.start[o])] = static_cast<float>(d.weight[j]);
        }
      dims[k].index = param(-1, std::move(index), {oshape[k], count}, DType::kInt32, out);
      if (dims[k].weighted)
        dims[k].weight = param(-1, std::move(weight), {oshape[k], count}, DType::kFloat32, out);
    }
    return define(name, oshape, [&](const Index& i) {
      Expr sum;
      std::vector<int> tap(oshape.size(), 0);
      while (true) {
        Index src(oshape.size());
        Expr w;
        for (size_t k = 0; k < oshape.size(); ++k) {
          if (dims[k].count == 0) {
            src[k] = i[k];
            continue;
          }
          const int in = static_cast<int>(x.shape[k]);
          src[k] = Halide::clamp(at(dims[k].index, {i[k], Expr(tap[k])}), 0, in - 1);
          if (dims[k].weighted) {
            Expr wk = at(dims[k].weight, {i[k], Expr(tap[k])});
            w = w.defined() ? w * wk : wk;
          }
        }
        Expr term = at(x, src);
        if (w.defined()) term = term * w;
        sum = sum.defined() ? sum + term : term;
        size_t k = oshape.size();
        while (k-- > 0) {
          if (dims[k].count == 0) continue;
          if (++tap[k] < dims[k].count) break;
          tap[k] = 0;
        }
        if (k == static_cast<size_t>(-1)) break;
      }
      return sum;
    });
  }

  // Pad in every mode (constant, reflect, edge; negative pads crop), by the reference's
  // rule (ops::pad_source): per padded dimension, a table of each output index's input
  // index (-1: the constant), an argument of the kernel.
  Val lower_pad(const Node& n, const Val& x, const Shape& oshape, const std::string& name,
                Lowered& out) {
    const ops::PadSpec spec = ops::pad_spec(InferContext(g_, n));
    float value = static_cast<float>(spec.attr_value);
    if (spec.mode == ops::PadMode::kConstant && g_.opset >= 11 && n.input(2) != kNoValue) {
      const Value& v = g_.value(n.input(2));
      if (!v.is_constant() || v.constant.numel() != 1) unsupported(n, "value not a constant");
      value = static_cast<float>(v.constant.get_as_double(0));
    }
    std::vector<std::optional<Val>> tables(oshape.size());
    for (size_t k = 0; k < oshape.size(); ++k) {
      if (spec.begin[k] == 0 && spec.end[k] == 0) continue;
      Tensor table(DType::kInt32, {oshape[k]});
      for (int64_t o = 0; o < oshape[k]; ++o)
        table.data<int32_t>()[o] =
            static_cast<int32_t>(ops::pad_source(spec.mode, o, spec.begin[k], x.shape[k]));
      tables[k] = param(-1, std::move(table), {oshape[k]}, DType::kInt32, out);
    }
    return define(name, oshape, [&](const Index& i) {
      Index src(oshape.size());
      Expr fill = Halide::cast<bool>(false);
      for (size_t k = 0; k < oshape.size(); ++k) {
        if (!tables[k]) {
          src[k] = i[k];
          continue;
        }
        Expr from = at(*tables[k], {i[k]});
        src[k] = Halide::clamp(from, 0, static_cast<int>(x.shape[k]) - 1);
        fill = fill || from < 0;
      }
      Expr read = at(x, src);
      return spec.mode == ops::PadMode::kConstant ? Halide::select(fill, Expr(value), read) : read;
    });
  }

  // LayerNormalization over dims [axis, rank): mean, then the mean square deviation, as two
  // reductions (row-wise ones when axis is the last dim, computed per row like Softmax).
  Val lower_layer_norm(const Node& n, const std::vector<const Val*>& ins, const std::string& name) {
    const Val& x = *ins[0];
    const Shape& shape = x.shape;
    const int64_t rank = static_cast<int64_t>(shape.size());
    int64_t axis = n.attr_int("axis", -1);
    if (axis < 0) axis += rank;
    const float eps = n.attr_float("epsilon", 1e-5f);
    std::vector<bool> mask(rank, false);
    int64_t count = 1;
    for (int64_t d = axis; d < rank; ++d) mask[d] = true, count *= shape[d];
    const float inv = 1.0f / static_cast<float>(count);
    auto add = [](Expr a, Expr b) { return a + b; };
    Val sum = reduce(name + "_sum", shape, mask, true, 0.0f, add,
                     [&](const Index& i) { return at(x, i); });
    Val mean = define(name + "_mean", sum.shape, [&](const Index& i) { return at(sum, i) * inv; });
    Val sq = reduce(name + "_sq", shape, mask, true, 0.0f, add, [&](const Index& i) {
      Expr c = at(x, i) - at_broadcast(mean, shape, i);
      return c * c;
    });
    Val rstd = define(name + "_rstd", sq.shape,
                      [&](const Index& i) { return 1.0f / Halide::sqrt(at(sq, i) * inv + eps); });
    const Val* scale = ins.size() > 1 ? ins[1] : nullptr;
    const Val* bias = ins.size() > 2 ? ins[2] : nullptr;
    Val out = define(name, shape, [&](const Index& i) {
      Expr y = (at(x, i) - at_broadcast(mean, shape, i)) * at_broadcast(rstd, shape, i);
      if (scale) y = y * at_broadcast(*scale, shape, i);
      if (bias) y = y + at_broadcast(*bias, shape, i);
      return y;
    });
    out.after_reduction = true;
    return out;
  }

  Val lower_softmax(const Node& n, const Val& x, const std::string& name) {
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    const bool coerce_2d = g_.opset < 13;
    int64_t axis = n.attr_int("axis", coerce_2d ? 1 : -1);
    if (axis < 0) axis += rank;
    std::vector<bool> mask(rank, false);
    for (int64_t d = axis; d < (coerce_2d ? rank : axis + 1); ++d) mask[d] = true;
    const Shape& shape = x.shape;
    Val m = reduce(
        name + "_max", shape, mask, true, -kInf, [](Expr a, Expr b) { return Halide::max(a, b); },
        [&](const Index& i) { return at(x, i); });
    Val e = define(name + "_exp", shape,
                   [&](const Index& i) { return exp_f32(at(x, i) - at_broadcast(m, shape, i)); });
    Val s = reduce(
        name + "_sum", shape, mask, true, 0.0f, [](Expr a, Expr b) { return a + b; },
        [&](const Index& i) { return at(e, i); });
    reductions_.back().producers.push_back({e.f, shape});
    Val out;
    if (n.op_type == "Softmax") {
      out = define(name, shape,
                   [&](const Index& i) { return at(e, i) * (1.0f / at_broadcast(s, shape, i)); });
    } else {
      out = define(name, shape, [&](const Index& i) {
        return (at(x, i) - at_broadcast(m, shape, i)) - Halide::log(at_broadcast(s, shape, i));
      });
    }
    out.after_reduction = true;
    return out;
  }

  void lower_layout(const Node& n, const std::vector<const Val*>& ins, const std::string& name,
                    std::vector<Val>& results) {
    const std::string& op = n.op_type;
    const Val& x = *ins[0];
    const Shape& in = x.shape;
    const Shape& out = g_.value(n.outputs[0]).shape;
    if (kReshape.count(op)) {
      results.push_back(
          define(name, out, [&](const Index& i) { return reshape_index(x, out, i); }));
    } else if (op == "Transpose") {
      std::vector<int64_t> perm = n.attr_ints("perm");
      if (perm.empty())
        for (size_t d = 0; d < in.size(); ++d)
          perm.push_back(static_cast<int64_t>(in.size() - 1 - d));
      results.push_back(define(name, out, [&](const Index& i) {
        Index src(in.size());
        for (size_t d = 0; d < perm.size(); ++d) src[perm[d]] = i[d];
        return at(x, src);
      }));
    } else if (op == "Expand") {
      results.push_back(define(name, out, [&](const Index& i) { return at_broadcast(x, out, i); }));
    } else if (op == "Tile") {
      results.push_back(define(name, out, [&](const Index& i) {
        Index src;
        for (size_t d = 0; d < in.size(); ++d)
          src.push_back(in[d] == 1        ? Expr(0)
                        : in[d] == out[d] ? i[d]
                                          : i[d] % static_cast<int>(in[d]));
        return at(x, src);
      }));
    } else if (op == "Slice") {
      const ops::SliceWindow w = ops::slice_window(g_, n);
      const std::vector<int64_t>&start = w.start, &step = w.step;
      results.push_back(define(name, out, [&](const Index& i) {
        Index src;
        for (size_t d = 0; d < in.size(); ++d)
          src.push_back(static_cast<int>(start[d]) + i[d] * static_cast<int>(step[d]));
        return at(x, src);
      }));
    } else if (op == "Concat") {
      int64_t axis = n.attr_int("axis", 0);
      if (axis < 0) axis += static_cast<int64_t>(out.size());
      results.push_back(define(name, out, [&](const Index& i) {
        // Every branch of a vector select is evaluated: clamp each piece's index in range.
        Expr result;
        int64_t begin = 0;
        for (const Val* in : ins) {
          const int64_t size = in->shape[axis];
          Index src = i;
          src[axis] =
              Halide::clamp(i[axis] - static_cast<int>(begin), 0, static_cast<int>(size) - 1);
          Expr piece = at(*in, src);
          // Later pieces win from their first index on.
          result = result.defined()
                       ? Halide::select(i[axis] >= static_cast<int>(begin), piece, result)
                       : piece;
          begin += size;
        }
        return result;
      }));
    } else if (op == "Split") {
      int64_t axis = n.attr_int("axis", 0);
      if (axis < 0) axis += static_cast<int64_t>(in.size());
      int64_t offset = 0;
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        const Shape& piece = g_.value(n.outputs[k]).shape;
        const int64_t begin = offset;
        offset += piece[axis];
        results.push_back(define(fmt::format("{}_{}", name, k), piece, [&](const Index& i) {
          Index src = i;
          src[axis] = i[axis] + static_cast<int>(begin);
          return at(x, src);
        }));
      }
    } else {
      fail(ErrorKind::kInternal, "halide: no lowering for {}", op);
    }
  }

  // Same elements, another shape: the row-major flat index is preserved. Both shapes split
  // into runs of dims of equal products (the coarsest common refinement: [128, 768] and
  // [128, 12, 64] into (128 | 128) and (768 | 12, 64)); within a run the output's index is
  // the input's, so a dim that splits or merges costs arithmetic only in its own run, and a
  // run of one input dim is affine in the output's coordinates (a dense vector load, not a
  // gather). The 9-node rotary-embedding group of a LLaMA layer (Reshape 128 x 768 to heads,
  // Transpose, Slice, Neg, Concat, Mul, Add), 1 thread: 0.081 ms with one flat index divided
  // through every dim, 0.066 with the runs, 0.012 once short rows are also unrolled.
  static Expr reshape_index(const Val& x, const Shape& out, const Index& i) {
    const Shape& in = x.shape;
    Index src(in.size(), Expr(0));
    const bool empty = std::find(in.begin(), in.end(), 0) != in.end();
    size_t a = 0, c = 0;
    while (!empty && (a < in.size() || c < out.size())) {
      const size_t a0 = a, c0 = c;
      int64_t in_elems = 1, out_elems = 1;
      if (a < in.size()) in_elems *= in[a++];
      if (c < out.size()) out_elems *= out[c++];
      while (in_elems != out_elems) {
        if (in_elems < out_elems && a < in.size())
          in_elems *= in[a++];
        else if (out_elems < in_elems && c < out.size())
          out_elems *= out[c++];
        else
          fail(ErrorKind::kInternal, "halide: reshape of {} to {} changes the element count",
               shape_to_string(in), shape_to_string(out));
      }
      Expr flat = 0;
      int64_t stride = 1;
      for (size_t d = c; d-- > c0;) {
        if (out[d] != 1) flat = flat + i[d] * static_cast<int>(stride);
        stride *= out[d];
      }
      stride = 1;
      for (size_t d = a; d-- > a0;) {
        if (in[d] != 1) {
          Expr q = stride == 1 ? flat : flat / static_cast<int>(stride);
          src[d] = d == a0 ? q : q % static_cast<int>(in[d]);
        }
        stride *= in[d];
      }
    }
    return at(x, src);  // an empty tensor's is never read
  }

  // ------------------------------------------------------------------------ schedule

  struct Loops {
    bool has_rows = false;
    Var rows;
  };

  // Vectorises the innermost dim and spreads rows (all outer dims fused) over threads.
  static Loops schedule_pointwise(Func f, const Shape& shape) {
    Loops loops;
    const size_t rank = shape.size();
    if (rank == 0) return loops;
    std::vector<Var> hv = dim_vars(rank);
    const int64_t inner = shape[rank - 1];
    int64_t total = 1;
    for (int64_t d : shape) total *= d;
    const int width = inner >= 16 ? 16 : inner >= 8 ? 8 : inner >= 4 ? 4 : 1;
    if (rank == 1) {
      if (total >= 2 * kParallelMin) {
        Var xo("xo"), xi("xi");
        f.split(hv[0], xo, xi, static_cast<int>(kTaskElems)).parallel(xo).vectorize(xi, 16);
      } else if (width > 1) {
        f.vectorize(hv[0], width);
      }
      return loops;
    }
    Var rows = hv[1];
    for (size_t k = 2; k < rank; ++k) {
      Var fused("r" + std::to_string(k));
      f.fuse(rows, hv[k], fused);
      rows = fused;
    }
    if (width > 1 && inner % width == 0 && inner / width > 1 && inner / width <= kUnrolledVectors) {
      // A short row as a few vectors, unrolled: each copy knows its position along the row,
      // so the simplifier settles a Concat's or Slice's clamps and selects there (dense loads
      // instead of gathers).
      Var vo("vo"), vi("vi");
      f.split(hv[0], vo, vi, width).vectorize(vi).unroll(vo);
    } else if (width > 1) {
      f.vectorize(hv[0], width);
    }
    const int64_t nrows = total / inner;
    loops.has_rows = true;
    loops.rows = rows;
    if (nrows >= 2 && total >= kParallelMin) {
      int64_t task = std::max<int64_t>(1, kTaskElems / std::max<int64_t>(inner, 1));
      task = std::min(task, (nrows + 1) / 2);
      Var ro("ro"), ri("ri");
      f.split(rows, ro, ri, static_cast<int>(task)).parallel(ro);
      loops.rows = ri;
    }
    return loops;
  }

  // Reduction over its innermost input dim: up to 64 partial sums (four 16-float vectors,
  // so four independent add chains hide the add latency), folded once at the end.
  static void vectorize_inner_reduction(Reduction& red) {
    const int64_t n = red.in_shape.back();
    int lanes = 0;
    for (int l : {64, 32, 16, 8})
      if (n % l == 0 && n >= 2 * l) {
        lanes = l;
        break;
      }
    if (lanes == 0) return;
    Halide::RVar ro("ro_r"), ri("ri_r");
    Var u("u");
    red.f.update().split((*red.rdom)[0], ro, ri, lanes);
    Func partial = red.f.update().rfactor(ri, u);
    std::vector<Var> hv = dim_vars(red.out_shape.size());
    if (hv.empty())
      partial.compute_at(red.f, Var::outermost());
    else
      partial.compute_at(red.f, hv[0]);
    const int width = std::min(lanes, 16);
    partial.vectorize(u, width);
    partial.update().vectorize(u, width);
    if (lanes > width) partial.update().unroll(u);
    // The final fold of the lanes as vector adds + one horizontal reduction: a scalar fold
    // of 64 lanes is a 64-add dependency chain per row.
    red.f.update().atomic().vectorize(ri, width);
  }

  // A scan: the walk along its axis stays serial; inside each step the dims inner to the axis
  // (contiguous in memory) run as vectors, so a step streams one slab and the next step
  // reads the slab just written; the dims outer to the axis and chunks of the inner ones
  // are the threads' tasks. (A 16-float column walked down the axis at a time, one thread
  // where the outermost dim was 1, a pure step and a copy out: 2.6 ms for a 16 MB scan where
  // this takes 0.3; DESIGN "A third probe".)
  static void schedule_scan(Scan& scan) {
    if (!scan.is_output) scan.f.compute_root();
    const size_t rank = scan.shape.size();
    if (rank == 0) return;
    const std::vector<Var> hv = dim_vars(rank);  // innermost first
    const size_t a = scan.axis;
    std::vector<Var> inner_vars(hv.begin(), hv.begin() + static_cast<long>(rank - 1 - a));
    std::vector<Var> outer_vars(hv.begin() + static_cast<long>(rank - a), hv.end());
    int64_t inner = 1, outer = 1;
    for (size_t d = a + 1; d < rank; ++d) inner *= scan.shape[d];
    for (size_t d = 0; d < a; ++d) outer *= scan.shape[d];
    const int64_t total = inner * outer * scan.shape[a];
    // Fuses `vars` (innermost first) of `stage` into one var; none: no var.
    auto fuse = [](Halide::Stage stage, const std::vector<Var>& vars,
                   const std::string& name) -> std::optional<Var> {
      if (vars.empty()) return std::nullopt;
      Var cur = vars[0];
      for (size_t k = 1; k < vars.size(); ++k) {
        Var fused(fmt::format("{}{}", name, k));
        stage.fuse(cur, vars[k], fused);
        cur = fused;
      }
      return cur;
    };
    const int width = inner >= 16 ? 16 : inner >= 8 ? 8 : 1;
    // The first position: 1/len of the work, vectors only.
    Halide::Stage first = scan.f.update(0);
    if (width > 1)
      first.vectorize(*fuse(first, inner_vars, "fi"), width, Halide::TailStrategy::GuardWithIf);
    else
      first.unscheduled();  // a few elements per row: nothing worth scheduling
    if (!scan.walk) return;
    Halide::Stage walk = scan.f.update(1);
    const std::optional<Var> in = fuse(walk, inner_vars, "wi");
    const std::optional<Var> out = fuse(walk, outer_vars, "wo");
    const Halide::RVar step = scan.walk->x;
    // Chunks of the inner dims so that there are some 8 tasks where the outer dims give fewer.
    const int64_t want_tasks = total >= kParallelMin ? 8 : 1;
    int64_t chunks = 1;
    if (in && outer < want_tasks) chunks = std::min((want_tasks + outer - 1) / outer, inner / 64);
    chunks = std::max<int64_t>(chunks, 1);
    std::vector<Halide::VarOrRVar> order;  // innermost first
    std::optional<Var> lanes, task;
    if (in) {
      Var chunk("wc"), within("ww");
      if (chunks > 1) {
        const int64_t size = (inner + chunks - 1) / chunks;
        walk.split(*in, chunk, within, static_cast<int>((size + 15) / 16 * 16),
                   Halide::TailStrategy::GuardWithIf);
        lanes = within;
        task = chunk;
      } else {
        lanes = *in;
      }
      order.push_back(*lanes);
    }
    order.push_back(step);
    if (task) order.push_back(*task);
    if (out) order.push_back(*out);
    walk.reorder(order);
    if (task && out) {
      Var both("wt");
      walk.fuse(*task, *out, both);
      task = both;
    } else if (out) {
      task = out;
    }
    if (lanes && width > 1) walk.vectorize(*lanes, width, Halide::TailStrategy::GuardWithIf);
    if (task && total >= kParallelMin && chunks * outer >= 2) walk.parallel(*task);
  }

  // A scatter in a buffer of its own: the copy vectorised and spread over threads, the
  // updates one after another (two could write one element).
  static void schedule_scatter(Scatter& sc) {
    sc.f.compute_root();
    const size_t rank = sc.shape.size();
    if (rank == 0) return;
    std::vector<Var> hv = dim_vars(rank);
    int64_t total = 1;
    for (int64_t d : sc.shape) total *= d;
    if (sc.shape[rank - 1] >= 8)
      sc.f.vectorize(hv[0], sc.shape[rank - 1] >= 16 ? 16 : 8, Halide::TailStrategy::GuardWithIf);
    if (rank >= 2 && sc.shape[0] >= 2 && total >= kParallelMin) sc.f.parallel(hv[rank - 1]);
  }

  void schedule(std::vector<Func>& outputs, const std::vector<const Val*>& vals) {
    std::vector<Loops> loops;
    for (size_t k = 0; k < outputs.size(); ++k) {
      const bool is_scan = std::any_of(scans_.begin(), scans_.end(), [&](const Scan& scan) {
        return scan.is_output && scan.f.function().same_as(outputs[k].function());
      });
      loops.push_back(is_scan ? Loops{} : schedule_pointwise(outputs[k], vals[k]->shape));
    }
    for (Scan& scan : scans_) schedule_scan(scan);
    for (Scatter& sc : scatters_) schedule_scatter(sc);
    for (Reduction& red : reductions_) {
      const size_t rank = red.in_shape.size();
      const bool inner_reduced = rank > 0 && red.mask[rank - 1];
      // Row-wise (LayerNorm, Softmax over the last axis): computed per output row, where
      // the row is still in L1, when the output rows are exactly the reduction's rows.
      bool only_inner = inner_reduced;
      for (size_t d = 0; d + 1 < rank; ++d) only_inner &= !red.mask[d];
      const bool rowwise = outputs.size() == 1 && loops[0].has_rows && only_inner &&
                           !vals[0]->reshaped_after_reduction && vals[0]->shape == red.in_shape;
      if (red.rdom && inner_reduced) vectorize_inner_reduction(red);
      if (rowwise) {
        red.f.compute_at(outputs[0], loops[0].rows);
        for (auto& [p, shape] : red.producers) {
          p.compute_at(outputs[0], loops[0].rows);
          const int64_t inner = shape.back();
          if (inner >= 16) p.vectorize(dim_vars(shape.size())[0], 16);
        }
        continue;
      }
      red.f.compute_root();
      for (auto& [p, shape] : red.producers) {
        p.compute_root();
        schedule_pointwise(p, shape);
      }
      const size_t out_rank = red.out_shape.size();
      if (out_rank == 0) continue;
      std::vector<Var> hv = dim_vars(out_rank);
      int64_t in_total = 1;
      for (int64_t d : red.in_shape) in_total *= d;
      const int64_t inner = red.out_shape.back();
      const bool vec_inner = !inner_reduced && inner >= 8;
      // The outermost kept dim with room to split, not the one the vectors take.
      int par = -1;
      for (size_t d = 0; d < out_rank && par < 0; ++d)
        if (red.out_shape[d] >= 2) par = static_cast<int>(d);
      if (vec_inner && par == static_cast<int>(out_rank) - 1) par = -1;
      if (par >= 0 && in_total >= kParallelMin) {
        const Var& v = hv[out_rank - 1 - par];
        red.f.parallel(v);
        if (red.rdom) red.f.update().parallel(v);
      }
      if (vec_inner) {
        const int w = inner >= 16 ? 16 : 8;
        // RoundUp (the default for update stages) would read the input past its end.
        red.f.vectorize(hv[0], w, Halide::TailStrategy::GuardWithIf);
        if (red.rdom) red.f.update().vectorize(hv[0], w, Halide::TailStrategy::GuardWithIf);
      }
    }
  }

  const Graph& g_;
  std::map<ValueId, Val> vals_;
  std::vector<Reduction> reductions_;
  std::vector<Scan> scans_;
  std::vector<Scatter> scatters_;
  int counter_ = 0;
};

void describe_attr(std::string& s, const Attribute& a) {
  switch (a.type) {
    case Attribute::Type::kFloat:
      s += fmt::format("f{:a}", a.f);
      break;
    case Attribute::Type::kInt:
      s += fmt::format("i{}", a.i);
      break;
    case Attribute::Type::kString:
      s += fmt::format("s{}:{}", a.s.size(), a.s);
      break;
    case Attribute::Type::kFloats:
      s += "F";
      for (float f : a.floats) s += fmt::format("{:a},", f);
      break;
    case Attribute::Type::kInts:
      s += fmt::format("I{}", fmt::join(a.ints, ","));
      break;
    default:
      s += "?";  // tensors/strings lists: no supported op reads them
  }
}

}  // namespace

halide_type_t buffer_type(DType dtype) {
  return halide_type(dtype);
}

std::string unsupported_reason(const Graph& g, const Node& n) {
  if (!n.domain.empty()) return "domain " + n.domain;
  const std::string& op = n.op_type;
  if (!kUnary.count(op) && !kBinary.count(op) && !kReduce.count(op) && !kSoftmax.count(op) &&
      !kReshape.count(op) && !kLayout.count(op) && !kOther.count(op) && !makes_bool(op) &&
      !kArgReduce.count(op) && !kIndexed.count(op) && !kPositional.count(op))
    return "op not lowered";
  if (kScatter.count(op)) {
    const std::string r = n.attr_string("reduction", "none");
    if (r != "none" && r != "add" && r != "mul" && r != "max" && r != "min")
      return "reduction " + r;
    if (r != "none" && g.value(n.inputs[0]).dtype == DType::kBool) return "reduction of bools";
  }
  if (op == "TopK") {
    if (g.opset < 10) return "k as an attribute (opset < 10)";
    if (n.input(1) == kNoValue || !g.value(n.input(1)).is_constant()) return "k not constant";
    if (n.outputs.size() != 2) return "not its two outputs";
    const Value& x = g.value(n.input(0));
    if (x.shape_known && !x.shape.empty() && shape_numel(x.shape) >= (int64_t{1} << 30))
      return "an axis of 2^30 elements or more";
    if (g.value(n.input(1)).constant.get_as_int(0) > kTopKMax)
      return fmt::format("k over {} (the reference's partial sort does better)", kTopKMax);
  }
  if (makes_bool(op)) {
    // Its operands' types are checked with every op's below.
    const size_t operands = op == "Not" || kFloatTests.count(op) ? 1 : 2;
    if (n.outputs.size() != 1 || n.inputs.size() != operands)
      return "not one output and its inputs";
    for (ValueId v : n.inputs)
      if (v == kNoValue || g.value(v).dtype != g.value(n.inputs[0]).dtype)
        return "inputs of different types";
  }
  if (op == "Resize" &&
      n.attr_string("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize")
    return "tf_crop_and_resize (extrapolated samples)";
  if (op == "LayerNormalization") {
    for (size_t k = 1; k < n.outputs.size(); ++k)
      if (n.outputs[k] != kNoValue) return "Mean/InvStdDev outputs";
    if (n.attr_int("stash_type", 1) != 1) return "stash_type is not float";
  }
  for (ValueId v : n.outputs) {
    if (v == kNoValue) continue;
    const Value& val = g.value(v);
    if (makes_bool(op)) {
      if (val.dtype != DType::kBool)
        return fmt::format("output of type {}, not bool", dtype_name(val.dtype));
    } else if (kArgReduce.count(op)) {
      if (val.dtype != DType::kInt64)
        return fmt::format("output of type {}, not int64", dtype_name(val.dtype));
    } else if (op == "OneHot") {
      if (!number_dtype(val.dtype)) return fmt::format("values of type {}", dtype_name(val.dtype));
    } else if (op == "TopK") {
      const DType want = v == n.outputs[0] ? DType::kFloat32 : DType::kInt64;
      if (val.dtype != want) return fmt::format("output of type {}", dtype_name(val.dtype));
    } else if (moves_data(op) || op == "Cast" || op == "CastLike" ? !buffer_dtype(val.dtype)
                                                                  : val.dtype != DType::kFloat32) {
      return fmt::format("output of type {}, not float32", dtype_name(val.dtype));
    }
    if (!val.shape_known) return "unknown shape";
    if (val.shape.size() > 16) return "rank > 16";
    int64_t numel = 1;
    for (int64_t d : val.shape) numel *= d;
    if (numel == 0) return "empty tensor";
    if (numel >= (int64_t{1} << 31)) return "tensor over 2^31 elements";
  }
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    ValueId v = n.inputs[i];
    if (v == kNoValue) continue;
    const Value& val = g.value(v);
    if (needs_constant(op, i) && !val.is_constant()) return "shape/axes input is not constant";
    if (is_param_input(op, i)) continue;
    if (const auto allowed = index_dtypes(op, i)) {
      if (!allowed->count(val.dtype))
        return fmt::format("indices of type {}", dtype_name(val.dtype));
    } else if (op == "OneHot") {
      if (!number_dtype(val.dtype))
        return fmt::format("{} of type {}", i == 0 ? "indices" : "values", dtype_name(val.dtype));
    } else if (op == "Where" && i == 0) {
      if (val.dtype != DType::kBool) return "condition is not bool";
    } else if (makes_bool(op)) {
      if (kCompare.count(op)      ? !number_dtype(val.dtype)
          : kFloatTests.count(op) ? val.dtype != DType::kFloat32
                                  : val.dtype != DType::kBool)
        return fmt::format("{} of {}", op, dtype_name(val.dtype));
      if (!val.shape_known) return "unknown shape";
    } else if (moves_data(op) || op == "Cast" || op == "CastLike" ? !buffer_dtype(val.dtype)
                                                                  : val.dtype != DType::kFloat32) {
      return fmt::format("input of type {}, not float32", dtype_name(val.dtype));
    }
    if (val.shape.size() > 16) return "rank > 16";
    int64_t numel = 1;
    for (int64_t d : val.shape) numel *= d;
    if (numel == 0) return "empty tensor";
  }
  if (n.has_attr("broadcast") || ((kBinary.count(op) || makes_bool(op)) && g.opset < 7))
    return "legacy broadcasting";
  if (kReduce.count(op)) return reduce_axes_reason(g, n);
  if (op == "Split" && std::count(n.outputs.begin(), n.outputs.end(), kNoValue) > 0)
    return "omitted outputs";
  return "";
}

Lowered lower(const Graph& subgraph) {
  try {
    return Lowerer(subgraph).run();
  } catch (const Halide::Error& e) {
    fail(ErrorKind::kUnsupported, "halide: lowering failed: {}", e.what());
  }
}

std::string describe(const Graph& g) {
  std::map<ValueId, int> local;
  auto ref = [&](ValueId v) -> std::string {
    if (v == kNoValue) return "_";
    auto it = local.find(v);
    if (it != local.end()) return fmt::format("%{}", it->second);
    const int id = static_cast<int>(local.size());
    local[v] = id;
    const Value& val = g.value(v);
    std::string s = fmt::format("%{}:{}[{}]", id, dtype_name(val.dtype), fmt::join(val.shape, "x"));
    if (val.is_constant()) {
      const Tensor& t = val.constant;
      // Float and bool constants are buffers; integer ones may be shapes, axes or starts
      // the code depends on.
      if ((t.dtype() == DType::kFloat32 || t.dtype() == DType::kBool) && t.numel() > 1) {
        s += "=buf";
      } else {
        s += "=";
        for (int64_t k = 0; k < t.numel(); ++k) s += fmt::format("{:a},", t.get_as_double(k));
      }
    }
    return s;
  };
  // The lowering's revision: bumped whenever lowering or scheduling changes what a
  // description compiles to, so that kernels cached on disk before are not reused (the
  // cache key hashes this text). 2: typed buffers, Gather, Where, LayerNormalization. 3:
  // indices resolved in 64 bits (a huge int64 index wrapped into range in 32). 4: reshapes
  // indexed run by run, rows of up to 8 vectors unrolled.
  std::string s = fmt::format("lowering 5\nopset {}\n", g.opset);
  for (ValueId v : g.inputs) s += "in " + ref(v) + "\n";
  for (const Node& n : g.nodes()) {
    s += n.op_type + "(";
    for (ValueId v : n.inputs) s += ref(v) + " ";
    s += ") {";
    for (const auto& [key, a] : n.attrs) {
      s += key + "=";
      describe_attr(s, a);
      s += ";";
    }
    s += "} ->";
    for (ValueId v : n.outputs) s += " " + ref(v);
    s += "\n";
  }
  s += "out";
  for (ValueId v : g.outputs) s += " " + ref(v);
  return s + "\n";
}

}  // namespace collage::halide_backend
