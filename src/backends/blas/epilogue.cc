#include "backends/blas/epilogue.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <map>

#include "backends/blas/fast_math.h"
#include "backends/blas/fused_group.h"
#include "collage/error.h"
#include "collage/op_registry.h"

namespace collage::blas {
namespace {

// A segment is at most one row and small enough that a few of them stay in L1.
constexpr int64_t kMaxSegment = 1024;
// Below this many elements per matrix a parallel region costs more than it saves.
constexpr int64_t kParallelElements = 16384;
constexpr int kMaxSlots = 32;

// An operand of one segment: `n` contiguous elements at p, or one value everywhere.
struct Span {
  const float* p;
  float s;
};

template <typename F>
void binary_loop(float* d, Span a, Span b, int64_t n, F f) {
  if (a.p && b.p) {
    for (int64_t i = 0; i < n; ++i) d[i] = f(a.p[i], b.p[i]);
  } else if (a.p) {
    const float s = b.s;
    for (int64_t i = 0; i < n; ++i) d[i] = f(a.p[i], s);
  } else if (b.p) {
    const float s = a.s;
    for (int64_t i = 0; i < n; ++i) d[i] = f(s, b.p[i]);
  } else {
    std::fill(d, d + n, f(a.s, b.s));
  }
}

template <typename F>
void unary_loop(float* d, const float* a, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) d[i] = f(a[i]);
}

// `constant` broadcast to `shape` (which it must not grow), flattened.
std::vector<float> broadcast_to(const Tensor& constant, const Shape& shape) {
  if (constant.dtype() != DType::kFloat32)
    fail(ErrorKind::kUnsupported, "blas: epilogue constant is {}, not float32",
         dtype_name(constant.dtype()));
  std::optional<Shape> joined = broadcast_shapes(constant.shape(), shape);
  if (!joined || *joined != shape)
    fail(ErrorKind::kUnsupported, "blas: epilogue constant {} does not broadcast to {}",
         shape_to_string(constant.shape()), shape_to_string(shape));
  const int rank = static_cast<int>(shape.size());
  Shape padded(rank - constant.rank(), 1);
  padded.insert(padded.end(), constant.shape().begin(), constant.shape().end());
  std::vector<int64_t> stride(rank);
  for (int64_t i = rank - 1, s = 1; i >= 0; --i) {
    stride[i] = padded[i] == 1 ? 0 : s;
    s *= padded[i];
  }
  const float* src = constant.data<float>();
  std::vector<float> out(static_cast<size_t>(shape_numel(shape)));
  std::vector<int64_t> index(rank, 0);
  int64_t offset = 0;
  for (float& v : out) {
    v = src[offset];
    for (int i = rank - 1; i >= 0; --i) {
      offset += stride[i];
      if (++index[i] < shape[i]) break;
      offset -= stride[i] * shape[i];
      index[i] = 0;
    }
  }
  return out;
}

bool same_bits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

float scalar_constant(const Graph& g, ValueId v, const Node& node, float absent) {
  if (v == kNoValue) return absent;
  const Value& value = g.value(v);
  if (!value.is_constant() || value.constant.numel() != 1)
    fail(ErrorKind::kUnsupported, "blas: {} '{}' needs constant scalar bounds", node.op_type,
         node.name);
  return static_cast<float>(value.constant.get_as_double(0));
}

}  // namespace

bool Epilogue::supports_op(const std::string& op_type) {
  static const char* const kOps[] = {"Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh",
                                     "Erf",  "Add",       "Sub",  "Mul",     "Div"};
  return std::find(std::begin(kOps), std::end(kOps), op_type) != std::end(kOps);
}

Epilogue::Source Epilogue::constant_source(const Tensor& constant, const Shape& shape) const {
  std::vector<float> full = broadcast_to(constant, shape);
  const int64_t cols = view_.cols, rows = view_.rows, matrix = view_.matrix();
  const int64_t n = static_cast<int64_t>(full.size());
  // The smallest kind that reproduces every element exactly.
  auto all = [&](auto index_of) {
    for (int64_t e = 0; e < n; ++e)
      if (!same_bits(full[e], full[index_of(e)])) return false;
    return true;
  };
  Source s;
  if (all([&](int64_t e) { return e % cols; })) {
    s.kind = Source::Kind::kPerCol;
    s.data.assign(full.begin(), full.begin() + cols);
  } else if (all([&](int64_t e) { return (e / cols) % rows * cols; })) {
    s.kind = Source::Kind::kPerRow;
    for (int64_t r = 0; r < rows; ++r) s.data.push_back(full[r * cols]);
  } else if (all([&](int64_t e) { return e % matrix; })) {
    s.kind = Source::Kind::kMatrix;
    s.data.assign(full.begin(), full.begin() + matrix);
  } else {
    s.kind = Source::Kind::kTensor;
    s.data = std::move(full);
  }
  return s;
}

Epilogue Epilogue::build(const Graph& g, NodeId head, const MatrixView& view,
                         const std::vector<HeadAddend>& addends, int threads) {
  Epilogue e;
  e.view_ = view;
  e.threads_ = std::max(threads, 1);
  e.segment_ = std::min(view.cols, kMaxSegment);
  e.segments_per_row_ = (view.cols + e.segment_ - 1) / e.segment_;

  const Node& head_node = g.node(head);
  const ValueId head_value = head_node.outputs.at(0);
  const Shape& shape = g.value(head_value).shape;
  if (shape_numel(shape) != view.outer * view.matrix())
    fail(ErrorKind::kInternal, "blas: view {}x{}x{} does not cover {}", view.outer, view.rows,
         view.cols, shape_to_string(shape));
  std::map<ValueId, int> slot_of = {{head_value, 0}};
  int num_slots = 1;

  // Operand `v` of node `node`, as a source.
  auto source = [&](ValueId v, const Node& node) {
    Source s;
    if (v == kNoValue) fail(ErrorKind::kUnsupported, "blas: '{}' lacks an operand", node.name);
    if (auto it = slot_of.find(v); it != slot_of.end()) {
      s.kind = Source::Kind::kSlot;
      s.index = it->second;
      return s;
    }
    const Value& value = g.value(v);
    if (value.is_constant()) return e.constant_source(value.constant, shape);
    s.kind = Source::Kind::kInput;
    s.index = input_index(g, v);
    if (s.index < 0 || value.dtype != DType::kFloat32 || value.shape != shape)
      fail(ErrorKind::kUnsupported,
           "blas: '{}' reads '{}' ({}), which is not float32 with the fused result's shape {}",
           node.name, value.name, shape_to_string(value.shape), shape_to_string(shape));
    return s;
  };

  for (const HeadAddend& addend : addends) {
    Instr add{Op::kAdd, 0, {}, {}};
    add.a.kind = Source::Kind::kSlot;
    if (addend.constant.defined()) {
      add.b = e.constant_source(addend.constant, shape);
    } else {
      const Value& value = g.value(g.inputs.at(addend.input));
      if (value.dtype != DType::kFloat32 || value.shape != shape)
        fail(ErrorKind::kUnsupported, "blas: addend '{}' {} is not float32 of shape {}", value.name,
             shape_to_string(value.shape), shape_to_string(shape));
      add.b.kind = Source::Kind::kInput;
      add.b.index = addend.input;
    }
    e.program_.push_back(std::move(add));
  }

  for (size_t n = 0; n < g.num_nodes(); ++n) {
    if (static_cast<NodeId>(n) == head) continue;
    const Node& node = g.node(static_cast<NodeId>(n));
    if (!supports_op(node.op_type))
      fail(ErrorKind::kUnsupported, "blas: '{}' ({}) is not an epilogue op", node.name,
           node.op_type);
    if (node.outputs.empty() || node.outputs[0] == kNoValue)
      fail(ErrorKind::kUnsupported, "blas: '{}' has no output", node.name);
    const Value& out = g.value(node.outputs[0]);
    if (out.dtype != DType::kFloat32 || out.shape != shape)
      fail(ErrorKind::kUnsupported, "blas: '{}' yields {} {}, not float32 {}", node.name,
           dtype_name(out.dtype), shape_to_string(out.shape), shape_to_string(shape));
    if (num_slots == kMaxSlots) fail(ErrorKind::kUnsupported, "blas: epilogue too long");

    Instr instr;
    instr.dst = num_slots;
    instr.a = source(node.input(0), node);
    const std::string& t = node.op_type;
    if (t == "Add" || t == "Sub" || t == "Mul" || t == "Div") {
      instr.op = t == "Add" ? Op::kAdd : t == "Sub" ? Op::kSub : t == "Mul" ? Op::kMul : Op::kDiv;
      instr.b = source(node.input(1), node);
    } else if (t == "Relu") {
      instr.op = Op::kRelu;
    } else if (t == "LeakyRelu") {
      instr.op = Op::kLeakyRelu;
      instr.p0 = node.attr_float("alpha", 0.01f);
    } else if (t == "Clip") {
      instr.op = Op::kClip;
      constexpr float kInf = std::numeric_limits<float>::infinity();
      if (g.opset < 11) {
        instr.p0 = node.attr_float("min", -kInf);
        instr.p1 = node.attr_float("max", kInf);
      } else {
        instr.p0 = scalar_constant(g, node.input(1), node, -kInf);
        instr.p1 = scalar_constant(g, node.input(2), node, kInf);
      }
    } else if (t == "Sigmoid") {
      instr.op = Op::kSigmoid;
    } else if (t == "Tanh") {
      instr.op = Op::kTanh;
    } else {
      instr.op = Op::kErf;
    }
    // Unary ops on a constant or an input would not involve the head: not an epilogue.
    if (instr.a.kind != Source::Kind::kSlot &&
        (instr.op < Op::kAdd || instr.b.kind != Source::Kind::kSlot))
      fail(ErrorKind::kUnsupported, "blas: '{}' does not read the fused result", node.name);
    slot_of[node.outputs[0]] = num_slots++;
    e.program_.push_back(std::move(instr));
  }

  // Homes: kernel outputs first, then scratch for the rest.
  e.homes_.assign(num_slots, Home{});
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    auto it = slot_of.find(g.outputs[k]);
    if (it == slot_of.end())
      fail(ErrorKind::kUnsupported, "blas: output '{}' is not computed by the fused group",
           g.value(g.outputs[k]).name);
    if (e.homes_[it->second].output < 0) e.homes_[it->second].output = static_cast<int>(k);
  }
  // The head's slot may share an output's memory when that output is produced at or after
  // the last instruction that reads the head (elementwise in place is safe).
  if (e.homes_[0].output < 0) {
    int last_read = -1;
    for (size_t i = 0; i < e.program_.size(); ++i) {
      const Instr& in = e.program_[i];
      auto reads_head = [](const Source& s) {
        return s.kind == Source::Kind::kSlot && s.index == 0;
      };
      if (reads_head(in.a) || (in.op >= Op::kAdd && reads_head(in.b)))
        last_read = static_cast<int>(i);
    }
    for (size_t i = 0; i < e.program_.size(); ++i)
      if (static_cast<int>(i) >= last_read && e.homes_[e.program_[i].dst].output >= 0) {
        e.homes_[0].output = e.homes_[e.program_[i].dst].output;
        break;
      }
    if (e.homes_[0].output < 0) e.head_full_.assign(view.outer * view.matrix(), 0.0f);
  }
  for (int s = 1; s < num_slots; ++s)
    if (e.homes_[s].output < 0) e.homes_[s].scratch = e.num_scratch_++;
  e.scratch_.assign(static_cast<size_t>(e.threads_) * e.num_scratch_ * e.segment_, 0.0f);
  return e;
}

float* Epilogue::head_buffer(std::span<const Tensor> outputs) {
  return homes_[0].output >= 0 ? static_cast<float*>(outputs[homes_[0].output].raw())
                               : head_full_.data();
}

void Epilogue::apply(int64_t o, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  if (program_.empty()) return;
  const int64_t segments = view_.rows * segments_per_row_;
  const int threads = std::min(threads_, omp_get_max_threads());
  if (threads > 1 && view_.matrix() >= kParallelElements) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t s = 0; s < segments; ++s) run_segment(o, s, omp_get_thread_num(), inputs, outputs);
  } else {
    for (int64_t s = 0; s < segments; ++s) run_segment(o, s, 0, inputs, outputs);
  }
}

void Epilogue::run_segment(int64_t o, int64_t segment, int thread, std::span<const Tensor> inputs,
                           std::span<const Tensor> outputs) {
  const int64_t r = segment / segments_per_row_;
  const int64_t j0 = (segment % segments_per_row_) * segment_;
  const int64_t n = std::min(segment_, view_.cols - j0);
  const int64_t in_matrix = r * view_.cols + j0;
  const int64_t base = o * view_.matrix() + in_matrix;

  float* slots[kMaxSlots];
  float* thread_scratch = scratch_.data() + static_cast<size_t>(thread) * num_scratch_ * segment_;
  for (size_t s = 0; s < homes_.size(); ++s) {
    const Home& h = homes_[s];
    if (h.output >= 0)
      slots[s] = static_cast<float*>(outputs[h.output].raw()) + base;
    else if (s == 0)
      slots[s] = head_full_.data() + base;
    else
      slots[s] = thread_scratch + h.scratch * segment_;
  }
  auto resolve = [&](const Source& src) -> Span {
    switch (src.kind) {
      case Source::Kind::kSlot:
        return {slots[src.index], 0};
      case Source::Kind::kPerCol:
        return {src.data.data() + j0, 0};
      case Source::Kind::kPerRow:
        return {nullptr, src.data[r]};
      case Source::Kind::kMatrix:
        return {src.data.data() + in_matrix, 0};
      case Source::Kind::kTensor:
        return {src.data.data() + base, 0};
      case Source::Kind::kInput:
        return {static_cast<const float*>(inputs[src.index].raw()) + base, 0};
    }
    return {nullptr, 0};
  };

  for (const Instr& in : program_) {
    float* d = slots[in.dst];
    const Span a = resolve(in.a);
    switch (in.op) {
      case Op::kRelu:
        unary_loop(d, a.p, n, [](float x) { return x < 0 ? 0.0f : x; });
        break;
      case Op::kLeakyRelu: {
        const float alpha = in.p0;
        unary_loop(d, a.p, n, [alpha](float x) { return x < 0 ? alpha * x : x; });
        break;
      }
      case Op::kClip: {
        const float lo = in.p0, hi = in.p1;
        unary_loop(d, a.p, n, [lo, hi](float x) { return std::min(std::max(x, lo), hi); });
        break;
      }
      case Op::kSigmoid:
        unary_loop(d, a.p, n, fast_sigmoid<float>);
        break;
      case Op::kTanh:
        unary_loop(d, a.p, n, fast_tanh);
        break;
      case Op::kErf:
        unary_loop(d, a.p, n, fast_erf);
        break;
      case Op::kAdd:
        binary_loop(d, a, resolve(in.b), n, [](float x, float y) { return x + y; });
        break;
      case Op::kSub:
        binary_loop(d, a, resolve(in.b), n, [](float x, float y) { return x - y; });
        break;
      case Op::kMul:
        binary_loop(d, a, resolve(in.b), n, [](float x, float y) { return x * y; });
        break;
      case Op::kDiv:
        binary_loop(d, a, resolve(in.b), n, [](float x, float y) { return x / y; });
        break;
    }
  }
}

}  // namespace collage::blas
