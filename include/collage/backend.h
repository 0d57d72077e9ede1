// The backend registration API. A backend is a pattern table (what it can run) plus a
// compile function (how to build a kernel for a matched subgraph). Adding one never
// touches the core: built-in backends register themselves (COLLAGE_REGISTER_BACKEND), and
// third-party ones come from a shared library exporting one C function:
//
//   extern "C" void collage_register_backends(collage::BackendRegistry* registry) {
//     registry->add(std::make_shared<MyBackend>());
//   }
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collage/device.h"
#include "collage/graph.h"
#include "collage/kernel.h"
#include "collage/pattern.h"

namespace collage {

enum class BackendKind {
  kOpLevel,     // one kernel per operator or small fused group (library calls)
  kGraphLevel,  // takes whole regions and optimises across kernels (a subgraph runtime)
};
const char* backend_kind_name(BackendKind kind);

// How a kernel is built: which of the backend's ways of computing the same nodes, and for
// how many threads. Both are part of a measured cost's key and of a plan.
struct CompileOptions {
  // One of Backend::variants(subgraph) (an algorithm such as a Winograd convolution, or a
  // build choice); "" is the backend's default.
  std::string variant;
  // Threads the kernel runs with. The runtime sets the calling thread's OpenMP thread count
  // to this before every run() (OpenMP's count is per calling thread), so OpenMP-based
  // kernels need do nothing; a backend with a pool of its own sizes it from here.
  int threads = 1;
};

// A variant of a region assembled from parts. The graph-level search gives each op-level
// group a graph-level backend *and* one of that backend's variants for the group's own
// nodes (Backend::variants of the group); neighbouring groups on one backend merge into a
// region, whose variant then says which of its nodes were given which variant:
//   "winograd@3,4,17;other@9"
// i.e. parts VARIANT@I,J,... joined by ';', where I, J are indices of the region's nodes in
// the order of its standalone subgraph (extract_subgraph keeps them sorted by node id).
// Nodes listed nowhere get the default. Variant names therefore contain none of "@;,".
// A plain name ("winograd") is a variant of the whole subgraph, as the backend defines it.
struct VariantPart {
  std::string variant;
  std::vector<int> nodes;  // sorted
};
// The canonical text of `parts` (default parts dropped, nodes and parts sorted, so equal
// assignments give equal cost-DB keys); "" when nothing is left.
std::string compose_variant(std::vector<VariantPart> parts);
// The parts of a composed variant (empty for ""); nullopt for a plain name (no '@'). Throws
// Error(kUnsupported) for a malformed one, or one naming a node index >= num_nodes.
std::optional<std::vector<VariantPart>> parse_composed_variant(const std::string& variant,
                                                               size_t num_nodes);
// A short form for people: "winograd" stays, "winograd@3,4,17" becomes "winograd(3 nodes)".
std::string variant_summary(const std::string& variant);

// A backend named as users write it: "NAME" or "NAME/VARIANT" (`run --backend onednn/winograd`:
// that backend, built as the variant wherever it offers it).
struct BackendSpec {
  std::string backend;
  std::string variant;  // "" = the backend's default
  static BackendSpec parse(const std::string& text);
};

// Whether a kernel's thread count holds whatever runs beside it. The concurrent executor
// runs independent steps at once, each on its share of the threads.
enum class ThreadControl {
  kPerKernel,    // each kernel uses exactly its own count (per-thread OpenMP, own pools)
  kProcessWide,  // the library has one count per process (OpenBLAS's pthreads): kernels of
                 // this backend with different counts must not run at the same time
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  // Library version: part of every cost-cache key, so a library upgrade re-measures.
  virtual std::string version() const = 0;
  virtual BackendKind kind() const { return BackendKind::kOpLevel; }
  // How it uses threads, for `collage backends` (e.g. "OpenMP", "pthreadpool").
  virtual std::string thread_model() const { return "caller's thread"; }
  // Extra facts worth showing (e.g. which OpenBLAS kernel is in use).
  virtual std::vector<std::string> details() const { return {}; }
  // False when the backend is built but can't run here (e.g. no GPU): it is then skipped.
  virtual bool available() const { return true; }
  // Why available() is false, for `collage backends` and `--version` (e.g. "no CUDA device
  // (cudaGetDeviceCount: ...)").
  virtual std::string unavailable_reason() const { return "not available on this machine"; }
  // The device its kernels run on; null (the default) = the host. A device backend's kernels
  // take and produce tensors in that device's memory (collage/device.h); the runtime copies
  // values between the host and the device where a placement crosses from one to the other.
  virtual Device* device() const { return nullptr; }

  virtual std::vector<PatternEntry> patterns() const = 0;
  virtual std::vector<FusionRule> fusion_rules() const { return {}; }

  // The variants this backend can build for `subgraph` (a match of its patterns): the
  // search measures each and keeps the fastest. The first is the default. Only variants
  // that may be faster somewhere belong here; each costs a measurement per candidate.
  virtual std::vector<std::string> variants(const Graph& subgraph) const { return {""}; }
  // The variants a group of a graph-level backend may take inside a region the graph-level
  // search assembles or a single-backend plan builds: variants(group), plus those that only
  // pay between neighbours in one region (a layout its boundary would undo), which are
  // measured as parts of whole regions, never as candidates alone.
  virtual std::vector<std::string> region_variants(const Graph& group) const {
    return variants(group);
  }
  virtual ThreadControl thread_control() const { return ThreadControl::kPerKernel; }
  // The significand bits its float32 arithmetic keeps: 24 for IEEE float32; fewer where the
  // user allowed reduced-precision math (11 for TF32 tensor cores, COLLAGE_CUDA_TF32=1). The
  // check against reference widens its tolerance to match (Tolerance::backend_vs_reference),
  // so a kernel is refused for computing wrong, never for the precision it was asked for.
  virtual int float32_significand_bits() const { return 24; }

  // Builds a kernel for `subgraph`: a standalone graph whose inputs and outputs are the
  // kernel's (see extract_subgraph). Weight packing and primitive creation happen here,
  // once. Throws Error (kUnsupported or kBackend) with the reason when it can't; an unknown
  // variant is kUnsupported.
  virtual std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) = 0;
};

class BackendRegistry {
 public:
  // Bumped whenever Backend/Kernel/Graph change layout: plugins built against another
  // version are refused.
  // 2: compile() takes CompileOptions; 3: Backend::device() and unavailable_reason();
  // 4: Backend::float32_significand_bits().
  static constexpr int kAbiVersion = 4;

  // The process-wide registry, with every built-in backend registered.
  static BackendRegistry& global();

  void add(std::shared_ptr<Backend> backend);  // replaces one with the same name
  Backend* find(const std::string& name) const;
  // Throws Error(kInvalidArgument) listing the available names.
  Backend& get(const std::string& name) const;
  std::vector<Backend*> all() const;
  // The backend every op runs on when no other takes it: the reference implementations,
  // the correctness oracle. The one place that names it.
  Backend& fallback() const;
  bool is_fallback(const Backend& backend) const { return &backend == &fallback(); }

  // dlopen()s `path` and calls its collage_register_backends. Throws Error(kIo) when it
  // can't be loaded or lacks the function.
  void load_plugin(const std::string& path);
  int abi_version() const { return kAbiVersion; }

 private:
  std::vector<std::shared_ptr<Backend>> backends_;
};

// Every (node set) the backend's patterns and fusion rules match in `graph`, deduplicated,
// after the entries' checks and a convexity check. Not yet compiled.
std::vector<Match> find_matches(const Graph& graph, const Backend& backend);

namespace detail {
struct BackendRegistrar {
  explicit BackendRegistrar(std::function<std::shared_ptr<Backend>()> make);
};
}  // namespace detail

}  // namespace collage

// Registers a built-in backend when the library loads. Use once, in the backend's .cc file.
#define COLLAGE_REGISTER_BACKEND(Class)                                 \
  static ::collage::detail::BackendRegistrar collage_registrar_##Class( \
      [] { return std::make_shared<Class>(); })

extern "C" {
// The one function a plugin exports.
typedef void (*CollageRegisterBackendsFn)(collage::BackendRegistry* registry);
}
