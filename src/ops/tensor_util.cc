#include "ops/tensor_util.h"

#include <cstring>

namespace collage::ops {
namespace {

template <size_t kSize>
void copy_elements(const std::byte* in, std::byte* out, int64_t base, const int64_t* map, int64_t n,
                   const std::byte* fill) {
  for (int64_t j = 0; j < n; ++j) {
    int64_t off = base + map[j];
    std::memcpy(out + j * kSize, off >= 0 ? in + off * kSize : fill, kSize);
  }
}

}  // namespace

void tensor_require_movable(const InferContext& ctx, size_t input) {
  DType t = ctx.input_dtype(input);
  if (dtype_size(t) == 0)
    tensor_unsupported(ctx.node(), "input {} has element type {}, which collage cannot hold", input,
                       dtype_name(t));
}

void tensor_require_int64(const InferContext& ctx, size_t input, const char* what) {
  DType t = ctx.input_dtype(input);
  if (t != DType::kInt64)
    fail(ErrorKind::kInvalidModel, "node '{}' ({}): input '{}' must be int64, not {}",
         ctx.node().name, ctx.node().op_type, what, dtype_name(t));
}

void tensor_require_dtype_in(const InferContext& ctx, size_t input,
                             std::initializer_list<DType> allowed) {
  DType t = ctx.input_dtype(input);
  for (DType a : allowed)
    if (a == t) return;
  tensor_unsupported(ctx.node(), "input {} has element type {}, not implemented for this op", input,
                     dtype_name(t));
}

RefKernel tensor_memcpy_kernel() {
  return [](std::span<const Tensor> in, std::span<const Tensor> out) {
    if (out[0].nbytes() && out[0].raw() != in[0].raw())
      std::memcpy(out[0].raw(), in[0].raw(), out[0].nbytes());
  };
}

RefKernel tensor_memcpy_factory(const Graph&, const Node&) {
  return tensor_memcpy_kernel();
}

OpDef tensor_op(const char* name, OpKind kind, InferFn infer, RefKernelFactory reference,
                bool value_dependent_shape) {
  OpDef d;
  d.name = name;
  d.kind = kind;
  d.infer = std::move(infer);
  d.reference = std::move(reference);
  d.value_dependent_shape = value_dependent_shape;
  return d;
}

TensorGatherPlan::TensorGatherPlan(Shape out_dims, std::vector<std::vector<int64_t>> maps,
                                   size_t elem_size)
    : dims_(std::move(out_dims)), maps_(std::move(maps)), elem_(elem_size) {
  if (maps_.size() != dims_.size())
    fail(ErrorKind::kInternal, "gather plan: {} maps for rank {}", maps_.size(), dims_.size());
  for (size_t k = 0; k < dims_.size(); ++k)
    if (static_cast<int64_t>(maps_[k].size()) != dims_[k])
      fail(ErrorKind::kInternal, "gather plan: map {} has {} entries for dim {}", k,
           maps_[k].size(), dims_[k]);
  numel_ = shape_numel(dims_);
  if (!dims_.empty()) {
    const auto& last = maps_.back();
    inner_contiguous_ = true;
    for (size_t j = 0; j < last.size(); ++j)
      if (last[j] < 0 || last[j] != last[0] + static_cast<int64_t>(j)) inner_contiguous_ = false;
  }
}

TensorGatherPlan TensorGatherPlan::strided(const Shape& out_dims,
                                           const std::vector<int64_t>& in_strides, int64_t offset,
                                           size_t elem_size) {
  Shape dims;
  std::vector<int64_t> strides;
  for (size_t k = 0; k < out_dims.size(); ++k) {
    if (out_dims[k] == 1) continue;  // contributes nothing to any offset
    if (!dims.empty() && strides.back() == in_strides[k] * out_dims[k]) {
      dims.back() *= out_dims[k];
      strides.back() = in_strides[k];
      continue;
    }
    dims.push_back(out_dims[k]);
    strides.push_back(in_strides[k]);
  }
  // Only the first dimension carries the base offset.
  std::vector<std::vector<int64_t>> maps(dims.size());
  for (size_t k = 0; k < dims.size(); ++k) {
    maps[k].resize(dims[k]);
    for (int64_t i = 0; i < dims[k]; ++i) maps[k][i] = (k == 0 ? offset : 0) + i * strides[k];
  }
  if (dims.empty()) {  // a single element
    dims.push_back(1);
    maps.push_back({offset});
  }
  return TensorGatherPlan(std::move(dims), std::move(maps), elem_size);
}

void TensorGatherPlan::copy_row(const std::byte* in, std::byte* out, int64_t base,
                                const std::byte* fill) const {
  const auto& last = maps_.back();
  const int64_t n = dims_.back();
  if (base >= 0 && inner_contiguous_) {
    std::memcpy(out, in + (base + last[0]) * elem_, n * elem_);
    return;
  }
  // Element-wise rows (inner transposes, broadcasts, pads) copy by a fixed size so the
  // compiler turns each copy into one load and store.
  switch (elem_) {
    case 1:
      return copy_elements<1>(in, out, base, last.data(), n, fill);
    case 2:
      return copy_elements<2>(in, out, base, last.data(), n, fill);
    case 4:
      return copy_elements<4>(in, out, base, last.data(), n, fill);
    case 8:
      return copy_elements<8>(in, out, base, last.data(), n, fill);
    default:
      break;
  }
  for (int64_t j = 0; j < n; ++j) {
    int64_t off = base + last[j];
    const std::byte* src = off >= 0 ? in + off * elem_ : fill;
    std::memcpy(out + j * elem_, src, elem_);
  }
}

void TensorGatherPlan::run(const std::byte* in, std::byte* out, const std::byte* fill) const {
  if (numel_ == 0) return;
  const size_t rank = dims_.size();
  const int64_t row = dims_.back();
  const int64_t rows = numel_ / row;
  std::vector<int64_t> idx(rank, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t base = 0;
    for (size_t k = 0; k + 1 < rank; ++k) base += maps_[k][idx[k]];
    copy_row(in, out + r * row * elem_, base, fill);
    for (size_t k = rank - 1; k-- > 0;) {  // odometer over all but the last dimension
      if (++idx[k] < dims_[k]) break;
      idx[k] = 0;
    }
  }
}

}  // namespace collage::ops
