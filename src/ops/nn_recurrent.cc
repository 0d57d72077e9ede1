// RNN, GRU and LSTM: shape functions and reference kernels (ONNX opsets 7 and 14, every
// attribute: directions, layout, activations with alpha/beta, clip, sequence_lens, initial
// states, peepholes, GRU's linear_before_reset, LSTM's input_forget). The reference is the
// oracle: each step is the operator's equations written out, dot products in double.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "ops/nn_util.h"
#include "ops/recurrent.h"

namespace collage::ops {

double CellActivation::operator()(double x) const {
  switch (kind) {
    case kRelu:
      return x > 0 ? x : 0;
    case kTanh:
      return std::tanh(x);
    case kSigmoid:
      return 1 / (1 + std::exp(-x));
    case kAffine:
      return alpha * x + beta;
    case kLeakyRelu:
      return x >= 0 ? x : alpha * x;
    case kThresholdedRelu:
      return x > alpha ? x : 0;
    case kScaledTanh:
      return alpha * std::tanh(beta * x);
    case kHardSigmoid:
      return std::clamp(alpha * x + beta, 0.0, 1.0);
    case kElu:
      return x >= 0 ? x : alpha * (std::exp(x) - 1);
    case kSoftsign:
      return x / (1 + std::abs(x));
    case kSoftplus:
      return std::log1p(std::exp(-std::abs(x))) + std::max(x, 0.0);
  }
  return x;
}

int RecurrentSpec::gates() const {
  return cell == RecurrentCell::kRnn ? 1 : cell == RecurrentCell::kGru ? 3 : 4;
}

int RecurrentSpec::functions_per_direction() const {
  return cell == RecurrentCell::kRnn ? 1 : cell == RecurrentCell::kGru ? 2 : 3;
}

bool RecurrentSpec::default_functions() const {
  if (clip || input_forget) return false;
  for (int d = 0; d < directions; ++d)
    for (int i = 0; i < functions_per_direction(); ++i) {
      const bool gate = cell != RecurrentCell::kRnn && i == 0;
      if (function(d, i).kind != (gate ? CellActivation::kSigmoid : CellActivation::kTanh))
        return false;
    }
  return true;
}

namespace {

struct ActivationName {
  const char* name;
  CellActivation::Kind kind;
  bool takes_alpha, takes_beta;
  float alpha, beta;  // ONNX's defaults for the op of that name
};
constexpr ActivationName kActivations[] = {
    {"relu", CellActivation::kRelu, false, false, 0, 0},
    {"tanh", CellActivation::kTanh, false, false, 0, 0},
    {"sigmoid", CellActivation::kSigmoid, false, false, 0, 0},
    {"affine", CellActivation::kAffine, true, true, 1, 0},
    {"leakyrelu", CellActivation::kLeakyRelu, true, false, 0.01f, 0},
    {"thresholdedrelu", CellActivation::kThresholdedRelu, true, false, 1, 0},
    {"scaledtanh", CellActivation::kScaledTanh, true, true, 1, 1},
    {"hardsigmoid", CellActivation::kHardSigmoid, true, true, 0.2f, 0.5f},
    {"elu", CellActivation::kElu, true, false, 1, 0},
    {"softsign", CellActivation::kSoftsign, false, false, 0, 0},
    {"softplus", CellActivation::kSoftplus, false, false, 0, 0},
};

[[noreturn]] void bad_attribute(const Node& n, const std::string& what) {
  nn::node_fail(n, ErrorKind::kInvalidModel, "{}", what);
}

}  // namespace

RecurrentSpec recurrent_spec(const Node& n) {
  RecurrentSpec s;
  s.cell = n.op_type == "RNN"   ? RecurrentCell::kRnn
           : n.op_type == "GRU" ? RecurrentCell::kGru
                                : RecurrentCell::kLstm;
  s.hidden = n.attr_int("hidden_size", 0);
  if (n.has_attr("hidden_size") && s.hidden <= 0)
    bad_attribute(n, fmt::format("hidden_size must be positive, got {}", s.hidden));
  const std::string direction = n.attr_string("direction", "forward");
  if (direction == "bidirectional")
    s.directions = 2;
  else if (direction == "reverse")
    s.reverse = true;
  else if (direction != "forward")
    bad_attribute(n,
                  "direction must be forward, reverse or bidirectional, got '" + direction + "'");
  const int64_t layout = n.attr_int("layout", 0);
  if (layout != 0 && layout != 1) bad_attribute(n, "layout must be 0 or 1");
  s.batch_major = layout == 1;
  if (n.has_attr("clip")) {
    const float clip = n.attr_float("clip", 0);
    if (!(clip > 0)) bad_attribute(n, fmt::format("clip must be positive, got {}", clip));
    s.clip = clip;
  }
  s.linear_before_reset = s.cell == RecurrentCell::kGru && n.attr_int("linear_before_reset", 0);
  s.input_forget = s.cell == RecurrentCell::kLstm && n.attr_int("input_forget", 0);

  std::vector<std::string> names;
  if (const auto it = n.attrs.find("activations"); it != n.attrs.end()) names = it->second.strings;
  const int per_direction = s.functions_per_direction();
  if (names.empty()) {
    for (int d = 0; d < s.directions; ++d)
      for (int i = 0; i < per_direction; ++i)
        names.push_back(s.cell != RecurrentCell::kRnn && i == 0 ? "Sigmoid" : "Tanh");
  } else if (static_cast<int>(names.size()) == per_direction && s.directions == 2) {
    names.insert(names.end(), names.begin(), names.end());  // one list for both directions
  }
  if (static_cast<int>(names.size()) != per_direction * s.directions)
    bad_attribute(n, fmt::format("activations lists {} functions; {} {} needs {} per direction",
                                 names.size(), direction, n.op_type, per_direction));
  // alpha and beta are consumed in order by the functions that take them (as ONNX Runtime
  // reads them); a function past the end of a list keeps its op's default.
  const std::vector<float> alphas = n.attr_floats("activation_alpha");
  const std::vector<float> betas = n.attr_floats("activation_beta");
  size_t next_alpha = 0, next_beta = 0;
  for (const std::string& name : names) {
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    const ActivationName* known = nullptr;
    for (const ActivationName& a : kActivations)
      if (lower == a.name) known = &a;
    if (!known) bad_attribute(n, "unknown activation function '" + name + "'");
    CellActivation f{known->kind, known->alpha, known->beta};
    if (known->takes_alpha && next_alpha < alphas.size()) f.alpha = alphas[next_alpha++];
    if (known->takes_beta && next_beta < betas.size()) f.beta = betas[next_beta++];
    s.activations.push_back(f);
  }
  return s;
}

RecurrentSpec recurrent_spec(const Graph& g, const Node& n) {
  RecurrentSpec spec = recurrent_spec(n);
  if (spec.hidden == 0) spec.hidden = g.value(n.inputs.at(kRecW)).shape.at(1) / spec.gates();
  return spec;
}

RecurrentDims recurrent_dims(const RecurrentSpec& spec, const Shape& x) {
  return {spec.batch_major ? x[1] : x[0], spec.batch_major ? x[0] : x[1], x[2]};
}

std::optional<RecurrentSpec> float32_recurrent_spec(const Graph& g, const Node& n) {
  if (!n.domain.empty() || (n.op_type != "RNN" && n.op_type != "GRU" && n.op_type != "LSTM"))
    return std::nullopt;
  auto f32_known = [&](ValueId v) {
    return g.value(v).dtype == DType::kFloat32 && g.value(v).shape_known;
  };
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] != kNoValue && i != kRecSeqLens && !f32_known(n.inputs[i])) return std::nullopt;
  for (ValueId v : n.outputs)
    if (v != kNoValue && !f32_known(v)) return std::nullopt;
  if (n.input(kRecX) == kNoValue || g.value(n.input(kRecX)).shape.size() != 3) return std::nullopt;
  try {
    return recurrent_spec(g, n);
  } catch (const Error&) {
    return std::nullopt;
  }
}

bool every_sequence_full(const Graph& g, const Node& n) {
  if (n.input(kRecSeqLens) == kNoValue) return true;
  const Value& lens = g.value(n.input(kRecSeqLens));
  const Value& x = g.value(n.input(kRecX));
  if (!lens.is_constant() || lens.constant.dtype() != DType::kInt32 || !x.shape_known ||
      x.shape.size() != 3)
    return false;
  const int64_t seq = recurrent_dims(recurrent_spec(g, n), x.shape).seq;
  const int32_t* l = lens.constant.data<int32_t>();
  return std::all_of(l, l + lens.constant.numel(), [&](int32_t v) { return v == seq; });
}

namespace {

// The (seq, batch) layout of X and Y, and the (direction, batch) layout of the states.
struct RecurrentLayout {
  RecurrentDims dims;
  int directions;
  bool batch_major;
  int64_t x(int64_t t, int64_t b) const {
    return (batch_major ? b * dims.seq + t : t * dims.batch + b) * dims.input;
  }
  int64_t y(int64_t t, int d, int64_t b, int64_t hidden) const {
    return (batch_major ? (b * dims.seq + t) * directions + d
                        : (t * directions + d) * dims.batch + b) *
           hidden;
  }
  int64_t state(int d, int64_t b, int64_t hidden) const {
    return (batch_major ? b * directions + d : d * dims.batch + b) * hidden;
  }
};

void infer_recurrent(InferContext& ctx) {
  const Node& n = ctx.node();
  const RecurrentSpec s = recurrent_spec(n);
  const bool lstm = s.cell == RecurrentCell::kLstm;
  if (!ctx.has_input(kRecX) || !ctx.has_input(kRecW) || !ctx.has_input(kRecR))
    nn::node_fail(n, ErrorKind::kInvalidModel, "needs inputs X, W and R");
  const DType t = nn::require_float_input(ctx, kRecX);
  for (size_t i : {kRecW, kRecR, kRecB, kRecInitialH, kRecInitialC, kRecPeephole})
    if (ctx.has_input(i) && (lstm || i < kRecInitialC)) nn::require_float_input(ctx, i, kRecX);
  if (!lstm && (ctx.has_input(kRecInitialC) || ctx.has_input(kRecPeephole)))
    nn::node_fail(n, ErrorKind::kInvalidModel, "has more than the 6 inputs {} takes", n.op_type);
  const Shape& x = ctx.input_shape(kRecX);
  const Shape& w = ctx.input_shape(kRecW);
  const Shape& r = ctx.input_shape(kRecR);
  if (x.size() != 3) ctx.fail("X must have rank 3, got {}", shape_to_string(x));
  const auto [seq, batch, input] = recurrent_dims(s, x);
  const int64_t g = s.gates(), dirs = s.directions;
  if (w.size() != 3 || w[0] != dirs || w[2] != input || w[1] % g != 0)
    ctx.fail("W has shape {}; expected [{}, {} x hidden_size, {}]", shape_to_string(w), dirs, g,
             input);
  const int64_t hidden = s.hidden > 0 ? s.hidden : w[1] / g;
  if (w[1] != g * hidden)
    ctx.fail("W has shape {}; hidden_size {} needs {} rows per direction", shape_to_string(w),
             hidden, g * hidden);
  if (r != Shape{dirs, g * hidden, hidden})
    ctx.fail("R has shape {}; expected [{}, {}, {}]", shape_to_string(r), dirs, g * hidden, hidden);
  if (ctx.has_input(kRecB) && ctx.input_shape(kRecB) != Shape{dirs, 2 * g * hidden})
    ctx.fail("B has shape {}; expected [{}, {}]", shape_to_string(ctx.input_shape(kRecB)), dirs,
             2 * g * hidden);
  if (ctx.has_input(kRecSeqLens)) {
    if (ctx.input_dtype(kRecSeqLens) != DType::kInt32)
      ctx.fail("sequence_lens must be int32, got {}", dtype_name(ctx.input_dtype(kRecSeqLens)));
    if (ctx.input_shape(kRecSeqLens) != Shape{batch})
      ctx.fail("sequence_lens has shape {}; expected [{}]",
               shape_to_string(ctx.input_shape(kRecSeqLens)), batch);
  }
  const Shape state = s.batch_major ? Shape{batch, dirs, hidden} : Shape{dirs, batch, hidden};
  for (size_t i : {kRecInitialH, kRecInitialC})
    if (ctx.has_input(i) && ctx.input_shape(i) != state)
      ctx.fail("input {} (an initial state) has shape {}; expected {}", i,
               shape_to_string(ctx.input_shape(i)), shape_to_string(state));
  if (ctx.has_input(kRecPeephole) && ctx.input_shape(kRecPeephole) != Shape{dirs, 3 * hidden})
    ctx.fail("P has shape {}; expected [{}, {}]", shape_to_string(ctx.input_shape(kRecPeephole)),
             dirs, 3 * hidden);
  if (n.outputs.size() > (lstm ? 3u : 2u))
    nn::node_fail(n, ErrorKind::kInvalidModel, "has {} outputs; {} has at most {}",
                  n.outputs.size(), n.op_type, lstm ? 3 : 2);
  ctx.set_output(0, t,
                 s.batch_major ? Shape{batch, seq, dirs, hidden} : Shape{seq, dirs, batch, hidden});
  for (size_t i = 1; i < n.outputs.size(); ++i) ctx.set_output(i, t, state);
}

// One direction of one sequence: the cell's equations, step by step.
template <typename T>
class CellRunner {
 public:
  CellRunner(const RecurrentSpec& spec, int direction, int64_t input, std::span<const Tensor> in)
      : s_(spec), dir_(direction), input_(input), hidden_(spec.hidden), gates_(spec.gates()) {
    const int64_t gh = gates_ * hidden_;
    w_ = in[kRecW].data<T>() + direction * gh * input;
    r_ = in[kRecR].data<T>() + direction * gh * hidden_;
    if (in.size() > kRecB && in[kRecB].defined()) bias_ = in[kRecB].data<T>() + direction * 2 * gh;
    if (s_.cell == RecurrentCell::kLstm && in.size() > kRecPeephole && in[kRecPeephole].defined())
      peephole_ = in[kRecPeephole].data<T>() + direction * 3 * hidden_;
    x_gates_.resize(gh);
    h_gates_.resize(gh);
    next_h_.resize(hidden_);
    scratch_.resize(hidden_);
  }

  // One step: reads x (input_ values) and the state h, c; leaves the new state in h, c.
  void step(const T* x, std::vector<double>& h, std::vector<double>& c) {
    const int64_t gh = gates_ * hidden_;
    for (int64_t row = 0; row < gh; ++row) {
      double sum = bias_ ? static_cast<double>(bias_[row]) : 0.0;
      const T* wr = w_ + row * input_;
      for (int64_t i = 0; i < input_; ++i) sum += static_cast<double>(wr[i]) * x[i];
      x_gates_[row] = sum;
    }
    switch (s_.cell) {
      case RecurrentCell::kRnn:
        recurrent_rows(0, 1, h, h_gates_);
        for (int64_t j = 0; j < hidden_; ++j) h[j] = act(0, x_gates_[j] + h_gates_[j]);
        return;
      case RecurrentCell::kGru:
        gru(h);
        return;
      case RecurrentCell::kLstm:
        lstm(h, c);
        return;
    }
  }

 private:
  double act(int i, double v) const {
    if (s_.clip) v = std::clamp(v, -static_cast<double>(*s_.clip), static_cast<double>(*s_.clip));
    return s_.function(dir_, i)(v);
  }
  // out[g*H + j] = R[g*H + j] . state + Rb[g*H + j] for gate blocks [first, first + count).
  void recurrent_rows(int first, int count, const std::vector<double>& state,
                      std::vector<double>& out) const {
    const int64_t gh = gates_ * hidden_;
    for (int64_t row = first * hidden_; row < (first + count) * hidden_; ++row) {
      double sum = bias_ ? static_cast<double>(bias_[gh + row]) : 0.0;
      const T* rr = r_ + row * hidden_;
      for (int64_t k = 0; k < hidden_; ++k) sum += static_cast<double>(rr[k]) * state[k];
      out[row] = sum;
    }
  }
  // Gates z, r, h.
  void gru(std::vector<double>& h) {
    const int64_t H = hidden_;
    recurrent_rows(0, 2, h, h_gates_);
    std::vector<double>& z = next_h_;  // z, then the new state
    for (int64_t j = 0; j < H; ++j) z[j] = act(0, x_gates_[j] + h_gates_[j]);
    for (int64_t j = 0; j < H; ++j) x_gates_[H + j] = act(0, x_gates_[H + j] + h_gates_[H + j]);
    // The candidate's recurrent term, in h_gates_'s third block: r . (Rh h + Rbh) when
    // linear_before_reset, else Rh (r . h) + Rbh.
    const double* reset = &x_gates_[H];
    double* term = &h_gates_[2 * H];
    if (s_.linear_before_reset) {
      recurrent_rows(2, 1, h, h_gates_);
      for (int64_t j = 0; j < H; ++j) term[j] *= reset[j];
    } else {
      for (int64_t j = 0; j < H; ++j) scratch_[j] = reset[j] * h[j];
      recurrent_rows(2, 1, scratch_, h_gates_);
    }
    for (int64_t j = 0; j < H; ++j) {
      const double candidate = act(1, x_gates_[2 * H + j] + term[j]);
      h[j] = (1 - z[j]) * candidate + z[j] * h[j];
    }
  }
  // Gates i, o, f, c; peepholes P = (Pi, Po, Pf).
  void lstm(std::vector<double>& h, std::vector<double>& c) {
    const int64_t H = hidden_;
    recurrent_rows(0, 4, h, h_gates_);
    auto pre = [&](int gate, int64_t j) { return x_gates_[gate * H + j] + h_gates_[gate * H + j]; };
    auto peep = [&](int which, int64_t j, double cell) {
      return peephole_ ? static_cast<double>(peephole_[which * H + j]) * cell : 0.0;
    };
    for (int64_t j = 0; j < H; ++j) {
      const double in_gate = act(0, pre(0, j) + peep(0, j, c[j]));
      const double forget = s_.input_forget ? 1 - in_gate : act(0, pre(2, j) + peep(2, j, c[j]));
      const double candidate = act(1, pre(3, j));
      const double cell = forget * c[j] + in_gate * candidate;
      const double out_gate = act(0, pre(1, j) + peep(1, j, cell));
      c[j] = cell;
      next_h_[j] = out_gate * act(2, cell);
    }
    std::copy(next_h_.begin(), next_h_.end(), h.begin());
  }

  const RecurrentSpec& s_;
  int dir_;
  int64_t input_, hidden_;
  int gates_;
  const T* w_ = nullptr;
  const T* r_ = nullptr;
  const T* bias_ = nullptr;
  const T* peephole_ = nullptr;
  std::vector<double> x_gates_, h_gates_, next_h_, scratch_;
};

template <typename T>
void run_recurrent(const RecurrentSpec& s, const RecurrentLayout& lay, const Node* node_for_errors,
                   std::span<const Tensor> in, std::span<const Tensor> out) {
  const RecurrentDims& d = lay.dims;
  const int64_t H = s.hidden;
  const T* x = in[kRecX].data<T>();
  auto given = [&](size_t i) { return in.size() > i && in[i].defined(); };
  const int32_t* lens = given(kRecSeqLens) ? in[kRecSeqLens].data<int32_t>() : nullptr;
  const T* h0 = given(kRecInitialH) ? in[kRecInitialH].data<T>() : nullptr;
  const T* c0 = given(kRecInitialC) ? in[kRecInitialC].data<T>() : nullptr;
  T* y = out.size() > 0 && out[0].defined() ? out[0].data<T>() : nullptr;
  T* y_h = out.size() > 1 && out[1].defined() ? out[1].data<T>() : nullptr;
  T* y_c = out.size() > 2 && out[2].defined() ? out[2].data<T>() : nullptr;
  for (int64_t b = 0; b < d.batch; ++b)
    if (lens && (lens[b] < 0 || lens[b] > d.seq))
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("node '{}' ({}): sequence_lens[{}] = {} is outside [0, {}]",
                              node_for_errors->name, node_for_errors->op_type, b, lens[b], d.seq));
  if (y) std::fill_n(y, out[0].numel(), T(0));  // steps past a sequence's length stay 0
  for (int dir = 0; dir < s.directions; ++dir) {
    CellRunner<T> cell(s, dir, d.input, in);
    const bool backwards = s.reverse || dir == 1;
    std::vector<double> h(H), c(H);
    for (int64_t b = 0; b < d.batch; ++b) {
      const int64_t state_at = lay.state(dir, b, H);
      for (int64_t j = 0; j < H; ++j) {
        h[j] = h0 ? static_cast<double>(h0[state_at + j]) : 0.0;
        c[j] = c0 ? static_cast<double>(c0[state_at + j]) : 0.0;
      }
      const int64_t len = lens ? lens[b] : d.seq;
      for (int64_t step = 0; step < len; ++step) {
        const int64_t t = backwards ? len - 1 - step : step;
        cell.step(x + lay.x(t, b), h, c);
        if (y)
          for (int64_t j = 0; j < H; ++j) y[lay.y(t, dir, b, H) + j] = static_cast<T>(h[j]);
      }
      for (int64_t j = 0; j < H; ++j) {
        if (y_h) y_h[state_at + j] = static_cast<T>(h[j]);
        if (y_c) y_c[state_at + j] = static_cast<T>(c[j]);
      }
    }
  }
}

RefKernel make_recurrent(const Graph& g, const Node& n) {
  const RecurrentSpec spec = recurrent_spec(g, n);
  const Shape& x = g.value(n.inputs[kRecX]).shape;
  RecurrentLayout lay{recurrent_dims(spec, x), spec.directions, spec.batch_major};
  const DType t = g.value(n.inputs[kRecX]).dtype;
  const Node node{n.name, n.op_type, n.domain, {}, {}, {}};
  return nn::dispatch_float(t, [&](auto zero) -> RefKernel {
    using T = decltype(zero);
    return [spec, lay, node](std::span<const Tensor> in, std::span<const Tensor> out) {
      run_recurrent<T>(spec, lay, &node, in, out);
    };
  });
}

}  // namespace

namespace nn {

void register_recurrent_ops(OpRegistry& registry) {
  for (const char* name : {"RNN", "GRU", "LSTM"})
    registry.add({name, "", OpKind::kOpaque, infer_recurrent, make_recurrent});
}

}  // namespace nn
}  // namespace collage::ops
