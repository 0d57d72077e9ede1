// ONNX ModelProto -> collage Graph. Everything a model file can get wrong is caught here
// or in the passes, as a collage::Error of the right kind; nothing is trusted.
#include <fmt/format.h>
#include <onnx/checker.h>

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "collage/model.h"
#include "ir/model_passes.h"
#include "ir/onnx_proto_util.h"

namespace collage {
namespace {

// Opsets 1-6 are accepted: 138 models of the conformance corpus (most of pytorch-converted)
// use them, and the only semantic differences that matter for them (legacy broadcast
// attributes, channel-wise PRelu slopes) are normalised by infer_shapes.
constexpr int64_t kMinOpset = 1;
// 17 is the newest opset the ONNX library we build against (1.12) knows; current exporters
// write newer ones (PyTorch's dynamo exporter opset 18 and up). Opsets 18-22 are accepted:
// every operator whose definition changed in them (kChangedAfterChecked) is computed by
// collage's op in its new form or refused by it with a message, never read the old way:
// - new forms computed: Reduce* with axes as an input and noop_with_empty_axes (18), Split's
//   num_outputs (18), Pad's axes input (18), ScatterElements/ScatterND max and min (18),
//   LpPool's ceil_mode (18), AveragePool's dilations (19: the reference and oneDNN compute
//   them, the other backends refuse them), GridSample's "linear" and "cubic" (20), Mish (18)
//   and Gelu (20) as their function bodies, GroupNormalization (18, per-channel scale from 21)
//   as PyTorch's GroupNorm decomposition (ir/function_op_lowering.cc);
// - refused with a message: Pad's "wrap" (19), Resize's antialias, axes and
//   keep_aspect_ratio_policy (18) and "half_pixel_symmetric" (19), operators collage has no
//   kernel for (DFT, DeformConv, the quantize and string ops, control
//   flow), float8 and 4-bit element types (19, 21);
// - changed in element types only (bfloat16 for many ops in 22, float8/int4 in 19-21): the
//   types collage runs are the same.
// Opset 23 adds Attention, RMSNormalization and RotaryEmbedding and changes more: refused.
constexpr int64_t kMaxOpset = 22;
constexpr int64_t kMaxCheckedOpset = 17;

// Default-domain operators with a definition (new, or a new version) in opsets 18-22. The
// ONNX checker of 1.12 verifies a node against the newest definition it knows, which for these
// is older than the model's; run_checker moves them out of its sight.
const std::set<std::string> kChangedAfterChecked = {
    // 18
    "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "CenterCropPad", "Col2Im",
    "GroupNormalization", "LpPool", "Mish", "OptionalGetElement", "OptionalHasElement", "Pad",
    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
    "ReduceMin", "ReduceProd", "ReduceSumSquare", "Resize", "ScatterElements", "ScatterND", "Split",
    // 19
    "AveragePool", "Cast", "CastLike", "Constant", "DeformConv", "DequantizeLinear", "Equal",
    "Identity", "If", "Loop", "QuantizeLinear", "Reshape", "Scan", "Shape", "Size",
    // 20
    "AffineGrid", "ConstantOfShape", "DFT", "Gelu", "GridSample", "ImageDecoder", "IsInf", "IsNaN",
    "RegexFullMatch", "StringConcat", "StringSplit",
    // 21
    "Flatten", "QLinearMatMul", "Squeeze", "Transpose", "Unsqueeze",
    // 22 (bfloat16)
    "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Bernoulli", "Conv", "ConvTranspose", "Cos",
    "Cosh", "Det", "Dropout", "Elu", "EyeLike", "GRU", "GlobalAveragePool", "GlobalLpPool",
    "GlobalMaxPool", "HardSigmoid", "HardSwish", "InstanceNormalization", "LSTM", "LpNormalization",
    "MaxPool", "MaxRoiPool", "MaxUnpool", "Multinomial", "NegativeLogLikelihoodLoss", "RNN",
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "RoiAlign", "Round",
    "Selu", "Sin", "Sinh", "Softplus", "Softsign", "Tan", "ThresholdedRelu"};

// The operators among them that are new in opsets 18-22, and the opset each appeared in: a
// model of an older opset has no such operator (the checker would have said so at 17).
const std::map<std::string, int64_t> kIntroducedAfterChecked = {{"BitwiseAnd", 18},
                                                                {"BitwiseNot", 18},
                                                                {"BitwiseOr", 18},
                                                                {"BitwiseXor", 18},
                                                                {"CenterCropPad", 18},
                                                                {"Col2Im", 18},
                                                                {"GroupNormalization", 18},
                                                                {"Mish", 18},
                                                                {"OptionalGetElement", 18},
                                                                {"OptionalHasElement", 18},
                                                                {"DeformConv", 19},
                                                                {"AffineGrid", 20},
                                                                {"Gelu", 20},
                                                                {"ImageDecoder", 20},
                                                                {"RegexFullMatch", 20},
                                                                {"StringConcat", 20},
                                                                {"StringSplit", 20}};

// Where run_checker puts those nodes for the checker: a domain it has no schemas for, so it
// checks their names, inputs and attributes as any node's, but not against an old definition.
constexpr const char* kNewerOpsetDomain = "collage.newer_opset";

const char* type_case_name(const onnx::TypeProto& type) {
  switch (type.value_case()) {
    case onnx::TypeProto::kTensorType:
      return "tensor";
    case onnx::TypeProto::kSequenceType:
      return "sequence";
    case onnx::TypeProto::kMapType:
      return "map";
    case onnx::TypeProto::kOptionalType:
      return "optional";
    case onnx::TypeProto::kSparseTensorType:
      return "sparse tensor";
    default:
      return "unknown";
  }
}

// Old exporters leave AttributeProto.type unset; the populated field tells the type.
onnx::AttributeProto::AttributeType attribute_type(const onnx::AttributeProto& a) {
  using A = onnx::AttributeProto;
  if (a.type() != A::UNDEFINED) return a.type();
  if (a.has_f()) return A::FLOAT;
  if (a.has_i()) return A::INT;
  if (a.has_s()) return A::STRING;
  if (a.has_t()) return A::TENSOR;
  if (a.has_g()) return A::GRAPH;
  if (a.floats_size()) return A::FLOATS;
  if (a.ints_size()) return A::INTS;
  if (a.strings_size()) return A::STRINGS;
  if (a.graphs_size()) return A::GRAPHS;
  return A::UNDEFINED;
}

class Importer {
 public:
  Importer(onnx::ModelProto& model, const std::string& base_dir, const LoadOptions& options)
      : model_(model), base_dir_(base_dir), options_(options) {}

  Graph run(DeclaredTypes& declared) {
    const onnx::GraphProto& g = model_.graph();
    graph_.name = g.name();
    graph_.opset = default_opset();
    if (g.sparse_initializer_size())
      fail(ErrorKind::kUnsupported, "sparse initializers are not supported");
    import_initializers();
    run_checker();
    import_inputs();
    import_nodes();
    import_outputs();
    collect_declared_types(declared);
    graph_.sort_topologically();
    graph_.validate();
    return std::move(graph_);
  }

  // True when some input was given a shape other than the one the model declares, so
  // declared output dims no longer have to hold.
  bool inputs_reshaped() const { return !reshaped_inputs_.empty(); }
  // Those inputs, "NAME: [given] given, [declared] declared" each ('?' a symbolic dim).
  const std::vector<std::string>& reshaped_inputs() const { return reshaped_inputs_; }

 private:
  int64_t default_opset() const {
    std::optional<int64_t> opset;
    for (const auto& id : model_.opset_import())
      if (id.domain().empty() || id.domain() == "ai.onnx") opset = id.version();
    // IR version 1-2 models predate opset_import and mean opset 1.
    if (!opset && model_.ir_version() < 3) opset = 1;
    // A model of custom-domain ops only (e.g. the training ops) need not import the default
    // domain; the checker rejects default-domain nodes without an import.
    if (!opset) opset = kMaxOpset;
    if (*opset < kMinOpset || *opset > kMaxOpset)
      fail(ErrorKind::kUnsupported, "ONNX opset {} is not supported (collage runs opsets {}-{})",
           *opset, kMinOpset, kMaxOpset);
    return *opset;
  }

  void import_initializers() {
    for (auto& init : *model_.mutable_graph()->mutable_initializer()) {
      if (init.name().empty()) fail(ErrorKind::kInvalidModel, "an initializer has no name");
      if (by_name_.count(init.name()))
        fail(ErrorKind::kInvalidModel, "initializer '{}' is defined twice", init.name());
      // Its data read from a file or taken out of the proto: the checker sees a stand-in.
      const bool stub = init.data_location() == onnx::TensorProto::EXTERNAL || init.has_raw_data();
      Tensor t = onnx_util::take_tensor_from_proto(init, base_dir_, options_.max_tensor_bytes);
      by_name_[init.name()] = graph_.add_constant(init.name(), std::move(t));
      if (stub) stub_for_checker(init);
    }
  }

  // The ONNX checker resolves external data against the current directory, not the
  // model's folder; we have read (and path-checked) it already, so it sees a stand-in. So
  // does an initializer whose raw data the graph took over (take_tensor_from_proto).
  static void stub_for_checker(onnx::TensorProto& init) {
    init.clear_external_data();
    init.set_data_location(onnx::TensorProto::DEFAULT);
    init.clear_dims();
    init.set_raw_data(std::string(dtype_size(static_cast<DType>(init.data_type())), '\0'));
  }

  // The checker verified all 1072 models of the conformance corpus clean, so its verdict
  // is enforced rather than downgraded to a warning.
  void run_checker() const {
    try {
      if (graph_.opset <= kMaxCheckedOpset) {
        onnx::checker::check_model(model_);
        return;
      }
      // A newer opset: the checker sees the model at the newest opset it knows, with the
      // operators defined anew since (kChangedAfterChecked) in a domain of their own. Every
      // other operator's newest definition is the one it knows.
      onnx::ModelProto checked = model_;
      for (auto& id : *checked.mutable_opset_import())
        if (id.domain().empty() || id.domain() == "ai.onnx") id.set_version(kMaxCheckedOpset);
      auto* newer = checked.add_opset_import();
      newer->set_domain(kNewerOpsetDomain);
      newer->set_version(1);
      for (auto& node : *checked.mutable_graph()->mutable_node()) {
        if (!node.domain().empty() && node.domain() != "ai.onnx") continue;
        auto introduced = kIntroducedAfterChecked.find(node.op_type());
        if (introduced != kIntroducedAfterChecked.end() && introduced->second > graph_.opset)
          fail(ErrorKind::kInvalidModel,
               "invalid ONNX model: node '{}': {} exists from opset {}; the model imports opset {}",
               node.name(), node.op_type(), introduced->second, graph_.opset);
        if (kChangedAfterChecked.count(node.op_type())) node.set_domain(kNewerOpsetDomain);
      }
      onnx::checker::check_model(checked);
    } catch (const onnx::checker::ValidationError& e) {
      fail(ErrorKind::kInvalidModel, "invalid ONNX model: {}", e.what());
    }
  }

  void import_inputs() {
    std::set<std::string> seen, symbolic;
    for (const auto& in : model_.graph().input()) {
      if (!seen.insert(in.name()).second)
        fail(ErrorKind::kInvalidModel, "graph input '{}' is listed twice", in.name());
      if (by_name_.count(in.name())) continue;  // has an initializer: a constant
      if (in.type().tensor_type().has_shape())
        for (const auto& dim : in.type().tensor_type().shape().dim())
          if (dim.has_dim_param() && !dim.dim_param().empty()) symbolic.insert(dim.dim_param());
      if (auto frozen = options_.constant_inputs.find(in.name());
          frozen != options_.constant_inputs.end()) {
        by_name_[in.name()] = graph_.add_constant(in.name(), frozen->second);
        continue;
      }
      if (!in.type().has_tensor_type())
        fail(ErrorKind::kUnsupported, "input '{}' is a {}; only tensor inputs are supported",
             in.name(), type_case_name(in.type()));
      const auto& tt = in.type().tensor_type();
      if (tt.elem_type() == 0)
        fail(ErrorKind::kInvalidModel, "input '{}' has no element type", in.name());
      DType dtype = onnx_util::dtype_from_onnx(tt.elem_type(), "input '" + in.name() + "'");
      Shape shape = input_shape(in);
      int64_t numel = shape_numel(shape);
      if (numel > options_.max_tensor_bytes / static_cast<int64_t>(dtype_size(dtype)))
        fail(ErrorKind::kLimit, "input '{}' of shape {} exceeds the limit of {} bytes", in.name(),
             shape_to_string(shape), options_.max_tensor_bytes);
      ValueId v = graph_.add_value(in.name(), dtype, shape, true);
      by_name_[in.name()] = v;
      graph_.inputs.push_back(v);
    }
    for (const auto& [name, value] : options_.constant_inputs)
      if (!seen.count(name))
        fail(ErrorKind::kInvalidArgument,
             "a value is given for '{}', but the model has no such input", name);
    for (const auto& [name, shape] : options_.input_shapes)
      if (!seen.count(name))
        fail(ErrorKind::kInvalidArgument,
             "a shape is given for '{}', but the model has no such input", name);
    // A misspelt --dim set nothing and said nothing (until 2026-12-08).
    for (const auto& [name, value] : options_.dims)
      if (!symbolic.count(name))
        fail(ErrorKind::kInvalidArgument,
             "--dim {}={}: the model's inputs have no symbolic dimension '{}' ({})", name, value,
             name,
             symbolic.empty() ? "every input dimension is fixed"
                              : fmt::format("theirs: {}", fmt::join(symbolic, ", ")));
  }

  Shape input_shape(const onnx::ValueInfoProto& in) {
    const auto& tt = in.type().tensor_type();
    auto it = options_.input_shapes.find(in.name());
    if (it != options_.input_shapes.end()) {
      for (int64_t d : it->second)
        if (d < 0)
          fail(ErrorKind::kInvalidArgument, "the shape given for input '{}' has a negative dim",
               in.name());
      if (!declared_shape_matches(tt, it->second))
        reshaped_inputs_.push_back(fmt::format("{}: {} given, {} declared", in.name(),
                                               shape_to_string(it->second), declared_text(tt)));
      return it->second;
    }
    if (!tt.has_shape())
      fail(ErrorKind::kShape, "input '{}' has no declared shape: give its shape explicitly",
           in.name());
    Shape shape;
    for (const auto& dim : tt.shape().dim()) {
      if (dim.has_dim_value()) {
        if (dim.dim_value() < 0)
          fail(ErrorKind::kInvalidModel, "input '{}' has a negative dimension {}", in.name(),
               dim.dim_value());
        shape.push_back(dim.dim_value());
      } else if (dim.has_dim_param() && !dim.dim_param().empty()) {
        auto d = options_.dims.find(dim.dim_param());
        if (d == options_.dims.end())
          fail(ErrorKind::kShape, "input '{}' has symbolic dimension '{}': pass --dim {}=N",
               in.name(), dim.dim_param(), dim.dim_param());
        if (d->second < 0)
          fail(ErrorKind::kInvalidArgument, "--dim {}={} is negative", d->first, d->second);
        shape.push_back(d->second);
      } else {
        fail(ErrorKind::kShape, "input '{}' has an unknown dimension {}: give its shape explicitly",
             in.name(), shape.size());
      }
    }
    return shape;
  }

  static std::string declared_text(const onnx::TypeProto::Tensor& tt) {
    std::vector<std::string> dims;
    for (const auto& dim : tt.shape().dim())
      dims.push_back(dim.has_dim_value() ? std::to_string(dim.dim_value()) : "?");
    return fmt::format("[{}]", fmt::join(dims, ","));
  }

  static bool declared_shape_matches(const onnx::TypeProto::Tensor& tt, const Shape& shape) {
    if (!tt.has_shape()) return true;
    if (tt.shape().dim_size() != static_cast<int>(shape.size())) return false;
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const auto& dim = tt.shape().dim(i);
      if (dim.has_dim_value() && dim.dim_value() != shape[i]) return false;
    }
    return true;
  }

  std::string unique_node_name(const onnx::NodeProto& n, size_t index) {
    std::string base = n.name().empty() ? fmt::format("{}_{}", n.op_type(), index) : n.name();
    std::string name = base;
    for (int k = 1; !node_names_.insert(name).second; ++k) name = fmt::format("{}_{}", base, k);
    return name;
  }

  void import_nodes() {
    const auto& protos = model_.graph().node();
    std::vector<Node> nodes(protos.size());
    // Outputs first: the file need not list nodes in topological order.
    for (int i = 0; i < protos.size(); ++i) {
      const auto& p = protos[i];
      Node& node = nodes[i];
      node.name = unique_node_name(p, i);
      node.op_type = p.op_type();
      node.domain = p.domain() == "ai.onnx" ? "" : p.domain();
      for (const auto& out : p.output()) node.outputs.push_back(add_node_output(node, out));
    }
    for (int i = 0; i < protos.size(); ++i) {
      const auto& p = protos[i];
      Node& node = nodes[i];
      for (const auto& in : p.input()) node.inputs.push_back(resolve_input(node, in));
      for (const auto& a : p.attribute()) node.attrs[a.name()] = convert_attribute(node, a);
      graph_.add_node(std::move(node));
    }
  }

  ValueId add_node_output(const Node& node, const std::string& name) {
    if (name.empty()) return kNoValue;
    if (by_name_.count(name))
      fail(ErrorKind::kInvalidModel,
           "node '{}' ({}) writes '{}', which is already an input, initializer or another node's "
           "output",
           node.name, node.op_type, name);
    ValueId v = graph_.add_value(name);
    by_name_[name] = v;
    return v;
  }

  ValueId resolve_input(const Node& node, const std::string& name) const {
    if (name.empty()) return kNoValue;
    auto it = by_name_.find(name);
    if (it == by_name_.end())
      fail(ErrorKind::kInvalidModel,
           "node '{}' ({}) reads '{}', which no node, graph input or initializer produces",
           node.name, node.op_type, name);
    return it->second;
  }

  Attribute convert_attribute(const Node& node, const onnx::AttributeProto& a) const {
    using A = onnx::AttributeProto;
    Attribute out;
    switch (attribute_type(a)) {
      case A::FLOAT:
        out.type = Attribute::Type::kFloat;
        out.f = a.f();
        break;
      case A::INT:
        out.type = Attribute::Type::kInt;
        out.i = a.i();
        break;
      case A::STRING:
        out.type = Attribute::Type::kString;
        out.s = a.s();
        break;
      case A::TENSOR:
        out.type = Attribute::Type::kTensor;
        out.t = onnx_util::tensor_from_proto(a.t(), base_dir_, options_.max_tensor_bytes);
        break;
      case A::FLOATS:
        out.type = Attribute::Type::kFloats;
        out.floats.assign(a.floats().begin(), a.floats().end());
        break;
      case A::INTS:
        out.type = Attribute::Type::kInts;
        out.ints.assign(a.ints().begin(), a.ints().end());
        break;
      case A::STRINGS:
        out.type = Attribute::Type::kStrings;
        out.strings.assign(a.strings().begin(), a.strings().end());
        break;
      case A::GRAPH:
      case A::GRAPHS:
        fail(ErrorKind::kUnsupported,
             "node '{}' ({}): attribute '{}' is a subgraph; control flow (If, Loop, Scan) is not "
             "supported",
             node.name, node.op_type, a.name());
      default:
        fail(ErrorKind::kUnsupported, "node '{}' ({}): attribute '{}' has unsupported type {}",
             node.name, node.op_type, a.name(), A::AttributeType_Name(attribute_type(a)));
    }
    return out;
  }

  void import_outputs() {
    const auto& outs = model_.graph().output();
    if (outs.empty()) fail(ErrorKind::kInvalidModel, "the graph has no outputs");
    for (const auto& out : outs) {
      auto it = by_name_.find(out.name());
      if (it == by_name_.end())
        fail(ErrorKind::kInvalidModel,
             "graph output '{}' is not produced by any node, input or initializer", out.name());
      if (out.has_type() && !out.type().has_tensor_type())
        fail(ErrorKind::kUnsupported, "output '{}' is a {}; only tensor outputs are supported",
             out.name(), type_case_name(out.type()));
      graph_.outputs.push_back(it->second);
    }
  }

  void collect_declared_types(DeclaredTypes& declared) const {
    auto add = [&](const onnx::ValueInfoProto& info) {
      if (!info.type().has_tensor_type() || !by_name_.count(info.name())) return;
      const auto& tt = info.type().tensor_type();
      DeclaredType d;
      d.name = info.name();
      d.elem_type = tt.elem_type();
      if (tt.has_shape()) {
        d.dims.emplace();
        for (const auto& dim : tt.shape().dim())
          d.dims->push_back(dim.has_dim_value() ? std::optional<int64_t>(dim.dim_value())
                                                : std::nullopt);
      }
      declared.push_back(std::move(d));
    };
    for (const auto& info : model_.graph().output()) add(info);
    for (const auto& info : model_.graph().value_info()) add(info);
  }

  onnx::ModelProto& model_;
  const std::string& base_dir_;
  const LoadOptions& options_;
  Graph graph_;
  std::unordered_map<std::string, ValueId> by_name_;
  std::set<std::string> node_names_;
  std::vector<std::string> reshaped_inputs_;
};

// Adds the model file's name to errors that do not mention it.
[[noreturn]] void rethrow_with_source(const Error& e, const std::string& source) {
  if (source.empty() || std::string(e.what()).find(source) != std::string::npos) throw e;
  throw Error(e.kind(), fmt::format("{}: {}", source, e.what()));
}

Graph load_impl(std::string_view bytes, const std::string& base_dir, const LoadOptions& options,
                const std::string& source) {
  try {
    onnx::ModelProto model;
    onnx_util::parse_message(bytes, model, source.empty() ? "the model bytes" : source);
    if (!model.has_graph()) fail(ErrorKind::kInvalidModel, "the model has no graph");
    DeclaredTypes declared;
    Importer importer(model, base_dir, options);
    Graph graph = importer.run(declared);
    model.Clear();  // the initializers now live in the graph: free the protobuf copy early
    try {
      infer_shapes(graph, options);
    } catch (const Error& e) {
      // A shape error an input given in another shape caused is easier read with it.
      if (e.kind() != ErrorKind::kShape || !importer.inputs_reshaped()) throw;
      throw Error(e.kind(), fmt::format("{} (inputs in other shapes than the model declares: {})",
                                        e.what(), fmt::join(importer.reshaped_inputs(), "; ")));
    }
    check_declared_types(graph, declared, /*check_dims=*/!importer.inputs_reshaped());
    if (options.optimize) {
      lower_einsum(graph);
      lower_space_depth(graph);
      lower_edge_pads(graph);
      lower_function_ops(graph);
      lower_gathers_and_tiles(graph);
      remove_identities(graph);  // also what the lowering leaves ("ij->ij": an Identity)
      bypass_broadcast_expands(graph);
      expand_two_sided_broadcasts(graph);
      fold_constants(graph, options);
      fold_batch_norms(graph);
      remove_dead_code(graph);
    } else {
      detach_folded_constants(graph);
    }
    graph.validate();
    return graph;
  } catch (const Error& e) {
    rethrow_with_source(e, source);
  }
}

}  // namespace

void prepare_model_loader() {
  // Any lookup builds the whole registry (OpSchemaRegistry::map()).
  (void)onnx::OpSchemaRegistry::Schema("Relu", 14, "");
}

Graph load_model(const std::string& path, const LoadOptions& options) {
  const onnx_util::FileBytes bytes(path);
  std::string base_dir = std::filesystem::path(path).parent_path().string();
  if (base_dir.empty()) base_dir = ".";
  return load_impl(bytes.view(), base_dir, options, "'" + path + "'");
}

Graph load_model_from_bytes(const std::string& bytes, const std::string& base_dir,
                            const LoadOptions& options) {
  return load_impl(bytes, base_dir, options, "");
}

}  // namespace collage
