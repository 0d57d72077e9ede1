// Gemm and MatMul. Both reduce to row-major (M,K) x (K,N) products computed in i-k-j
// order, so the inner loop is a contiguous axpy over a row of B and of the output.
#include <algorithm>

#include "ops/nn_util.h"

namespace collage::ops::nn {
namespace {

// Rows [m_begin, m_end) of out (M,N) = a (M,K) x b (K,N), all row-major. Columns are
// tiled so that a tile of b stays in cache while every row of the block reuses it.
constexpr int64_t kRowBlock = 8;
constexpr int64_t kColBlock = 256;

template <typename T>
void matmul_rows(int64_t m_begin, int64_t m_end, int64_t n, int64_t k, const T* a, const T* b,
                 T* out) {
  for (int64_t i = m_begin; i < m_end; ++i) std::fill(out + i * n, out + (i + 1) * n, T(0));
  for (int64_t j0 = 0; j0 < n; j0 += kColBlock) {
    const int64_t j1 = std::min(n, j0 + kColBlock);
    for (int64_t i = m_begin; i < m_end; ++i) {
      T* row = out + i * n;
      for (int64_t p = 0; p < k; ++p) {
        const T av = a[i * k + p];
        const T* brow = b + p * n;
        for (int64_t j = j0; j < j1; ++j) row[j] += av * brow[j];
      }
    }
  }
}

// Rows [m_begin, m_end), columns [j_begin, j_end) of out (M,N) = a (M,K) x b^T, b (N,K)
// row-major (Gemm's transB): dot products along rows of both, eight columns at a time. Each
// output is summed over k in order from zero, as matmul_rows sums it, so the results are
// those of matmul_rows on b transposed, without a transposed copy of b per run (VGG's 411 MB
// classifier weights: 15 % of its cold tune went to that copy).
template <typename T>
void matmul_rows_bt(int64_t m_begin, int64_t m_end, int64_t j_begin, int64_t j_end, int64_t k,
                    const T* a, const T* b, int64_t n, T* out) {
  constexpr int64_t kCols = 8;
  for (int64_t i = m_begin; i < m_end; ++i) {
    const T* arow = a + i * k;
    for (int64_t j0 = j_begin; j0 < j_end; j0 += kCols) {
      const int64_t cols = std::min(kCols, j_end - j0);
      T acc[kCols] = {};
      for (int64_t p = 0; p < k; ++p) {
        const T av = arow[p];
        for (int64_t c = 0; c < cols; ++c) acc[c] += av * b[(j0 + c) * k + p];
      }
      std::copy(acc, acc + cols, out + i * n + j0);
    }
  }
}

// A (rows, cols) row-major copied to (cols, rows), in square tiles to stay in cache.
template <typename T>
std::vector<T> transposed(const T* src, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
  std::vector<T> dst(static_cast<size_t>(rows * cols));
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
          dst[c * rows + r] = src[r * cols + c];
  return dst;
}

// ---- Gemm: Y = alpha * A' B' + beta * C, C broadcast unidirectionally to (M, N).

struct GemmParams {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  float alpha = 1, beta = 1;
  bool has_c = false;
  int64_t c_row_stride = 0, c_col_stride = 0;  // 0 along broadcast axes
};

GemmParams gemm_params(const Node& node, const Shape& a, const Shape& b, const Shape* c) {
  if (a.size() != 2 || b.size() != 2)
    node_fail(node, ErrorKind::kShape, "A {} and B {} must be matrices", shape_to_string(a),
              shape_to_string(b));
  GemmParams p;
  p.trans_a = node.attr_int("transA", 0) != 0;
  p.trans_b = node.attr_int("transB", 0) != 0;
  p.alpha = node.attr_float("alpha", 1.0f);
  p.beta = node.attr_float("beta", 1.0f);
  p.m = p.trans_a ? a[1] : a[0];
  p.k = p.trans_a ? a[0] : a[1];
  int64_t kb = p.trans_b ? b[1] : b[0];
  p.n = p.trans_b ? b[0] : b[1];
  if (kb != p.k)
    node_fail(node, ErrorKind::kShape,
              "inner dimensions differ: A {} (transA={}), B {} (transB={})", shape_to_string(a),
              p.trans_a, shape_to_string(b), p.trans_b);
  if (c) {
    if (c->size() > 2) node_fail(node, ErrorKind::kShape, "C {} has rank > 2", shape_to_string(*c));
    Shape c2(2 - c->size(), 1);
    c2.insert(c2.end(), c->begin(), c->end());
    if ((c2[0] != 1 && c2[0] != p.m) || (c2[1] != 1 && c2[1] != p.n))
      node_fail(node, ErrorKind::kShape, "C {} does not broadcast to [{}, {}]", shape_to_string(*c),
                p.m, p.n);
    p.has_c = true;
    p.c_row_stride = c2[0] == 1 ? 0 : c2[1];
    p.c_col_stride = c2[1] == 1 ? 0 : 1;
  }
  return p;
}

void infer_gemm(InferContext& ctx) {
  if (!ctx.has_input(0) || !ctx.has_input(1))
    node_fail(ctx.node(), ErrorKind::kInvalidModel, "needs inputs A and B");
  DType t = require_float_input(ctx, 0);
  require_float_input(ctx, 1, 0);
  const Shape* c = nullptr;
  if (ctx.has_input(2)) {
    require_float_input(ctx, 2, 0);
    c = &ctx.input_shape(2);
  }
  GemmParams p = gemm_params(ctx.node(), ctx.input_shape(0), ctx.input_shape(1), c);
  ctx.set_output(0, t, {p.m, p.n});
}

template <typename T>
RefKernel gemm_kernel(GemmParams p) {
  return [p](std::span<const Tensor> in, std::span<const Tensor> out) {
    const T* a = in[0].data<T>();
    const T* b = in[1].data<T>();
    std::vector<T> a_t;
    if (p.trans_a) {
      a_t = transposed(a, p.k, p.m);
      a = a_t.data();
    }
    // BLAS convention: beta == 0 ignores C entirely (even NaN/Inf in it).
    const T* c =
        p.has_c && p.beta != 0 && in.size() > 2 && in[2].defined() ? in[2].data<T>() : nullptr;
    T* y = out[0].data<T>();
    const T alpha = static_cast<T>(p.alpha), beta = static_cast<T>(p.beta);
    // Tasks of a row block and a column range: with transB the columns are split too, so that
    // a batch-1 classifier (one row) runs on every thread.
    const int64_t blocks = (p.m + kRowBlock - 1) / kRowBlock;
    const int64_t col_ranges = p.trans_b ? (p.n + kColBlock - 1) / kColBlock : 1;
#pragma omp parallel for schedule(static)
    for (int64_t task = 0; task < blocks * col_ranges; ++task) {
      const int64_t blk = task / col_ranges, range = task % col_ranges;
      const int64_t i0 = blk * kRowBlock, i1 = std::min(p.m, i0 + kRowBlock);
      const int64_t j0 = p.trans_b ? range * kColBlock : 0;
      const int64_t j1 = p.trans_b ? std::min(p.n, j0 + kColBlock) : p.n;
      if (p.trans_b)
        matmul_rows_bt(i0, i1, j0, j1, p.k, a, b, p.n, y);
      else
        matmul_rows(i0, i1, p.n, p.k, a, b, y);
      for (int64_t i = i0; i < i1; ++i) {
        T* row = y + i * p.n;
        for (int64_t j = j0; j < j1; ++j) row[j] *= alpha;
        if (c)
          for (int64_t j = j0; j < j1; ++j)
            row[j] += beta * c[i * p.c_row_stride + j * p.c_col_stride];
      }
    }
  };
}

RefKernel make_gemm(const Graph& g, const Node& node) {
  const Shape* c = node.input(2) != kNoValue ? &g.value(node.inputs[2]).shape : nullptr;
  GemmParams p = gemm_params(node, g.value(node.inputs[0]).shape, g.value(node.inputs[1]).shape, c);
  return dispatch_float(g.value(node.inputs[0]).dtype,
                        [&](auto tag) { return gemm_kernel<decltype(tag)>(p); });
}

// ---- MatMul: numpy matmul (1-D operands promoted and squeezed, batch dims broadcast).

struct MatMulParams {
  Shape out_shape;
  int64_t m = 0, n = 0, k = 0;
  std::vector<int64_t> a_offsets, b_offsets;  // per output batch, in elements
};

// Element offset of each batch of an operand with batch dims `dims` (left-padded to the
// output's batch rank), matrices of `matrix` elements; broadcast dims stride 0.
std::vector<int64_t> batch_offsets(const Shape& out_batch, const Shape& dims, int64_t matrix) {
  size_t r = out_batch.size();
  Shape padded(r - dims.size(), 1);
  padded.insert(padded.end(), dims.begin(), dims.end());
  std::vector<int64_t> strides(r);
  int64_t s = matrix;
  for (size_t i = r; i-- > 0;) {
    strides[i] = padded[i] == 1 ? 0 : s;
    s *= padded[i];
  }
  int64_t count = dims_product(out_batch, 0, r);
  std::vector<int64_t> offsets(static_cast<size_t>(count));
  for (int64_t flat = 0; flat < count; ++flat) {
    int64_t rem = flat, off = 0;
    for (size_t i = r; i-- > 0;) {
      off += (rem % out_batch[i]) * strides[i];
      rem /= out_batch[i];
    }
    offsets[flat] = off;
  }
  return offsets;
}

MatMulParams matmul_params(const Node& node, const Shape& a, const Shape& b) {
  if (a.empty() || b.empty())
    node_fail(node, ErrorKind::kShape, "operands must have rank >= 1, got {} and {}",
              shape_to_string(a), shape_to_string(b));
  MatMulParams p;
  p.m = a.size() == 1 ? 1 : a[a.size() - 2];
  p.k = a.back();
  int64_t kb = b.size() == 1 ? b[0] : b[b.size() - 2];
  p.n = b.size() == 1 ? 1 : b.back();
  if (kb != p.k)
    node_fail(node, ErrorKind::kShape, "inner dimensions differ: {} x {}", shape_to_string(a),
              shape_to_string(b));
  Shape a_batch(a.begin(), a.end() - std::min<size_t>(a.size(), 2));
  Shape b_batch(b.begin(), b.end() - std::min<size_t>(b.size(), 2));
  std::optional<Shape> batch = broadcast_shapes(a_batch, b_batch);
  if (!batch)
    node_fail(node, ErrorKind::kShape, "batch dimensions of {} and {} do not broadcast",
              shape_to_string(a), shape_to_string(b));
  p.out_shape = *batch;
  if (a.size() >= 2) p.out_shape.push_back(p.m);
  if (b.size() >= 2) p.out_shape.push_back(p.n);
  p.a_offsets = batch_offsets(*batch, a_batch, p.m * p.k);
  p.b_offsets = batch_offsets(*batch, b_batch, p.k * p.n);
  return p;
}

void infer_matmul(InferContext& ctx) {
  if (!ctx.has_input(0) || !ctx.has_input(1))
    node_fail(ctx.node(), ErrorKind::kInvalidModel, "needs inputs A and B");
  DType t = require_float_input(ctx, 0);
  require_float_input(ctx, 1, 0);
  ctx.set_output(0, t, matmul_params(ctx.node(), ctx.input_shape(0), ctx.input_shape(1)).out_shape);
}

template <typename T>
RefKernel matmul_kernel(MatMulParams p) {
  return [p](std::span<const Tensor> in, std::span<const Tensor> out) {
    const T* a = in[0].data<T>();
    const T* b = in[1].data<T>();
    T* y = out[0].data<T>();
    const int64_t batches = static_cast<int64_t>(p.a_offsets.size());
    const int64_t blocks_per_matrix = (p.m + kRowBlock - 1) / kRowBlock;
    const int64_t blocks = batches * blocks_per_matrix;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < blocks; ++r) {
      const int64_t bi = r / blocks_per_matrix, i0 = (r % blocks_per_matrix) * kRowBlock;
      matmul_rows(i0, std::min(p.m, i0 + kRowBlock), p.n, p.k, a + p.a_offsets[bi],
                  b + p.b_offsets[bi], y + bi * p.m * p.n);
    }
  };
}

RefKernel make_matmul(const Graph& g, const Node& node) {
  MatMulParams p =
      matmul_params(node, g.value(node.inputs[0]).shape, g.value(node.inputs[1]).shape);
  return dispatch_float(g.value(node.inputs[0]).dtype,
                        [&](auto tag) { return matmul_kernel<decltype(tag)>(p); });
}

}  // namespace

void register_matmul_ops(OpRegistry& registry) {
  registry.add({"Gemm", "", OpKind::kOutElemwiseFusable, infer_gemm, make_gemm});
  registry.add({"MatMul", "", OpKind::kOutElemwiseFusable, infer_matmul, make_matmul});
}

}  // namespace collage::ops::nn
