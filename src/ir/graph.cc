#include "collage/graph.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

namespace collage {
namespace {

const Attribute* find_attr(const Node& n, const std::string& key, Attribute::Type type) {
  auto it = n.attrs.find(key);
  if (it == n.attrs.end()) return nullptr;
  if (it->second.type != type)
    fail(ErrorKind::kInvalidModel, "node '{}' ({}): attribute '{}' has the wrong type", n.name,
         n.op_type, key);
  return &it->second;
}

}  // namespace

Attribute Attribute::from_int(int64_t v) {
  Attribute a;
  a.type = Type::kInt;
  a.i = v;
  return a;
}

Attribute Attribute::from_ints(std::vector<int64_t> v) {
  Attribute a;
  a.type = Type::kInts;
  a.ints = std::move(v);
  return a;
}

Attribute Attribute::from_float(float v) {
  Attribute a;
  a.type = Type::kFloat;
  a.f = v;
  return a;
}

Attribute Attribute::from_string(std::string v) {
  Attribute a;
  a.type = Type::kString;
  a.s = std::move(v);
  return a;
}

int64_t Node::attr_int(const std::string& key, int64_t def) const {
  const Attribute* a = find_attr(*this, key, Attribute::Type::kInt);
  return a ? a->i : def;
}

float Node::attr_float(const std::string& key, float def) const {
  auto it = attrs.find(key);
  // Some exporters write integral values for float attributes (e.g. alpha=1): accept them.
  if (it != attrs.end() && it->second.type == Attribute::Type::kInt)
    return static_cast<float>(it->second.i);
  const Attribute* a = find_attr(*this, key, Attribute::Type::kFloat);
  return a ? a->f : def;
}

std::string Node::attr_string(const std::string& key, const std::string& def) const {
  const Attribute* a = find_attr(*this, key, Attribute::Type::kString);
  return a ? a->s : def;
}

std::vector<int64_t> Node::attr_ints(const std::string& key, std::vector<int64_t> def) const {
  const Attribute* a = find_attr(*this, key, Attribute::Type::kInts);
  return a ? a->ints : def;
}

std::vector<float> Node::attr_floats(const std::string& key, std::vector<float> def) const {
  const Attribute* a = find_attr(*this, key, Attribute::Type::kFloats);
  return a ? a->floats : def;
}

const Tensor* Node::attr_tensor(const std::string& key) const {
  const Attribute* a = find_attr(*this, key, Attribute::Type::kTensor);
  return a ? &a->t : nullptr;
}

ValueId Graph::add_value(std::string value_name, DType dtype, Shape shape, bool shape_known) {
  Value v;
  v.name = std::move(value_name);
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.shape_known = shape_known;
  values_.push_back(std::move(v));
  return static_cast<ValueId>(values_.size() - 1);
}

ValueId Graph::add_constant(std::string value_name, Tensor tensor) {
  ValueId id = add_value(std::move(value_name), tensor.dtype(), tensor.shape(), true);
  values_[id].constant = std::move(tensor);
  return id;
}

NodeId Graph::add_node(Node node) {
  NodeId id = static_cast<NodeId>(nodes_.size());
  for (ValueId v : node.outputs)
    if (v != kNoValue) values_.at(v).producer = id;
  nodes_.push_back(std::move(node));
  return id;
}

std::optional<ValueId> Graph::find_value(const std::string& value_name) const {
  for (size_t i = 0; i < values_.size(); ++i)
    if (values_[i].name == value_name) return static_cast<ValueId>(i);
  return std::nullopt;
}

std::optional<NodeId> Graph::find_node(const std::string& node_name) const {
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].name == node_name) return static_cast<NodeId>(i);
  return std::nullopt;
}

std::vector<std::vector<NodeId>> Graph::consumers() const {
  std::vector<std::vector<NodeId>> result(values_.size());
  for (size_t n = 0; n < nodes_.size(); ++n)
    for (ValueId v : nodes_[n].inputs)
      if (v != kNoValue) {
        auto& list = result[v];
        if (list.empty() || list.back() != static_cast<NodeId>(n))
          list.push_back(static_cast<NodeId>(n));
      }
  return result;
}

void Graph::sort_topologically() {
  const size_t n = nodes_.size();
  std::vector<int> missing(n, 0);
  auto users = consumers();
  for (size_t i = 0; i < n; ++i) {
    for (ValueId v : nodes_[i].inputs)
      if (v != kNoValue && values_.at(v).producer >= 0) ++missing[i];
  }
  // Kahn's algorithm; a min-heap on the original index keeps the model's order where free.
  std::priority_queue<NodeId, std::vector<NodeId>, std::greater<>> ready;
  for (size_t i = 0; i < n; ++i)
    if (missing[i] == 0) ready.push(static_cast<NodeId>(i));
  std::vector<NodeId> order;
  order.reserve(n);
  while (!ready.empty()) {
    NodeId id = ready.top();
    ready.pop();
    order.push_back(id);
    for (ValueId v : nodes_[id].outputs) {
      if (v == kNoValue) continue;
      for (NodeId u : users[v]) {
        // A node may read the same value twice: count each input slot.
        for (ValueId in : nodes_[u].inputs)
          if (in == v && --missing[u] == 0) ready.push(u);
      }
    }
  }
  if (order.size() != n) {
    for (size_t i = 0; i < n; ++i)
      if (missing[i] > 0)
        fail(ErrorKind::kInvalidModel, "the graph has a cycle through node '{}' ({})",
             nodes_[i].name, nodes_[i].op_type);
  }
  std::vector<Node> sorted;
  sorted.reserve(n);
  for (NodeId id : order) sorted.push_back(std::move(nodes_[id]));
  nodes_ = std::move(sorted);
  for (auto& v : values_) v.producer = -1;
  for (size_t i = 0; i < n; ++i)
    for (ValueId v : nodes_[i].outputs)
      if (v != kNoValue) values_[v].producer = static_cast<NodeId>(i);
}

void Graph::prune(const std::vector<bool>& remove_node) {
  std::vector<bool> used(values_.size(), false);
  for (ValueId v : inputs) used[v] = true;
  for (ValueId v : outputs) used[v] = true;
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (i < remove_node.size() && remove_node[i]) continue;
    for (ValueId v : nodes_[i].inputs)
      if (v != kNoValue) used[v] = true;
    for (ValueId v : nodes_[i].outputs)
      if (v != kNoValue) used[v] = true;
    kept.push_back(std::move(nodes_[i]));
  }
  std::vector<ValueId> remap(values_.size(), kNoValue);
  std::vector<Value> new_values;
  for (size_t v = 0; v < values_.size(); ++v) {
    if (!used[v]) continue;
    remap[v] = static_cast<ValueId>(new_values.size());
    new_values.push_back(std::move(values_[v]));
  }
  auto fix = [&](std::vector<ValueId>& ids) {
    for (ValueId& id : ids)
      if (id != kNoValue) id = remap[id];
  };
  for (auto& node : kept) {
    fix(node.inputs);
    fix(node.outputs);
  }
  fix(inputs);
  fix(outputs);
  nodes_ = std::move(kept);
  values_ = std::move(new_values);
  for (auto& v : values_) v.producer = -1;
  for (size_t i = 0; i < nodes_.size(); ++i)
    for (ValueId v : nodes_[i].outputs)
      if (v != kNoValue) values_[v].producer = static_cast<NodeId>(i);
}

void Graph::validate() const {
  const auto nv = static_cast<ValueId>(values_.size());
  auto check = [&](ValueId v, const std::string& where) {
    if (v != kNoValue && (v < 0 || v >= nv))
      fail(ErrorKind::kInternal, "{} refers to value id {} of {}", where, v, nv);
  };
  std::vector<int> producers(values_.size(), 0);
  for (const auto& node : nodes_) {
    for (ValueId v : node.inputs) check(v, "node '" + node.name + "'");
    for (ValueId v : node.outputs) {
      check(v, "node '" + node.name + "'");
      if (v != kNoValue && ++producers[v] > 1)
        fail(ErrorKind::kInvalidModel, "value '{}' is produced by more than one node",
             values_[v].name);
    }
  }
  for (ValueId v : inputs) check(v, "graph input");
  for (ValueId v : outputs) check(v, "graph output");
}

}  // namespace collage
