// An example third-party backend: fuses chains of Relu/Clip into one pass.
#include <algorithm>
#include <limits>

#include "collage/backend.h"

namespace {

using collage::Graph;
using collage::Tensor;

// Clip's bounds come from attributes (opset < 11) or constant inputs (opset >= 11).
std::pair<float, float> clip_bounds(const Graph& g, const collage::Node& n) {
  float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
  if (n.op_type == "Relu") return {0.0f, hi};
  if (g.opset < 11) return {n.attr_float("min", lo), n.attr_float("max", hi)};
  auto bound = [&](size_t i, float def) {
    collage::ValueId v = n.input(i);
    if (v == collage::kNoValue) return def;
    if (!g.value(v).is_constant())
      collage::fail(collage::ErrorKind::kUnsupported, "Clip with non-constant bounds");
    return static_cast<float>(g.value(v).constant.get_as_double(0));
  };
  return {bound(1, lo), bound(2, hi)};
}

class ClampChainKernel : public collage::Kernel {
 public:
  ClampChainKernel(float lo, float hi) : lo_(lo), hi_(hi) {}
  void run(std::span<const Tensor> in, std::span<const Tensor> out) override {
    const float* x = in[0].data<float>();
    float* y = out[0].data<float>();
    for (int64_t i = 0; i < in[0].numel(); ++i) y[i] = std::min(std::max(x[i], lo_), hi_);
  }

 private:
  float lo_, hi_;
};

class ClampBackend : public collage::Backend {
 public:
  std::string name() const override { return "example-clamp"; }
  std::string version() const override { return "1.0"; }

  std::vector<collage::PatternEntry> patterns() const override {
    using namespace collage;
    Pattern clamp = op("Relu") | op("Clip", {any(), maybe(constant()), maybe(constant())});
    return {{"clamp", clamp, {}}};
  }

  std::vector<collage::FusionRule> fusion_rules() const override {
    auto is_clamp = [](const Graph&, const collage::Node& n) {
      return n.op_type == "Relu" || n.op_type == "Clip";
    };
    return {collage::fuse_tail("clamp-chain", {"Relu", "Clip"}, {collage::OpKind::kElementwise}, 4,
                               is_clamp)};
  }

  std::unique_ptr<collage::Kernel> compile(const Graph& g,
                                           const collage::CompileOptions&) override {
    if (g.inputs.size() != 1 || g.outputs.size() != 1 ||
        g.value(g.inputs[0]).dtype != collage::DType::kFloat32)
      collage::fail(collage::ErrorKind::kUnsupported, "example-clamp takes one float32 chain");
    // Clamps compose: clamp(clamp(x, a, b), c, d) = clamp(x, max(a,c), min(max(b,c), d))...
    // simpler to apply the bounds in order to the interval [lo, hi] of the running result.
    float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
    for (const auto& n : g.nodes()) {
      auto [a, b] = clip_bounds(g, n);
      lo = std::min(std::max(lo, a), b);
      hi = std::min(std::max(hi, a), b);
    }
    return std::make_unique<ClampChainKernel>(lo, hi);
  }
};

}  // namespace

extern "C" void collage_register_backends(collage::BackendRegistry* registry) {
  if (registry->abi_version() != collage::BackendRegistry::kAbiVersion) return;
  registry->add(std::make_shared<ClampBackend>());
}
