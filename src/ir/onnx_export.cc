// collage Graph -> ONNX ModelProto: the inverse of onnx_import.cc, so a graph built in
// code (the model zoo) or rewritten by a pass can be handed to any ONNX tool, and read back
// by load_model unchanged.
#include <onnx/onnx_pb.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <set>
#include <unordered_set>

#include "collage/model.h"
#include "ir/onnx_proto_util.h"

namespace collage {
namespace {

// ONNX IR version 8 (ONNX 1.10+) covers every opset the importer accepts (up to 17).
constexpr int64_t kIrVersion = 8;
// Version for each non-default domain a node uses (com.microsoft and friends start at 1).
constexpr int64_t kCustomDomainVersion = 1;

void set_tensor_type(const Value& v, const std::string& name, onnx::ValueInfoProto* info) {
  info->set_name(name);
  auto* tt = info->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(v.dtype));
  if (!v.shape_known) return;
  auto* shape = tt->mutable_shape();
  for (int64_t d : v.shape) shape->add_dim()->set_dim_value(d);
}

void convert_attribute(const std::string& key, const Attribute& a, onnx::AttributeProto* p) {
  using A = onnx::AttributeProto;
  p->set_name(key);
  switch (a.type) {
    case Attribute::Type::kFloat:
      p->set_type(A::FLOAT);
      p->set_f(a.f);
      break;
    case Attribute::Type::kInt:
      p->set_type(A::INT);
      p->set_i(a.i);
      break;
    case Attribute::Type::kString:
      p->set_type(A::STRING);
      p->set_s(a.s);
      break;
    case Attribute::Type::kTensor:
      p->set_type(A::TENSOR);
      *p->mutable_t() = onnx_util::tensor_to_proto(a.t, "");
      break;
    case Attribute::Type::kFloats:
      p->set_type(A::FLOATS);
      for (float f : a.floats) p->add_floats(f);
      break;
    case Attribute::Type::kInts:
      p->set_type(A::INTS);
      for (int64_t i : a.ints) p->add_ints(i);
      break;
    case Attribute::Type::kStrings:
      p->set_type(A::STRINGS);
      for (const std::string& s : a.strings) p->add_strings(s);
      break;
  }
}

class Exporter {
 public:
  explicit Exporter(const Graph& graph) : graph_(graph) {}

  onnx::ModelProto run() {
    assign_names();
    onnx::ModelProto model;
    model.set_ir_version(kIrVersion);
    model.set_producer_name("collage");
    add_opsets(model);
    onnx::GraphProto* g = model.mutable_graph();
    g->set_name(graph_.name.empty() ? "collage" : graph_.name);
    add_initializers(*g);
    for (ValueId v : graph_.inputs) set_tensor_type(graph_.value(v), names_[v], g->add_input());
    for (const Node& node : graph_.nodes()) add_node(node, *g);
    std::unordered_set<ValueId> io(graph_.inputs.begin(), graph_.inputs.end());
    for (ValueId v : graph_.outputs) {
      set_tensor_type(graph_.value(v), names_[v], g->add_output());
      io.insert(v);
    }
    add_value_info(io, *g);
    return model;
  }

 private:
  // Every value gets a non-empty name no other value has: graphs made by passes or
  // builders are not held to ONNX's naming rules, the file is.
  void assign_names() {
    std::set<std::string> used;
    names_.resize(graph_.num_values());
    for (size_t i = 0; i < graph_.num_values(); ++i) {
      std::string base = graph_.value(static_cast<ValueId>(i)).name;
      if (base.empty()) base = "value_" + std::to_string(i);
      std::string name = base;
      for (int k = 1; !used.insert(name).second; ++k) name = base + "_" + std::to_string(k);
      names_[i] = name;
    }
  }

  void add_opsets(onnx::ModelProto& model) const {
    auto* def = model.add_opset_import();
    def->set_domain("");
    def->set_version(graph_.opset);
    std::set<std::string> domains;
    for (const Node& node : graph_.nodes())
      if (!node.domain.empty() && node.domain != "ai.onnx") domains.insert(node.domain);
    for (const std::string& d : domains) {
      auto* id = model.add_opset_import();
      id->set_domain(d);
      id->set_version(kCustomDomainVersion);
    }
  }

  // Constants nobody reads are dropped (the importer would drop them too). A constant with
  // a producer is a folded node output: the node stays and computes it.
  void add_initializers(onnx::GraphProto& g) const {
    std::vector<bool> read(graph_.num_values(), false);
    for (const Node& node : graph_.nodes())
      for (ValueId v : node.inputs)
        if (v != kNoValue) read[v] = true;
    for (ValueId v : graph_.outputs) read[v] = true;
    for (size_t i = 0; i < graph_.num_values(); ++i) {
      const Value& v = graph_.value(static_cast<ValueId>(i));
      if (read[i] && v.is_constant() && v.producer < 0)
        *g.add_initializer() = onnx_util::tensor_to_proto(v.constant, names_[i]);
    }
  }

  void add_node(const Node& node, onnx::GraphProto& g) const {
    auto* p = g.add_node();
    p->set_name(node.name);
    p->set_op_type(node.op_type);
    if (!node.domain.empty()) p->set_domain(node.domain);
    for (ValueId v : node.inputs) p->add_input(v == kNoValue ? "" : names_[v]);
    for (ValueId v : node.outputs) p->add_output(v == kNoValue ? "" : names_[v]);
    for (const auto& [key, attr] : node.attrs) convert_attribute(key, attr, p->add_attribute());
  }

  // Types of the intermediates, so tools (and the importer's declared-type check) see the
  // shapes collage inferred.
  void add_value_info(const std::unordered_set<ValueId>& io, onnx::GraphProto& g) const {
    for (const Node& node : graph_.nodes())
      for (ValueId v : node.outputs)
        if (v != kNoValue && !io.count(v) && graph_.value(v).dtype != DType::kUndefined)
          set_tensor_type(graph_.value(v), names_[v], g.add_value_info());
  }

  const Graph& graph_;
  std::vector<std::string> names_;
};

// Protobuf refuses messages of 2 GiB or more; larger models need external data, which
// the exporter does not write.
onnx::ModelProto to_checked_proto(const Graph& graph) {
  onnx::ModelProto model = Exporter(graph).run();
  const size_t size = model.ByteSizeLong();
  if (size > static_cast<size_t>(INT_MAX))
    fail(ErrorKind::kLimit,
         "model '{}' is {} bytes; ONNX files without external data are limited to 2 GiB",
         graph.name, size);
  return model;
}

}  // namespace

std::string model_to_bytes(const Graph& graph) {
  std::string bytes;
  if (!to_checked_proto(graph).SerializeToString(&bytes))
    fail(ErrorKind::kInternal, "could not serialize model '{}'", graph.name);
  return bytes;
}

// Streams to the file rather than through model_to_bytes: a BERT-base is 440 MB, and one
// copy fewer matters.
void save_model(const Graph& graph, const std::string& path) {
  onnx::ModelProto model = to_checked_proto(graph);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(ErrorKind::kIo, "cannot create '{}': {}", path, std::strerror(errno));
  if (!model.SerializeToOstream(&out)) fail(ErrorKind::kIo, "error writing '{}'", path);
  out.close();
  if (!out) fail(ErrorKind::kIo, "error writing '{}'", path);
}

}  // namespace collage
