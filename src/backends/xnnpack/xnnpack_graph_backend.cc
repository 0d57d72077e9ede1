// The `xnnpack-graph` backend (graph-level): connected convex regions of the ops XNNPACK's
// subgraph API takes, each compiled into one runtime that keeps activations NHWC between
// its operators and transposes only at the region's boundary.
#include <set>

#include "backends/xnnpack/backend_common.h"
#include "backends/xnnpack/subgraph_kernel.h"
#include "collage/backend.h"

namespace collage::xnnpack {
namespace {

// Regions grow one node at a time and every step is a candidate: this caps how many the
// tuner measures per start node. Larger regions come from the graph-level search merging
// adjacent groups, which compile() takes at any size.
constexpr int kMaxRegionNodes = 8;

const std::vector<std::string>& region_ops() {
  static const std::vector<std::string> ops = {
      "Conv",     "MatMul", "Gemm",    "MaxPool", "AveragePool", "GlobalAveragePool",
      "Relu",     "Clip",   "Sigmoid", "Softmax", "Add",         "Mul",
      "Sub",      "Div",    "Pad",     "Flatten", "Reshape",     "Squeeze",
      "Unsqueeze"};
  return ops;
}

class XnnpackGraphBackend : public Backend {
 public:
  std::string name() const override { return "xnnpack-graph"; }
  std::string version() const override { return backend_version(); }
  BackendKind kind() const override { return BackendKind::kGraphLevel; }
  std::string thread_model() const override { return "pthreadpool"; }
  std::vector<std::string> details() const override { return backend_details(); }
  bool available() const override { return XnnpackContext::get().initialized(); }

  std::vector<PatternEntry> patterns() const override {
    // Single supported ops: regions of one node (the fusion rule yields only larger ones).
    return {
        {"xnnpack_op", op_in(region_ops()).where(subgraph_supports, "in XNNPACK subgraphs"), {}}};
  }

  std::vector<FusionRule> fusion_rules() const override {
    std::set<OpKind> all_kinds = {OpKind::kElementwise,        OpKind::kBroadcast,
                                  OpKind::kInjective,          OpKind::kReduction,
                                  OpKind::kOutElemwiseFusable, OpKind::kOpaque};
    return {fuse_region("xnnpack_region", all_kinds, kMaxRegionNodes, subgraph_supports)};
  }

  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) override {
    require_available();
    if (!options.variant.empty())
      fail(ErrorKind::kUnsupported, "xnnpack-graph: no variant '{}'", options.variant);
    return compile_subgraph(subgraph, XnnpackContext::get().pool(options.threads));
  }
};

COLLAGE_REGISTER_BACKEND(XnnpackGraphBackend);

}  // namespace
}  // namespace collage::xnnpack
