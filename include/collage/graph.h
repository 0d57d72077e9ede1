// collage's model IR: a dataflow graph of ONNX-style nodes over values that have a
// dtype and (after shape inference) a static shape. Constants (initializers, folded
// values) are values that carry a Tensor.
//
// Values and nodes are addressed by dense integer ids, so sets of nodes are bitsets and a
// subgraph can be copied out without pointer fix-ups. `nodes()` is kept in a topological
// order by every pass (import sorts it; Graph::prune keeps it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "collage/tensor.h"

namespace collage {

using ValueId = int32_t;
using NodeId = int32_t;
constexpr ValueId kNoValue = -1;  // an omitted optional input

struct Value {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape;
  bool shape_known = false;
  Tensor constant;       // defined() for initializers and folded values
  NodeId producer = -1;  // -1 for graph inputs and constants
  bool is_constant() const { return constant.defined(); }
};

struct Attribute {
  enum class Type { kFloat, kInt, kString, kTensor, kFloats, kInts, kStrings };
  Type type = Type::kInt;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;

  // Typed attributes, for graphs built in code (the model zoo, import rewrites, fused groups).
  static Attribute from_int(int64_t v);
  static Attribute from_ints(std::vector<int64_t> v);
  static Attribute from_float(float v);
  static Attribute from_string(std::string v);
};

struct Node {
  std::string name;              // unique within a graph (import names unnamed nodes)
  std::string op_type;           // e.g. "Conv"
  std::string domain;            // "" for the default ONNX domain
  std::vector<ValueId> inputs;   // kNoValue for omitted optional inputs
  std::vector<ValueId> outputs;  // kNoValue for omitted optional outputs
  std::map<std::string, Attribute> attrs;

  bool has_attr(const std::string& key) const { return attrs.count(key) != 0; }
  // Typed getters: the default when absent, Error(kInvalidModel) when the type is wrong.
  int64_t attr_int(const std::string& key, int64_t def) const;
  float attr_float(const std::string& key, float def) const;
  std::string attr_string(const std::string& key, const std::string& def) const;
  std::vector<int64_t> attr_ints(const std::string& key, std::vector<int64_t> def = {}) const;
  std::vector<float> attr_floats(const std::string& key, std::vector<float> def = {}) const;
  const Tensor* attr_tensor(const std::string& key) const;
  // Input i or kNoValue when the node has fewer inputs.
  ValueId input(size_t i) const { return i < inputs.size() ? inputs[i] : kNoValue; }
};

class Graph {
 public:
  std::string name;
  int64_t opset = 13;            // default-domain opset the model was imported with
  std::vector<ValueId> inputs;   // runtime inputs, in the model's order (no initializers)
  std::vector<ValueId> outputs;  // in the model's order

  ValueId add_value(std::string name, DType dtype = DType::kUndefined, Shape shape = {},
                    bool shape_known = false);
  ValueId add_constant(std::string name, Tensor tensor);
  // Appends a node; sets the producer of its outputs. Callers append in topological order.
  NodeId add_node(Node node);

  Value& value(ValueId id) { return values_.at(id); }
  const Value& value(ValueId id) const { return values_.at(id); }
  Node& node(NodeId id) { return nodes_.at(id); }
  const Node& node(NodeId id) const { return nodes_.at(id); }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& nodes() { return nodes_; }
  const std::vector<Value>& values() const { return values_; }
  size_t num_nodes() const { return nodes_.size(); }
  size_t num_values() const { return values_.size(); }

  std::optional<ValueId> find_value(const std::string& name) const;
  std::optional<NodeId> find_node(const std::string& name) const;

  // For each value, the nodes that read it (recomputed on demand; invalidated by edits).
  std::vector<std::vector<NodeId>> consumers() const;

  // Reorders nodes topologically; throws Error(kInvalidModel) naming a node on a cycle.
  void sort_topologically();
  // Drops the nodes marked in `remove` and every value no longer referenced, renumbering
  // ids; keeps the topological order.
  void prune(const std::vector<bool>& remove_node);
  // Throws Error(kInvalidModel) for dangling ids, values with two producers, and so on.
  void validate() const;

 private:
  std::vector<Value> values_;
  std::vector<Node> nodes_;
};

}  // namespace collage
