// ATen helpers shared by the plugin's two translation units (the only ones that include
// libtorch headers: each costs ~20 s to compile).
#pragma once

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <span>
#include <vector>

#include "collage/error.h"
#include "collage/graph.h"
#include "collage/kernel.h"

namespace collage::torch_backend {

std::unique_ptr<Kernel> compile_ops(const Graph& subgraph);
std::unique_ptr<Kernel> compile_region(const Graph& subgraph);

// A float32 view of a collage tensor's buffer: no copy, the buffer outlives the call.
inline at::Tensor wrap(const Tensor& t) {
  if (t.dtype() != DType::kFloat32) fail(ErrorKind::kUnsupported, "torch: tensor is not float32");
  return at::from_blob(t.raw(), at::IntArrayRef(t.shape()), at::TensorOptions().dtype(at::kFloat));
}

// An owning copy of a constant, so kernels hold their weights independently of the graph.
inline at::Tensor constant_tensor(const Graph& g, ValueId v) {
  return wrap(g.value(v).constant).clone();
}

// Writes `result` into the output buffer unless ATen already computed it in place there.
inline void store(const at::Tensor& result, const Tensor& out) {
  if (result.data_ptr() == out.raw() && result.is_contiguous()) return;
  at::Tensor dst = wrap(out);
  if (result.sizes() != dst.sizes())
    fail(ErrorKind::kBackend, "torch: result shape {} != output shape {}",
         fmt::join(result.sizes(), "x"), fmt::join(dst.sizes(), "x"));
  dst.copy_(result);
}

}  // namespace collage::torch_backend
