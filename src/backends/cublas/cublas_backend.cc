// The `cublas` backend (op-level, GPU): MatMul (batched, broadcast batch dims) and Gemm
// through cuBLASLt, with its epilogues fused: a bias Add, a Relu, and GELU in the tanh form
// GPT-2 exports (cuBLASLt's GELU is that approximation; the erf form differs by up to 5e-4
// and is left to cuda-gen). cuBLASLt's heuristic proposes algorithms; its top candidates are
// variants the search measures.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <optional>

#include "backends/cublas/cublas_lt.h"
#include "collage/backend.h"
#include "devices/cuda/cuda_device.h"

namespace collage::cublas_backend {
namespace {

using cuda::CudaDevice;

// One workspace for every kernel, used under the lock below: every kernel enqueues on one
// stream, so they never use it at the same time.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
// Heuristic results offered as variants: "" is cuBLASLt's first choice.
constexpr int kAlgorithms = 4;

[[noreturn]] void unsupported(const std::string& why) {
  fail(ErrorKind::kUnsupported, "cublas: {}", why);
}

struct Shared {
  std::mutex mutex;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

// The handle and workspace, made on first use, locked for one kernel's calls.
class SharedLock {
 public:
  SharedLock() : lock_(shared().mutex) {
    Shared& s = shared();
    if (!s.handle) {
      check(lt().create(&s.handle), "cublasLtCreate");
      s.workspace = CudaDevice::get().allocate(kWorkspaceBytes);
    }
  }
  cublasLtHandle_t handle() const { return shared().handle; }
  void* workspace() const { return shared().workspace; }

 private:
  static Shared& shared() {
    static Shared* s = new Shared();  // never destroyed: kernels may outlive statics
    return *s;
  }
  std::unique_lock<std::mutex> lock_;
};

bool is_scalar(const Graph& g, ValueId v, double want, double tol) {
  if (v == kNoValue) return false;
  const Value& val = g.value(v);
  return val.is_constant() && val.constant.numel() == 1 &&
         std::abs(val.constant.get_as_double(0) - want) <= tol;
}

// The node reading `v` as its only reader, if it is `op`.
const Node* only_reader(const Graph& g, const std::vector<std::vector<NodeId>>& consumers,
                        ValueId v, const char* op) {
  if (consumers[v].size() != 1) return nullptr;
  const Node& n = g.node(consumers[v][0]);
  return n.op_type == op ? &n : nullptr;
}

// The other input of a two-input node than `v`.
ValueId other(const Node& n, ValueId v) {
  if (n.inputs.size() != 2) return kNoValue;
  return n.inputs[0] == v ? n.inputs[1] : n.inputs[1] == v ? n.inputs[0] : kNoValue;
}

// GELU, tanh form, of `x` as GPT-2 exports it: 0.5x * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Its nodes (x read by exactly three of them) and its output.
struct Gelu {
  std::vector<NodeId> nodes;
  ValueId out = kNoValue;
};
std::optional<Gelu> gelu_tanh(const Graph& g, const std::vector<std::vector<NodeId>>& consumers,
                              ValueId x) {
  if (consumers[x].size() != 3) return std::nullopt;
  const Node *half = nullptr, *pow = nullptr, *inner = nullptr;
  for (NodeId id : consumers[x]) {
    const Node& n = g.node(id);
    if (n.op_type == "Mul" && is_scalar(g, other(n, x), 0.5, 1e-6)) half = &n;
    if (n.op_type == "Pow" && n.inputs.size() == 2 && n.inputs[0] == x &&
        is_scalar(g, n.inputs[1], 3.0, 1e-6))
      pow = &n;
    if (n.op_type == "Add") inner = &n;
  }
  if (!half || !pow || !inner) return std::nullopt;
  const Node* cubic = only_reader(g, consumers, pow->outputs[0], "Mul");
  if (!cubic || !is_scalar(g, other(*cubic, pow->outputs[0]), 0.044715, 1e-6) ||
      other(*inner, x) != cubic->outputs[0])
    return std::nullopt;
  const Node* scale = only_reader(g, consumers, inner->outputs[0], "Mul");
  if (!scale || !is_scalar(g, other(*scale, inner->outputs[0]), 0.7978845608, 1e-6))
    return std::nullopt;
  const Node* tanh = only_reader(g, consumers, scale->outputs[0], "Tanh");
  if (!tanh) return std::nullopt;
  const Node* one_plus = only_reader(g, consumers, tanh->outputs[0], "Add");
  if (!one_plus || !is_scalar(g, other(*one_plus, tanh->outputs[0]), 1.0, 1e-6))
    return std::nullopt;
  const Node* product = only_reader(g, consumers, one_plus->outputs[0], "Mul");
  if (!product || other(*product, one_plus->outputs[0]) != half->outputs[0] ||
      consumers[half->outputs[0]].size() != 1)
    return std::nullopt;
  Gelu out;
  for (const Node* n : {half, pow, cubic, inner, scale, tanh, one_plus, product})
    out.nodes.push_back(static_cast<NodeId>(n - g.nodes().data()));
  std::sort(out.nodes.begin(), out.nodes.end());
  out.out = product->outputs[0];
  return out;
}

// A bias Add after a product of N columns: a float constant of N values along the last axis.
bool is_bias_add(const Graph& g, const Node& add, ValueId product) {
  if (add.op_type != "Add") return false;
  ValueId b = other(add, product);
  if (b == kNoValue || !g.value(b).is_constant() || g.value(b).dtype != DType::kFloat32)
    return false;
  const Shape& bs = g.value(b).shape;
  const Shape& ps = g.value(product).shape;
  if (bs.empty() || ps.empty() || bs.back() != ps.back() || bs.size() > ps.size()) return false;
  return shape_numel(bs) == bs.back() && g.value(add.outputs[0]).shape == ps;
}

bool head_ok(const Graph& g, const Node& n) {
  if (n.op_type != "MatMul" && n.op_type != "Gemm") return false;
  if (n.inputs.size() < 2) return false;
  for (size_t i = 0; i < 2; ++i)
    if (g.value(n.inputs[i]).dtype != DType::kFloat32 || g.value(n.inputs[i]).shape.size() < 2)
      return false;
  return true;
}

// MatMul/Gemm with the tails cuBLASLt's epilogues take: [bias Add] then [Relu | GELU].
std::vector<Match> epilogue_chains(const Graph& g) {
  std::vector<Match> out;
  const auto consumers = g.consumers();
  for (size_t h = 0; h < g.num_nodes(); ++h) {
    const Node& head = g.node(static_cast<NodeId>(h));
    if (!head_ok(g, head)) continue;
    std::vector<NodeId> chain = {static_cast<NodeId>(h)};
    ValueId v = head.outputs[0];
    if (consumers[v].size() == 1 && is_bias_add(g, g.node(consumers[v][0]), v)) {
      chain.push_back(consumers[v][0]);
      out.push_back({chain});
      v = g.node(consumers[v][0]).outputs[0];
    }
    if (only_reader(g, consumers, v, "Relu")) {
      std::vector<NodeId> with = chain;
      with.push_back(consumers[v][0]);
      out.push_back({with});
    } else if (std::optional<Gelu> gelu = gelu_tanh(g, consumers, v)) {
      std::vector<NodeId> with = chain;
      with.insert(with.end(), gelu->nodes.begin(), gelu->nodes.end());
      out.push_back({with});
    }
  }
  for (Match& m : out) std::sort(m.nodes.begin(), m.nodes.end());
  return out;
}

// ---- the kernel ----------------------------------------------------------------------------

struct Operand {
  ValueId value = kNoValue;
  int input = -1;            // index into the kernel's inputs, or -1 for a constant
  void* constant = nullptr;  // device copy of a constant operand
};

class MatmulKernel : public Kernel {
 public:
  ~MatmulKernel() override {
    if (desc) lt().desc_destroy(desc);
    for (cublasLtMatrixLayout_t l : {a_layout, b_layout, d_layout})
      if (l) lt().layout_destroy(l);
    for (void* m : memory) CudaDevice::get().release(m);
  }
  // cuBLASLt's column-major view: D^T = B^T A^T, so its "A" is ONNX's B and its "B" ONNX's A.
  Operand onnx_a, onnx_b;
  float alpha = 1;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a_layout = nullptr, b_layout = nullptr, d_layout = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::vector<void*> memory;

  void launch(const void* a, const void* b, void* d) const {
    SharedLock s;
    const float beta = 0;
    check(lt().matmul(s.handle(), desc, &alpha, b, a_layout, a, b_layout, &beta, d, d_layout, d,
                      d_layout, &algo, s.workspace(), kWorkspaceBytes, CudaDevice::get().stream()),
          "cublasLtMatmul");
  }
  const void* pointer(const Operand& o, std::span<const Tensor> inputs) const {
    return o.input >= 0 ? inputs[o.input].raw() : o.constant;
  }
  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    launch(pointer(onnx_a, inputs), pointer(onnx_b, inputs), outputs[0].raw());
  }
};

void* upload(MatmulKernel& k, const void* host, size_t bytes) {
  void* m = CudaDevice::get().allocate(std::max<size_t>(bytes, 4));
  k.memory.push_back(m);
  CudaDevice::get().copy_to_device(m, host, bytes);
  return m;
}

Operand operand(const Graph& g, ValueId v, MatmulKernel& k) {
  Operand o;
  o.value = v;
  const Value& val = g.value(v);
  if (val.is_constant()) {
    o.constant = upload(k, val.constant.raw(), val.constant.nbytes());
    return o;
  }
  auto it = std::find(g.inputs.begin(), g.inputs.end(), v);
  if (it == g.inputs.end()) unsupported("an operand is computed inside the kernel");
  o.input = static_cast<int>(it - g.inputs.begin());
  return o;
}

void set_layout(cublasLtMatrixLayout_t& layout, uint64_t rows, uint64_t cols, int64_t ld,
                int32_t batch, int64_t stride) {
  check(lt().layout_create(&layout, CUDA_R_32F, rows, cols, ld), "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    check(lt().layout_set(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch),
          "batch count");
    check(lt().layout_set(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                          sizeof stride),
          "batch stride");
  }
}

std::unique_ptr<Kernel> compile_matmul(const Graph& g, const std::string& variant) {
  if (g.num_nodes() == 0) unsupported("empty subgraph");
  const Node& head = g.node(0);
  if (!head_ok(g, head)) unsupported(head.name + ": not a float32 MatMul/Gemm of matrices");
  int algo_index = 0;
  if (!variant.empty()) {
    if (variant.size() != 5 || variant.rfind("algo", 0) != 0 || variant[4] < '1' ||
        variant[4] >= '0' + kAlgorithms)
      unsupported("no variant '" + variant + "'");
    algo_index = variant[4] - '0';
  }
  const Shape& as = g.value(head.inputs[0]).shape;
  const Shape& bs = g.value(head.inputs[1]).shape;
  const Shape& ys = g.value(head.outputs[0]).shape;
  bool trans_a = false, trans_b = false;
  float alpha = 1;
  std::vector<float> bias;
  int64_t m = 0, n = 0, k = 0, batch = 1, stride_a = 0, stride_b = 0;
  if (head.op_type == "Gemm") {
    if (as.size() != 2 || bs.size() != 2) unsupported("Gemm of non-matrices");
    trans_a = head.attr_int("transA", 0) != 0;
    trans_b = head.attr_int("transB", 0) != 0;
    alpha = head.attr_float("alpha", 1.0f);
    const float beta = head.attr_float("beta", 1.0f);
    m = trans_a ? as[1] : as[0];
    k = trans_a ? as[0] : as[1];
    n = trans_b ? bs[0] : bs[1];
    if (head.input(2) != kNoValue) {
      const Value& c = g.value(head.inputs[2]);
      if (!c.is_constant() || c.dtype != DType::kFloat32 || c.constant.numel() != n ||
          c.shape.back() != n)
        unsupported(head.name + ": C other than a bias of N values");
      for (int64_t i = 0; i < n; ++i) bias.push_back(beta * c.constant.data<float>()[i]);
    }
  } else {
    k = as.back();
    n = bs.back();
    m = as[as.size() - 2];
    if (bs.size() == 2) {
      m = shape_numel(as) / k;  // A's batch dims fold into its rows
    } else {
      const Shape batch_dims(ys.begin(), ys.end() - 2);
      batch = shape_numel(batch_dims);
      auto stride_of = [&](const Shape& s, int64_t matrix) -> int64_t {
        const Shape own(s.begin(), s.end() - 2);
        if (shape_numel(own) == 1) return 0;  // one matrix for every batch
        Shape padded(batch_dims.size() - own.size(), 1);
        padded.insert(padded.end(), own.begin(), own.end());
        if (padded != batch_dims) unsupported(head.name + ": partly broadcast batch dims");
        return matrix;
      };
      stride_a = stride_of(as, m * k);
      stride_b = stride_of(bs, k * n);
    }
  }
  if (std::max({m, n, k, batch}) > std::numeric_limits<int32_t>::max())
    unsupported("dimensions beyond 32 bits");

  // The tail: [bias Add] then [Relu | GELU (tanh form)].
  const auto consumers = g.consumers();
  ValueId v = head.outputs[0];
  size_t used = 1;
  if (used < g.num_nodes() && is_bias_add(g, g.node(static_cast<NodeId>(used)), v)) {
    if (!bias.empty()) unsupported("two biases");
    const Node& add = g.node(static_cast<NodeId>(used));
    const Tensor& b = g.value(other(add, v)).constant;
    bias.assign(b.data<float>(), b.data<float>() + b.numel());
    v = add.outputs[0];
    ++used;
  }
  bool relu = false, gelu = false;
  if (used < g.num_nodes()) {
    if (const Node* r = only_reader(g, consumers, v, "Relu")) {
      relu = true;
      v = r->outputs[0];
      ++used;
    } else if (std::optional<Gelu> ge = gelu_tanh(g, consumers, v)) {
      gelu = true;
      v = ge->out;
      used += ge->nodes.size();
    }
  }
  if (used != g.num_nodes()) unsupported("nodes beyond the epilogues cuBLASLt fuses");
  if (g.outputs.size() != 1 || g.outputs[0] != v) unsupported("one output, the chain's last");
  if (!bias.empty() && batch > 1) unsupported("a bias on a batched product");

  CudaDevice& device = CudaDevice::get();
  if (!device.available()) fail(ErrorKind::kBackend, "cublas: {}", device.unavailable_reason());
  auto kernel = std::make_unique<MatmulKernel>();
  MatmulKernel& kk = *kernel;
  kk.alpha = alpha;
  kk.onnx_a = operand(g, head.inputs[0], kk);
  kk.onnx_b = operand(g, head.inputs[1], kk);
  const cublasComputeType_t compute =
      CudaDevice::tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check(lt().desc_create(&kk.desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  // Row-major C[M,N] = op(A) op(B) is column-major C^T[N,M] = op(B)^T op(A)^T.
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(lt().desc_set(kk.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b), "transa");
  check(lt().desc_set(kk.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a), "transb");
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (!bias.empty())
    epilogue = relu   ? CUBLASLT_EPILOGUE_RELU_BIAS
               : gelu ? CUBLASLT_EPILOGUE_GELU_BIAS
                      : CUBLASLT_EPILOGUE_BIAS;
  else if (relu)
    epilogue = CUBLASLT_EPILOGUE_RELU;
  else if (gelu)
    epilogue = CUBLASLT_EPILOGUE_GELU;
  check(lt().desc_set(kk.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
        "epilogue");
  if (!bias.empty()) {
    void* b = upload(kk, bias.data(), bias.size() * sizeof(float));
    check(lt().desc_set(kk.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b), "bias");
  }
  const int32_t batches = static_cast<int32_t>(batch);
  // cuBLASLt's A (ONNX's B): [N, K] column-major, or its transpose.
  set_layout(kk.a_layout, trans_b ? k : n, trans_b ? n : k, trans_b ? k : n, batches, stride_b);
  // cuBLASLt's B (ONNX's A): [K, M] column-major, or its transpose.
  set_layout(kk.b_layout, trans_a ? m : k, trans_a ? k : m, trans_a ? m : k, batches, stride_a);
  set_layout(kk.d_layout, n, m, n, batches, m * n);

  {
    SharedLock s;
    cublasLtMatmulPreference_t pref = nullptr;
    check(lt().pref_create(&pref), "cublasLtMatmulPreferenceCreate");
    const uint64_t ws = kWorkspaceBytes;
    lt().pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t results[kAlgorithms] = {};
    int returned = 0;
    cublasStatus_t st = lt().heuristic(s.handle(), kk.desc, kk.a_layout, kk.b_layout, kk.d_layout,
                                       kk.d_layout, pref, kAlgorithms, results, &returned);
    lt().pref_destroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || returned == 0)
      unsupported(fmt::format("{}: no cuBLASLt algorithm ({})", head.name, static_cast<int>(st)));
    if (algo_index >= returned)
      unsupported(fmt::format("{}: cuBLASLt proposes {} algorithms", head.name, returned));
    kk.algo = results[algo_index].algo;
  }
  // One run on zeros now: anything cuBLASLt refuses is refused at compile.
  try {
    std::vector<void*> scratch;
    auto zeros = [&](size_t bytes) {
      void* p = device.allocate(std::max<size_t>(bytes, 4));
      scratch.push_back(p);
      cuda::check(cudaMemsetAsync(p, 0, bytes, device.stream()), "cudaMemsetAsync");
      return p;
    };
    const void* a = kk.onnx_a.input >= 0 ? zeros(shape_numel(as) * 4) : kk.onnx_a.constant;
    const void* b = kk.onnx_b.input >= 0 ? zeros(shape_numel(bs) * 4) : kk.onnx_b.constant;
    void* d = zeros(static_cast<size_t>(shape_numel(g.value(v).shape)) * 4);
    try {
      kk.launch(a, b, d);
      device.synchronize();
    } catch (...) {
      for (void* p : scratch) device.release(p);
      throw;
    }
    for (void* p : scratch) device.release(p);
  } catch (const Error& e) {
    unsupported(fmt::format("{} refused by cuBLASLt: {}", head.name, e.what()));
  }
  return kernel;
}

class CublasBackend : public Backend {
 public:
  std::string name() const override { return "cublas"; }
  std::string version() const override {
    // Without a device nothing is measured: the headers' version will do, and the 0.15 s
    // of loading the library is not paid for a listing.
    size_t v = CUBLAS_VERSION;  // 130100 for 13.1.0
    if (CudaDevice::get().available() && lt_loadable(nullptr)) v = lt().get_version();
    return fmt::format("cuBLASLt {}.{}.{}{}", v / 10000, v % 10000 / 100, v % 100,
                       CudaDevice::tf32() ? "+tf32" : "");
  }
  std::string thread_model() const override { return "CUDA stream"; }
  int float32_significand_bits() const override { return CudaDevice::matmul_significand_bits(); }
  bool available() const override { return CudaDevice::get().available() && lt_loadable(nullptr); }
  std::string unavailable_reason() const override {
    if (!CudaDevice::get().available()) return CudaDevice::get().unavailable_reason();
    std::string why;
    lt_loadable(&why);
    return why;
  }
  Device* device() const override { return &CudaDevice::get(); }
  std::vector<std::string> details() const override {
    return {"cuBLASLt loaded on first use (dlopen)",
            CudaDevice::tf32() ? "TF32 allowed (COLLAGE_CUDA_TF32=1)"
                               : "float32 compute (no TF32; COLLAGE_CUDA_TF32=1 allows it)"};
  }

  std::vector<PatternEntry> patterns() const override {
    return {{"MatMul/Gemm", op_in({"MatMul", "Gemm"}).where(head_ok, "float32 matrices"), {}}};
  }
  std::vector<FusionRule> fusion_rules() const override {
    FusionRule rule;
    rule.name = "epilogues";
    rule.description = "MatMul/Gemm + bias Add + Relu or GELU (tanh form): cuBLASLt epilogues";
    rule.generate = epilogue_chains;
    return {rule};
  }
  std::vector<std::string> variants(const Graph&) const override {
    std::vector<std::string> v = {""};
    for (int i = 1; i < kAlgorithms; ++i) v.push_back(fmt::format("algo{}", i));
    return v;
  }
  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) override {
    return compile_matmul(subgraph, options.variant);
  }
};

COLLAGE_REGISTER_BACKEND(CublasBackend);

}  // namespace
}  // namespace collage::cublas_backend
