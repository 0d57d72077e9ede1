// RNN, GRU and LSTM as oneDNN's RNN primitives (recurrent_kernel.h): random cells, directions
// and sizes, constant weights (a model's) and computed ones (the ONNX tests feed them as
// inputs), with and without bias, initial states and peepholes, each built for one thread and
// for all: equal to the reference kernel (itself checked against ONNX's expected outputs by the
// conformance suite and against PyTorch by models_reference's crnn), no node left to the
// fallback on onednn or onednn-graph, the recurrence a step of the region between two ops.
// What oneDNN's cells do not compute (clip, other functions, sequence_lens, layout 1) is left
// to the reference, and still computed right.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/recurrent_kernel.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_f;
using testing::attr_i;
using testing::attr_s;
using testing::attr_strings;
using testing::GraphBuilder;

struct Case {
  std::string cell = "LSTM";
  std::string direction = "forward";
  int64_t seq = 5, batch = 2, input = 6, hidden = 8;
  bool bias = true, initial_states = false, peephole = false, computed_weights = false;
  int64_t linear_before_reset = 0;
  std::vector<std::string> activations;  // empty: the defaults
  float clip = 0;                        // 0: none
  bool sequence_lens = false;            // lengths seq, seq - 1, ... (the cells refuse them)
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
Graph recurrent_graph(const Case& c) {
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
      lens[i] = static_cast<int32_t>(c.full_lengths ? c.seq : c.seq - i % c.seq);
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

std::vector<Case> random_cases(int count, unsigned seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  // First the ONNX tests' GRU shapes: one step of 3 sequences, where oneDNN packs the weights
  // (a timing on zeroed packed weights divided by zero there).
  Case one_step;
  one_step.cell = "GRU";
  one_step.seq = 1;
  one_step.batch = 3;
  one_step.input = 2;
  one_step.hidden = 5;
  one_step.bias = false;
  Case one_step_bias = one_step;
  one_step_bias.input = one_step_bias.hidden = 3;
  one_step_bias.bias = true;
  std::vector<Case> cases = {one_step, one_step_bias};
  for (int i = 0; i < count; ++i) {
    Case c;
    c.cell = std::vector<std::string>{"RNN", "GRU", "LSTM"}[i % 3];
    c.direction = std::vector<std::string>{"forward", "reverse", "bidirectional"}[pick(3)];
    c.seq = 1 + pick(9);
    c.batch = 1 + pick(4);
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
      c.activations.assign(c.direction == "bidirectional" ? 2 : 1, f);
    }
    cases.push_back(c);
  }
  return cases;
}

TEST(OnednnRecurrent, RandomCellsLikeReferenceOnEveryThreadBuild) {
  for (const Case& c : random_cases(testing::random_graph_count(18), 7)) {
    SCOPED_TRACE(c.text());
    const Graph g = recurrent_graph(c);
    const NodeId node = 1;  // after the Tanh
    ASSERT_TRUE(onednn::recurrent_takes(g, g.node(node)));
    const std::vector<Tensor> inputs = random_inputs(g, static_cast<uint64_t>(c.hidden));
    const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
    // Measured at compile (the default), then each build forced.
    for (const char* threads : {"measured", "one", "all"}) {
      std::optional<testing::ScopedEnv> build;
      if (std::string(threads) != "measured") build.emplace("COLLAGE_ONEDNN_RNN_THREADS", threads);
      std::unique_ptr<Kernel> kernel = testing::onednn_graph().compile(g, testing::test_options(2));
      const testing::ProgramSteps steps = testing::steps_of(*kernel);
      EXPECT_EQ(steps.count(dnnl::primitive::kind::rnn), 1) << threads;
      std::vector<Tensor> got;
      for (ValueId v : g.outputs) got.emplace_back(DType::kFloat32, g.value(v).shape);
      kernel->run(inputs, got);
      EXPECT_TRUE(testing::outputs_match(got, want)) << threads;
      for (const char* backend : {"onednn-graph", "onednn"})
        EXPECT_TRUE(
            testing::expect_session_like_reference(backend, g, 2, inputs, want, c.text()).empty())
            << backend << ", " << threads;
    }
  }
}

TEST(OnednnRecurrent, WhatTheCellsDoNotComputeIsLeftToTheReference) {
  Case clipped;
  clipped.clip = 0.5f;
  Case functions;
  functions.cell = "GRU";
  functions.activations = {"HardSigmoid", "Softsign"};
  Case lengths;
  lengths.sequence_lens = true;
  lengths.batch = 3;
  Case batch_major;
  batch_major.cell = "RNN";
  batch_major.layout = 1;
  Case elu;
  elu.cell = "RNN";
  elu.activations = {"Elu"};
  for (const Case& c : {clipped, functions, lengths, batch_major, elu}) {
    SCOPED_TRACE(c.text());
    const Graph g = recurrent_graph(c);
    EXPECT_FALSE(onednn::recurrent_takes(g, g.node(1)));
    const std::vector<Tensor> inputs = random_inputs(g, 3);
    const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
    for (const char* backend : {"onednn-graph", "onednn"})
      EXPECT_EQ(testing::expect_session_like_reference(backend, g, 2, inputs, want, c.text()),
                std::vector<NodeId>{1})
          << backend;
  }
}

}  // namespace
}  // namespace collage
