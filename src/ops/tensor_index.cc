// Tensor ops, part 3: ops driven by index tensors (Gather*, Scatter*, OneHot) or by
// element values (NonZero, Compress). Indices are checked when the kernel runs: an
// out-of-range index is an Error, never an out-of-bounds read.
#include <cstring>

#include "ops/tensor_util.h"

namespace collage::ops {
namespace {

const std::byte* tensor_bytes(const Tensor& t) {
  return static_cast<const std::byte*>(t.raw());
}
std::byte* tensor_bytes_mut(const Tensor& t) {
  return static_cast<std::byte*>(t.raw());
}

void require_index_type(const InferContext& ctx, size_t input) {
  tensor_require_dtype_in(ctx, input, {DType::kInt32, DType::kInt64});
}

// Index tensors are int32 or int64; kernels work on int64.
std::vector<int64_t> read_indices(const Tensor& t) {
  std::vector<int64_t> v(t.numel());
  if (t.dtype() == DType::kInt64) {
    std::copy_n(t.data<int64_t>(), t.numel(), v.begin());
  } else {
    std::copy_n(t.data<int32_t>(), t.numel(), v.begin());
  }
  return v;
}

// Resolves a possibly negative index into [0, d); throws for one outside [-d, d).
int64_t resolve_index(int64_t i, int64_t d, const std::string& node) {
  int64_t r = i < 0 ? i + d : i;
  if (r < 0 || r >= d)
    fail(ErrorKind::kInvalidArgument, "node '{}': index {} is out of range for a dimension of {}",
         node, i, d);
  return r;
}

// Steps `idx` (row-major) through `shape`; used where each element needs its coordinates.
void next_index(std::vector<int64_t>& idx, const Shape& shape) {
  for (size_t k = idx.size(); k-- > 0;) {
    if (++idx[k] < shape[k]) return;
    idx[k] = 0;
  }
}

// ---- Gather ------------------------------------------------------------------------

void infer_gather(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  require_index_type(ctx, 1);
  const Shape& data = ctx.input_shape(0);
  int64_t axis = ctx.normalize_axis(ctx.node().attr_int("axis", 0), data.size());
  Shape out(data.begin(), data.begin() + axis);
  for (int64_t d : ctx.input_shape(1)) out.push_back(d);
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  ctx.set_output(0, ctx.input_dtype(0), out);
}

RefKernel gather_kernel(const Graph& g, const Node& n) {
  const Shape& data = tensor_input_shape(g, n, 0);
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(data.size());
  int64_t outer = tensor_product(data, 0, axis), dim = data[axis];
  size_t row =
      tensor_product(data, axis + 1, data.size()) * dtype_size(tensor_input_dtype(g, n, 0));
  std::string name = n.name;
  return [=](std::span<const Tensor> in, std::span<const Tensor> out) {
    std::vector<int64_t> idx = read_indices(in[1]);
    for (int64_t& i : idx) i = resolve_index(i, dim, name);
    const std::byte* src = tensor_bytes(in[0]);
    std::byte* dst = tensor_bytes_mut(out[0]);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i : idx) {
        std::memcpy(dst, src + (o * dim + i) * row, row);
        dst += row;
      }
  };
}

// ---- GatherElements ----------------------------------------------------------------

void infer_gather_elements(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  require_index_type(ctx, 1);
  const Shape& data = ctx.input_shape(0);
  const Shape& idx = ctx.input_shape(1);
  int64_t axis = ctx.normalize_axis(ctx.node().attr_int("axis", 0), data.size());
  if (idx.size() != data.size()) ctx.fail("indices and data have different ranks");
  for (size_t k = 0; k < idx.size(); ++k)
    if (static_cast<int64_t>(k) != axis && idx[k] > data[k])
      ctx.fail("indices {} exceed data {} off the axis", shape_to_string(idx),
               shape_to_string(data));
  ctx.set_output(0, ctx.input_dtype(0), idx);
}

RefKernel gather_elements_kernel(const Graph& g, const Node& n) {
  const Shape& data = tensor_input_shape(g, n, 0);
  const Shape& ishape = tensor_input_shape(g, n, 1);
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(data.size());
  std::vector<int64_t> strides = shape_strides(data);
  size_t elem = dtype_size(tensor_input_dtype(g, n, 0));
  std::string name = n.name;
  return [=](std::span<const Tensor> in, std::span<const Tensor> out) {
    std::vector<int64_t> idx = read_indices(in[1]);
    std::vector<int64_t> pos(ishape.size(), 0);
    for (size_t e = 0; e < idx.size(); ++e, next_index(pos, ishape)) {
      int64_t off = 0;
      for (size_t k = 0; k < pos.size(); ++k)
        off += (static_cast<int64_t>(k) == axis ? resolve_index(idx[e], data[k], name) : pos[k]) *
               strides[k];
      std::memcpy(tensor_bytes_mut(out[0]) + e * elem, tensor_bytes(in[0]) + off * elem, elem);
    }
  };
}

// ---- GatherND ----------------------------------------------------------------------

struct NdLayout {
  int64_t batches = 1;       // product of the batch dims
  int64_t tuples = 1;        // index tuples per batch
  int64_t depth = 0;         // entries per index tuple
  int64_t slice = 1;         // elements each tuple addresses
  int64_t batch_stride = 0;  // data elements per batch
  Shape dims;                // data dims the tuple entries index
  std::vector<int64_t> dim_strides;
};

NdLayout nd_layout(const Shape& data, const Shape& idx, int64_t b) {
  NdLayout l;
  l.depth = idx.back();
  l.batches = tensor_product(data, 0, b);
  l.tuples = tensor_product(idx, b, idx.size() - 1);
  l.slice = tensor_product(data, b + l.depth, data.size());
  l.batch_stride = tensor_product(data, b, data.size());
  std::vector<int64_t> strides = shape_strides(data);
  for (int64_t j = 0; j < l.depth; ++j) {
    l.dims.push_back(data[b + j]);
    l.dim_strides.push_back(strides[b + j]);
  }
  return l;
}

// Element offset into data of tuple t of batch bt.
int64_t nd_offset(const NdLayout& l, const std::vector<int64_t>& idx, int64_t bt, int64_t t,
                  const std::string& name) {
  int64_t off = bt * l.batch_stride;
  const int64_t* tuple = idx.data() + (bt * l.tuples + t) * l.depth;
  for (int64_t j = 0; j < l.depth; ++j)
    off += resolve_index(tuple[j], l.dims[j], name) * l.dim_strides[j];
  return off;
}

void check_nd(const InferContext& ctx, int64_t b) {
  const Shape& data = ctx.input_shape(0);
  const Shape& idx = ctx.input_shape(1);
  int64_t r = data.size(), q = idx.size();
  if (b < 0 || b >= q || b >= r) ctx.fail("batch_dims {} is out of range", b);
  if (idx.back() < 0 || b + idx.back() > r)
    ctx.fail("index tuples of length {} for data of rank {}", idx.back(), r);
  for (int64_t k = 0; k < b; ++k)
    if (data[k] != idx[k]) ctx.fail("batch dimensions of data and indices differ");
}

void infer_gather_nd(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  tensor_require_dtype_in(ctx, 1, {DType::kInt64});
  int64_t b = ctx.node().attr_int("batch_dims", 0);
  check_nd(ctx, b);
  const Shape& data = ctx.input_shape(0);
  const Shape& idx = ctx.input_shape(1);
  Shape out(idx.begin(), idx.end() - 1);
  out.insert(out.end(), data.begin() + b + idx.back(), data.end());
  ctx.set_output(0, ctx.input_dtype(0), out);
}

RefKernel gather_nd_kernel(const Graph& g, const Node& n) {
  NdLayout l = nd_layout(tensor_input_shape(g, n, 0), tensor_input_shape(g, n, 1),
                         n.attr_int("batch_dims", 0));
  size_t elem = dtype_size(tensor_input_dtype(g, n, 0));
  size_t row = l.slice * elem;
  std::string name = n.name;
  return [=](std::span<const Tensor> in, std::span<const Tensor> out) {
    std::vector<int64_t> idx = read_indices(in[1]);
    std::byte* dst = tensor_bytes_mut(out[0]);
    for (int64_t bt = 0; bt < l.batches; ++bt)
      for (int64_t t = 0; t < l.tuples; ++t, dst += row)
        std::memcpy(dst, tensor_bytes(in[0]) + nd_offset(l, idx, bt, t, name) * elem, row);
  };
}

// ---- ScatterElements, Scatter, ScatterND -------------------------------------------

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

Reduction scatter_reduction(const InferContext& ctx) {
  std::string r = ctx.node().attr_string("reduction", "none");
  if (r == "none") return Reduction::kNone;
  if (!dtype_is_supported(ctx.input_dtype(0)) || ctx.input_dtype(0) == DType::kBool)
    tensor_unsupported(ctx.node(), "reduction '{}' on element type {}", r,
                       dtype_name(ctx.input_dtype(0)));
  if (r == "add") return Reduction::kAdd;
  if (r == "mul") return Reduction::kMul;
  if (r == "max") return Reduction::kMax;
  if (r == "min") return Reduction::kMin;
  tensor_unsupported(ctx.node(), "reduction '{}'", r);
}

// Writes (or reduces) `count` elements of `src` into `dst`.
void scatter_apply(std::byte* dst, const std::byte* src, int64_t count, DType t, Reduction r) {
  if (r == Reduction::kNone) {
    std::memcpy(dst, src, count * dtype_size(t));
    return;
  }
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      T* d = reinterpret_cast<T*>(dst);
      const T* s = reinterpret_cast<const T*>(src);
      for (int64_t i = 0; i < count; ++i) {
        switch (r) {
          case Reduction::kAdd:
            d[i] = static_cast<T>(d[i] + s[i]);
            break;
          case Reduction::kMul:
            d[i] = static_cast<T>(d[i] * s[i]);
            break;
          case Reduction::kMax:
            d[i] = std::max(d[i], s[i]);
            break;
          case Reduction::kMin:
            d[i] = std::min(d[i], s[i]);
            break;
          case Reduction::kNone:
            break;
        }
      }
    }
  });
}

void infer_scatter_elements(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  require_index_type(ctx, 1);
  scatter_reduction(ctx);
  const Shape& data = ctx.input_shape(0);
  const Shape& idx = ctx.input_shape(1);
  const int64_t axis = ctx.normalize_axis(ctx.node().attr_int("axis", 0), data.size());
  if (idx != ctx.input_shape(2)) ctx.fail("indices and updates have different shapes");
  if (ctx.input_dtype(2) != ctx.input_dtype(0)) ctx.fail("updates and data have different types");
  if (idx.size() != data.size()) ctx.fail("indices and data have different ranks");
  // Along the axis any number of updates may land (PyTorch's scatter_add of 50,000 edge
  // messages into 5,000 nodes: a graph network's aggregation); off it, no more than data has.
  for (size_t k = 0; k < idx.size(); ++k)
    if (static_cast<int64_t>(k) != axis && idx[k] > data[k])
      ctx.fail("indices {} exceed data {} off the axis", shape_to_string(idx),
               shape_to_string(data));
  ctx.set_output(0, ctx.input_dtype(0), data);
}

RefKernel scatter_elements_kernel(const Graph& g, const Node& n) {
  InferContext ctx(g, n);
  Reduction red = scatter_reduction(ctx);
  const Shape& data = tensor_input_shape(g, n, 0);
  const Shape& ishape = tensor_input_shape(g, n, 1);
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(data.size());
  std::vector<int64_t> strides = shape_strides(data);
  DType t = tensor_input_dtype(g, n, 0);
  size_t elem = dtype_size(t);
  std::string name = n.name;
  return [=](std::span<const Tensor> in, std::span<const Tensor> out) {
    std::vector<int64_t> idx = read_indices(in[1]);
    if (out[0].nbytes()) std::memcpy(out[0].raw(), in[0].raw(), out[0].nbytes());
    std::vector<int64_t> pos(ishape.size(), 0);
    for (size_t e = 0; e < idx.size(); ++e, next_index(pos, ishape)) {
      int64_t off = 0;
      for (size_t k = 0; k < pos.size(); ++k)
        off += (static_cast<int64_t>(k) == axis ? resolve_index(idx[e], data[k], name) : pos[k]) *
               strides[k];
      scatter_apply(tensor_bytes_mut(out[0]) + off * elem, tensor_bytes(in[2]) + e * elem, 1, t,
                    red);
    }
  };
}

void infer_scatter_nd(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  tensor_require_dtype_in(ctx, 1, {DType::kInt64});
  scatter_reduction(ctx);
  check_nd(ctx, 0);
  const Shape& data = ctx.input_shape(0);
  const Shape& idx = ctx.input_shape(1);
  Shape updates(idx.begin(), idx.end() - 1);
  updates.insert(updates.end(), data.begin() + idx.back(), data.end());
  if (ctx.input_shape(2) != updates)
    ctx.fail("updates have shape {}, expected {}", shape_to_string(ctx.input_shape(2)),
             shape_to_string(updates));
  if (ctx.input_dtype(2) != ctx.input_dtype(0)) ctx.fail("updates and data have different types");
  ctx.set_output(0, ctx.input_dtype(0), data);
}

RefKernel scatter_nd_kernel(const Graph& g, const Node& n) {
  InferContext ctx(g, n);
  Reduction red = scatter_reduction(ctx);
  NdLayout l = nd_layout(tensor_input_shape(g, n, 0), tensor_input_shape(g, n, 1), 0);
  DType t = tensor_input_dtype(g, n, 0);
  size_t elem = dtype_size(t);
  std::string name = n.name;
  return [=](std::span<const Tensor> in, std::span<const Tensor> out) {
    std::vector<int64_t> idx = read_indices(in[1]);
    if (out[0].nbytes()) std::memcpy(out[0].raw(), in[0].raw(), out[0].nbytes());
    for (int64_t tu = 0; tu < l.tuples; ++tu)
      scatter_apply(tensor_bytes_mut(out[0]) + nd_offset(l, idx, 0, tu, name) * elem,
                    tensor_bytes(in[2]) + tu * l.slice * elem, l.slice, t, red);
  };
}

// ---- OneHot ------------------------------------------------------------------------

int64_t one_hot_depth(const Tensor& depth) {
  return static_cast<int64_t>(depth.get_as_double(0));
}

void infer_one_hot(InferContext& ctx) {
  if (!dtype_is_supported(ctx.input_dtype(0)) || !dtype_is_supported(ctx.input_dtype(1)))
    tensor_unsupported(ctx.node(), "indices or depth of an unsupported element type");
  tensor_require_movable(ctx, 2);
  const Tensor& depth_t = ctx.require_constant(1, "depth");
  if (depth_t.numel() != 1) ctx.fail("depth must hold one value");
  int64_t depth = one_hot_depth(depth_t);
  if (depth <= 0) ctx.fail("depth must be positive, got {}", depth);
  if (shape_numel(ctx.input_shape(2)) != 2) ctx.fail("values must hold [off, on]");
  const Shape& idx = ctx.input_shape(0);
  int64_t axis = ctx.normalize_axis(ctx.node().attr_int("axis", -1), idx.size() + 1);
  Shape out = idx;
  out.insert(out.begin() + axis, depth);
  ctx.set_output(0, ctx.input_dtype(2), out);
}

RefKernel one_hot_kernel(const Graph& g, const Node& n) {
  const Shape& out = tensor_output_shape(g, n, 0);
  int64_t axis = n.attr_int("axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(out.size());
  int64_t depth = out[axis], inner = tensor_product(out, axis + 1, out.size());
  size_t elem = dtype_size(tensor_output_dtype(g, n, 0));
  return [=](std::span<const Tensor> in, std::span<const Tensor> out) {
    const std::byte* off = tensor_bytes(in[2]);
    const std::byte* on = off + elem;
    std::byte* dst = tensor_bytes_mut(out[0]);
    for (int64_t i = 0; i < out[0].numel(); ++i) std::memcpy(dst + i * elem, off, elem);
    for (int64_t e = 0; e < in[0].numel(); ++e) {
      int64_t v = static_cast<int64_t>(in[0].get_as_double(e));
      if (v < 0) v += depth;
      if (v < 0 || v >= depth) continue;  // out-of-range indices give an all-off row
      int64_t o = e / inner, i = e % inner;
      std::memcpy(dst + ((o * depth + v) * inner + i) * elem, on, elem);
    }
  };
}

// ---- NonZero, Compress -------------------------------------------------------------

std::vector<bool> nonzero_mask(const Tensor& t) {
  std::vector<bool> mask(t.numel());
  dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* d = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) mask[i] = d[i] != T{};
  });
  return mask;
}

int64_t count_true(const std::vector<bool>& mask) {
  return std::count(mask.begin(), mask.end(), true);
}

void infer_nonzero(InferContext& ctx) {
  if (!dtype_is_supported(ctx.input_dtype(0)))
    tensor_unsupported(ctx.node(), "element type {}", dtype_name(ctx.input_dtype(0)));
  int64_t nnz = count_true(nonzero_mask(ctx.require_constant(0, "input")));
  ctx.set_output(0, DType::kInt64, {ctx.input_rank(0), nnz});
}

RefKernel nonzero_kernel(const Graph& g, const Node& n) {
  Shape shape = tensor_input_shape(g, n, 0);
  return [shape](std::span<const Tensor> in, std::span<const Tensor> out) {
    std::vector<bool> mask = nonzero_mask(in[0]);
    int64_t nnz = count_true(mask);
    if (out[0].numel() != nnz * static_cast<int64_t>(shape.size()))
      fail(ErrorKind::kShape, "NonZero: the input changed after its output shape was fixed");
    int64_t* dst = out[0].data<int64_t>();
    std::vector<int64_t> pos(shape.size(), 0);
    int64_t col = 0;
    for (size_t e = 0; e < mask.size(); ++e, next_index(pos, shape)) {
      if (!mask[e]) continue;
      for (size_t k = 0; k < pos.size(); ++k) dst[k * nnz + col] = pos[k];
      ++col;
    }
  };
}

// Compress selects along `axis`, or over the flattened input when there is none.
struct CompressLayout {
  int64_t outer = 1, dim = 0, inner = 1;
};

CompressLayout compress_layout(const Node& n, const Shape& in) {
  CompressLayout l;
  if (!n.has_attr("axis")) {
    l.dim = shape_numel(in);
    return l;
  }
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(in.size());
  l.outer = tensor_product(in, 0, axis);
  l.dim = in[axis];
  l.inner = tensor_product(in, axis + 1, in.size());
  return l;
}

std::vector<int64_t> compress_selection(const Tensor& cond, int64_t dim, const std::string& name) {
  std::vector<bool> mask = nonzero_mask(cond);
  std::vector<int64_t> sel;
  for (size_t i = 0; i < mask.size(); ++i) {
    if (!mask[i]) continue;
    if (static_cast<int64_t>(i) >= dim)
      fail(ErrorKind::kShape, "node '{}' (Compress): condition selects index {} of {}", name, i,
           dim);
    sel.push_back(static_cast<int64_t>(i));
  }
  return sel;
}

void infer_compress(InferContext& ctx) {
  tensor_require_movable(ctx, 0);
  tensor_require_dtype_in(ctx, 1, {DType::kBool});
  if (ctx.input_rank(1) != 1) ctx.fail("condition must be 1-D");
  const Shape& in = ctx.input_shape(0);
  if (ctx.node().has_attr("axis")) ctx.normalize_axis(ctx.node().attr_int("axis", 0), in.size());
  CompressLayout l = compress_layout(ctx.node(), in);
  int64_t kept =
      compress_selection(ctx.require_constant(1, "condition"), l.dim, ctx.node().name).size();
  Shape out = {kept};
  if (ctx.node().has_attr("axis")) {
    out = in;
    int64_t axis = ctx.normalize_axis(ctx.node().attr_int("axis", 0), in.size());
    out[axis] = kept;
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
}

RefKernel compress_kernel(const Graph& g, const Node& n) {
  CompressLayout l = compress_layout(n, tensor_input_shape(g, n, 0));
  size_t row = l.inner * dtype_size(tensor_input_dtype(g, n, 0));
  std::string name = n.name;
  return [=](std::span<const Tensor> in, std::span<const Tensor> out) {
    std::vector<int64_t> sel = compress_selection(in[1], l.dim, name);
    if (out[0].numel() != l.outer * static_cast<int64_t>(sel.size()) * l.inner)
      fail(ErrorKind::kShape, "node '{}': the condition changed after shapes were fixed", name);
    std::byte* dst = tensor_bytes_mut(out[0]);
    for (int64_t o = 0; o < l.outer; ++o)
      for (int64_t i : sel) {
        std::memcpy(dst, tensor_bytes(in[0]) + (o * l.dim + i) * row, row);
        dst += row;
      }
  };
}

}  // namespace

void register_tensor_index_ops(OpRegistry& r) {
  r.add(tensor_op("Gather", OpKind::kInjective, infer_gather, gather_kernel));
  r.add(tensor_op("GatherElements", OpKind::kInjective, infer_gather_elements,
                  gather_elements_kernel));
  r.add(tensor_op("GatherND", OpKind::kInjective, infer_gather_nd, gather_nd_kernel));
  r.add(tensor_op("ScatterElements", OpKind::kOpaque, infer_scatter_elements,
                  scatter_elements_kernel));
  // Scatter (opsets 9-10) is ScatterElements before it was renamed.
  r.add(tensor_op("Scatter", OpKind::kOpaque, infer_scatter_elements, scatter_elements_kernel));
  r.add(tensor_op("ScatterND", OpKind::kOpaque, infer_scatter_nd, scatter_nd_kernel));
  r.add(tensor_op("OneHot", OpKind::kOpaque, infer_one_hot, one_hot_kernel));
  r.add(tensor_op("NonZero", OpKind::kOpaque, infer_nonzero, nonzero_kernel, true));
  r.add(tensor_op("Compress", OpKind::kOpaque, infer_compress, compress_kernel, true));
}

}  // namespace collage::ops
