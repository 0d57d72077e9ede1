// The `onednn-graph` backend (graph-level): connected convex regions of the ops the onednn
// backend fuses, each compiled into one program whose primitives pass activations in the
// layouts they prefer (blocked, format_tag::any), reordering only at the region's boundary
// where `onednn` pays a reorder into and out of every convolution.
#include <algorithm>
#include <set>

#include "backends/onednn/groups.h"
#include "backends/onednn/kernels.h"
#include "backends/onednn/region_kernel.h"
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
  for (const char* op : {"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Concat",
                         "Slice", "Split", "Transpose", "Pad", "ReduceMean", "ReduceMax"})
    if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
  for (const auto* list : {&unary_ops(), &binary_ops()})
    for (const std::string& op : *list)
      if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
  return ops;
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
    return {
        {"onednn_op", op_in(region_ops()).where(region_node, "float32, fusable by onednn"), {}}};
  }

  std::vector<FusionRule> fusion_rules() const override {
    std::set<OpKind> all_kinds = {OpKind::kElementwise,        OpKind::kBroadcast,
                                  OpKind::kInjective,          OpKind::kReduction,
                                  OpKind::kOutElemwiseFusable, OpKind::kOpaque};
    return {fuse_region("onednn_region", all_kinds, kMaxRegionNodes, region_node)};
  }

  // "winograd": every Conv of the region that oneDNN's Winograd kernels take uses them.
  // Regions the graph-level search assembles get a composed variant instead
  // ("winograd@I,J,...": those nodes only), from the variants their groups were given.
  std::vector<std::string> variants(const Graph& subgraph) const override {
    for (size_t n = 0; n < subgraph.num_nodes(); ++n)
      if (winograd_candidate(subgraph, subgraph.node(static_cast<NodeId>(n))))
        return {"", kWinograd};
    return {""};
  }

  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) override {
    return compile_region(subgraph, winograd_nodes(subgraph, options.variant));
  }

 private:
  static constexpr const char* kWinograd = "winograd";

  // Per node of `region`: built with Winograd. Throws kUnsupported for another variant.
  static std::vector<bool> winograd_nodes(const Graph& region, const std::string& variant) {
    std::vector<bool> out(region.num_nodes(), false);
    auto mark = [&](size_t n) {
      out[n] = winograd_candidate(region, region.node(static_cast<NodeId>(n)));
    };
    if (variant == kWinograd) {
      for (size_t n = 0; n < region.num_nodes(); ++n) mark(n);
      return out;
    }
    std::optional<std::vector<VariantPart>> parts =
        parse_composed_variant(variant, region.num_nodes());
    if (!parts) fail(ErrorKind::kUnsupported, "onednn-graph: no variant '{}'", variant);
    for (const VariantPart& p : *parts) {
      if (p.variant != kWinograd)
        fail(ErrorKind::kUnsupported, "onednn-graph: no variant '{}' (in '{}')", p.variant,
             variant);
      for (int n : p.nodes) mark(static_cast<size_t>(n));
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
