// The `torch` (op-level: one ATen call per kernel, with a fused bias/Relu) and `torch-graph`
// (graph-level: a region becomes a frozen, inference-optimised TorchScript module) backends.
// This file is their front end inside collage_core: pattern tables, listing facts and the
// lazy loading of libcollage_torch.so, which holds every kernel (see plugin_api.h for why).
#include <dlfcn.h>
#include <torch/version.h>  // macros only: no libtorch code comes with it

#include <filesystem>
#include <mutex>

#include "backends/torch/plugin_api.h"
#include "backends/torch/support.h"
#include "collage/backend.h"
#include "collage/session.h"

namespace collage::torch_backend {
namespace {

// Regions grow one node at a time and every step is a candidate the tuner compiles and
// times; TorchScript compile + freeze + optimize takes ~0.1 s, so regions stay small here
// and larger ones come from the graph-level search merging neighbours.
constexpr int kMaxRegionNodes = 12;

const char* const kPluginName = "libcollage_torch.so";

// The plugin sits next to libcollage_core.so (both are build outputs of this project);
// COLLAGE_TORCH_PLUGIN overrides that.
std::string plugin_path() {
  if (const char* env = std::getenv("COLLAGE_TORCH_PLUGIN"); env && *env) return env;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&plugin_path), &info) && info.dli_fname)
    return (std::filesystem::path(info.dli_fname).parent_path() / kPluginName).string();
  return kPluginName;
}

class Plugin {
 public:
  static Plugin& get() {
    static Plugin plugin;
    return plugin;
  }

  bool present() const { return std::filesystem::exists(path_); }
  const std::string& path() const { return path_; }

  // Loads the plugin on first use (in this process: a forked child loads its own).
  const PluginApi& api() {
    std::call_once(once_, [this] { load(); });
    if (!api_) fail(ErrorKind::kBackend, "torch: {}", error_);
    return *api_;
  }

 private:
  Plugin() : path_(plugin_path()) {}

  void load() {
    // RTLD_NODELETE: kernels from the plugin outlive any handle we keep.
    void* handle = dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!handle) {
      error_ = fmt::format("cannot load {}: {}", path_, dlerror());
      return;
    }
    auto entry = reinterpret_cast<decltype(&collage_torch_plugin_api)>(
        dlsym(handle, "collage_torch_plugin_api"));
    const PluginApi* api = entry ? entry() : nullptr;
    if (!api || api->abi != kPluginAbi) {
      error_ = fmt::format("{} is not a compatible torch plugin", path_);
      return;
    }
    if (std::string(api->torch_version) != TORCH_VERSION) {
      error_ = fmt::format("{} was built against libtorch {}, collage against {}", path_,
                           api->torch_version, TORCH_VERSION);
      return;
    }
    api_ = api;
  }

  std::string path_;
  std::once_flag once_;
  const PluginApi* api_ = nullptr;
  std::string error_;
};

// COLLAGE_TORCH_PRELOAD=1 loads the plugin when collage_core loads: for a process that
// forks many short-lived children that each compile (the conformance runner), so that
// libtorch starts once instead of once per child. The parent runs no ATen op, so no
// thread pool exists yet that a child could inherit half-started.
const bool g_preloaded = [] {
  const char* env = std::getenv("COLLAGE_TORCH_PRELOAD");
  if (!env || std::string(env) != "1") return false;
  try {
    Plugin::get().api();
    return true;
  } catch (const Error&) {
    return false;  // reported again, with the reason, by the first compile
  }
}();

std::vector<std::string> common_details() {
  Plugin& p = Plugin::get();
  return {"kernels in " + p.path() + " (loaded on first compile; libtorch start-up is slow)",
          "ATen CPU ops (oneDNN/mkldnn-backed convolutions where ATen picks them)",
          "inter-op threads: 1",
          g_preloaded ? "plugin preloaded (COLLAGE_TORCH_PRELOAD=1)" : "plugin loaded lazily"};
}

class TorchBackendBase : public Backend {
 public:
  // Debian's 1.13.1 headers still say TORCH_VERSION "1.13.0": the package's upstream
  // version, when the build found one, keeps cost-cache keys honest across upgrades. The
  // kernel revision (+rN) changes when collage's own kernels do, so cached costs and
  // failures ("wrong result") are measured again: r1, torch-graph checks its optimised
  // region against the plain one (the ReLU6 miscompile, script_kernel.cc); r2, also on
  // inputs times 16 (a Clip cut at 1).
  std::string version() const override {
#ifdef COLLAGE_TORCH_PACKAGE_VERSION
    return "libtorch " COLLAGE_TORCH_PACKAGE_VERSION "+r2";
#else
    return "libtorch " TORCH_VERSION "+r2";
#endif
  }
  std::string thread_model() const override {
    return "ATen intra-op (OpenMP)";
  }
  bool available() const override {
    return Plugin::get().present();
  }

 protected:
  static void check_variant(const CompileOptions& options) {
    if (!options.variant.empty())
      fail(ErrorKind::kUnsupported, "torch: no variant '{}'", options.variant);
  }
};

Pattern with_relu(const Pattern& p) {
  return optional(p, [](const Pattern& x) { return op("Relu", {x}); });
}

// The kernel computes only its last node's value: an interior value read outside the
// match would be a second output it does not produce.
bool one_output(const Graph& g, const Match& m) {
  return boundary_of(g, m.nodes).outputs.size() == 1;
}

// MatMul + Add(bias): the bias must broadcast along the last axis only (a Linear's bias).
bool linear_check(const Graph& g, const Match& m) {
  if (!one_output(g, m)) return false;
  for (NodeId id : m.nodes) {
    const Node& n = g.node(id);
    if (n.op_type != "Add") continue;
    const ValueId bias = is_const(g, n.input(1)) ? n.input(1) : n.input(0);
    const Shape& b = g.value(bias).shape;
    const Shape& y = g.value(n.outputs[0]).shape;
    const ValueId mm = bias == n.input(1) ? n.input(0) : n.input(1);
    if (g.value(mm).shape != y || y.empty() || !is_f32(g, bias)) return false;
    for (size_t i = 0; i + 1 < b.size(); ++i)
      if (b[i] != 1) return false;
    return b.empty() || b.back() == 1 || b.back() == y.back();
  }
  return false;
}

class TorchBackend : public TorchBackendBase {
 public:
  std::string name() const override { return "torch"; }
  std::vector<std::string> details() const override {
    std::vector<std::string> d = common_details();
    d.push_back("weights: contiguous ATen tensors made once at compile; bias/BN/Relu fused");
    return d;
  }

  std::vector<PatternEntry> patterns() const override {
    const NodePredicate head = [](const Graph& g, const Node& n) { return op_level_head(g, n); };
    Pattern conv = op("Conv", {any(), constant(), maybe(constant())}).where(head, "float32");
    Pattern matmul = op("MatMul").where(head, "float32");
    Pattern linear = op("Add", {matmul, constant()}) | op("Add", {constant(), matmul});
    return {
        {"Conv+Relu?", with_relu(conv), one_output},
        {"ConvTranspose",
         op("ConvTranspose", {any(), constant(), maybe(constant())}).where(head, "float32"),
         {}},
        {"MatMul+Relu?", with_relu(matmul), one_output},
        {"Linear(MatMul+bias)+Relu?", with_relu(linear), linear_check},
        {"Gemm+Relu?", with_relu(op("Gemm").where(head, "float32")), one_output},
        {"Pool",
         op_in({"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"})
             .where(head, "float32, no Indices, no AveragePool dilation"),
         {}},
        {"BatchNormalization+Relu?",
         with_relu(op("BatchNormalization").where(head, "float32, inference, constant stats")),
         one_output},
        {"LayerNormalization", op("LayerNormalization").where(head, "float32, one output"), {}},
    };
  }

  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) override {
    check_variant(options);
    return Plugin::get().api().compile_ops(subgraph, options.threads);
  }
};

class TorchGraphBackend : public TorchBackendBase {
 public:
  std::string name() const override { return "torch-graph"; }
  BackendKind kind() const override { return BackendKind::kGraphLevel; }
  std::vector<std::string> details() const override {
    std::vector<std::string> d = common_details();
    d.push_back(
        "regions -> TorchScript source -> torch::jit::compile, freeze, optimize_for_inference");
    return d;
  }

  std::vector<PatternEntry> patterns() const override {
    // Single supported ops: regions of one node (the fusion rule yields only larger ones).
    return {{"torchscript_op",
             op_in(region_op_types()).where(region_supports, "float32, in TorchScript regions"),
             {}}};
  }

  std::vector<FusionRule> fusion_rules() const override {
    const std::set<OpKind> all_kinds = {OpKind::kElementwise,        OpKind::kBroadcast,
                                        OpKind::kInjective,          OpKind::kReduction,
                                        OpKind::kOutElemwiseFusable, OpKind::kOpaque};
    return {fuse_region("torchscript_region", all_kinds, kMaxRegionNodes, region_supports)};
  }

  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) override {
    check_variant(options);
    return Plugin::get().api().compile_region(subgraph, options.threads);
  }
};

}  // namespace
}  // namespace collage::torch_backend

namespace collage {
using TorchBackend = torch_backend::TorchBackend;
using TorchGraphBackend = torch_backend::TorchGraphBackend;
COLLAGE_REGISTER_BACKEND(TorchBackend);
COLLAGE_REGISTER_BACKEND(TorchGraphBackend);
}  // namespace collage
