#include "backends/cuda_gen/codegen.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace collage::cuda_gen {
namespace {

[[noreturn]] void unsupported(const std::string& why) {
  fail(ErrorKind::kUnsupported, "cuda-gen: {}", why);
}

enum class ReduceOp { kSum, kMax, kMin };

struct Expr {
  enum class Kind { kLoad, kLiteral, kCompute, kReduce };
  Kind kind = Kind::kCompute;
  std::string code;  // kLiteral: its text; kCompute: a template over $0, $1, $2
  std::vector<int> operands;
  int param = -1;        // kLoad: the parameter it reads
  Shape shape;           // kLoad: the tensor's shape
  bool is_bool = false;  // kLoad of a bool tensor (read as 0/1)
  ReduceOp reduce = ReduceOp::kSum;
};

const std::map<std::string, std::string>& unary_templates() {
  static const std::map<std::string, std::string> t = {
      {"Relu", "fmaxf($0, 0.0f)"},
      {"Sigmoid", "(1.0f / (1.0f + expf(-$0)))"},
      {"Tanh", "tanhf($0)"},
      {"Exp", "expf($0)"},
      {"Log", "logf($0)"},
      {"Sqrt", "sqrtf($0)"},
      {"Neg", "(-$0)"},
      {"Abs", "fabsf($0)"},
      {"Erf", "erff($0)"},
      {"Reciprocal", "(1.0f / $0)"},
      {"Floor", "floorf($0)"},
      {"Ceil", "ceilf($0)"},
      {"Identity", "$0"},
      {"Softsign", "($0 / (1.0f + fabsf($0)))"},
      {"Softplus", "log1pf(expf($0))"},
      {"HardSwish", "($0 * fmaxf(0.0f, fminf(1.0f, $0 * (1.0f / 6.0f) + 0.5f)))"},
  };
  return t;
}

const std::map<std::string, std::string>& binary_templates() {
  static const std::map<std::string, std::string> t = {
      {"Add", "($0 + $1)"},    {"Sub", "($0 - $1)"},     {"Mul", "($0 * $1)"},
      {"Div", "($0 / $1)"},    {"Max", "fmaxf($0, $1)"}, {"Min", "fminf($0, $1)"},
      {"Pow", "powf($0, $1)"},
  };
  return t;
}

const std::set<std::string>& other_ops() {
  static const std::set<std::string> ops = {
      "LeakyRelu", "Elu",       "HardSigmoid",       "Clip",       "Where",
      "Cast",      "Dropout",   "Softmax",           "ReduceMean", "ReduceSum",
      "ReduceMax", "ReduceMin", "LayerNormalization"};
  return ops;
}

std::string literal(float v) {
  if (std::isnan(v)) return "__int_as_float(0x7fc00000)";
  if (std::isinf(v)) return v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  std::string text = fmt::format("{:.9g}", v);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text + "f";
}

// The numpy broadcast of two shapes; false when they do not broadcast.
bool broadcast_into(Shape& acc, const Shape& s) {
  Shape out(std::max(acc.size(), s.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t a = i < out.size() - acc.size() ? 1 : acc[i - (out.size() - acc.size())];
    const int64_t b = i < out.size() - s.size() ? 1 : s[i - (out.size() - s.size())];
    if (a != b && a != 1 && b != 1) return false;
    out[i] = a == 1 ? b : a;
  }
  acc = std::move(out);
  return true;
}

// The offset into a tensor of shape `s` (broadcast to `domain`) of the domain's element at
// linear index `e`.
std::string offset(const Shape& s, const Shape& domain) {
  const int64_t numel = shape_numel(s);
  if (numel == 1) return "0";
  Shape padded(domain.size() - s.size(), 1);
  padded.insert(padded.end(), s.begin(), s.end());
  if (padded == domain) return "e";
  std::vector<std::string> terms;
  int64_t stride = 1;  // the tensor's stride for dim k
  std::vector<int64_t> strides(domain.size());
  for (size_t k = domain.size(); k-- > 0;) {
    strides[k] = stride;
    stride *= padded[k];
  }
  int64_t inner = 1;  // product of the domain's dims after k
  std::vector<int64_t> inners(domain.size());
  for (size_t k = domain.size(); k-- > 0;) {
    inners[k] = inner;
    inner *= domain[k];
  }
  for (size_t k = 0; k < domain.size(); ++k) {
    if (padded[k] == 1 || domain[k] == 1) continue;
    std::string index = inners[k] == 1 ? "e" : fmt::format("(e / {}LL)", inners[k]);
    if (k > 0) index = fmt::format("({} % {}LL)", index, domain[k]);
    terms.push_back(strides[k] == 1 ? index : fmt::format("{} * {}LL", index, strides[k]));
  }
  std::string out;
  for (const std::string& t : terms) out += (out.empty() ? "" : " + ") + t;
  return out.empty() ? "0" : out;
}

int normalize_axis(int64_t axis, size_t rank, const Node& node) {
  const int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) unsupported(fmt::format("{}: axis {} out of range", node.name, axis));
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

class Builder {
 public:
  explicit Builder(const Graph& g) : g_(g) {}

  GeneratedKernel build() {
    if (g_.num_nodes() == 0) unsupported("empty region");
    for (const Node& n : g_.nodes()) lower(n);
    // The domain: every value of the region broadcast together.
    for (const Node& n : g_.nodes()) {
      for (ValueId v : n.inputs)
        if (v != kNoValue) extend_domain(v);
      for (ValueId v : n.outputs)
        if (v != kNoValue) extend_domain(v);
    }
    for (ValueId v : g_.outputs)
      if (g_.value(v).dtype != DType::kFloat32)
        unsupported(fmt::format("output '{}' is not float32", g_.value(v).name));
    const bool rows = std::any_of(exprs_.begin(), exprs_.end(),
                                  [](const Expr& e) { return e.kind == Expr::Kind::kReduce; });
    if (rows) {
      if (domain_.empty()) unsupported("a reduction over a scalar");
      for (auto [name, last] : reduced_lengths_)
        if (last != domain_.back())
          unsupported(fmt::format("{} reduces {} elements, the region's rows have {}", name, last,
                                  domain_.back()));
    }
    for (size_t i = 0; i < g_.outputs.size(); ++i) {
      KernelParam p{KernelParam::Kind::kOutput, static_cast<int>(i)};
      params_.push_back({p, fmt::format("float* __restrict__ p{}", params_.size())});
    }
    out_.row_kernel = rows;
    const int64_t numel = shape_numel(domain_);
    if (numel == 0) unsupported("an empty domain");
    if (rows) {
      const int64_t n = domain_.back();
      out_.work = numel / n;
      out_.block = 32;
      while (out_.block < n && out_.block < 256) out_.block *= 2;
    } else {
      out_.work = numel;
      out_.block = 256;
    }
    for (const auto& [p, decl] : params_) out_.params.push_back(p);
    out_.source = emit(rows);
    return std::move(out_);
  }

 private:
  int add(Expr e) {
    exprs_.push_back(std::move(e));
    return static_cast<int>(exprs_.size()) - 1;
  }
  int compute(std::string code, std::vector<int> operands) {
    Expr e;
    e.kind = Expr::Kind::kCompute;
    e.code = std::move(code);
    e.operands = std::move(operands);
    return add(std::move(e));
  }
  int lit(float v) {
    Expr e;
    e.kind = Expr::Kind::kLiteral;
    e.code = literal(v);
    return add(std::move(e));
  }
  int reduce(ReduceOp op, int operand, const Node& node, int64_t length) {
    Expr e;
    e.kind = Expr::Kind::kReduce;
    e.reduce = op;
    e.operands = {operand};
    reduced_lengths_.emplace_back(node.name, length);
    return add(std::move(e));
  }

  void extend_domain(ValueId v) {
    if (!broadcast_into(domain_, g_.value(v).shape))
      unsupported(fmt::format("value '{}' {} does not broadcast with the region's {}",
                              g_.value(v).name, shape_to_string(g_.value(v).shape),
                              shape_to_string(domain_)));
  }

  // The expression of graph value v: inputs and constants become loads or literals.
  int value(ValueId v, bool allow_bool = false) {
    if (v == kNoValue) unsupported("a missing input");
    if (auto it = expr_of_.find(v); it != expr_of_.end()) return it->second;
    const Value& val = g_.value(v);
    const bool is_bool = val.dtype == DType::kBool;
    if (val.dtype != DType::kFloat32 && !(allow_bool && is_bool))
      unsupported(fmt::format("value '{}' is {}", val.name, dtype_name(val.dtype)));
    if (val.producer >= 0)
      fail(ErrorKind::kInternal, "cuda-gen: '{}' read before it is computed", val.name);
    int id;
    if (val.is_constant() && val.constant.numel() == 1) {
      id = lit(static_cast<float>(val.constant.get_as_double(0)));
    } else {
      Expr e;
      e.kind = Expr::Kind::kLoad;
      e.shape = val.shape;
      e.is_bool = is_bool;
      e.param = static_cast<int>(params_.size());
      KernelParam p;
      if (val.is_constant()) {
        p = {KernelParam::Kind::kConstant, static_cast<int>(out_.constants.size())};
        out_.constants.push_back(val.constant);
      } else {
        auto it = std::find(g_.inputs.begin(), g_.inputs.end(), v);
        if (it == g_.inputs.end())
          fail(ErrorKind::kInternal, "cuda-gen: '{}' is neither computed nor an input", val.name);
        p = {KernelParam::Kind::kInput, static_cast<int>(it - g_.inputs.begin())};
      }
      params_.push_back({p, fmt::format("const {}* __restrict__ p{}", is_bool ? "bool" : "float",
                                        params_.size())});
      id = add(std::move(e));
    }
    return expr_of_[v] = id;
  }

  // A constant scalar input (Clip's bounds, Reduce's axes are read elsewhere).
  float constant_scalar(const Node& n, size_t i, float absent) {
    ValueId v = n.input(i);
    if (v == kNoValue) return absent;
    const Value& val = g_.value(v);
    if (!val.is_constant() || val.constant.numel() != 1)
      unsupported(fmt::format("{}: input {} is not a constant scalar", n.name, i));
    return static_cast<float>(val.constant.get_as_double(0));
  }

  void define(const Node& n, int expr) {
    if (n.outputs.empty() || n.outputs[0] == kNoValue) unsupported(n.name + ": no output");
    for (size_t i = 1; i < n.outputs.size(); ++i)
      if (n.outputs[i] != kNoValue && used(n.outputs[i]))
        unsupported(fmt::format("{}: output {} is used", n.name, i));
    if (g_.value(n.outputs[0]).dtype != DType::kFloat32)
      unsupported(
          fmt::format("{}: output is {}", n.name, dtype_name(g_.value(n.outputs[0]).dtype)));
    expr_of_[n.outputs[0]] = expr;
  }
  bool used(ValueId v) const {
    if (std::find(g_.outputs.begin(), g_.outputs.end(), v) != g_.outputs.end()) return true;
    for (const Node& n : g_.nodes())
      if (std::find(n.inputs.begin(), n.inputs.end(), v) != n.inputs.end()) return true;
    return false;
  }

  // The last-axis length a reduction of input 0 of `n` covers, after checking its axes.
  int64_t row_length(const Node& n, int axis) {
    const Shape& s = g_.value(n.inputs[0]).shape;
    if (s.empty()) unsupported(n.name + ": a scalar input");
    if (axis != static_cast<int>(s.size()) - 1)
      unsupported(fmt::format("{}: reduces axis {} of {}, only the last", n.name, axis,
                              shape_to_string(s)));
    return s.back();
  }

  void lower(const Node& n) {
    const std::string& op = n.op_type;
    if (!n.domain.empty()) unsupported(n.name + ": domain " + n.domain);
    if (auto it = unary_templates().find(op); it != unary_templates().end()) {
      if (n.inputs.size() != 1) unsupported(n.name + ": not one input");
      return define(n, compute(it->second, {value(n.inputs[0])}));
    }
    if (auto it = binary_templates().find(op); it != binary_templates().end()) {
      if (n.inputs.size() != 2) unsupported(fmt::format("{}: {} inputs", n.name, n.inputs.size()));
      if (op == "Pow") {
        const Value& e = g_.value(n.inputs[1]);
        if (e.is_constant() && e.constant.numel() == 1 && e.constant.get_as_double(0) == 2.0)
          return define(n, compute("($0 * $0)", {value(n.inputs[0])}));
      }
      return define(n, compute(it->second, {value(n.inputs[0]), value(n.inputs[1])}));
    }
    if (op == "LeakyRelu") {
      const std::string a = literal(n.attr_float("alpha", 0.01f));
      return define(n, compute("($0 < 0.0f ? " + a + " * $0 : $0)", {value(n.inputs[0])}));
    }
    if (op == "Elu") {
      const std::string a = literal(n.attr_float("alpha", 1.0f));
      return define(n, compute("($0 < 0.0f ? " + a + " * expm1f($0) : $0)", {value(n.inputs[0])}));
    }
    if (op == "HardSigmoid") {
      const std::string a = literal(n.attr_float("alpha", 0.2f));
      const std::string b = literal(n.attr_float("beta", 0.5f));
      return define(
          n, compute("fmaxf(0.0f, fminf(1.0f, " + a + " * $0 + " + b + "))", {value(n.inputs[0])}));
    }
    if (op == "Clip") {
      float lo = -INFINITY, hi = INFINITY;
      if (g_.opset < 11) {
        lo = n.attr_float("min", -INFINITY);
        hi = n.attr_float("max", INFINITY);
      } else {
        lo = constant_scalar(n, 1, -INFINITY);
        hi = constant_scalar(n, 2, INFINITY);
      }
      return define(n, compute("fminf(fmaxf($0, " + literal(lo) + "), " + literal(hi) + ")",
                               {value(n.inputs[0])}));
    }
    if (op == "Where") {
      if (n.inputs.size() != 3) unsupported(n.name + ": not three inputs");
      return define(n, compute("($0 != 0.0f ? $1 : $2)",
                               {value(n.inputs[0], true), value(n.inputs[1]), value(n.inputs[2])}));
    }
    if (op == "Cast" || op == "Dropout") {
      // Cast to float of a float, Dropout at inference: the identity.
      if (op == "Cast" && n.attr_int("to", 0) != 1) unsupported(n.name + ": casts to non-float");
      if (op == "Dropout" && n.input(2) != kNoValue) {
        const Value& t = g_.value(n.inputs[2]);
        if (!t.is_constant() || t.constant.get_as_double(0) != 0)
          unsupported(n.name + ": training mode");
      }
      return define(n, compute("$0", {value(n.inputs[0])}));
    }
    if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax" || op == "ReduceMin") {
      const Shape& s = g_.value(n.inputs[0]).shape;
      std::vector<int64_t> axes;
      if (n.input(1) != kNoValue) {
        const Value& a = g_.value(n.inputs[1]);
        if (!a.is_constant()) unsupported(n.name + ": axes not constant");
        axes = a.constant.to_int_vector();
      } else {
        axes = n.attr_ints("axes");
      }
      if (axes.size() != 1) unsupported(n.name + ": reduces other than one axis");
      if (n.attr_int("keepdims", 1) != 1) unsupported(n.name + ": keepdims=0");
      const int64_t len = row_length(n, normalize_axis(axes[0], s.size(), n));
      const int x = value(n.inputs[0]);
      if (op == "ReduceMax") return define(n, reduce(ReduceOp::kMax, x, n, len));
      if (op == "ReduceMin") return define(n, reduce(ReduceOp::kMin, x, n, len));
      const int sum = reduce(ReduceOp::kSum, x, n, len);
      if (op == "ReduceSum") return define(n, sum);
      return define(n, compute("($0 / " + literal(static_cast<float>(len)) + ")", {sum}));
    }
    if (op == "Softmax") {
      const Shape& s = g_.value(n.inputs[0]).shape;
      const int axis = normalize_axis(n.attr_int("axis", g_.opset < 13 ? 1 : -1), s.size(), n);
      const int64_t len = row_length(n, axis);
      const int x = value(n.inputs[0]);
      const int m = reduce(ReduceOp::kMax, x, n, len);
      const int ex = compute("expf($0 - $1)", {x, m});
      const int sum = reduce(ReduceOp::kSum, ex, n, len);
      return define(n, compute("($0 / $1)", {ex, sum}));
    }
    if (op == "LayerNormalization") {
      const Shape& s = g_.value(n.inputs[0]).shape;
      const int axis = normalize_axis(n.attr_int("axis", -1), s.size(), n);
      const int64_t len = row_length(n, axis);
      const std::string inv_n = literal(1.0f / static_cast<float>(len));
      const int x = value(n.inputs[0]);
      const int mean = compute("($0 * " + inv_n + ")", {reduce(ReduceOp::kSum, x, n, len)});
      const int d = compute("($0 - $1)", {x, mean});
      const int var = compute("($0 * " + inv_n + ")",
                              {reduce(ReduceOp::kSum, compute("($0 * $0)", {d}), n, len)});
      const std::string eps = literal(n.attr_float("epsilon", 1e-5f));
      int y = compute("($0 * rsqrtf($1 + " + eps + ") * $2)", {d, var, value(n.inputs[1])});
      if (n.input(2) != kNoValue) y = compute("($0 + $1)", {y, value(n.inputs[2])});
      return define(n, y);
    }
    unsupported(fmt::format("{}: op {} is not generated", n.name, op));
  }

  std::string name(int id) const {
    const Expr& e = exprs_[id];
    if (e.kind == Expr::Kind::kLiteral) return e.code;
    if (e.kind == Expr::Kind::kReduce) return fmt::format("s{}", id);
    return fmt::format("v{}", id);
  }

  // The statements computing `targets` at element `e`: every load and computation they need,
  // in order (reductions are row-scope variables already computed).
  std::string body(const std::vector<int>& targets, const std::string& indent) const {
    std::set<int> needed;
    std::vector<int> stack = targets;
    while (!stack.empty()) {
      int id = stack.back();
      stack.pop_back();
      const Expr& e = exprs_[id];
      if (e.kind == Expr::Kind::kReduce || e.kind == Expr::Kind::kLiteral) continue;
      if (!needed.insert(id).second) continue;
      for (int o : e.operands) stack.push_back(o);
    }
    std::string out;
    for (int id : needed) {
      const Expr& e = exprs_[id];
      if (e.kind == Expr::Kind::kLoad) {
        std::string read = fmt::format("p{}[{}]", e.param, offset(e.shape, domain_));
        if (e.is_bool) read = "(" + read + " ? 1.0f : 0.0f)";
        out += fmt::format("{}const float v{} = {};\n", indent, id, read);
        continue;
      }
      std::string code = e.code;
      for (size_t i = e.operands.size(); i-- > 0;) {
        const std::string hole = "$" + std::to_string(i);
        for (size_t at = code.find(hole); at != std::string::npos; at = code.find(hole, at))
          code.replace(at, hole.size(), name(e.operands[i]));
      }
      out += fmt::format("{}const float v{} = {};\n", indent, id, code);
    }
    return out;
  }

  std::string writes(const std::string& indent) const {
    std::string out;
    for (size_t i = 0; i < g_.outputs.size(); ++i) {
      const ValueId v = g_.outputs[i];
      const int param = static_cast<int>(params_.size() - g_.outputs.size() + i);
      out += fmt::format("{}p{}[{}] = {};\n", indent, param, offset(g_.value(v).shape, domain_),
                         name(expr_of_.at(v)));
    }
    return out;
  }

  std::vector<int> output_exprs() const {
    std::vector<int> out;
    for (ValueId v : g_.outputs) out.push_back(expr_of_.at(v));
    return out;
  }

  std::string emit(bool rows) const {
    std::string params;
    for (const auto& [p, decl] : params_) params += (params.empty() ? "" : ", ") + decl;
    std::string s = fmt::format(
        "// collage cuda-gen ({}): {} nodes, domain {}\n"
        "extern \"C\" __global__ void __launch_bounds__({}) {}({}) {{\n",
        kCodegenVersion, g_.num_nodes(), shape_to_string(domain_), out_.block, kEntry, params);
    if (!rows) {
      s += fmt::format(
          "  for (long long e = (long long)blockIdx.x * {0} + threadIdx.x; e < {1}LL;\n"
          "       e += (long long)gridDim.x * {0}) {{\n",
          out_.block, out_.work);
      s += body(output_exprs(), "    ");
      s += writes("    ");
      s += "  }\n}\n";
      return s;
    }
    const int64_t n = domain_.back();
    s += fmt::format("  __shared__ float red[{}];\n", out_.block);
    s += fmt::format("  for (long long r = blockIdx.x; r < {}LL; r += gridDim.x) {{\n", out_.work);
    s += fmt::format("    const long long row = r * {}LL;\n", n);
    for (size_t id = 0; id < exprs_.size(); ++id) {
      const Expr& e = exprs_[id];
      if (e.kind != Expr::Kind::kReduce) continue;
      const char* init = e.reduce == ReduceOp::kSum   ? "0.0f"
                         : e.reduce == ReduceOp::kMax ? "__int_as_float(0xff800000)"
                                                      : "__int_as_float(0x7f800000)";
      const char* combine = e.reduce == ReduceOp::kSum   ? "({0} + {1})"
                            : e.reduce == ReduceOp::kMax ? "fmaxf({0}, {1})"
                                                         : "fminf({0}, {1})";
      s += fmt::format("    float s{};\n    {{\n      float acc = {};\n", id, init);
      s += fmt::format("      for (long long j = threadIdx.x; j < {}LL; j += {}) {{\n", n,
                       out_.block);
      s += "        const long long e = row + j;\n";
      s += body({e.operands[0]}, "        ");
      s += "        acc = " + fmt::format(fmt::runtime(combine), "acc", name(e.operands[0])) +
           ";\n      }\n";
      s += "      red[threadIdx.x] = acc;\n      __syncthreads();\n";
      s += fmt::format("      for (int half = {} / 2; half > 0; half >>= 1) {{\n", out_.block);
      s += "        if (threadIdx.x < half) red[threadIdx.x] = " +
           fmt::format(fmt::runtime(combine), "red[threadIdx.x]", "red[threadIdx.x + half]") +
           ";\n        __syncthreads();\n      }\n";
      s += fmt::format("      s{} = red[0];\n      __syncthreads();\n    }}\n", id);
    }
    s += fmt::format("    for (long long j = threadIdx.x; j < {}LL; j += {}) {{\n", n, out_.block);
    s += "      const long long e = row + j;\n";
    s += body(output_exprs(), "      ");
    s += writes("      ");
    s += "    }\n  }\n}\n";
    return s;
  }

  const Graph& g_;
  std::vector<Expr> exprs_;
  std::map<ValueId, int> expr_of_;
  std::vector<std::pair<KernelParam, std::string>> params_;  // with their declarations
  std::vector<std::pair<std::string, int64_t>> reduced_lengths_;
  Shape domain_;
  GeneratedKernel out_;
};

}  // namespace

bool supports_node(const Graph& graph, const Node& node) {
  if (!node.domain.empty()) return false;
  const std::string& op = node.op_type;
  if (!unary_templates().count(op) && !binary_templates().count(op) && !other_ops().count(op))
    return false;
  if (node.outputs.empty() || node.outputs[0] == kNoValue) return false;
  if (graph.value(node.outputs[0]).dtype != DType::kFloat32) return false;
  // The data inputs are float (Where's condition bool, Reduce's axes integer).
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    ValueId v = node.inputs[i];
    if (v == kNoValue) continue;
    const DType t = graph.value(v).dtype;
    if (op == "Where" && i == 0) {
      if (t != DType::kBool) return false;
    } else if (op.rfind("Reduce", 0) == 0 && i == 1) {
      continue;
    } else if (op == "Dropout" && i > 0) {
      continue;
    } else if (t != DType::kFloat32) {
      return false;
    }
  }
  return true;
}

GeneratedKernel generate(const Graph& region) {
  return Builder(region).build();
}

}  // namespace collage::cuda_gen
