// The `libxsmm` backend (op-level): JIT-generated small GEMMs from libxsmm for the GEMM-shaped
// ops where a library GEMM's fixed costs (packing, dispatch) weigh most: MatMul/Gemm of small
// shapes, and 1x1 stride-1 convolutions on NCHW tensors, which are exactly a GEMM per image
// (Y[M x HW] = W[M x C] * X[C x HW]) with no layout change. A bias and Relu/Clip tail are
// fused into each output tile (epilogue.h). Everything else is left to other backends.
#include <algorithm>
#include <numeric>
#include <optional>

#include "backends/libxsmm/epilogue.h"
#include "backends/libxsmm/tiled_gemm.h"
#include "collage/backend.h"

namespace collage::xsmm {
namespace {

// MatMul/Gemm products up to this many multiply-adds (256^3): libxsmm is built for small
// GEMMs; larger ones are the large-GEMM libraries' (oneDNN, OpenBLAS) and would only add
// measurements. ResNet-50's classifier (1x2048x1000, 2M) is well inside.
constexpr int64_t kMaxGemmMacs = int64_t{1} << 24;

bool is_f32(const Graph& g, ValueId v) {
  return v != kNoValue && g.value(v).dtype == DType::kFloat32;
}

int64_t product(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

// How a group becomes one tiled GEMM: its shape, the epilogue, where the operands come from.
struct GemmPlan {
  GemmShape shape;
  Epilogue epilogue;
  ChannelAxis axis = ChannelAxis::kColumns;
  // libxsmm's A and B (column-major): a kernel input (its index), or a constant packed here.
  int a_input = -1, b_input = -1;
  std::vector<float> a_const, b_const;
  ValueId out = kNoValue;
};

int input_index(const Graph& g, ValueId v) {
  auto it = std::find(g.inputs.begin(), g.inputs.end(), v);
  return it == g.inputs.end() ? -1 : static_cast<int>(it - g.inputs.begin());
}

// An operand: a kernel input, or a constant (copied, `transpose`d from rows x cols).
bool bind_operand(const Graph& g, ValueId v, int* input, std::vector<float>* constant,
                  bool transpose = false, int64_t rows = 0, int64_t cols = 0) {
  if (g.value(v).is_constant()) {
    const Tensor& t = g.value(v).constant;
    const float* d = t.data<float>();
    constant->assign(d, d + t.numel());
    if (transpose)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) (*constant)[c * rows + r] = d[r * cols + c];
    return true;
  }
  if (transpose) return false;
  *input = input_index(g, v);
  return *input >= 0;
}

// A 1x1 stride-1 unpadded single-group Conv (any spatial rank) as a GEMM per image.
std::optional<GemmPlan> plan_conv(const Graph& g) {
  const Node& n = g.node(0);
  const ValueId x = n.input(0), w = n.input(1), b = n.input(2);
  if (!is_f32(g, x) || !is_f32(g, w) || !is_f32(g, n.outputs[0]) || !g.value(w).is_constant() ||
      (b != kNoValue && (!g.value(b).is_constant() || !is_f32(g, b))))
    return std::nullopt;
  const Shape& xs = g.value(x).shape;
  const Shape& ws = g.value(w).shape;
  const Shape& ys = g.value(n.outputs[0]).shape;
  if (xs.size() < 3 || ws.size() != xs.size() || ys.size() != xs.size()) return std::nullopt;
  if (n.attr_int("group", 1) != 1) return std::nullopt;
  for (size_t i = 2; i < ws.size(); ++i)
    if (ws[i] != 1 || ys[i] != xs[i]) return std::nullopt;  // 1x1, and stride 1 / no pads
  for (int64_t s : n.attr_ints("strides", {}))
    if (s != 1) return std::nullopt;
  for (int64_t p : n.attr_ints("pads", {}))
    if (p != 0) return std::nullopt;
  const int64_t batch = xs[0], c = xs[1], m = ws[0], pixels = product(xs, 2, xs.size());
  if (ws[1] != c || ys[1] != m) return std::nullopt;
  std::optional<ParsedTail> tail = parse_tail(g, n.outputs[0], 1, m);
  if (!tail) return std::nullopt;
  GemmPlan p;
  p.epilogue = std::move(tail->epilogue);
  if (b != kNoValue) {
    if (p.epilogue.bias.empty()) p.epilogue.bias.assign(m, 0.0f);
    const float* d = g.value(b).constant.data<float>();
    for (int64_t i = 0; i < m; ++i) p.epilogue.bias[i] += d[i];
  }
  // Column-major: C (pixels x m, ld pixels) = X (pixels x c, ld pixels) * W^T (c x m, ld c).
  p.shape = {pixels, m, c, pixels, c, pixels, batch, c * pixels, 0, m * pixels};
  p.axis = ChannelAxis::kColumns;
  p.out = tail->out;
  if (!bind_operand(g, x, &p.a_input, &p.a_const) || !bind_operand(g, w, &p.b_input, &p.b_const))
    return std::nullopt;
  return p;
}

// Row-major Y (rows x N) = A (rows x K) * B (K x N) is, column-major,
// Y^T (N x rows) = B^T (N x K) * A^T (K x rows): libxsmm's A is our B and its B our A.
std::optional<GemmPlan> plan_matmul(const Graph& g) {
  const Node& n = g.node(0);
  const bool gemm = n.op_type == "Gemm";
  const ValueId a = n.input(0), b = n.input(1);
  if (!is_f32(g, a) || !is_f32(g, b) || !is_f32(g, n.outputs[0])) return std::nullopt;
  const Shape& as = g.value(a).shape;
  const Shape& bs = g.value(b).shape;
  const Shape& ys = g.value(n.outputs[0]).shape;
  if (as.size() < 2 || bs.size() < 2 || ys.empty()) return std::nullopt;
  GemmPlan p;
  int64_t rows, k, cols, batch = 1;
  bool trans_b = false;
  if (gemm) {
    if (as.size() != 2 || bs.size() != 2 || n.attr_int("transA", 0) != 0) return std::nullopt;
    trans_b = n.attr_int("transB", 0) != 0;
    rows = as[0];
    k = as[1];
    cols = trans_b ? bs[0] : bs[1];
    if ((trans_b ? bs[1] : bs[0]) != k) return std::nullopt;
    p.epilogue.scale = n.attr_float("alpha", 1.0f);
  } else {
    k = as.back();
    cols = bs.back();
    if (bs[bs.size() - 2] != k) return std::nullopt;
    if (bs.size() == 2) {
      rows = product(as, 0, as.size() - 1);  // every batch row against one B
    } else {
      // Batched: B's batch dims equal A's (no broadcasting).
      if (as.size() != bs.size() || !std::equal(as.begin(), as.end() - 2, bs.begin()))
        return std::nullopt;
      batch = product(as, 0, as.size() - 2);
      rows = as[as.size() - 2];
    }
  }
  if (ys.back() != cols || product(ys, 0, ys.size()) != batch * rows * cols) return std::nullopt;
  if (rows * cols * k > kMaxGemmMacs) return std::nullopt;
  std::optional<ParsedTail> tail = parse_tail(g, n.outputs[0], ys.size() - 1, cols);
  if (!tail) return std::nullopt;
  if (gemm) {
    // beta * C: a constant broadcast along the rows (a bias), added to the tail's.
    const ValueId c = n.input(2);
    if (c != kNoValue) {
      if (!g.value(c).is_constant() || !is_f32(g, c)) return std::nullopt;
      const Shape& cs = g.value(c).shape;
      if (cs.size() > 2 || (cs.size() == 2 && cs[0] != 1) ||
          (!cs.empty() && cs.back() != cols && cs.back() != 1))
        return std::nullopt;
      const float beta = n.attr_float("beta", 1.0f);
      const Tensor& ct = g.value(c).constant;
      std::vector<float>& bias = tail->epilogue.bias;
      if (bias.empty()) bias.assign(cols, 0.0f);
      for (int64_t j = 0; j < cols; ++j)
        bias[j] += beta * ct.data<float>()[ct.numel() == 1 ? 0 : j];
    }
    // act(alpha * A * B + (beta * C + the tail's bias)): alpha scales the product only.
    tail->epilogue.scale = p.epilogue.scale;
  }
  p.epilogue = std::move(tail->epilogue);
  p.shape = {cols, rows, k, cols, k, cols, batch, k * cols, rows * k, rows * cols};
  if (bs.size() == 2) p.shape.a_stride = 0;
  p.axis = ChannelAxis::kRows;
  p.out = tail->out;
  // libxsmm's A = our B (cols x k column-major = B row-major k x cols), B = our A.
  if (!bind_operand(g, b, &p.a_input, &p.a_const, trans_b, cols, k) ||
      !bind_operand(g, a, &p.b_input, &p.b_const))
    return std::nullopt;
  return p;
}

std::optional<GemmPlan> plan_group(const Graph& g) {
  if (g.num_nodes() == 0 || g.outputs.size() != 1) return std::nullopt;
  const Node& head = g.node(0);
  if (!head.domain.empty() || head.outputs.empty()) return std::nullopt;
  if (head.op_type == "Conv") return plan_conv(g);
  if (head.op_type == "MatMul" || head.op_type == "Gemm") return plan_matmul(g);
  return std::nullopt;
}

class GemmKernel : public Kernel {
 public:
  explicit GemmKernel(GemmPlan plan)
      : plan_(std::move(plan)), gemm_(plan_.shape, plan_.epilogue, plan_.axis) {}

  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    const float* a = plan_.a_input >= 0 ? static_cast<const float*>(inputs[plan_.a_input].raw())
                                        : plan_.a_const.data();
    const float* b = plan_.b_input >= 0 ? static_cast<const float*>(inputs[plan_.b_input].raw())
                                        : plan_.b_const.data();
    gemm_.run(a, b, static_cast<float*>(outputs[0].raw()));
  }

 private:
  GemmPlan plan_;
  TiledGemm gemm_;
};

bool conv_head(const Graph& g, const Node& n) {
  if (n.inputs.size() < 2 || !is_f32(g, n.input(0))) return false;
  const Shape& ws = g.value(n.input(1)).shape;
  if (ws.size() < 3 || n.attr_int("group", 1) != 1) return false;
  return std::all_of(ws.begin() + 2, ws.end(), [](int64_t d) { return d == 1; });
}

bool gemm_head(const Graph& g, const Node& n) {
  return n.inputs.size() >= 2 && is_f32(g, n.input(0)) && is_f32(g, n.input(1));
}

// The entries propose a head with an optional bias Add and an optional Relu/Clip; the
// check keeps what plan_group accepts (so nothing proposed fails to compile).
bool accepted(const Graph& g, const Match& m) {
  return plan_group(extract_subgraph(g, m.nodes)).has_value();
}

Pattern with_tail(const Pattern& head) {
  Pattern biased = optional(head, [](const Pattern& p) {
    return op("Add", {p, constant()}) | op("Add", {constant(), p});
  });
  return optional(biased, [](const Pattern& p) { return op_in({"Relu", "Clip"}, {p}); });
}

class LibxsmmBackend : public Backend {
 public:
  std::string name() const override { return "libxsmm"; }
  // libxsmm's version plus a revision of collage's kernels on it (bumped when they change
  // what they compute or how fast), part of every cost-DB key.
  std::string version() const override { return std::string(COLLAGE_LIBXSMM_VERSION) + "+r1"; }
  std::string thread_model() const override { return "OpenMP (tiles over the team)"; }
  std::vector<std::string> details() const override {
    return {std::string("JIT target: ") + jit_target(),
            "1x1 convs and small MatMul/Gemm (<= 2^24 multiply-adds) as tiled JIT GEMMs with "
            "a fused bias/Relu/Clip epilogue"};
  }
  bool available() const override { return has_jit(); }

  std::vector<PatternEntry> patterns() const override {
    const char* conv_what = "float32, 1x1, stride 1, no pads, one group";
    const char* gemm_what = "float32, <= 2^24 multiply-adds, Gemm without transA";
    return {
        {"Conv1x1",
         with_tail(op("Conv", {any(), constant(), maybe(constant())}).where(conv_head, conv_what)),
         accepted},
        {"MatMul", with_tail(op("MatMul").where(gemm_head, gemm_what)), accepted},
        {"Gemm", with_tail(op("Gemm").where(gemm_head, gemm_what)), accepted},
    };
  }

  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) override {
    if (!options.variant.empty())
      fail(ErrorKind::kUnsupported, "libxsmm: no variant '{}'", options.variant);
    std::optional<GemmPlan> plan = plan_group(subgraph);
    if (!plan)
      fail(ErrorKind::kUnsupported,
           "libxsmm: not a 1x1 Conv / small MatMul / Gemm with a bias and Relu/Clip tail");
    return std::make_unique<GemmKernel>(std::move(*plan));
  }
};

}  // namespace
}  // namespace collage::xsmm

namespace collage {
using LibxsmmBackend = xsmm::LibxsmmBackend;
COLLAGE_REGISTER_BACKEND(LibxsmmBackend);
}  // namespace collage
