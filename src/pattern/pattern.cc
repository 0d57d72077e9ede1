#include "collage/pattern.h"

#include <algorithm>

#include "pattern/pattern_node.h"

namespace collage {
namespace {

using detail::PatternNode;
using NodeSets = std::vector<std::vector<NodeId>>;

Pattern make(PatternNode node) {
  return Pattern(std::make_shared<const PatternNode>(std::move(node)));
}

// Every way to extend each partial set in `sets` by one set from `options`.
NodeSets cross(const NodeSets& sets, const NodeSets& options) {
  NodeSets out;
  for (const auto& s : sets)
    for (const auto& o : options) {
      std::vector<NodeId> merged = s;
      merged.insert(merged.end(), o.begin(), o.end());
      out.push_back(std::move(merged));
    }
  return out;
}

NodeSets match_node(const PatternNode& p, const Graph& g, ValueId v) {
  switch (p.kind) {
    case PatternNode::Kind::kAbsent:
      return v == kNoValue ? NodeSets{{}} : NodeSets{};
    case PatternNode::Kind::kAny:
      return v != kNoValue ? NodeSets{{}} : NodeSets{};
    case PatternNode::Kind::kConstant:
      return v != kNoValue && g.value(v).is_constant() ? NodeSets{{}} : NodeSets{};
    case PatternNode::Kind::kAlt: {
      NodeSets out;
      for (const Pattern& alt : p.inputs) {
        NodeSets m = match_node(alt.node(), g, v);
        out.insert(out.end(), m.begin(), m.end());
      }
      return out;
    }
    case PatternNode::Kind::kOp: {
      if (v == kNoValue) return {};
      const Value& value = g.value(v);
      if (value.is_constant() || value.producer < 0) return {};
      const Node& node = g.node(value.producer);
      if (std::find(p.op_types.begin(), p.op_types.end(), node.op_type) == p.op_types.end())
        return {};
      if (!node.domain.empty() && node.domain != "ai.onnx") return {};
      for (const auto& predicate : p.predicates)
        if (!predicate(g, node)) return {};
      NodeSets sets = {{value.producer}};
      for (size_t i = 0; i < p.inputs.size() && !sets.empty(); ++i)
        sets = cross(sets, match_node(p.inputs[i].node(), g, node.input(i)));
      return sets;
    }
  }
  return {};
}

std::string describe(const PatternNode& p) {
  switch (p.kind) {
    case PatternNode::Kind::kAny:
      return "*";
    case PatternNode::Kind::kConstant:
      return "const";
    case PatternNode::Kind::kAbsent:
      return "none";
    case PatternNode::Kind::kAlt: {
      std::string s = "(";
      for (size_t i = 0; i < p.inputs.size(); ++i)
        s += (i ? " | " : "") + describe(p.inputs[i].node());
      return s + ")";
    }
    case PatternNode::Kind::kOp: {
      std::string s;
      for (size_t i = 0; i < p.op_types.size(); ++i) s += (i ? "|" : "") + p.op_types[i];
      if (!p.predicate_names.empty()) {
        s += "[";
        for (size_t i = 0; i < p.predicate_names.size(); ++i)
          s += (i ? ", " : "") + p.predicate_names[i];
        s += "]";
      }
      if (p.inputs.empty()) return s;
      s += "(";
      for (size_t i = 0; i < p.inputs.size(); ++i)
        s += (i ? ", " : "") + describe(p.inputs[i].node());
      return s + ")";
    }
  }
  return "?";
}

}  // namespace

Pattern Pattern::where(NodePredicate predicate, std::string what) const {
  if (node_->kind != PatternNode::Kind::kOp)
    fail(ErrorKind::kInternal, "Pattern::where applies to op patterns only");
  PatternNode copy = *node_;
  copy.predicates.push_back(std::move(predicate));
  copy.predicate_names.push_back(std::move(what));
  return make(std::move(copy));
}

Pattern Pattern::operator|(const Pattern& other) const {
  PatternNode alt;
  alt.kind = PatternNode::Kind::kAlt;
  alt.inputs = {*this, other};
  return make(std::move(alt));
}

std::vector<std::vector<NodeId>> Pattern::match(const Graph& graph, ValueId value) const {
  NodeSets sets = match_node(*node_, graph, value);
  for (auto& s : sets) {
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
  }
  std::sort(sets.begin(), sets.end());
  sets.erase(std::unique(sets.begin(), sets.end()), sets.end());
  return sets;
}

std::string Pattern::to_string() const {
  return describe(*node_);
}

Pattern any() {
  return make(PatternNode{PatternNode::Kind::kAny, {}, {}, {}, {}});
}
Pattern constant() {
  return make(PatternNode{PatternNode::Kind::kConstant, {}, {}, {}, {}});
}
Pattern absent() {
  return make(PatternNode{PatternNode::Kind::kAbsent, {}, {}, {}, {}});
}
Pattern maybe(const Pattern& p) {
  return p | absent();
}

Pattern op(std::string op_type, std::vector<Pattern> inputs) {
  return op_in({std::move(op_type)}, std::move(inputs));
}

Pattern op_in(std::vector<std::string> op_types, std::vector<Pattern> inputs) {
  PatternNode node;
  node.kind = PatternNode::Kind::kOp;
  node.op_types = std::move(op_types);
  node.inputs = std::move(inputs);
  return make(std::move(node));
}

Pattern optional(const Pattern& inner, const std::function<Pattern(const Pattern&)>& wrap) {
  return wrap(inner) | inner;
}

namespace pred {

NodePredicate attr_int_is(std::string name, int64_t value, int64_t default_value) {
  return [=](const Graph&, const Node& n) { return n.attr_int(name, default_value) == value; };
}

NodePredicate input_rank_is(size_t input, int rank) {
  return [=](const Graph& g, const Node& n) {
    return n.input(input) != kNoValue &&
           static_cast<int>(g.value(n.input(input)).shape.size()) == rank;
  };
}

NodePredicate input_rank_in(size_t input, std::set<int> ranks) {
  return [=](const Graph& g, const Node& n) {
    return n.input(input) != kNoValue &&
           ranks.count(static_cast<int>(g.value(n.input(input)).shape.size())) > 0;
  };
}

NodePredicate input_dtype_is(size_t input, DType dtype) {
  return [=](const Graph& g, const Node& n) {
    return n.input(input) != kNoValue && g.value(n.input(input)).dtype == dtype;
  };
}

NodePredicate output_dtype_is(size_t output, DType dtype) {
  return [=](const Graph& g, const Node& n) {
    return output < n.outputs.size() && n.outputs[output] != kNoValue &&
           g.value(n.outputs[output]).dtype == dtype;
  };
}

}  // namespace pred
}  // namespace collage
