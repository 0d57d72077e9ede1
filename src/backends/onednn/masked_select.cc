// A Where of a computed condition, with the nodes computing it, as one step (masked_select.h
// says why).
#include "backends/onednn/masked_select.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <set>

#include "backends/onednn/dnnl_common.h"
#include "ops/elementwise_util.h"

namespace collage::onednn {
namespace {

using ops::elem::BroadcastPlan;
using ops::elem::kParallelThreshold;

// A unit is evaluated in runs of kChunk elements, each node's result for the run in a
// buffer of the thread's stack (kMaxUnitNodes of them: 32 KiB), so no bool tensor is ever
// written out.
constexpr int kChunk = 512;
constexpr size_t kMaxUnitNodes = 16;

bool is_bool(const Graph& g, ValueId v) {
  return v != kNoValue && g.value(v).dtype == DType::kBool;
}

bool known(const Graph& g, ValueId v) {
  return v != kNoValue && g.value(v).shape_known;
}

enum class Op {
  kLess,
  kGreater,
  kLessOrEqual,
  kGreaterOrEqual,
  kEqual,  // float, float -> bool
  kIsNaN,
  kIsInf,
  kFloatToBool,  // float -> bool
  kNot,
  kAnd,
  kOr,
  kXor,
  kBoolCopy,     // bools -> bool
  kWhere,        // bool, float, float -> float
  kWiden,        // float -> float (as float64)
  kBoolToFloat,  // bool -> float
};

// The ops a unit names by their op type alone (a Cast's op depends on its types).
const std::map<std::string, Op>& named_ops() {
  static const std::map<std::string, Op> table = {{"Less", Op::kLess},
                                                  {"Greater", Op::kGreater},
                                                  {"LessOrEqual", Op::kLessOrEqual},
                                                  {"GreaterOrEqual", Op::kGreaterOrEqual},
                                                  {"Equal", Op::kEqual},
                                                  {"IsNaN", Op::kIsNaN},
                                                  {"IsInf", Op::kIsInf},
                                                  {"Not", Op::kNot},
                                                  {"And", Op::kAnd},
                                                  {"Or", Op::kOr},
                                                  {"Xor", Op::kXor},
                                                  {"Where", Op::kWhere}};
  return table;
}

// The comparisons lead the enum (kLess .. kEqual).
bool is_comparison(const std::string& op_type) {
  auto it = named_ops().find(op_type);
  return it != named_ops().end() && it->second <= Op::kEqual;
}

// Whether `n` casts a float32 to float64: exact, and what PyTorch's nan_to_num export does
// before IsInf; inside a unit the value stays float32.
bool widen_node(const Graph& g, const Node& n) {
  return n.domain.empty() && n.op_type == "Cast" && n.inputs.size() == 1 && n.outputs.size() == 1 &&
         is_f32(g, n.input(0)) && known(g, n.input(0)) && n.outputs[0] != kNoValue &&
         g.value(n.outputs[0]).dtype == DType::kFloat64;
}

// A float64 value a unit may read: one a widening Cast made.
bool is_widened(const Graph& g, ValueId v) {
  if (v == kNoValue || g.value(v).dtype != DType::kFloat64) return false;
  const NodeId p = g.value(v).producer;
  return p >= 0 && widen_node(g, g.node(p));
}

// Whether `n` computes a bool of a condition: a comparison of two floats, IsNaN/IsInf of one
// (or of a widened one), logic over bools, a Cast to bool of a float or a bool.
bool condition_node(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.outputs.size() != 1 || !is_bool(g, n.outputs[0]) ||
      !known(g, n.outputs[0]))
    return false;
  const std::string& t = n.op_type;
  auto all = [&](size_t count, bool (*type)(const Graph&, ValueId)) {
    if (n.inputs.size() != count) return false;
    for (ValueId v : n.inputs)
      if (!type(g, v) || !known(g, v)) return false;
    return true;
  };
  if (is_comparison(t)) return all(2, is_f32);
  if (t == "IsNaN" || t == "IsInf") return all(1, is_f32) || all(1, is_widened);
  if (t == "Not") return all(1, is_bool);
  if (t == "And" || t == "Or" || t == "Xor") return all(2, is_bool);
  if (t == "Cast") return all(1, is_f32) || all(1, is_bool);
  return false;
}

// Whether `n` can head a unit: a Where choosing between two floats, or a Cast of a bool to
// float32.
bool root_node(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.outputs.size() != 1 || !is_f32(g, n.outputs[0]) ||
      !known(g, n.outputs[0]))
    return false;
  if (n.op_type == "Where")
    return n.inputs.size() == 3 && is_bool(g, n.input(0)) && is_f32(g, n.input(1)) &&
           is_f32(g, n.input(2)) && known(g, n.input(0)) && known(g, n.input(1)) &&
           known(g, n.input(2));
  return n.op_type == "Cast" && n.inputs.size() == 1 && is_bool(g, n.input(0)) &&
         known(g, n.input(0));
}

Op op_of(const Graph& g, const Node& n) {
  if (n.op_type == "Cast") {
    if (widen_node(g, n)) return Op::kWiden;
    if (is_f32(g, n.outputs[0])) return Op::kBoolToFloat;
    return is_bool(g, n.input(0)) ? Op::kBoolCopy : Op::kFloatToBool;
  }
  return named_ops().at(n.op_type);
}

// An operand of a node: the result of an earlier node of the unit (its index) or an operand
// of the step.
struct Ref {
  int node = -1;
  int operand = -1;
};

struct Instruction {
  Op op;
  std::array<Ref, 3> in;
  bool negative = true, positive = true;  // IsInf's
};

// What the step reads from outside the unit: a float32 value of the output's layout (a
// memory argument), one broadcast to the output (read row-major, expanded each run), or a
// constant (expanded at compile; a scalar stays one element).
struct Operand {
  enum class Kind { kMemory, kBroadcast, kConstant } kind = Kind::kMemory;
  bool is_bool = false;
  BroadcastPlan plan;          // kBroadcast
  std::vector<float> floats;   // kConstant float / kBroadcast's expansion
  std::vector<uint8_t> bools;  // kConstant bool
  bool advances = true;        // false: one element for every output element
};

// An instruction's input over a run: one element per output element, or one for all (a
// scalar). The loops below take each case apart, so that every one of them vectorizes.
template <typename T>
struct In {
  const T* p;
  bool step;
};

template <typename A, typename O, typename F>
void map1(In<A> a, O* out, int m, F f) {
  if (!a.step) {
    std::fill_n(out, m, static_cast<O>(f(*a.p)));
    return;
  }
  for (int j = 0; j < m; ++j) out[j] = static_cast<O>(f(a.p[j]));
}

template <typename A, typename B, typename O, typename F>
void map2(In<A> a, In<B> b, O* out, int m, F f) {
  if (a.step && b.step) {
    for (int j = 0; j < m; ++j) out[j] = static_cast<O>(f(a.p[j], b.p[j]));
  } else if (a.step) {
    const B y = *b.p;
    for (int j = 0; j < m; ++j) out[j] = static_cast<O>(f(a.p[j], y));
  } else if (b.step) {
    const A x = *a.p;
    for (int j = 0; j < m; ++j) out[j] = static_cast<O>(f(x, b.p[j]));
  } else {
    std::fill_n(out, m, static_cast<O>(f(*a.p, *b.p)));
  }
}

// Where: out[j] = keep[j] ? x[j] : y[j].
void select(In<uint8_t> keep, In<float> x, In<float> y, float* out, int m) {
  if (!keep.step) return map1(*keep.p ? x : y, out, m, [](float v) { return v; });
  const uint8_t* c = keep.p;
  if (x.step && y.step) {
    for (int j = 0; j < m; ++j) out[j] = c[j] ? x.p[j] : y.p[j];
  } else if (x.step) {
    const float v = *y.p;
    for (int j = 0; j < m; ++j) out[j] = c[j] ? x.p[j] : v;
  } else if (y.step) {
    const float v = *x.p;
    for (int j = 0; j < m; ++j) out[j] = c[j] ? v : y.p[j];
  } else {
    const float u = *x.p, v = *y.p;
    for (int j = 0; j < m; ++j) out[j] = c[j] ? u : v;
  }
}

class MaskedSelectStep {
 public:
  MaskedSelectStep(std::vector<Instruction> program, std::vector<Operand> operands, int64_t numel)
      : program_(std::move(program)), operands_(std::move(operands)), numel_(numel) {}

  // Runs are never concurrent for one step (a program runs one run at a time; a lane runs
  // other steps), so the broadcast operands' expansions live in the step.
  dnnl_status_t run(const dnnl_exec_arg_t* args, int count) {
    float* dst = custom_step_data(args, count, DNNL_ARG_DST);
    std::vector<const void*> base(operands_.size());
    for (size_t k = 0; k < operands_.size(); ++k) {
      Operand& o = operands_[k];
      const float* memory =
          custom_step_data(args, count, DNNL_ARG_MULTIPLE_SRC + static_cast<int>(k));
      if (o.kind == Operand::Kind::kMemory) {
        base[k] = memory;
      } else if (o.kind == Operand::Kind::kBroadcast) {
        ops::elem::broadcast_copy(o.plan, memory, o.floats.data());
        base[k] = o.floats.data();
      } else {
        base[k] = o.is_bool ? static_cast<const void*>(o.bools.data()) : o.floats.data();
      }
    }
    const int64_t chunks = (numel_ + kChunk - 1) / kChunk;
    // Under kParallelThreshold elements one thread (a lane of a concurrent stage is one
    // thread too).
    const int team = omp_in_parallel() || numel_ < kParallelThreshold ? 1 : omp_get_max_threads();
#pragma omp parallel num_threads(team)
    {
      alignas(64) float results[kMaxUnitNodes][kChunk];
      const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
      for (int64_t c = chunks * t / threads; c < chunks * (t + 1) / threads; ++c) {
        const int64_t at = c * kChunk;
        const int m = static_cast<int>(std::min<int64_t>(kChunk, numel_ - at));
        for (size_t i = 0; i < program_.size(); ++i) {
          float* out = i + 1 == program_.size() ? dst + at : results[i];
          eval(program_[i], base, at, m, results, out);
        }
      }
    }
    return dnnl_success;
  }

 private:
  // Whether `r` holds one element per output element (else one for all).
  bool steps(const Ref& r) const {
    return r.node >= 0 || operands_[r.operand].advances;
  }

  template <typename T>
  const T* input(const Ref& r, const std::vector<const void*>& base, int64_t at,
                 const float (*results)[kChunk]) const {
    if (r.node >= 0) return reinterpret_cast<const T*>(results[r.node]);
    const T* p = static_cast<const T*>(base[r.operand]);
    return operands_[r.operand].advances ? p + at : p;
  }

  // Instruction `ins` over elements [at, at + m).
  void eval(const Instruction& ins, const std::vector<const void*>& base, int64_t at, int m,
            const float (*results)[kChunk], float* out) const {
    auto f = [&](int k) {
      return In<float>{input<float>(ins.in[k], base, at, results), steps(ins.in[k])};
    };
    auto b = [&](int k) {
      return In<uint8_t>{input<uint8_t>(ins.in[k], base, at, results), steps(ins.in[k])};
    };
    uint8_t* bout = reinterpret_cast<uint8_t*>(out);
    auto logic = [&](auto op) {
      map2(b(0), b(1), bout, m, [op](uint8_t x, uint8_t y) { return op(x != 0, y != 0); });
    };
    switch (ins.op) {
      case Op::kLess:
        return map2(f(0), f(1), bout, m, [](float x, float y) { return x < y; });
      case Op::kGreater:
        return map2(f(0), f(1), bout, m, [](float x, float y) { return x > y; });
      case Op::kLessOrEqual:
        return map2(f(0), f(1), bout, m, [](float x, float y) { return x <= y; });
      case Op::kGreaterOrEqual:
        return map2(f(0), f(1), bout, m, [](float x, float y) { return x >= y; });
      case Op::kEqual:
        return map2(f(0), f(1), bout, m, [](float x, float y) { return x == y; });
      case Op::kAnd:
        return logic([](bool x, bool y) { return x && y; });
      case Op::kOr:
        return logic([](bool x, bool y) { return x || y; });
      case Op::kXor:
        return logic([](bool x, bool y) { return x != y; });
      case Op::kIsNaN:
        return map1(f(0), bout, m, [](float x) { return std::isnan(x); });
      case Op::kIsInf: {
        const bool positive = ins.positive, negative = ins.negative;
        return map1(f(0), bout, m, [positive, negative](float x) {
          return std::isinf(x) && (x > 0 ? positive : negative);
        });
      }
      case Op::kFloatToBool:  // NaN is true, as a cast
        return map1(f(0), bout, m, [](float x) { return x != 0.0f; });
      case Op::kNot:
        return map1(b(0), bout, m, [](uint8_t x) { return x == 0; });
      case Op::kBoolCopy:
        return map1(b(0), bout, m, [](uint8_t x) { return x != 0; });
      case Op::kWiden:
        return map1(f(0), out, m, [](float x) { return x; });
      case Op::kBoolToFloat:
        return map1(b(0), out, m, [](uint8_t x) { return x ? 1.0f : 0.0f; });
      case Op::kWhere:
        return select(b(0), f(1), f(2), out, m);
    }
  }

  std::vector<Instruction> program_;
  std::vector<Operand> operands_;
  int64_t numel_;
};

// Every node of `g` reading a value `from` reaches through bool values only, up to the
// roots: where the unit holding a condition node is headed.
std::vector<NodeId> roots_below(const Graph& g, const Consumers& consumers, NodeId from) {
  std::vector<NodeId> roots, frontier = {from};
  std::set<NodeId> seen = {from};
  while (!frontier.empty() && seen.size() <= 2 * kMaxUnitNodes) {
    const NodeId n = frontier.back();
    frontier.pop_back();
    for (NodeId r : consumers[g.node(n).outputs[0]]) {
      if (!seen.insert(r).second) continue;
      if (root_node(g, g.node(r)))
        roots.push_back(r);
      else if (condition_node(g, g.node(r)) || widen_node(g, g.node(r)))
        frontier.push_back(r);
    }
  }
  return roots;
}

}  // namespace

const std::vector<std::string>& masked_select_ops() {
  static const std::vector<std::string> ops = [] {
    std::vector<std::string> v = {"Cast"};
    for (const auto& [name, op] : named_ops()) v.push_back(name);
    return v;
  }();
  return ops;
}

std::optional<std::vector<NodeId>> masked_select_nodes(const Graph& g, const Consumers& consumers,
                                                       NodeId root) {
  const Node& r = g.node(root);
  if (!root_node(g, r)) return std::nullopt;
  std::set<NodeId> unit = {root};
  std::vector<ValueId> pending = {r.input(0)};
  while (!pending.empty()) {
    const ValueId v = pending.back();
    pending.pop_back();
    const Value& value = g.value(v);
    if (value.is_constant() && value.dtype == DType::kBool) continue;
    const NodeId p = value.producer;
    if (p < 0 || !(condition_node(g, g.node(p)) || widen_node(g, g.node(p))))
      return std::nullopt;  // a bool from outside, or a float64 no widening Cast made
    if (!unit.insert(p).second) continue;
    if (unit.size() > kMaxUnitNodes) return std::nullopt;
    for (ValueId in : g.node(p).inputs)
      if (is_bool(g, in) || is_widened(g, in)) pending.push_back(in);
  }
  // The bools (and widened floats) stay inside: each is read by the unit alone.
  for (NodeId n : unit) {
    if (n == root) continue;
    const ValueId out = g.node(n).outputs[0];
    if (is_graph_output(g, out)) return std::nullopt;
    for (NodeId reader : consumers[out])
      if (!unit.count(reader)) return std::nullopt;
  }
  return std::vector<NodeId>(unit.begin(), unit.end());
}

bool masked_select_kind(const Graph& g, const Node& n) {
  return root_node(g, n) || condition_node(g, n) || widen_node(g, n);
}

std::optional<std::vector<NodeId>> masked_unit_holding(const Graph& g, const Consumers& consumers,
                                                       NodeId n) {
  const Node& node = g.node(n);
  if (root_node(g, node))
    if (std::optional<std::vector<NodeId>> unit = masked_select_nodes(g, consumers, n)) return unit;
  if (!condition_node(g, node) && !widen_node(g, node)) return std::nullopt;
  for (NodeId root : roots_below(g, consumers, n)) {
    std::optional<std::vector<NodeId>> unit = masked_select_nodes(g, consumers, root);
    if (unit && std::binary_search(unit->begin(), unit->end(), n)) return unit;
  }
  return std::nullopt;
}

std::vector<Match> masked_select_matches(const Graph& g) {
  const Consumers consumers = g.consumers();
  std::vector<Match> out;
  for (size_t n = 0; n < g.num_nodes(); ++n)
    if (std::optional<std::vector<NodeId>> unit =
            masked_select_nodes(g, consumers, static_cast<NodeId>(n)))
      out.push_back(Match{*unit});
  return out;
}

bool masked_select_group(const Graph& sub) {
  if (sub.num_nodes() == 0) return false;
  const NodeId last = static_cast<NodeId>(sub.num_nodes() - 1);
  std::optional<std::vector<NodeId>> unit = masked_select_nodes(sub, sub.consumers(), last);
  return unit && unit->size() == sub.num_nodes();
}

void emit_masked_select(const Graph& sub, ValueMemories& values) {
  if (!masked_select_group(sub))
    fail(ErrorKind::kUnsupported, "onednn: not one Where of a computed condition with its nodes");
  const Node& root = sub.node(static_cast<NodeId>(sub.num_nodes() - 1));
  const ValueId y = root.outputs[0];
  const Shape& shape = sub.value(y).shape;
  const int64_t numel = shape_numel(shape);

  // The step's operands (the values the unit reads from outside), its program in graph order.
  std::vector<ValueId> outside;
  std::map<ValueId, int> made_by;
  std::vector<Instruction> program;
  for (size_t i = 0; i < sub.num_nodes(); ++i) {
    const Node& n = sub.node(static_cast<NodeId>(i));
    Instruction ins{op_of(sub, n), {}};
    if (ins.op == Op::kIsInf) {
      ins.negative = n.attr_int("detect_negative", 1) != 0;
      ins.positive = n.attr_int("detect_positive", 1) != 0;
    }
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const ValueId v = n.inputs[k];
      if (auto it = made_by.find(v); it != made_by.end()) {
        ins.in[k].node = it->second;
        continue;
      }
      auto at = std::find(outside.begin(), outside.end(), v);
      ins.in[k].operand = static_cast<int>(at - outside.begin());
      if (at == outside.end()) outside.push_back(v);
    }
    made_by[n.outputs[0]] = static_cast<int>(i);
    program.push_back(ins);
  }

  // Elementwise in any layout when every value read has the output's shape and every constant
  // is one element: the output's layout is then the first value's (a conv's blocked one stays;
  // a padded block is no flat array, and the padding must stay zero). Else row-major.
  bool same_shapes = true;
  for (ValueId v : outside) {
    const Value& value = sub.value(v);
    if (value.is_constant() ? value.constant.numel() != 1 : value.shape != shape)
      same_shapes = false;
  }
  dnnl::memory::desc md = plain_md(shape);
  for (ValueId v : outside)
    if (same_shapes && !sub.value(v).is_constant()) {
      if (!values.has(v))
        fail(ErrorKind::kUnsupported, "onednn: Where input is not a kernel input");
      const dnnl::memory m = values.as_is(v, shape);
      if (flat_f32(m, numel)) md = m.get_desc();
      break;
    }

  std::vector<Operand> operands(outside.size());
  std::vector<std::pair<int, dnnl::memory>> args;
  for (size_t k = 0; k < outside.size(); ++k) {
    const Value& value = sub.value(outside[k]);
    Operand& o = operands[k];
    o.is_bool = value.dtype == DType::kBool;
    if (value.is_constant()) {
      o.kind = Operand::Kind::kConstant;
      o.advances = value.constant.numel() != 1;
      if (!o.advances && o.is_bool)
        o.bools = {static_cast<uint8_t>(value.constant.data<bool>()[0])};
      else if (!o.advances)
        o.floats = {value.constant.data<float>()[0]};
      else if (o.is_bool)
        o.bools = ops::elem::broadcast_elements<bool, uint8_t>(value.constant, shape);
      else
        o.floats = ops::elem::broadcast_elements<float>(value.constant, shape);
      continue;
    }
    if (!values.has(outside[k]))
      fail(ErrorKind::kUnsupported, "onednn: Where input is not a kernel input");
    dnnl::memory m;
    if (value.shape == shape) {
      m = values.read(outside[k], md);
      if (!flat_f32(m, numel))
        fail(ErrorKind::kUnsupported, "onednn: Where input is no flat array");
    } else {
      o.kind = Operand::Kind::kBroadcast;
      o.plan = ops::elem::make_broadcast_plan(shape, {value.shape});
      o.floats.resize(static_cast<size_t>(numel));
      m = values.read(outside[k], plain_md(value.shape));
      if (!flat_f32(m, shape_numel(value.shape)))
        fail(ErrorKind::kUnsupported, "onednn: Where input is no flat array");
    }
    args.emplace_back(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(k), m);
  }
  dnnl::memory dst = values.destination(y, md);
  if (!flat_f32(dst, numel)) dst = values.fresh_destination(y, md);
  args.emplace_back(DNNL_ARG_DST, dst);
  auto step = std::make_shared<MaskedSelectStep>(std::move(program), std::move(operands), numel);
  values.program().add_custom(
      kMaskedSelectStep,
      [step](const dnnl_exec_arg_t* a, int count) { return step->run(a, count); }, std::move(args),
      dnnl::primitive::kind::eltwise);
  values.produced(y, dst);
}

}  // namespace collage::onednn
