// Random RNN, GRU and LSTM nodes for the backends' recurrent tests: a case's cell, direction,
// sizes and optional inputs, and its graph (a Tanh, the node, a Relu of Y, so the node sits
// between two other ops), on the reference kernel's reading of the spec (ops/recurrent.h).
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "graph_builder.h"
#include "op_test_util.h"

namespace collage::testing {

struct RecurrentCase {
  std::string cell = "LSTM";
  std::string direction = "forward";
  int64_t seq = 5, batch = 2, input = 6, hidden = 8;
  bool bias = true, initial_states = false, peephole = false, computed_weights = false;
  int64_t linear_before_reset = 0;
  std::vector<std::string> activations;  // empty: the defaults
  float clip = 0;                        // 0: none
  bool sequence_lens = false;            // lengths seq - 1, seq - 2, ..., wrapping to seq (refused)
  bool full_lengths = false;             // sequence_lens of every sequence's full length (taken)
  int64_t layout = 0;

  std::string text() const {
    return fmt::format(
        "{} {} T{} N{} I{} H{}{}{}{}{}{}{}{}{}", cell, direction, seq, batch, input, hidden,
        bias ? " bias" : "", initial_states ? " states" : "", peephole ? " peephole" : "",
        computed_weights ? " computed-weights" : "", linear_before_reset ? " lbr" : "",
        activations.empty() ? "" : " " + fmt::format("{}", fmt::join(activations, "/")),
        clip > 0 ? " clip" : "",
        sequence_lens  ? " seq-lens"
        : full_lengths ? " full-lengths"
                       : "");
  }
};

// A Tanh, the recurrent node, and a Relu of Y: the node sits between two region steps.
inline Graph recurrent_graph(const RecurrentCase& c) {
  GraphBuilder b(14);
  const int64_t dirs = c.direction == "bidirectional" ? 2 : 1;
  const int64_t gates = c.cell == "LSTM" ? 4 : c.cell == "GRU" ? 3 : 1;
  const Shape x_shape = c.layout ? Shape{c.batch, c.seq, c.input} : Shape{c.seq, c.batch, c.input};
  const Shape state = c.layout ? Shape{c.batch, dirs, c.hidden} : Shape{dirs, c.batch, c.hidden};
  const ValueId x = b.add1("Tanh", {b.input("x", DType::kFloat32, x_shape)});
  auto weights = [&](const std::string& name, Shape shape) {
    return c.computed_weights ? b.input(name, DType::kFloat32, std::move(shape))
                              : b.random_constant(name, std::move(shape), 0.4f);
  };
  std::vector<ValueId> in = {x, weights("w", {dirs, gates * c.hidden, c.input}),
                             weights("r", {dirs, gates * c.hidden, c.hidden})};
  in.push_back(c.bias ? weights("b", {dirs, 2 * gates * c.hidden}) : kNoValue);
  if (c.sequence_lens || c.full_lengths) {
    std::vector<int32_t> lens(c.batch);
    for (int64_t i = 0; i < c.batch; ++i)
      lens[i] = static_cast<int32_t>(c.full_lengths ? c.seq : c.seq - (i + 1) % c.seq);
    in.push_back(b.constant("lens", Tensor::from_vector<int32_t>({c.batch}, lens)));
  } else {
    in.push_back(kNoValue);
  }
  in.push_back(c.initial_states ? b.input("h0", DType::kFloat32, state) : kNoValue);
  if (c.cell == "LSTM") {
    in.push_back(c.initial_states ? b.input("c0", DType::kFloat32, state) : kNoValue);
    in.push_back(c.peephole ? weights("p", {dirs, 3 * c.hidden}) : kNoValue);
  }
  while (!in.empty() && in.back() == kNoValue) in.pop_back();
  std::map<std::string, Attribute> attrs = {{"hidden_size", attr_i(c.hidden)},
                                            {"direction", attr_s(c.direction)}};
  if (c.cell == "GRU") attrs["linear_before_reset"] = attr_i(c.linear_before_reset);
  if (!c.activations.empty()) attrs["activations"] = attr_strings(c.activations);
  if (c.clip > 0) attrs["clip"] = attr_f(c.clip);
  if (c.layout) attrs["layout"] = attr_i(c.layout);
  const std::vector<ValueId> out = b.add(c.cell, in, attrs, c.cell == "LSTM" ? 3 : 2);
  b.output(b.add1("Relu", {out[0]}));
  for (size_t i = 1; i < out.size(); ++i) b.output(out[i]);
  return b.finish();
}

// `count` random cases: every cell in turn, random directions, sizes, bias, initial states,
// peepholes, computed weights, full-length sequence_lens and GRU's linear_before_reset.
// `batch` 0 draws 1 to 4 sequences, else every case has that many; RNN cells draw one of Tanh,
// Relu and Sigmoid when `rnn_functions`, else keep the default Tanh.
inline std::vector<RecurrentCase> random_recurrent_cases(int count, unsigned seed,
                                                         int64_t batch = 0,
                                                         bool rnn_functions = true) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  std::vector<RecurrentCase> cases;
  for (int i = 0; i < count; ++i) {
    RecurrentCase c;
    c.cell = std::vector<std::string>{"RNN", "GRU", "LSTM"}[i % 3];
    c.direction = std::vector<std::string>{"forward", "reverse", "bidirectional"}[pick(3)];
    c.seq = 1 + pick(9);
    c.batch = 1 + pick(4);
    if (batch > 0) c.batch = batch;
    c.input = 1 + pick(20);
    c.hidden = 1 + pick(40);
    c.bias = pick(4) != 0;
    c.initial_states = pick(2) != 0;
    c.peephole = c.cell == "LSTM" && pick(2) != 0;
    c.computed_weights = pick(3) == 0;
    c.full_lengths = pick(4) == 0;
    c.linear_before_reset = c.cell == "GRU" ? pick(2) : 0;
    if (c.cell == "RNN") {
      const std::string f = std::vector<std::string>{"Tanh", "Relu", "Sigmoid"}[pick(3)];
      if (rnn_functions) c.activations.assign(c.direction == "bidirectional" ? 2 : 1, f);
    }
    cases.push_back(c);
  }
  return cases;
}

}  // namespace collage::testing
