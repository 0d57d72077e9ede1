// The `halide` backend: generated code. A connected region of float32 elementwise,
// broadcast, injective and reduction ops (GELU's Div/Erf/Add/Mul, LayerNorm's
// decomposition, Softmax, bias + activation, residual adds, Transpose/Reshape glue) becomes
// ONE Halide pipeline with a hand-written schedule (lower.cc), compiled ahead of time into a
// cached shared object (jit_cache.cc). Candidates come from a fusion rule over op kinds, not
// from a list of patterns.
#include <HalideRuntime.h>

#include <algorithm>

#include "backends/halide/jit_cache.h"
#include "backends/halide/lower.h"
#include "collage/backend.h"

#ifndef COLLAGE_HALIDE_VERSION
#define COLLAGE_HALIDE_VERSION "unknown"
#endif

namespace collage::halide_backend {
namespace {

// Ops per region at most: regions beyond that rarely fuse better, and every extra size
// multiplies the candidates the search must compile and time.
constexpr int kMaxRegion = 16;

bool lowerable(const Graph& g, const Node& n) {
  return unsupported_reason(g, n).empty();
}

class HalideKernel : public Kernel {
 public:
  HalideKernel(EntryPoint fn, std::vector<Lowered::Param> params, const std::vector<Shape>& outputs,
               const std::vector<DType>& output_dtypes, int threads)
      : fn_(fn), params_(std::move(params)), threads_(threads) {
    for (const auto& p : params_) {
      dims_.push_back(dims_of(p.shape));
      types_.push_back(buffer_type(p.dtype));
    }
    for (size_t k = 0; k < outputs.size(); ++k) {
      dims_.push_back(dims_of(outputs[k]));
      types_.push_back(buffer_type(output_dtypes[k]));
    }
  }

  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    set_num_threads(threads_);
    const size_t count = params_.size() + outputs.size();
    std::vector<halide_buffer_t> buffers(count);
    // Halide may write into dim arrays during bounds queries: each call gets its own copy.
    std::vector<std::vector<halide_dimension_t>> dims = dims_;
    std::vector<void*> args(count);
    for (size_t k = 0; k < count; ++k) {
      const Tensor* t = nullptr;
      if (k < params_.size())
        t = params_[k].input >= 0 ? &inputs[params_[k].input] : &params_[k].constant;
      else
        t = &outputs[k - params_.size()];
      halide_buffer_t& b = buffers[k];
      b.host = static_cast<uint8_t*>(t->raw());
      b.type = types_[k];
      b.dimensions = static_cast<int32_t>(dims[k].size());
      b.dim = dims[k].empty() ? nullptr : dims[k].data();
      args[k] = &b;
    }
    if (int rc = fn_(args.data()); rc != 0)
      fail(ErrorKind::kBackend, "halide: kernel failed with status {}: {}", rc,
           last_kernel_error());
  }

 private:
  static std::vector<halide_dimension_t> dims_of(const Shape& shape) {
    std::vector<halide_dimension_t> dims;
    int32_t stride = 1;
    for (size_t k = shape.size(); k-- > 0;) {
      dims.push_back(halide_dimension_t(0, static_cast<int32_t>(shape[k]), stride));
      stride *= static_cast<int32_t>(shape[k]);
    }
    return dims;
  }

  EntryPoint fn_;
  std::vector<Lowered::Param> params_;
  std::vector<std::vector<halide_dimension_t>> dims_;
  std::vector<halide_type_t> types_;
  int threads_;
};

class HalideBackend : public Backend {
 public:
  std::string name() const override { return "halide"; }
  // "+r2": kernels since lowering 2 (see describe()) compute differently or faster, so costs
  // measured before are not reused. "+r3": compiled only for features the CPU has (a kernel
  // built with AVX512-FP16 on a Zen 5 died of SIGILL, jit_cache.cc): failures cached for
  // such crashes are measured again. "+r4": reshapes indexed run by run and short rows
  // unrolled (lowering 4): glue groups (Reshape, Slice, Concat) up to 6x faster. "+r5": a
  // scan writes each element once, streams along its axis, and is its own output.
  std::string version() const override {
    return std::string("Halide ") + COLLAGE_HALIDE_VERSION + "+r5";
  }
  BackendKind kind() const override { return BackendKind::kOpLevel; }
  std::string thread_model() const override { return "Halide thread pool"; }
  std::vector<std::string> details() const override {
    return {"target: " + target_string(),
            "hand-written schedules: innermost dim in 16-float vectors (a row of up to 8 "
            "vectors unrolled), rows over the pool, row reductions computed per row",
            "kernels compiled ahead of time and cached on disk (see jit_cache.h)"};
  }

  std::vector<PatternEntry> patterns() const override {
    // A reduction alone is worth a generated kernel (one pass, vectorised); a lone
    // elementwise op is not: the reference's loop is as good and each kernel costs a
    // compile. Chains of them come from the fusion rule. The transformer glue that often
    // stands alone between library kernels (an embedding Gather, a causal-mask Where, a
    // heads Transpose, a Split of packed q/k/v, a no-op Cast) gets a candidate too, so the
    // search decides by measurement whether reference's copy loop is the faster one.
    const NodePredicate ok = [](const Graph& g, const Node& n) { return lowerable(g, n); };
    return {
        {"Softmax", op_in({"Softmax", "LogSoftmax"}).where(ok, "float32"), {}},
        {"Reduce",
         op_in({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"})
             .where(ok, "float32, constant axes"),
         {}},
        // ArgMax and CumSum have no other fast backend (oneDNN 2.6 has neither).
        {"ArgReduce", op_in({"ArgMax", "ArgMin"}).where(ok, "float32 in, int64 positions out"), {}},
        {"CumSum", op("CumSum").where(ok, "float32, constant axis"), {}},
        // The index and mask ops (post-processing, one-hot masks, gathered or scattered
        // rows, causal masks, float remainders) have no other fast backend either.
        {"IndexOps",
         op_in({"GatherElements", "GatherND", "ScatterElements", "Scatter", "ScatterND", "OneHot",
                "Trilu", "Hardmax", "Mod", "TopK"})
             .where(ok,
                    "float32 (Trilu, gathers and scatters: any data type a buffer holds; "
                    "TopK: k up to 16)"),
         {}},
        {"LayerNormalization", op("LayerNormalization").where(ok, "float32, Y only"), {}},
        // Every sampling mode (the reference's taps as tables): a linear or cubic resize
        // alone is many times the reference's speed.
        // Reflect and edge padding (ReflectionPad2d in style-transfer and GAN
        // generators) has no other fast backend; constant padding competes with onednn.
        {"Pad", op("Pad").where(ok, "float32, every mode, constant pads and value"), {}},
        {"Resize",
         op_in({"Resize", "Upsample"})
             .where(ok, "float32, every mode but tf_crop_and_resize, constant scales/sizes"),
         {}},
        {"TransformerGlue",
         op_in({"Gather", "Where", "Transpose", "Split", "Cast", "CastLike"})
             .where(ok, "float32 data (int32/int64/bool where the op moves it)"),
         {}}};
  }

  std::vector<FusionRule> fusion_rules() const override {
    // kOpaque admits the one opaque op lowering knows (LayerNormalization); `lowerable`
    // keeps every other out.
    FusionRule rule = fuse_region("fused_region",
                                  {OpKind::kElementwise, OpKind::kBroadcast, OpKind::kInjective,
                                   OpKind::kReduction, OpKind::kOpaque},
                                  kMaxRegion, lowerable);
    rule.description += " (float32, ops lowerable to Halide)";
    return {rule};
  }

  // Halide's runtime has one thread pool per process: each kernel sets its size before it
  // runs, so two kernels with different counts must not run at the same time.
  ThreadControl thread_control() const override { return ThreadControl::kProcessWide; }

  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) override {
    if (!options.variant.empty())
      fail(ErrorKind::kUnsupported, "halide: no variant '{}'", options.variant);
    if (subgraph.num_nodes() == 0) fail(ErrorKind::kUnsupported, "halide: empty subgraph");
    for (const Node& n : subgraph.nodes())
      if (std::string why = unsupported_reason(subgraph, n); !why.empty())
        fail(ErrorKind::kUnsupported, "halide: node '{}' ({}): {}", n.name, n.op_type, why);
    Lowered lowered = lower(subgraph);
    EntryPoint fn =
        get_kernel(describe(subgraph), [&](const std::string& name, const Halide::Target& target) {
          return lowered.pipeline.compile_to_module(lowered.arguments, name, target);
        });
    return std::make_unique<HalideKernel>(fn, std::move(lowered.params), lowered.output_shapes,
                                          lowered.output_dtypes, options.threads);
  }
};

}  // namespace
}  // namespace collage::halide_backend

namespace collage {
using HalideBackend = halide_backend::HalideBackend;
COLLAGE_REGISTER_BACKEND(HalideBackend);
}  // namespace collage
