// Builds model graphs in code: each node's output types are inferred with the op's own
// shape function as it is added, so a zoo model is valid by construction and needs no
// import. Weights are pseudo-random from a fixed seed, so the same model is the same bytes
// on every run and machine.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "collage/graph.h"

namespace collage::models {

using Attrs = std::map<std::string, Attribute>;
Attribute int_attr(int64_t v);
Attribute ints_attr(std::vector<int64_t> v);
Attribute float_attr(float v);
Attribute string_attr(std::string v);

// A counter-based generator (splitmix64): cheap, portable, and each weight gets its own
// stream keyed by its name, so adding a layer does not change the others' values.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  // Uniform in [0, 1) with 24 bits, like a float mantissa.
  float uniform();

 private:
  uint64_t state_;
};

class ModelBuilder {
 public:
  ModelBuilder(std::string name, uint64_t seed, int64_t opset = 13);

  // A runtime input with a static shape.
  ValueId input(const std::string& name, DType dtype, Shape shape);
  // Marks v a graph output; a non-empty `name` renames it ("logits", "last_hidden_state").
  void output(ValueId v, const std::string& name = "");

  ValueId constant(const std::string& name, Tensor tensor);
  ValueId int64s(const std::string& name, const std::vector<int64_t>& values);  // 1-D
  ValueId scalar(const std::string& name, float value);                         // rank 0
  // Float weights uniform in [mean - a, mean + a) with a = stddev * sqrt(3), so their
  // standard deviation is `stddev` (Kaiming-uniform style, as PyTorch initialises).
  ValueId random(const std::string& name, Shape shape, float stddev, float mean = 0);
  // Uniform in [lo, hi): for BatchNorm/LayerNorm parameters kept away from 0 and 1.
  ValueId random_range(const std::string& name, Shape shape, float lo, float hi);

  // Appends a node named "<scope>/<op_type>" (made unique) and returns its outputs with
  // dtypes and shapes inferred. Throws Error(kShape) when the shapes do not fit.
  std::vector<ValueId> add(const std::string& op_type, std::vector<ValueId> inputs,
                           Attrs attrs = {}, size_t num_outputs = 1);
  ValueId add1(const std::string& op_type, std::vector<ValueId> inputs, Attrs attrs = {}) {
    return add(op_type, std::move(inputs), std::move(attrs))[0];
  }

  // The opset the graph declares: layers emit the form an exporter writes at that opset
  // (LayerNormalization from 17 on, its decomposition before).
  int64_t opset() const { return graph_.opset; }
  const Shape& shape(ValueId v) const { return graph_.value(v).shape; }
  // The tensor of a constant made by constant()/random() (e.g. to store a tied weight's
  // transpose, as the exporter does).
  const Tensor& constant_value(ValueId v) const { return graph_.value(v).constant; }
  int64_t dim(ValueId v, int i) const;

  // Name scopes, like PyTorch module paths: nodes become "/layer1/0/conv1/Conv" and
  // weights "layer1.0.conv1.weight".
  void push_scope(const std::string& name) { scopes_.push_back(name); }
  void pop_scope() { scopes_.pop_back(); }
  // The dotted parameter name for `leaf` in the current scope.
  std::string param_name(const std::string& leaf) const;

  // Checks the graph and hands it over; the builder is empty afterwards.
  Graph finish();

 private:
  std::string unique_name(const std::string& base);
  Tensor uniform_tensor(const std::string& name, Shape shape, float lo, float hi) const;

  Graph graph_;
  uint64_t seed_;
  std::vector<std::string> scopes_;
  std::set<std::string> used_names_;
  std::map<std::string, int> next_suffix_;
};

// RAII scope: { Scope s(b, "layer1"); ... }
class Scope {
 public:
  Scope(ModelBuilder& b, const std::string& name) : b_(b) { b_.push_scope(name); }
  ~Scope() { b_.pop_scope(); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  ModelBuilder& b_;
};

}  // namespace collage::models
