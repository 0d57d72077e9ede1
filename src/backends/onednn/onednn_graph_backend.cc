// The `onednn-graph` backend (graph-level): connected convex regions of the ops the onednn
// backend fuses, each compiled into one program whose primitives pass activations in the
// layouts they prefer (blocked, format_tag::any), reordering only at the region's boundary
// where `onednn` pays a reorder into and out of every convolution.
#include <algorithm>
#include <set>

#include "backends/onednn/epilogue.h"
#include "backends/onednn/groups.h"
#include "backends/onednn/kernels.h"
#include "backends/onednn/masked_select.h"
#include "backends/onednn/region_kernel.h"
#include "backends/onednn/unary_math.h"
#include "backends/onednn/winograd_conv.h"
#include "collage/backend.h"

namespace collage::onednn {
namespace {

// Regions grow one node at a time and every step is a candidate: this caps how many the
// tuner measures per start node. Larger regions come from the graph-level search merging
// adjacent groups, which compile() takes at any size.
constexpr int kMaxRegionNodes = 8;

// The heads of every family a region can hold, its views, and the elementwise ops.
std::vector<std::string> region_ops() {
  std::vector<std::string> ops;
  for (const Family& f : families())
    if (f.emit) ops.insert(ops.end(), f.ops.begin(), f.ops.end());
  // Views, and the glue between primitives (layout_kernel.cc).
  for (const char* op :
       {"Flatten",   "Reshape",    "Squeeze",    "Unsqueeze",    "Identity",     "Concat",
        "Slice",     "Split",      "Transpose",  "Pad",          "ReduceMean",   "ReduceMax",
        "ReduceMin", "ReduceSum",  "ReduceProd", "DepthToSpace", "SpaceToDepth", "Erf",
        "Expand",    "GridSample", "RNN",        "GRU",          "LSTM"})
    if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
  // The elementwise ops: the functions oneDNN has no eltwise for (steps of collage's own,
  // unary_math.h), its eltwise and binary ones; Where with the nodes computing its condition
  // (masked_select.h; a constant condition alone).
  for (const auto* list : {&unary_math_ops(), &unary_ops(), &binary_ops(), &masked_select_ops()})
    for (const std::string& op : *list)
      if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
  return ops;
}

// Units that a region of at most kMaxRegionNodes nodes could only cut in pieces none of which
// compiles (region_node takes their ReduceMean and Erf only whole): the exported LayerNorm
// decomposition (nine nodes with its scale and shift), a head whose tail holds an exported
// erf GELU (MatMul, bias Add, five GELU nodes), and a Where with the nodes computing its
// condition (masked_select.h: a bool leaves no group). The single-backend placement takes
// the largest match at each node, so without them ConvNeXt's blocks ran their LayerNorm and
// Erf on the fallback.
std::vector<Match> whole_units(const Graph& g) {
  const std::vector<std::vector<NodeId>> consumers = g.consumers();
  std::vector<Match> out;
  for (size_t n = 0; n < g.num_nodes(); ++n)
    if (g.node(static_cast<NodeId>(n)).op_type == "ReduceMean")
      if (std::optional<std::vector<NodeId>> ln =
              layer_norm_nodes(g, consumers, static_cast<NodeId>(n)))
        out.push_back(Match{*ln});
  for (Match& unit : masked_select_matches(g))
    if (unit.nodes.size() > 1) out.push_back(std::move(unit));
  for (Match& m : grow_tails(g)) {
    const bool erf = std::any_of(m.nodes.begin(), m.nodes.end(),
                                 [&](NodeId n) { return g.node(n).op_type == "Erf"; });
    if (erf && std::all_of(m.nodes.begin(), m.nodes.end(),
                           [&](NodeId n) { return region_node(g, g.node(n)); }))
      out.push_back(std::move(m));
  }
  return out;
}

// Whether node `n` belongs to a unit whole_units proposes. A unit's nodes all lie at most
// four producer edges below its Erf or first ReduceMean, except the GELU's scaling, which the
// Erf reads.
bool in_whole_unit(const Graph& g, const Node& n) {
  if (masked_select_kind(g, n)) {
    const std::optional<std::vector<NodeId>> unit =
        masked_unit_holding(g, g.consumers(), g.value(n.outputs[0]).producer);
    if (unit && unit->size() > 1) return true;
  }
  static const std::set<std::string> kUnitOps = {"ReduceMean", "Sub", "Pow", "Add",
                                                 "Sqrt",       "Div", "Mul", "Erf"};
  if (!kUnitOps.count(n.op_type) || n.outputs.empty() || n.outputs[0] == kNoValue) return false;
  const NodeId id = g.value(n.outputs[0]).producer;
  std::optional<std::vector<std::vector<NodeId>>> consumers;
  auto unit_holds = [&](NodeId anchor) {
    if (!consumers) consumers = g.consumers();
    const Node& a = g.node(anchor);
    std::optional<std::vector<NodeId>> unit;
    if (a.op_type == "Erf") {
      if (std::optional<TailStep> gelu = gelu_around_erf(g, *consumers, a)) unit = gelu->nodes;
    } else {
      unit = layer_norm_nodes(g, *consumers, anchor);
    }
    return unit && std::find(unit->begin(), unit->end(), id) != unit->end();
  };
  std::set<NodeId> seen = {id};
  std::vector<NodeId> frontier = {id};
  for (int hop = 0; hop <= 4 && !frontier.empty(); ++hop) {
    std::vector<NodeId> next;
    for (NodeId f : frontier) {
      const std::string& t = g.node(f).op_type;
      if ((t == "Erf" || t == "ReduceMean") && unit_holds(f)) return true;
      for (ValueId v : g.node(f).inputs) {
        const NodeId p = v == kNoValue ? -1 : g.value(v).producer;
        if (p >= 0 && seen.insert(p).second) next.push_back(p);
      }
    }
    frontier = std::move(next);
  }
  if (n.op_type != "Div" && n.op_type != "Mul") return false;
  if (!consumers) consumers = g.consumers();
  for (NodeId r : (*consumers)[n.outputs[0]])
    if (g.node(r).op_type == "Erf" && unit_holds(r)) return true;
  return false;
}

// What the size-capped regions may hold: a unit's nodes only come whole (whole_units), so
// that no region takes the first nodes of a GELU and strands its Erf, which runs on nothing
// of oneDNN's alone.
bool capped_region_node(const Graph& g, const Node& n) {
  return region_node(g, n) && !in_whole_unit(g, n);
}

class OnednnGraphBackend : public Backend {
 public:
  std::string name() const override { return "onednn-graph"; }
  std::string version() const override { return backend_version(); }
  BackendKind kind() const override { return BackendKind::kGraphLevel; }
  // Same runtime as `onednn`: OpenMP, the calling thread's count (the kernel's).
  std::string thread_model() const override { return "OpenMP"; }
  std::vector<std::string> details() const override {
    return {"ISA in use: " + effective_isa(),
            "Activations stay in the primitives' preferred (blocked) layouts inside a region"};
  }

  std::vector<PatternEntry> patterns() const override {
    // Single supported ops: regions of one node (the fusion rule yields only larger ones).
    return {{"onednn_op",
             op_in(region_ops()).where(capped_region_node, "float32, fusable by onednn"),
             {}}};
  }

  std::vector<FusionRule> fusion_rules() const override {
    std::set<OpKind> all_kinds = {OpKind::kElementwise,        OpKind::kBroadcast,
                                  OpKind::kInjective,          OpKind::kReduction,
                                  OpKind::kOutElemwiseFusable, OpKind::kOpaque};
    return {
        fuse_region("onednn_region", all_kinds, kMaxRegionNodes, capped_region_node),
        {"onednn_units", "a LayerNorm decomposition or a head with its GELU, whole", whole_units}};
  }

  // "winograd" / "winograd2x2": every Conv of the region that Winograd takes uses it, with 4 /
  // 2 outputs per tile side (winograd_conv.h: fewer multiplies against more weight bytes;
  // which pays on a 3x3 conv depends on the image size and on whether the weights stay in
  // cache, so both are measured). "winograd2x2" is offered where a 3x3 conv is: on Inception's
  // 1x7 / 7x1 convs F(2, 7) ran 1.11x slower than F(4, 7) in every round, and measuring it
  // there took its cold tune from 3660 to 3929 measurements (docs/DESIGN.md, "Winograd along
  // one axis"); a region that has both builds its 1-D convs with 2 outputs too. Regions the
  // graph-level search assembles get a composed variant instead ("winograd@I,J;blocked@K,...":
  // those nodes only), from the variants their groups were given.
  std::vector<std::string> variants(const Graph& subgraph) const override {
    std::vector<std::string> out = {""};
    if (any_node(subgraph, winograd_conv_shape)) out.push_back(kWinograd);
    if (any_node(subgraph, winograd_3x3_shape)) out.push_back(kWinograd2x2);
    return out;
  }

  // "blocked": every Conv writes channel-blocked activations (nChw16c) and reads its input in
  // the layout it has: oneDNN's jit kernels instead of channels-last brgconv, and its one-pass
  // 1x1 + depthwise kernel (ConvAlgorithm::kBlocked). A region variant only: it pays where
  // activations pass between convs inside a region, and measured for every small region the
  // fusion rule proposes it took Inception-v3's cold tune from 3171 to 3944 measurements.
  std::vector<std::string> region_variants(const Graph& group) const override {
    std::vector<std::string> out = variants(group);
    if (any_node(group, blocked_candidate)) out.push_back(kBlocked);
    return out;
  }

  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) override {
    return compile_region(subgraph, conv_algorithms(subgraph, options.variant));
  }

 private:
  static constexpr const char* kWinograd = "winograd";
  static constexpr const char* kWinograd2x2 = "winograd2x2";
  static constexpr const char* kBlocked = "blocked";

  static bool any_node(const Graph& g, bool (*takes)(const Graph&, const Node&)) {
    return std::any_of(g.nodes().begin(), g.nodes().end(),
                       [&](const Node& n) { return takes(g, n); });
  }

  // A Conv (not ConvTranspose) of 1-3 spatial dims: what the blocked layouts exist for.
  static bool blocked_candidate(const Graph& g, const Node& n) {
    if (n.op_type != "Conv" || !n.domain.empty() || n.inputs.empty()) return false;
    const size_t rank = g.value(n.input(0)).shape.size();
    return rank >= 3 && rank <= 5;
  }

  // Per node of `region`: the algorithm its Conv is built with (empty: all direct). Throws
  // kUnsupported for a variant this backend does not offer.
  static std::vector<ConvAlgorithm> conv_algorithms(const Graph& region,
                                                    const std::string& variant) {
    if (variant.empty()) return {};
    std::vector<ConvAlgorithm> out(region.num_nodes(), ConvAlgorithm::kDirect);
    auto mark = [&](size_t n, const std::string& part) {
      const Node& node = region.node(static_cast<NodeId>(n));
      if (part == kWinograd && winograd_conv_shape(region, node))
        out[n] = ConvAlgorithm::kWinograd;
      else if (part == kWinograd2x2 && winograd_conv_shape(region, node))
        out[n] = ConvAlgorithm::kWinograd2x2;
      else if (part == kBlocked && blocked_candidate(region, node))
        out[n] = ConvAlgorithm::kBlocked;
    };
    if (variant == kWinograd || variant == kWinograd2x2 || variant == kBlocked) {
      for (size_t n = 0; n < region.num_nodes(); ++n) mark(n, variant);
      return out;
    }
    std::optional<std::vector<VariantPart>> parts =
        parse_composed_variant(variant, region.num_nodes());
    if (!parts) fail(ErrorKind::kUnsupported, "onednn-graph: no variant '{}'", variant);
    for (const VariantPart& p : *parts) {
      if (p.variant != kWinograd && p.variant != kWinograd2x2 && p.variant != kBlocked)
        fail(ErrorKind::kUnsupported, "onednn-graph: no variant '{}' (in '{}')", p.variant,
             variant);
      for (int n : p.nodes) mark(static_cast<size_t>(n), p.variant);
    }
    return out;
  }
};

}  // namespace
}  // namespace collage::onednn

namespace collage {
using OnednnGraphBackend = onednn::OnednnGraphBackend;
COLLAGE_REGISTER_BACKEND(OnednnGraphBackend);
}  // namespace collage
