#include "backends/blas/gemm_kernel.h"

#include <cblas.h>

#include "backends/blas/epilogue.h"
#include "backends/blas/fused_group.h"
#include "collage/op_registry.h"

namespace collage::blas {
namespace {

// One sgemm per outer index: out[o] (m x n) = alpha * op(a + a_offset[o]) op(b + b_offset[o]).
struct GemmPlan {
  Operand a, b;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1;
  std::vector<int64_t> a_offsets, b_offsets;
};

class GemmKernel : public Kernel {
 public:
  GemmKernel(GemmPlan plan, Epilogue epilogue)
      : plan_(std::move(plan)), epilogue_(std::move(epilogue)) {}

  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    const GemmPlan& p = plan_;
    const float* a = p.a.data(inputs);
    const float* b = p.b.data(inputs);
    float* out = epilogue_.head_buffer(outputs);
    // Leading dimensions of the operands as stored (row-major, before transposition).
    const int64_t lda = p.trans_a ? p.m : p.k, ldb = p.trans_b ? p.k : p.n;
    for (size_t o = 0; o < p.a_offsets.size(); ++o) {
      if (p.m == 1) {
        // One row (a batch-1 classifier): sgemv streams B once, where sgemm first packs all
        // of it (OpenBLAS's itcopy: AlexNet's 151 MB Gemm spent most of its time there).
        // The row of A is contiguous whether transposed or not.
        const CBLAS_TRANSPOSE t = p.trans_b ? CblasNoTrans : CblasTrans;
        cblas_sgemv(CblasRowMajor, t, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n, p.alpha,
                    b + p.b_offsets[o], std::max<int64_t>(ldb, 1), a + p.a_offsets[o], 1, 0.0f,
                    out + o * p.n, 1);
        epilogue_.apply(static_cast<int64_t>(o), inputs, outputs);
        continue;
      }
      cblas_sgemm(CblasRowMajor, p.trans_a ? CblasTrans : CblasNoTrans,
                  p.trans_b ? CblasTrans : CblasNoTrans, p.m, p.n, p.k, p.alpha, a + p.a_offsets[o],
                  std::max<int64_t>(lda, 1), b + p.b_offsets[o], std::max<int64_t>(ldb, 1), 0.0f,
                  out + o * p.m * p.n, std::max<int64_t>(p.n, 1));
      epilogue_.apply(static_cast<int64_t>(o), inputs, outputs);
    }
  }

 private:
  GemmPlan plan_;
  Epilogue epilogue_;
};

// Element offset of each output batch into an operand with batch dims `dims`, whose
// matrices have `matrix` elements; broadcast dims stride 0.
std::vector<int64_t> batch_offsets(const Shape& out_batch, const Shape& dims, int64_t matrix) {
  const size_t rank = out_batch.size();
  Shape padded(rank - dims.size(), 1);
  padded.insert(padded.end(), dims.begin(), dims.end());
  std::vector<int64_t> stride(rank);
  int64_t s = matrix;
  for (size_t i = rank; i-- > 0;) {
    stride[i] = padded[i] == 1 ? 0 : s;
    s *= padded[i];
  }
  std::vector<int64_t> offsets(static_cast<size_t>(shape_numel(out_batch)));
  for (size_t flat = 0; flat < offsets.size(); ++flat) {
    int64_t rem = static_cast<int64_t>(flat), off = 0;
    for (size_t i = rank; i-- > 0;) {
      off += (rem % out_batch[i]) * stride[i];
      rem /= out_batch[i];
    }
    offsets[flat] = off;
  }
  return offsets;
}

GemmPlan matmul_plan(const Graph& g, const Node& node, MatrixView* view) {
  GemmPlan p;
  p.a = Operand::of(g, node.input(0), "MatMul A");
  p.b = Operand::of(g, node.input(1), "MatMul B");
  const Shape& a = g.value(node.input(0)).shape;
  const Shape& b = g.value(node.input(1)).shape;
  if (a.empty() || b.empty()) fail(ErrorKind::kUnsupported, "blas: MatMul of a scalar");
  p.m = a.size() == 1 ? 1 : a[a.size() - 2];
  p.k = a.back();
  p.n = b.size() == 1 ? 1 : b.back();
  Shape a_batch(a.begin(), a.end() - std::min<size_t>(a.size(), 2));
  Shape b_batch(b.begin(), b.end() - std::min<size_t>(b.size(), 2));
  std::optional<Shape> batch = broadcast_shapes(a_batch, b_batch);
  if (!batch) fail(ErrorKind::kUnsupported, "blas: MatMul batch dims do not broadcast");
  if (shape_numel(b_batch) == 1 && a_batch == *batch) {
    // B shared by every batch and A's batches contiguous (BERT's activations x weights):
    // one sgemm over all rows at once instead of one per batch.
    p.m *= shape_numel(a_batch);
    p.a_offsets = {0};
    p.b_offsets = {0};
  } else {
    p.a_offsets = batch_offsets(*batch, a_batch, p.m * p.k);
    p.b_offsets = batch_offsets(*batch, b_batch, p.k * p.n);
  }
  *view = {static_cast<int64_t>(p.a_offsets.size()), p.m, p.n};
  return p;
}

GemmPlan gemm_plan(const Graph& g, const Node& node, MatrixView* view,
                   std::vector<HeadAddend>* addends) {
  GemmPlan p;
  p.a = Operand::of(g, node.input(0), "Gemm A");
  p.b = Operand::of(g, node.input(1), "Gemm B");
  const Shape& a = g.value(node.input(0)).shape;
  const Shape& b = g.value(node.input(1)).shape;
  if (a.size() != 2 || b.size() != 2) fail(ErrorKind::kUnsupported, "blas: Gemm needs matrices");
  p.trans_a = node.attr_int("transA", 0) != 0;
  p.trans_b = node.attr_int("transB", 0) != 0;
  p.alpha = node.attr_float("alpha", 1.0f);
  p.m = p.trans_a ? a[1] : a[0];
  p.k = p.trans_a ? a[0] : a[1];
  p.n = p.trans_b ? b[0] : b[1];
  p.a_offsets = {0};
  p.b_offsets = {0};
  *view = {1, p.m, p.n};
  const float beta = node.attr_float("beta", 1.0f);
  // BLAS convention (and the reference's): beta == 0 ignores C entirely.
  if (node.input(2) != kNoValue && beta != 0) {
    const Value& c = g.value(node.input(2));
    HeadAddend addend;
    if (c.is_constant()) {
      if (c.constant.dtype() != DType::kFloat32)
        fail(ErrorKind::kUnsupported, "blas: Gemm C is not float32");
      addend.constant = Tensor(DType::kFloat32, c.constant.shape());
      const float* src = c.constant.data<float>();
      float* dst = addend.constant.data<float>();
      for (int64_t i = 0; i < c.constant.numel(); ++i) dst[i] = beta * src[i];
    } else {
      if (beta != 1) fail(ErrorKind::kUnsupported, "blas: Gemm with a computed C and beta != 1");
      addend.input = input_index(g, node.input(2));
    }
    addends->push_back(std::move(addend));
  }
  return p;
}

}  // namespace

std::unique_ptr<Kernel> compile_gemm(const Graph& g, NodeId head, int threads) {
  const Node& node = g.node(head);
  MatrixView view;
  std::vector<HeadAddend> addends;
  GemmPlan plan =
      node.op_type == "Gemm" ? gemm_plan(g, node, &view, &addends) : matmul_plan(g, node, &view);
  if (plan.k == 0 || plan.m == 0 || plan.n == 0)
    fail(ErrorKind::kUnsupported, "blas: empty {} ({}x{}x{})", node.op_type, plan.m, plan.n,
         plan.k);
  if (g.value(node.outputs.at(0)).dtype != DType::kFloat32)
    fail(ErrorKind::kUnsupported, "blas: {} output is not float32", node.op_type);
  Epilogue epilogue = Epilogue::build(g, head, view, addends, threads);
  return std::make_unique<GemmKernel>(std::move(plan), std::move(epilogue));
}

}  // namespace collage::blas
