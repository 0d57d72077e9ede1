// The `cuda-gen` backend (op-level, GPU, generated code): fused elementwise/broadcast chains
// and last-axis reductions (GELU, LayerNorm, Softmax, attention's scale + mask + Softmax)
// generated as CUDA C++ (codegen.h), compiled at run time with NVRTC and cached on disk
// (nvrtc_compiler.h), loaded with the runtime's cudaLibraryLoadData (no driver API, no nvcc):
// the role TVM's generated kernels play in the Collage paper.
#include <fmt/format.h>

#include <map>
#include <mutex>

#include "backends/cuda_gen/codegen.h"
#include "backends/cuda_gen/nvrtc_compiler.h"
#include "collage/backend.h"
#include "devices/cuda/cuda_device.h"

namespace collage::cuda_gen {
namespace {

using cuda::check;
using cuda::CudaDevice;

// Regions grow one node at a time and every step is a candidate (each measured: an NVRTC
// compile the first time, ~0.1 s); larger fusions are rare in the zoo's models.
constexpr int kMaxRegion = 16;

// Loaded kernels by cubin, for the process: a region seen again (another plan, a re-tune)
// is not loaded twice. Libraries stay loaded (kernels from them may live anywhere).
cudaKernel_t load_kernel(const std::shared_ptr<const std::string>& cubin) {
  static std::mutex mutex;
  static std::map<const std::string*, cudaKernel_t> loaded;
  static std::vector<std::shared_ptr<const std::string>> keep;  // the keys' storage
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = loaded.find(cubin.get()); it != loaded.end()) return it->second;
  cudaLibrary_t library = nullptr;
  check(cudaLibraryLoadData(&library, cubin->data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
        "cuda-gen: cudaLibraryLoadData");
  cudaKernel_t kernel = nullptr;
  check(cudaLibraryGetKernel(&kernel, library, kEntry), "cuda-gen: cudaLibraryGetKernel");
  keep.push_back(cubin);
  return loaded[cubin.get()] = kernel;
}

class GeneratedCudaKernel : public Kernel {
 public:
  GeneratedCudaKernel(GeneratedKernel generated, cudaKernel_t kernel)
      : generated_(std::move(generated)), kernel_(kernel) {
    CudaDevice& device = CudaDevice::get();
    for (const Tensor& c : generated_.constants) {
      void* memory = device.allocate(std::max<size_t>(c.nbytes(), 1));
      constants_.push_back(memory);
      if (c.nbytes()) device.copy_to_device(memory, c.raw(), c.nbytes());
    }
    device.synchronize();
    // Enough blocks to fill the device a few times over; grid-stride loops cover the rest.
    const int64_t max_blocks = int64_t{device.properties().multiProcessorCount} * 32;
    const int64_t wanted = generated_.row_kernel
                               ? generated_.work
                               : (generated_.work + generated_.block - 1) / generated_.block;
    blocks_ = static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, max_blocks)));
  }
  ~GeneratedCudaKernel() override {
    for (void* m : constants_) CudaDevice::get().release(m);
  }

  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    std::vector<void*> pointers;
    for (const KernelParam& p : generated_.params) {
      switch (p.kind) {
        case KernelParam::Kind::kInput:
          pointers.push_back(inputs[p.index].raw());
          break;
        case KernelParam::Kind::kConstant:
          pointers.push_back(constants_[p.index]);
          break;
        case KernelParam::Kind::kOutput:
          pointers.push_back(outputs[p.index].raw());
          break;
      }
    }
    std::vector<void*> args;
    for (void*& p : pointers) args.push_back(&p);
    check(cudaLaunchKernel(reinterpret_cast<const void*>(kernel_), dim3(blocks_),
                           dim3(generated_.block), args.data(), 0, CudaDevice::get().stream()),
          "cuda-gen: cudaLaunchKernel");
  }

 private:
  GeneratedKernel generated_;
  cudaKernel_t kernel_;
  std::vector<void*> constants_;
  unsigned blocks_ = 1;
};

class CudaGenBackend : public Backend {
 public:
  std::string name() const override { return "cuda-gen"; }
  // The generator's version is part of it: costs measured with older kernels are re-measured.
  std::string version() const override {
    return fmt::format("nvrtc {} ({})", nvrtc_version(), kCodegenVersion);
  }
  std::string thread_model() const override { return "CUDA stream"; }
  bool available() const override { return CudaDevice::get().available(); }
  std::string unavailable_reason() const override { return CudaDevice::get().unavailable_reason(); }
  Device* device() const override { return &CudaDevice::get(); }
  std::vector<std::string> details() const override {
    return {
        "one generated kernel per region: elementwise/broadcast chains and last-axis "
        "reductions (Softmax, LayerNorm, Reduce*), compiled with NVRTC to a cubin",
        "kernels cached on disk under $COLLAGE_CACHE_DIR/cuda-gen (see nvrtc_compiler.h)"};
  }

  std::vector<PatternEntry> patterns() const override {
    // On a GPU even a lone elementwise op is worth a kernel: the alternative is a copy to the
    // host and back around it.
    std::vector<std::string> ops = {
        "Relu",     "Sigmoid",     "Tanh",      "Exp",        "Log",       "Sqrt",
        "Neg",      "Abs",         "Erf",       "Reciprocal", "Floor",     "Ceil",
        "Identity", "Softsign",    "Softplus",  "HardSwish",  "Add",       "Sub",
        "Mul",      "Div",         "Max",       "Min",        "Pow",       "LeakyRelu",
        "Elu",      "HardSigmoid", "Clip",      "Where",      "Cast",      "Dropout",
        "Softmax",  "ReduceMean",  "ReduceSum", "ReduceMax",  "ReduceMin", "LayerNormalization"};
    return {{"generated_op", op_in(ops).where(supports_node, "float32"), {}}};
  }

  std::vector<FusionRule> fusion_rules() const override {
    FusionRule rule =
        fuse_region("generated_region",
                    {OpKind::kElementwise, OpKind::kBroadcast, OpKind::kReduction, OpKind::kOpaque},
                    kMaxRegion, supports_node);
    rule.description += " (float32; reductions along the last axis)";
    return {rule};
  }

  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) override {
    if (!options.variant.empty())
      fail(ErrorKind::kUnsupported, "cuda-gen: no variant '{}'", options.variant);
    GeneratedKernel generated = generate(subgraph);  // kUnsupported before touching the GPU
    CudaDevice& device = CudaDevice::get();
    if (!device.available()) fail(ErrorKind::kBackend, "cuda-gen: {}", device.unavailable_reason());
    cudaKernel_t kernel = load_kernel(compile_cubin(generated.source, device.compute_capability()));
    return std::make_unique<GeneratedCudaKernel>(std::move(generated), kernel);
  }
};

COLLAGE_REGISTER_BACKEND(CudaGenBackend);

}  // namespace
}  // namespace collage::cuda_gen
