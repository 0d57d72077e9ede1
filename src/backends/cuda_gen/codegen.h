// cuda-gen's code generator: a region of elementwise/broadcast ops and reductions along the
// last axis (Softmax, LayerNormalization, ReduceMean/Sum/Max/Min with keepdims) written as
// ONE CUDA C++ kernel. Plain host code (no CUDA header): its output is text that NVRTC
// compiles, so it is tested on machines without a GPU.
//
// The kernel model: a "domain" shape D (the numpy broadcast of every value in the region).
// - No reduction: one thread per element of D (a grid-stride loop); every value is an
//   expression of the inputs at that element, inputs read at their broadcast offsets.
// - Reductions along the last axis: one block per row of D (rows = numel(D) / D[-1]); each
//   reduction is a loop over the row plus a shared-memory tree, its result a per-row scalar
//   later expressions read (LayerNorm decomposed by an exporter: two reductions, the second
//   reading the first). Outputs are written in a last loop over the row.
// Region outputs smaller than D are written at their broadcast offsets (repeated writes of
// one value). Everything is float32 (bool loads only as Where's condition); shapes are
// constants in the source, so NVRTC folds the index arithmetic.
#pragma once

#include <string>
#include <vector>

#include "collage/graph.h"

namespace collage::cuda_gen {

// One kernel parameter, in order: what the caller passes.
struct KernelParam {
  enum class Kind { kInput, kConstant, kOutput };
  Kind kind = Kind::kInput;
  int index = 0;  // subgraph input / GeneratedKernel::constants / subgraph output index
};

struct GeneratedKernel {
  std::string source;  // CUDA C++, no includes; entry point `kEntry`
  std::vector<KernelParam> params;
  std::vector<Tensor> constants;  // non-scalar constants the kernel reads (uploaded once)
  bool row_kernel = false;
  int64_t work = 0;  // rows (row kernel) or elements (elementwise kernel)
  int block = 256;   // threads per block (a power of two)
};

inline constexpr const char* kEntry = "collage_gen";
// Bumped whenever the generated text changes meaning: part of the kernel cache's key.
inline constexpr const char* kCodegenVersion = "collage-cuda-gen-1";

// Whether the generator takes `node` at all (its op, attributes and dtypes); the region as
// a whole is checked by generate().
bool supports_node(const Graph& graph, const Node& node);

// The kernel for a whole standalone region (every node of `region`). Throws
// Error(kUnsupported) with the reason when the region does not fit the model above.
GeneratedKernel generate(const Graph& region);

}  // namespace collage::cuda_gen
