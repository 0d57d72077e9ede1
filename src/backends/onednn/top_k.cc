// TopK by a heap per row (top_k.h says why and what is taken).
#include "backends/onednn/top_k.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdint>
#include <vector>

#include "backends/onednn/dnnl_common.h"

namespace collage::onednn {
namespace {

class TopKKernel : public Kernel {
 public:
  TopKKernel(const Graph& sub, const Node& n, int threads)
      : threads_(threads),
        largest_(n.attr_int("largest", 1) != 0),
        x_(input_index(sub, n.input(0))) {
    const Shape& shape = sub.value(n.input(0)).shape;
    const int64_t rank = static_cast<int64_t>(shape.size());
    int64_t axis = n.attr_int("axis", -1);
    if (axis < 0) axis += rank;
    for (int64_t d = 0; d < axis; ++d) outer_ *= shape[d];
    for (int64_t d = axis + 1; d < rank; ++d) inner_ *= shape[d];
    len_ = shape[axis];
    k_ = sub.value(n.outputs[0]).shape[axis];
    for (size_t i = 0; i < 2; ++i)
      for (size_t o = 0; o < sub.outputs.size(); ++o)
        if (sub.outputs[o] == n.outputs[i]) out_[i] = static_cast<int>(o);
  }

  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    const float* x = inputs[x_].data<float>();
    float* values = out_[0] >= 0 ? static_cast<float*>(outputs[out_[0]].raw()) : nullptr;
    int64_t* indices = out_[1] >= 0 ? static_cast<int64_t*>(outputs[out_[1]].raw()) : nullptr;
    const int64_t rows = outer_ * inner_;
    // Rows of under ~16k elements in all take microseconds: one thread (a lane is one too).
    const int team = omp_in_parallel() || rows * len_ < (1 << 14) ? 1 : threads_;
#pragma omp parallel num_threads(team)
    {
      std::vector<float> row(inner_ > 1 ? len_ : 0);
      std::vector<Kept> heap(k_);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t o = r / inner_, i = r % inner_;
        const float* p = x + o * len_ * inner_ + i;
        if (inner_ > 1) {  // a strided axis: its elements gathered once
          for (int64_t j = 0; j < len_; ++j) row[j] = p[j * inner_];
          p = row.data();
        }
        select(p, heap.data());
        for (int64_t j = 0; j < k_; ++j) {
          const int64_t at = (o * k_ + j) * inner_ + i;
          if (values) values[at] = p[heap[j].index];
          if (indices) indices[at] = heap[j].index;
        }
      }
    }
  }

 private:
  // A kept element: its order key (order_key) and index.
  struct Kept {
    int32_t key;
    int64_t index;
  };
  // An int whose order is TopK's order of values (a larger key first; the reference's, in
  // ops/reduction_topk.cc): the float's bits made monotonic, both zeros one key, NaN above
  // every number; reversed (bitwise not) for the smallest first. Equal keys are equal values.
  static int32_t order_key(float v, bool largest) {
    int32_t bits = v != v ? INT32_MAX : std::bit_cast<int32_t>(v == 0.0f ? 0.0f : v);
    if (v == v && bits < 0) bits ^= INT32_MAX;
    return largest ? bits : ~bits;
  }
  // Whether a comes before b: the larger key, then the lower index.
  static bool before(const Kept& a, const Kept& b) {
    return a.key > b.key || (a.key == b.key && a.index < b.index);
  }
  // Restores the heap (its top the last in TopK's order of those kept) after its top changed.
  static void sift_down(Kept* heap, int64_t size) {
    const Kept moving = heap[0];
    int64_t at = 0;
    for (;;) {
      int64_t child = 2 * at + 1;
      if (child >= size) break;
      if (child + 1 < size && before(heap[child], heap[child + 1])) ++child;
      if (!before(moving, heap[child])) break;
      heap[at] = heap[child];
      at = child;
    }
    heap[at] = moving;
  }

  // Row `p`'s k first elements in TopK's order, into `best`.
  void select(const float* p, Kept* best) const {
    if (k_ == 0) return;
    const bool largest = largest_;
    // A heap of the k best so far whose top is the worst of them; a later element enters
    // only when it comes before that one (ties go to the lower index: the one kept).
    for (int64_t j = 0; j < k_; ++j) best[j] = {order_key(p[j], largest), j};
    std::make_heap(best, best + k_, before);
    // Blocks of 64 tested at once first (a vectorized count of keys past the worst kept's):
    // past the first few hundred elements of a row few enter, and most blocks are skipped.
    constexpr int64_t kBlock = 64;
    for (int64_t begin = k_; begin < len_; begin += kBlock) {
      const int64_t end = std::min(len_, begin + kBlock);
      const int32_t worst = best[0].key;
      int32_t entering = 0;
      for (int64_t j = begin; j < end; ++j) entering += order_key(p[j], largest) > worst ? 1 : 0;
      if (entering == 0) continue;
      for (int64_t j = begin; j < end; ++j) {
        // A later index loses a tie: only a larger key enters.
        const int32_t key = order_key(p[j], largest);
        if (key <= best[0].key) continue;
        best[0] = {key, j};
        sift_down(best, k_);
      }
    }
    std::sort_heap(best, best + k_, before);
  }

  int threads_;
  bool largest_;
  int x_;
  int out_[2] = {-1, -1};  // kernel outputs of the values and the indices
  int64_t outer_ = 1, inner_ = 1, len_ = 0, k_ = 0;
};

}  // namespace

bool top_k_takes(const Graph& g, const Node& n) {
  if (n.op_type != "TopK" || !n.domain.empty() || n.inputs.empty() || n.outputs.size() != 2)
    return false;
  const Value& x = g.value(n.input(0));
  const Value& values = g.value(n.outputs[0]);
  const Value& indices = g.value(n.outputs[1]);
  return x.dtype == DType::kFloat32 && x.shape_known && !x.shape.empty() && !x.is_constant() &&
         values.dtype == DType::kFloat32 && values.shape_known &&
         values.shape.size() == x.shape.size() && indices.dtype == DType::kInt64;
}

std::unique_ptr<Kernel> compile_top_k(const Graph& subgraph, int threads) {
  if (subgraph.num_nodes() != 1 || !top_k_takes(subgraph, subgraph.node(0)) ||
      input_index(subgraph, subgraph.node(0).input(0)) < 0)
    fail(ErrorKind::kUnsupported, "onednn: not one TopK of a float32 input");
  return std::make_unique<TopKKernel>(subgraph, subgraph.node(0), std::max(1, threads));
}

}  // namespace collage::onednn
