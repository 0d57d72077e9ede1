// The `cuda-graph` backend (graph-level, GPU): a region of the op-level GPU backends' kernels
// (cudnn, cublas, cuda-gen: whatever backends on the CUDA device are registered) recorded
// once into a CUDA graph and replayed with one launch, so a region of many small kernels
// pays one launch instead of one each: the role TensorRT's whole-region engines play in the
// Collage paper. It reaches those backends through the registry only (their patterns are its
// patterns; it compiles each part with them), so it depends on no other backend folder.
//
// Inside a region: the parts are chosen greedily (largest match first, the registry's order
// on ties), its intermediate values live in a device arena of its own planned by liveness,
// its inputs and outputs are the executor's device buffers. The graph is captured on a
// private stream (CudaDevice's StreamOverride) at the first run with a set of buffers (an
// executor's never move; a few sets are kept), then launched on the device's stream.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "collage/backend.h"
#include "devices/cuda/cuda_device.h"
#include "runtime/memory_plan.h"
#include "runtime/partitioner.h"

namespace collage::cuda_graph {
namespace {

using cuda::check;
using cuda::CudaDevice;

[[noreturn]] void unsupported(const std::string& why) {
  fail(ErrorKind::kUnsupported, "cuda-graph: {}", why);
}

// The op-level backends whose kernels run on the CUDA device, in the registry's order.
std::vector<Backend*> gpu_backends() {
  std::vector<Backend*> out;
  for (Backend* b : BackendRegistry::global().all())
    if (b->kind() == BackendKind::kOpLevel && b->device() == &CudaDevice::get()) out.push_back(b);
  return out;
}

struct Part {
  std::shared_ptr<Kernel> kernel;
  std::vector<ValueId> inputs, outputs;  // values of the region graph
};

class CudaGraphKernel : public Kernel {
 public:
  CudaGraphKernel(Graph region, std::vector<Part> parts)
      : g_(std::move(region)), parts_(std::move(parts)) {
    // Intermediate values (neither a region input nor output) get arena slots by liveness.
    const size_t nv = g_.num_values();
    std::vector<int> first(nv, -1), last(nv, -1);
    std::set<ValueId> boundary(g_.inputs.begin(), g_.inputs.end());
    boundary.insert(g_.outputs.begin(), g_.outputs.end());
    for (size_t p = 0; p < parts_.size(); ++p) {
      for (ValueId v : parts_[p].outputs)
        if (first[v] < 0) first[v] = static_cast<int>(p);
      for (ValueId v : parts_[p].inputs) last[v] = std::max(last[v], static_cast<int>(p));
    }
    std::vector<ValueId> slotted;
    std::vector<BufferRequest> requests;
    for (size_t v = 0; v < nv; ++v) {
      if (first[v] < 0 || boundary.count(static_cast<ValueId>(v))) continue;
      const Value& val = g_.value(static_cast<ValueId>(v));
      requests.push_back({static_cast<size_t>(shape_numel(val.shape)) * dtype_size(val.dtype),
                          first[v], std::max(first[v], last[v])});
      slotted.push_back(static_cast<ValueId>(v));
    }
    MemoryPlan plan = plan_memory(requests);
    if (plan.arena_bytes) arena_ = CudaDevice::get().allocate(plan.arena_bytes);
    slot_.assign(nv, nullptr);
    for (size_t i = 0; i < slotted.size(); ++i)
      slot_[slotted[i]] = static_cast<std::byte*>(arena_) + plan.offsets[i];
  }
  ~CudaGraphKernel() override {
    for (auto& [bound, exec] : execs_) cudaGraphExecDestroy(exec);
    if (capture_stream_) cudaStreamDestroy(capture_stream_);
    if (arena_) CudaDevice::get().release(arena_);
  }

  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    std::vector<void*> bound;
    for (const Tensor& t : inputs) bound.push_back(t.raw());
    for (const Tensor& t : outputs) bound.push_back(t.raw());
    cudaGraphExec_t exec = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = std::find_if(execs_.begin(), execs_.end(),
                             [&](const auto& e) { return e.first == bound; });
      if (it == execs_.end()) {
        if (execs_.size() == kMaxGraphs) {
          cudaGraphExecDestroy(execs_.front().second);
          execs_.erase(execs_.begin());
        }
        execs_.emplace_back(bound, capture(inputs, outputs));
        it = execs_.end() - 1;
      }
      exec = it->second;
    }
    check(cudaGraphLaunch(exec, CudaDevice::get().stream()), "cuda-graph: cudaGraphLaunch");
  }

 private:
  // Records every part's kernel into a graph, reading and writing these buffers.
  cudaGraphExec_t capture(std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
    std::vector<Tensor> views(g_.num_values());
    for (size_t i = 0; i < g_.inputs.size(); ++i) views[g_.inputs[i]] = inputs[i];
    for (size_t i = 0; i < g_.outputs.size(); ++i) views[g_.outputs[i]] = outputs[i];
    for (size_t v = 0; v < g_.num_values(); ++v)
      if (slot_[v]) {
        const Value& val = g_.value(static_cast<ValueId>(v));
        views[v] = Tensor::view(val.dtype, val.shape, slot_[v]);
      }
    if (!capture_stream_)
      check(cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking),
            "cuda-graph: cudaStreamCreate");
    cudaGraph_t graph = nullptr;
    {
      cuda::StreamOverride on(capture_stream_);
      // Thread-local: kernels other threads enqueue meanwhile are not recorded.
      check(cudaStreamBeginCapture(capture_stream_, cudaStreamCaptureModeThreadLocal),
            "cuda-graph: cudaStreamBeginCapture");
      try {
        for (const Part& p : parts_) {
          std::vector<Tensor> in, out;
          for (ValueId v : p.inputs) in.push_back(views[v]);
          for (ValueId v : p.outputs) out.push_back(views[v]);
          p.kernel->run(in, out);
        }
      } catch (...) {
        cudaGraph_t broken = nullptr;
        cudaStreamEndCapture(capture_stream_, &broken);
        if (broken) cudaGraphDestroy(broken);
        throw;
      }
      check(cudaStreamEndCapture(capture_stream_, &graph), "cuda-graph: cudaStreamEndCapture");
    }
    cudaGraphExec_t exec = nullptr;
    cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(status, "cuda-graph: cudaGraphInstantiate");
    return exec;
  }

  Graph g_;
  std::vector<Part> parts_;
  void* arena_ = nullptr;
  std::vector<std::byte*> slot_;  // by value: its arena slot (intermediates only)
  cudaStream_t capture_stream_ = nullptr;
  // A graph per set of buffers it was given, the latest kMaxGraphs: the tuner shares one
  // kernel between the plans it times side by side, each with its own arena, and must not
  // re-record it at every run.
  static constexpr size_t kMaxGraphs = 8;
  std::mutex mutex_;
  std::vector<std::pair<std::vector<void*>, cudaGraphExec_t>> execs_;
};

class CudaGraphBackend : public Backend {
 public:
  std::string name() const override { return "cuda-graph"; }
  // The kernels inside are the op-level backends': their versions are part of this one.
  std::string version() const override {
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    std::string v = fmt::format("cudart {}.{}", runtime / 1000, runtime % 1000 / 10);
    for (Backend* b : gpu_backends()) v += fmt::format("; {} {}", b->name(), b->version());
    return v;
  }
  BackendKind kind() const override { return BackendKind::kGraphLevel; }
  std::string thread_model() const override { return "CUDA graph on the device's stream"; }
  bool available() const override { return CudaDevice::get().available(); }
  std::string unavailable_reason() const override { return CudaDevice::get().unavailable_reason(); }
  Device* device() const override { return &CudaDevice::get(); }
  // Its regions hold the inner backends' kernels: the least precise of them.
  int float32_significand_bits() const override {
    int bits = 24;
    for (Backend* b : gpu_backends()) bits = std::min(bits, b->float32_significand_bits());
    return bits;
  }
  std::vector<std::string> details() const override {
    std::string inner;
    for (Backend* b : gpu_backends()) inner += (inner.empty() ? "" : ", ") + b->name();
    return {"regions of " + inner + " kernels recorded once into a CUDA graph, one launch each"};
  }

  // What the GPU backends match: a region can hold any of their kernels.
  std::vector<PatternEntry> patterns() const override {
    std::vector<PatternEntry> out;
    for (Backend* b : gpu_backends())
      for (PatternEntry& p : b->patterns()) {
        p.name = b->name() + ":" + p.name;
        out.push_back(std::move(p));
      }
    return out;
  }
  std::vector<FusionRule> fusion_rules() const override {
    std::vector<FusionRule> out;
    for (Backend* b : gpu_backends())
      for (FusionRule& r : b->fusion_rules()) {
        r.name = b->name() + ":" + r.name;
        out.push_back(std::move(r));
      }
    return out;
  }

  std::unique_ptr<Kernel> compile(const Graph& region, const CompileOptions& options) override {
    if (!options.variant.empty()) unsupported("no variant '" + options.variant + "'");
    if (region.num_nodes() == 0) unsupported("empty region");
    CudaDevice& device = CudaDevice::get();
    if (!device.available())
      fail(ErrorKind::kBackend, "cuda-graph: {}", device.unavailable_reason());
    // Every match of every GPU backend, largest first from each node (ties: registry order).
    struct Option {
      std::vector<NodeId> nodes;
      Backend* backend;
      size_t rank;
    };
    std::vector<Option> options_found;
    std::vector<Backend*> backends = gpu_backends();
    for (size_t r = 0; r < backends.size(); ++r)
      for (Match& m : find_matches(region, *backends[r]))
        options_found.push_back({std::move(m.nodes), backends[r], r});
    std::stable_sort(options_found.begin(), options_found.end(),
                     [](const Option& a, const Option& b) {
                       if (a.nodes.front() != b.nodes.front())
                         return a.nodes.front() < b.nodes.front();
                       if (a.nodes.size() != b.nodes.size()) return a.nodes.size() > b.nodes.size();
                       return a.rank < b.rank;
                     });
    std::vector<int> group_of(region.num_nodes(), -1);
    Placement placement;
    std::vector<std::shared_ptr<Kernel>> kernels;
    for (size_t n = 0; n < region.num_nodes(); ++n) {
      if (group_of[n] >= 0) continue;
      std::string why = "no GPU backend matches it";
      for (const Option& o : options_found) {
        if (o.nodes.front() != static_cast<NodeId>(n)) continue;
        if (std::any_of(o.nodes.begin(), o.nodes.end(), [&](NodeId x) { return group_of[x] >= 0; }))
          continue;
        for (NodeId x : o.nodes) group_of[x] = static_cast<int>(placement.size());
        std::shared_ptr<Kernel> kernel;
        if (groups_are_acyclic(region, group_of)) {
          Candidate c{o.nodes, o.backend, "", options.threads};
          try {
            kernel = compile_candidate(region, c);
          } catch (const Error& e) {
            why = e.what();
          }
        }
        if (!kernel) {
          for (NodeId x : o.nodes) group_of[x] = -1;
          continue;
        }
        placement.push_back(Candidate{o.nodes, o.backend, "", options.threads});
        kernels.push_back(std::move(kernel));
        break;
      }
      if (group_of[n] < 0)
        unsupported(fmt::format("node '{}' ({}): {}", region.node(static_cast<NodeId>(n)).name,
                                region.node(static_cast<NodeId>(n)).op_type, why));
    }
    // In an executable order, each part reading and writing region values.
    std::vector<Step> steps =
        build_steps(region, placement, nullptr, [&](const Graph&, const Candidate& c) {
          for (size_t i = 0; i < placement.size(); ++i)
            if (placement[i] == c) return kernels[i];
          fail(ErrorKind::kInternal, "cuda-graph: a part without a kernel");
        });
    std::vector<Part> parts;
    for (Step& s : steps) parts.push_back({s.kernel, s.inputs, s.outputs});
    auto kernel = std::make_unique<CudaGraphKernel>(region, std::move(parts));
    trial_run(region, *kernel);
    return kernel;
  }

 private:
  // Captures and launches once on zeroed buffers: what CUDA refuses to record fails here.
  static void trial_run(const Graph& region, Kernel& kernel) {
    CudaDevice& device = CudaDevice::get();
    std::vector<void*> memory;
    auto buffers = [&](const std::vector<ValueId>& values) {
      std::vector<Tensor> out;
      for (ValueId v : values) {
        const Value& val = region.value(v);
        const size_t bytes = static_cast<size_t>(shape_numel(val.shape)) * dtype_size(val.dtype);
        void* p = device.allocate(std::max<size_t>(bytes, 4));
        memory.push_back(p);
        check(cudaMemsetAsync(p, 0, bytes, device.stream()), "cudaMemsetAsync");
        out.push_back(Tensor::view(val.dtype, val.shape, p));
      }
      return out;
    };
    try {
      std::vector<Tensor> in = buffers(region.inputs), out = buffers(region.outputs);
      kernel.run(in, out);
      device.synchronize();
    } catch (const Error& e) {
      for (void* p : memory) device.release(p);
      unsupported(fmt::format("the region cannot be recorded: {}", e.what()));
    }
    for (void* p : memory) device.release(p);
  }
};

COLLAGE_REGISTER_BACKEND(CudaGraphBackend);

}  // namespace
}  // namespace collage::cuda_graph
