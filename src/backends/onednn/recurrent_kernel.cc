// RNN, GRU and LSTM as oneDNN's RNN primitives (recurrent_kernel.h says what is taken).
#include "backends/onednn/recurrent_kernel.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>

#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/packed_recurrence.h"
#include "ops/recurrent.h"

namespace collage::onednn {
namespace {

using ops::CellActivation;
using ops::RecurrentCell;
using ops::RecurrentSpec;

// oneDNN's gate k is ONNX's gate kGateOf[k]: LSTM i,f,c,o from ONNX's i,o,f,c; GRU's u,r,o
// are ONNX's z,r,h; an RNN has one.
std::vector<int> onnx_gates(RecurrentCell cell) {
  if (cell == RecurrentCell::kLstm) return {0, 2, 3, 1};
  if (cell == RecurrentCell::kGru) return {0, 1, 2};
  return {0};
}

// An RNN's function as oneDNN's vanilla cell takes it (the same in both directions).
std::optional<dnnl::algorithm> rnn_function(const RecurrentSpec& s) {
  const CellActivation& f = s.function(0, 0);
  for (int d = 1; d < s.directions; ++d) {
    const CellActivation& other = s.function(d, 0);
    if (other.kind != f.kind) return std::nullopt;
  }
  if (f.kind == CellActivation::kTanh) return dnnl::algorithm::eltwise_tanh;
  if (f.kind == CellActivation::kRelu) return dnnl::algorithm::eltwise_relu;
  if (f.kind == CellActivation::kSigmoid) return dnnl::algorithm::eltwise_logistic;
  return std::nullopt;
}

// A zero-filled tensor of `md`'s dims (a bias or state oneDNN needs where ONNX omits one).
Tensor zeros(const dnnl::memory::desc& md) {
  const Dims dims = md.dims();
  return Tensor(DType::kFloat32, Shape(dims.begin(), dims.end()));
}

bool absent(const Node& n, size_t i) {
  return n.input(i) == kNoValue;
}

struct RecurrentShapes {
  int64_t seq, batch, input, hidden, directions, gates;
};

RecurrentShapes shapes_of(const Graph& g, const Node& n, const RecurrentSpec& s) {
  const ops::RecurrentDims x = ops::recurrent_dims(s, g.value(n.input(ops::kRecX)).shape);
  return {x.seq, x.batch, x.input, s.hidden, s.directions, s.gates()};
}

// W or R ([D, G*H, K], ONNX's gate blocks) as oneDNN's ldigo ([1, D, K, G, H]).
void weights_to_ldigo(const float* src, float* dst, int64_t k, const RecurrentShapes& r,
                      const std::vector<int>& gate_of) {
  const int64_t h = r.hidden, gates = r.gates;
  for (int64_t d = 0; d < r.directions; ++d)
    for (int64_t i = 0; i < k; ++i)
      for (int64_t g = 0; g < gates; ++g)
        for (int64_t j = 0; j < h; ++j)
          dst[(((d * k) + i) * gates + g) * h + j] =
              src[(d * gates * h + gate_of[g] * h + j) * k + i];
}

// B ([D, 2*G*H]: Wb then Rb) as oneDNN's ldgo bias: Wb + Rb per gate, and for lbr_gru a
// fourth gate holding Rbh alone (it is added inside the reset product).
void bias_to_ldgo(const float* src, float* dst, const RecurrentShapes& r,
                  const std::vector<int>& gate_of, bool linear_before_reset) {
  const int64_t h = r.hidden, gates = r.gates, gh = gates * h;
  const int64_t out_gates = linear_before_reset ? gates + 1 : gates;
  for (int64_t d = 0; d < r.directions; ++d) {
    const float* wb = src + d * 2 * gh;
    const float* rb = wb + gh;
    float* o = dst + d * out_gates * h;
    for (int64_t g = 0; g < gates; ++g)
      for (int64_t j = 0; j < h; ++j) {
        const int64_t at = gate_of[g] * h + j;
        const bool candidate_of_lbr = linear_before_reset && g == 2;
        o[g * h + j] = candidate_of_lbr ? wb[at] : wb[at] + rb[at];
      }
    if (linear_before_reset)
      for (int64_t j = 0; j < h; ++j) o[3 * h + j] = rb[2 * h + j];
  }
}

// P ([D, 3*H]: i, o, f) as oneDNN's peephole weights ([1, D, 3, H]: i, f, o).
void peephole_to_ldgo(const float* src, float* dst, const RecurrentShapes& r) {
  constexpr int kOnnxOf[3] = {0, 2, 1};
  for (int64_t d = 0; d < r.directions; ++d)
    for (int g = 0; g < 3; ++g)
      std::memcpy(dst + (d * 3 + g) * r.hidden, src + (d * 3 + kOnnxOf[g]) * r.hidden,
                  sizeof(float) * r.hidden);
}

// Runs `p` with `args` on the calling thread alone, as a primitive built for one thread: with
// this thread's OpenMP count at 1 for the call, oneDNN's parallel() runs its work inline. (In a
// team of one instead, an LSTM built for one thread took 4.1 ms where it takes 0.1: oneDNN
// reads the count of the level below, the kernel's, and partitions for it.)
dnnl_status_t execute_on_one_thread(const dnnl::primitive& p, const dnnl::stream& stream,
                                    const dnnl_exec_arg_t* args, int count) {
  const OpenMpThreadsInScope alone(1);
  return dnnl_primitive_execute(p.get(), stream.get(), count, args);
}

// COLLAGE_ONEDNN_RNN_THREADS: "one" or "all" takes that build without measuring (the tests
// run both); unset (or anything else) measures.
std::optional<bool> forced_one_thread() {
  const char* v = std::getenv("COLLAGE_ONEDNN_RNN_THREADS");
  if (v && !std::strcmp(v, "one")) return true;
  if (v && !std::strcmp(v, "all")) return false;
  return std::nullopt;
}

struct RecurrentPrimitive {
  dnnl::primitive primitive;
  std::shared_ptr<dnnl::rnn_primitive_desc_base> pd;
};

// One cell primitive of kind `Cell` (lstm_forward, gru_forward...) from its descriptor's
// arguments, with the Program's scratchpad attribute; kUnsupported where oneDNN refuses it.
template <typename Cell, typename... DescArgs>
RecurrentPrimitive make_cell(const std::string& what, const DescArgs&... args) {
  auto pd = create_pd(what, [&] {
    return typename Cell::primitive_desc(typename Cell::desc(args...), base_attr(), cpu_engine());
  });
  return {Cell(pd), std::make_shared<typename Cell::primitive_desc>(pd)};
}

// Milliseconds of one execution of `p` on scratch memories of its arguments' layouts (zeros),
// fastest of `runs` after a warm-up; on the calling thread alone or on its OpenMP team.
double fastest_ms(const RecurrentPrimitive& p, bool one_thread, int runs) {
  std::vector<dnnl::memory> scratch;
  std::vector<dnnl_exec_arg_t> bound;
  for (int arg :
       {DNNL_ARG_SRC_LAYER, DNNL_ARG_SRC_ITER, DNNL_ARG_SRC_ITER_C, DNNL_ARG_WEIGHTS_LAYER,
        DNNL_ARG_WEIGHTS_ITER, DNNL_ARG_WEIGHTS_PEEPHOLE, DNNL_ARG_BIAS, DNNL_ARG_DST_LAYER,
        DNNL_ARG_DST_ITER, DNNL_ARG_DST_ITER_C, DNNL_ARG_SCRATCHPAD}) {
    const dnnl::memory::desc md = p.pd->query_md(dnnl::query::exec_arg_md, arg);
    if (md.get_size() == 0) continue;
    scratch.emplace_back(md, cpu_engine());
    bound.push_back({arg, scratch.back().get()});
  }
  dnnl::stream stream(cpu_engine());
  // Zeros, written by a reorder from row-major zeros: a packed weights layout carries a header
  // that only a reorder writes (zeroed bytes there made the packed GEMM divide by zero).
  for (dnnl::memory& m : scratch) {
    const dnnl::memory::desc md = m.get_desc();
    if (md.data.format_kind != dnnl_blocked || md.data.extra.flags != 0) {
      const Dims dims = md.dims();
      dnnl::memory zeros(plain_md(Shape(dims.begin(), dims.end())), cpu_engine());
      std::memset(zeros.get_data_handle(), 0, zeros.get_desc().get_size());
      dnnl::reorder(zeros, m).execute(stream, zeros, m);
    } else {
      std::memset(m.get_data_handle(), 0, md.get_size());
    }
  }
  stream.wait();
  double best = 0;
  for (int r = 0; r <= runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const int count = static_cast<int>(bound.size());
    const dnnl_status_t status =
        one_thread ? execute_on_one_thread(p.primitive, stream, bound.data(), count)
                   : dnnl_primitive_execute(p.primitive.get(), stream.get(), count, bound.data());
    if (status != dnnl_success)
      fail(ErrorKind::kBackend, "onednn: recurrent primitive failed (status {})",
           static_cast<int>(status));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r == 1 || (r > 1 && ms < best)) best = ms;  // run 0 warms pages and caches
  }
  return best;
}

// Whether `alone` (built for one thread, run in a team of one) beats `wide` (built for the
// kernel's threads). oneDNN's cells parallelise each time step, and a small step pays a
// team's barrier for little work. Measured at compile (2026-12-06, 2-core EPYC, 2 threads
// against one): an LSTM of 48 units over 25 steps of 2 sequences, bidirectional, 0.48 ms
// against 0.11; a GRU of 256 units over 100 steps 1.20 against 0.90; a bidirectional LSTM
// of 128 units over 8 sequences 1.76 against 1.26; but an LSTM of 256 units 1.98 against
// 2.52, of 512 units 7.2 against 11.6, of 1024 units over 4 sequences 10.9 against 36.
bool faster_on_one_thread(const RecurrentPrimitive& wide, const RecurrentPrimitive& alone) {
  const double wide_ms = fastest_ms(wide, false, 1);
  if (wide_ms > 20) return false;  // long steps: the threads pay off; timing both costs more
  return fastest_ms(alone, true, 3) < 0.9 * std::min(wide_ms, fastest_ms(wide, false, 2));
}

}  // namespace

bool recurrent_takes(const Graph& g, const Node& n) {
  const std::optional<RecurrentSpec> s = ops::float32_recurrent_spec(g, n);
  if (!s || s->batch_major || !ops::every_sequence_full(g, n)) return false;
  return s->cell == RecurrentCell::kRnn ? !s->clip && rnn_function(*s) : s->default_functions();
}

void emit_recurrent(const Graph& sub, ValueMemories& values) {
  if (sub.num_nodes() != 1 || !recurrent_takes(sub, sub.node(0)))
    fail(ErrorKind::kUnsupported, "onednn: not one RNN/GRU/LSTM oneDNN's cells compute");
  const Node& n = sub.node(0);
  // One sequence with constant weights: matmuls with packed weights around collage's cell,
  // faster than the RNN primitives there (packed_recurrence.h).
  if (packed_recurrence_takes(sub, n)) return emit_packed_recurrence(sub, values);
  const RecurrentSpec s = ops::recurrent_spec(sub, n);
  const RecurrentShapes r = shapes_of(sub, n, s);
  const std::vector<int> gate_of = onnx_gates(s.cell);
  const bool lstm = s.cell == RecurrentCell::kLstm;
  const bool lbr = s.cell == RecurrentCell::kGru && s.linear_before_reset;
  auto input = [&](size_t i) { return n.input(i); };
  auto output = [&](size_t i) { return i < n.outputs.size() ? n.outputs[i] : kNoValue; };

  const dnnl::memory::desc none;
  const dnnl::memory::desc src_layer = plain_md({r.seq, r.batch, r.input});
  const dnnl::memory::desc state = plain_md({1, r.directions, r.batch, r.hidden});
  auto any = [](const Dims& d) { return dnnl::memory::desc(d, dt::f32, tag::any); };
  const dnnl::memory::desc w_layer = any({1, r.directions, r.input, r.gates, r.hidden});
  const dnnl::memory::desc w_iter = any({1, r.directions, r.hidden, r.gates, r.hidden});
  // oneDNN's RNN descriptors refuse an absent bias: zeros stand in for one.
  const dnnl::memory::desc bias = plain_md({1, r.directions, lbr ? 4 : r.gates, r.hidden});
  const dnnl::memory::desc peephole =
      lstm && !absent(n, ops::kRecPeephole) ? plain_md({1, r.directions, 3, r.hidden}) : none;
  const dnnl::memory::desc dst_layer = plain_md({r.seq, r.batch, r.directions * r.hidden});
  // An LSTM's two states go in pairs (oneDNN takes both or neither): a missing initial one is
  // zeros, an unwanted final one a scratch buffer.
  const bool h0_given = !absent(n, ops::kRecInitialH),
             c0_given = lstm && !absent(n, ops::kRecInitialC);
  const bool has_h0 = h0_given || c0_given, has_c0 = lstm && has_h0;
  const bool h_wanted = output(1) != kNoValue, c_wanted = lstm && output(2) != kNoValue;
  const bool want_h = h_wanted || c_wanted, want_c = lstm && want_h;
  const dnnl::memory::desc src_iter = has_h0 ? state : none, src_iter_c = has_c0 ? state : none;
  const dnnl::memory::desc dst_iter = want_h ? state : none, dst_iter_c = want_c ? state : none;
  const auto direction = r.directions == 2 ? dnnl::rnn_direction::bidirectional_concat
                         : s.reverse       ? dnnl::rnn_direction::unidirectional_right2left
                                           : dnnl::rnn_direction::unidirectional_left2right;
  const auto inference = dnnl::prop_kind::forward_inference;

  const std::string what = fmt::format("{} '{}'", n.op_type, n.name);
  // Built for the calling thread's OpenMP count: oneDNN sizes its partition then.
  auto build = [&]() -> RecurrentPrimitive {
    if (lstm)
      return make_cell<dnnl::lstm_forward>(what, inference, direction, src_layer, src_iter,
                                           src_iter_c, w_layer, w_iter, peephole, bias, dst_layer,
                                           dst_iter, dst_iter_c);
    if (lbr)
      return make_cell<dnnl::lbr_gru_forward>(what, inference, direction, src_layer, src_iter,
                                              w_layer, w_iter, bias, dst_layer, dst_iter);
    if (s.cell == RecurrentCell::kGru)
      return make_cell<dnnl::gru_forward>(what, inference, direction, src_layer, src_iter, w_layer,
                                          w_iter, bias, dst_layer, dst_iter);
    return make_cell<dnnl::vanilla_rnn_forward>(what, inference, *rnn_function(s), direction,
                                                src_layer, src_iter, w_layer, w_iter, bias,
                                                dst_layer, dst_iter);
  };
  // The faster of the primitive built for the kernel's threads and one built for a thread
  // alone, measured now (faster_on_one_thread).
  RecurrentPrimitive built = build();
  bool one_thread = false;
  if (const int threads = omp_get_max_threads(); threads > 1) {
    const std::optional<bool> forced = forced_one_thread();
    if (forced.value_or(true)) {
      RecurrentPrimitive alone = [&] {
        const OpenMpThreadsInScope one(1);
        return build();
      }();
      one_thread = forced.value_or(false) || faster_on_one_thread(built, alone);
      if (one_thread) built = alone;
    }
  }
  const dnnl::primitive& primitive = built.primitive;
  const std::shared_ptr<dnnl::rnn_primitive_desc_base>& pd = built.pd;

  Program& program = values.program();
  // A parameter in oneDNN's order: a constant converted now (and packed into the layout the
  // primitive prefers), a computed one (an ONNX test's inputs) converted by a step each run.
  using Convert = std::function<void(const float*, float*)>;
  auto parameter = [&](size_t i, const dnnl::memory::desc& packed, const Dims& ordered_dims,
                       Convert convert) {
    const ValueId v = input(i);
    const dnnl::memory::desc ordered = plain_md(Shape(ordered_dims.begin(), ordered_dims.end()));
    if (sub.value(v).is_constant()) {
      Tensor t(DType::kFloat32, Shape(ordered_dims.begin(), ordered_dims.end()));
      convert(sub.value(v).constant.data<float>(), t.data<float>());
      return program.constant(t, ordered, packed);
    }
    const dnnl::memory src = values.view(v, plain_md(sub.value(v).shape));
    const dnnl::memory dst = program.rewritten_buffer(ordered);
    program.add_custom(
        "collage:recurrent_gates",
        [convert](const dnnl_exec_arg_t* a, int count) {
          convert(custom_step_data(a, count, DNNL_ARG_SRC),
                  custom_step_data(a, count, DNNL_ARG_DST));
          return dnnl_success;
        },
        {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, dnnl::primitive::kind::reorder);
    return program.in_layout(dst, packed);
  };
  const Dims wl_dims = {1, r.directions, r.input, r.gates, r.hidden};
  const Dims wi_dims = {1, r.directions, r.hidden, r.gates, r.hidden};
  std::vector<std::pair<int, dnnl::memory>> args = {
      {DNNL_ARG_SRC_LAYER, values.view(input(ops::kRecX), src_layer)},
      {DNNL_ARG_WEIGHTS_LAYER, parameter(ops::kRecW, pd->weights_layer_desc(), wl_dims,
                                         [r, gate_of](const float* s, float* d) {
                                           weights_to_ldigo(s, d, r.input, r, gate_of);
                                         })},
      {DNNL_ARG_WEIGHTS_ITER, parameter(ops::kRecR, pd->weights_iter_desc(), wi_dims,
                                        [r, gate_of](const float* s, float* d) {
                                          weights_to_ldigo(s, d, r.hidden, r, gate_of);
                                        })},
  };
  if (absent(n, ops::kRecB))
    args.emplace_back(DNNL_ARG_BIAS, program.constant(zeros(bias), bias, bias));
  else
    args.emplace_back(DNNL_ARG_BIAS, parameter(ops::kRecB, bias, bias.dims(),
                                               [r, gate_of, lbr](const float* s, float* d) {
                                                 bias_to_ldgo(s, d, r, gate_of, lbr);
                                               }));
  if (peephole != none)
    args.emplace_back(DNNL_ARG_WEIGHTS_PEEPHOLE,
                      parameter(ops::kRecPeephole, peephole, peephole.dims(),
                                [r](const float* s, float* d) { peephole_to_ldgo(s, d, r); }));
  // Initial states: a constant is copied in now, a computed one read as it is, a missing one
  // (beside a given one) zeros.
  auto state_source = [&](size_t i, bool given) {
    if (!given) return program.constant(zeros(state), state, state);
    const ValueId v = input(i);
    if (sub.value(v).is_constant()) return program.constant(sub.value(v).constant, state, state);
    return values.view(v, state);
  };
  if (has_h0) args.emplace_back(DNNL_ARG_SRC_ITER, state_source(ops::kRecInitialH, h0_given));
  if (has_c0) args.emplace_back(DNNL_ARG_SRC_ITER_C, state_source(ops::kRecInitialC, c0_given));

  // Y is [T, D, N, H]; oneDNN writes [T, N, D*H]: the same bytes for one direction, and for
  // two a copy step interleaves them.
  const ValueId y = output(0);
  const bool y_direct = y != kNoValue && r.directions == 1;
  const dnnl::memory layer_out =
      y_direct ? values.destination(y, dst_layer) : program.rewritten_buffer(dst_layer);
  args.emplace_back(DNNL_ARG_DST_LAYER, layer_out);
  auto state_out = [&](bool wanted, size_t i) {
    return wanted ? values.destination(output(i), state) : program.rewritten_buffer(state);
  };
  dnnl::memory h_out, c_out;
  if (want_h) args.emplace_back(DNNL_ARG_DST_ITER, h_out = state_out(h_wanted, 1));
  if (want_c) args.emplace_back(DNNL_ARG_DST_ITER_C, c_out = state_out(c_wanted, 2));
  if (one_thread) {
    if (pd->scratchpad_desc().get_size() > 0)
      args.emplace_back(DNNL_ARG_SCRATCHPAD, program.buffer(pd->scratchpad_desc()));
    program.add_custom(
        "collage:recurrent_one_thread",
        [primitive, stream = dnnl::stream(cpu_engine())](const dnnl_exec_arg_t* a, int count) {
          return execute_on_one_thread(primitive, stream, a, count);
        },
        std::move(args), dnnl::primitive::kind::rnn);
  } else {
    program.add(primitive, *pd, std::move(args));
  }
  if (y_direct) values.produced(y, layer_out);
  if (h_wanted) values.produced(output(1), h_out);
  if (c_wanted) values.produced(output(2), c_out);
  if (y == kNoValue || y_direct) return;

  const dnnl::memory y_mem =
      values.destination(y, plain_md({r.seq, r.directions, r.batch, r.hidden}));
  const int64_t rows = r.seq * r.batch, h = r.hidden, batch = r.batch, dirs = r.directions;
  program.add_custom(
      "collage:recurrent_directions",
      [rows, h, batch, dirs](const dnnl_exec_arg_t* a, int count) {
        const float* src = custom_step_data(a, count, DNNL_ARG_SRC);
        float* dst = custom_step_data(a, count, DNNL_ARG_DST);
        for (int64_t row = 0; row < rows; ++row) {  // row = t * batch + b
          const int64_t t = row / batch, b = row % batch;
          for (int64_t d = 0; d < dirs; ++d)
            std::memcpy(dst + ((t * dirs + d) * batch + b) * h, src + (row * dirs + d) * h,
                        sizeof(float) * h);
        }
        return dnnl_success;
      },
      {{DNNL_ARG_SRC, layer_out}, {DNNL_ARG_DST, y_mem}}, dnnl::primitive::kind::reorder);
  values.produced(y, y_mem);
}

}  // namespace collage::onednn
