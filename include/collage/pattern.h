// What a backend can run, declared as data: patterns over the IR (in the spirit of TVM's
// dataflow patterns) and fusion rules that grow candidate groups from op kinds.
//
//   op("Conv", {any(), constant(), maybe(constant())})            a Conv with constant weights
//   optional(conv, [](Pattern x) { return op("Relu", {x}); })     ... with or without a Relu
//   op("Add", {conv, any()}) | op("Add", {any(), conv})           alternatives
//   op("Conv").where(pred::attr_int_is("group", 1))               predicates on the node
//
// A pattern is anchored at its root (the value it produces). Matching enumerates every way
// the pattern covers the graph there; each gives a node set. Values inside the set that are
// also read outside it become extra outputs of the kernel (multi-output candidates); an
// entry's `check` callback vetoes matches the backend can't compile.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "collage/graph.h"
#include "collage/op_registry.h"

namespace collage {

namespace detail {
struct PatternNode;
}

using NodePredicate = std::function<bool(const Graph& graph, const Node& node)>;

class Pattern {
 public:
  explicit Pattern(std::shared_ptr<const detail::PatternNode> node) : node_(std::move(node)) {}

  // Adds a predicate the matched node must satisfy (only on op patterns). `what` names it
  // in listings (`collage backends`).
  Pattern where(NodePredicate predicate, std::string what = "constraint") const;
  Pattern operator|(const Pattern& other) const;
  // Every node set this pattern can cover with its root producing `value`. Each set is
  // sorted and unique. Empty when it does not match.
  std::vector<std::vector<NodeId>> match(const Graph& graph, ValueId value) const;
  std::string to_string() const;
  const detail::PatternNode& node() const { return *node_; }

 private:
  std::shared_ptr<const detail::PatternNode> node_;
};

// Any value; it stays outside the match (an input of the kernel).
Pattern any();
// A constant value (initializer / folded): weights a backend may pack at compile time.
Pattern constant();
// An omitted optional input.
Pattern absent();
// `p` or an omitted optional input.
Pattern maybe(const Pattern& p);
// A node of this type whose inputs match `inputs` positionally; inputs beyond the list are
// any() (present or absent).
Pattern op(std::string op_type, std::vector<Pattern> inputs = {});
// A node whose type is one of `op_types`.
Pattern op_in(std::vector<std::string> op_types, std::vector<Pattern> inputs = {});
// `wrap(inner) | inner`: an optional trailing op, e.g. an optional Relu after a Conv.
Pattern optional(const Pattern& inner, const std::function<Pattern(const Pattern&)>& wrap);

// Predicates for Pattern::where.
namespace pred {
NodePredicate attr_int_is(std::string name, int64_t value, int64_t default_value);
NodePredicate input_rank_is(size_t input, int rank);
NodePredicate input_rank_in(size_t input, std::set<int> ranks);
NodePredicate input_dtype_is(size_t input, DType dtype);
NodePredicate output_dtype_is(size_t output, DType dtype);
}  // namespace pred

// A node set proposed for a backend, with the graph it lives in.
struct Match {
  std::vector<NodeId> nodes;  // sorted
};

struct PatternEntry {
  std::string name;
  Pattern pattern;
  // Vetoes a match (e.g. "the conv's interior output must not be read outside").
  std::function<bool(const Graph& graph, const Match& match)> check;
};

// Generates candidate node sets from the graph's structure rather than a fixed list.
struct FusionRule {
  std::string name;
  std::string description;
  std::function<std::vector<Match>(const Graph& graph)> generate;
};

// "One `head` op followed by a chain of up to `max_tail` ops of the `tail` kinds, each
// reading the previous one" (a Conv/MatMul with its bias/activation/residual epilogue).
// `accept_node` filters tail nodes (e.g. only ops the backend's post-ops can express).
FusionRule fuse_tail(std::string name, std::set<std::string> head_ops, std::set<OpKind> tail,
                     int max_tail, std::function<bool(const Graph&, const Node&)> accept_node);
// "Connected convex regions of up to `max_nodes` nodes whose ops all have one of `kinds`":
// what a code generator can fuse into one loop nest.
FusionRule fuse_region(std::string name, std::set<OpKind> kinds, int max_nodes,
                       std::function<bool(const Graph&, const Node&)> accept_node);

// Values a node set reads from outside (in first-use order) and values it produces that are
// read outside or are graph outputs (in production order): the kernel's boundary.
struct Boundary {
  std::vector<ValueId> inputs;  // non-constant values only; constants stay inside
  std::vector<ValueId> outputs;
};
Boundary boundary_of(const Graph& graph, const std::vector<NodeId>& nodes);
// True when no path leaves the set and comes back into it (the set can run as one kernel).
bool is_convex(const Graph& graph, const std::vector<NodeId>& nodes);
// A standalone graph of `nodes` (sorted ids of `graph`): its inputs/outputs are the
// boundary's, constants are copied in (sharing storage). Node and value names are kept.
Graph extract_subgraph(const Graph& graph, const std::vector<NodeId>& nodes);

}  // namespace collage
