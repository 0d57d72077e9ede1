#include "models/model_builder.h"

#include <cmath>

#include "collage/op_registry.h"

namespace collage::models {

Attribute int_attr(int64_t v) {
  return Attribute::from_int(v);
}

Attribute ints_attr(std::vector<int64_t> v) {
  return Attribute::from_ints(std::move(v));
}

Attribute float_attr(float v) {
  return Attribute::from_float(v);
}

Attribute string_attr(std::string v) {
  return Attribute::from_string(std::move(v));
}

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

float Rng::uniform() {
  return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
}

namespace {

// FNV-1a: a stable hash of a weight's name, to key its random stream.
uint64_t hash_name(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ULL;
  return h;
}

}  // namespace

ModelBuilder::ModelBuilder(std::string name, uint64_t seed, int64_t opset) : seed_(seed) {
  graph_.name = std::move(name);
  graph_.opset = opset;
}

ValueId ModelBuilder::input(const std::string& name, DType dtype, Shape shape) {
  ValueId v = graph_.add_value(unique_name(name), dtype, std::move(shape), true);
  graph_.inputs.push_back(v);
  return v;
}

void ModelBuilder::output(ValueId v, const std::string& name) {
  if (!name.empty()) graph_.value(v).name = unique_name(name);
  graph_.outputs.push_back(v);
}

ValueId ModelBuilder::constant(const std::string& name, Tensor tensor) {
  return graph_.add_constant(unique_name(name), std::move(tensor));
}

ValueId ModelBuilder::int64s(const std::string& name, const std::vector<int64_t>& values) {
  return constant(name,
                  Tensor::from_vector<int64_t>({static_cast<int64_t>(values.size())}, values));
}

ValueId ModelBuilder::scalar(const std::string& name, float value) {
  return constant(name, Tensor::scalar<float>(value));
}

Tensor ModelBuilder::uniform_tensor(const std::string& name, Shape shape, float lo,
                                    float hi) const {
  Tensor t(DType::kFloat32, std::move(shape));
  Rng rng(seed_ ^ hash_name(name));
  float* d = t.data<float>();
  const float span = hi - lo;
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = lo + span * rng.uniform();
  return t;
}

ValueId ModelBuilder::random(const std::string& name, Shape shape, float stddev, float mean) {
  const float a = stddev * std::sqrt(3.0f);
  std::string unique = unique_name(name);
  return graph_.add_constant(unique, uniform_tensor(unique, std::move(shape), mean - a, mean + a));
}

ValueId ModelBuilder::random_range(const std::string& name, Shape shape, float lo, float hi) {
  std::string unique = unique_name(name);
  return graph_.add_constant(unique, uniform_tensor(unique, std::move(shape), lo, hi));
}

std::vector<ValueId> ModelBuilder::add(const std::string& op_type, std::vector<ValueId> inputs,
                                       Attrs attrs, size_t num_outputs) {
  std::string prefix;
  for (const std::string& s : scopes_) prefix += "/" + s;
  Node node;
  node.name = unique_name(prefix + "/" + op_type);
  node.op_type = op_type;
  node.inputs = std::move(inputs);
  node.attrs = std::move(attrs);
  for (size_t i = 0; i < num_outputs; ++i)
    node.outputs.push_back(graph_.add_value(node.name + "_output_" + std::to_string(i)));
  NodeId id = graph_.add_node(std::move(node));
  infer_node_outputs(graph_, id);
  return graph_.node(id).outputs;
}

int64_t ModelBuilder::dim(ValueId v, int i) const {
  const Shape& s = shape(v);
  return s.at(i < 0 ? i + static_cast<int>(s.size()) : i);
}

std::string ModelBuilder::param_name(const std::string& leaf) const {
  std::string name;
  for (const std::string& s : scopes_) name += s + ".";
  return name + leaf;
}

std::string ModelBuilder::unique_name(const std::string& base) {
  int& suffix = next_suffix_[base];
  std::string name = base;
  while (!used_names_.insert(name).second) name = base + "_" + std::to_string(++suffix);
  return name;
}

Graph ModelBuilder::finish() {
  graph_.validate();
  Graph g = std::move(graph_);
  graph_ = Graph();
  used_names_.clear();
  next_suffix_.clear();
  return g;
}

}  // namespace collage::models
