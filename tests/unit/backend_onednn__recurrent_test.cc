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
#include <utility>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/packed_recurrence.h"
#include "backends/onednn/recurrent_kernel.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "onednn_test_util.h"
#include "recurrent_test_util.h"
#include "runtime/threads.h"

namespace collage {
namespace {

using testing::attr_f;
using testing::attr_i;
using testing::attr_s;
using testing::attr_strings;
using testing::GraphBuilder;
using testing::recurrent_graph;
using testing::RecurrentCase;

// The ONNX tests' GRU shapes first: one step of 3 sequences, where oneDNN packs the weights
// (a timing on zeroed packed weights divided by zero there); then random cells.
std::vector<RecurrentCase> random_cases(int count, unsigned seed) {
  RecurrentCase one_step;
  one_step.cell = "GRU";
  one_step.seq = 1;
  one_step.batch = 3;
  one_step.input = 2;
  one_step.hidden = 5;
  one_step.bias = false;
  RecurrentCase one_step_bias = one_step;
  one_step_bias.input = one_step_bias.hidden = 3;
  one_step_bias.bias = true;
  std::vector<RecurrentCase> cases = {one_step, one_step_bias};
  for (const RecurrentCase& c : testing::random_recurrent_cases(count, seed)) cases.push_back(c);
  return cases;
}

TEST(OnednnRecurrent, RandomCellsLikeReferenceOnEveryThreadBuild) {
  for (const RecurrentCase& c : random_cases(testing::random_graph_count(18), 7)) {
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

// One sequence with constant weights is the packed step (packed_recurrence.h): the matmuls
// with packed weights around collage's cell, a direction's hidden units cut in slices of 64
// or more by the threads (up to 300 units: 1 to 3 slices on 1 to 3 threads, uneven ones
// too), run on its team and, in a lane, one slice after another.
TEST(OnednnRecurrent, OneSequenceWithConstantWeightsIsPackedMatmulsLikeReference) {
  std::mt19937 rng(11);
  std::vector<RecurrentCase> cases = testing::random_recurrent_cases(
      testing::random_graph_count(18), 23, /*batch=*/1, /*rnn_functions=*/false);
  for (RecurrentCase& c : cases) c.hidden = 1 + static_cast<int64_t>(rng() % 300);
  // And every cell in slices for sure: one direction of 150 units (2 slices on 2 and 3
  // threads) and a reverse one of 200 (3 uneven slices on 3 threads).
  const std::pair<const char*, int64_t> cells[] = {{"RNN", 0}, {"GRU", 0}, {"GRU", 1}, {"LSTM", 0}};
  for (const auto& [cell, linear_before_reset] : cells) {
    RecurrentCase c;
    c.cell = cell;
    c.batch = 1;
    c.hidden = 150;
    c.initial_states = c.peephole = c.cell == "LSTM";
    c.linear_before_reset = linear_before_reset;
    cases.push_back(c);
    c.direction = "reverse";
    c.hidden = 200;
    cases.push_back(c);
  }
  for (RecurrentCase c : cases) {
    c.computed_weights = false;
    SCOPED_TRACE(c.text());
    const Graph g = recurrent_graph(c);
    ASSERT_TRUE(onednn::packed_recurrence_takes(g, g.node(1)));
    const std::vector<Tensor> inputs = random_inputs(g, static_cast<uint64_t>(c.hidden));
    const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
    for (int threads : {1, 2, 3}) {
      use_threads_on_this_thread(threads);  // a kernel's threads, as the executor sets them
      std::unique_ptr<Kernel> kernel =
          testing::onednn_graph().compile(g, testing::test_options(threads));
      const testing::ProgramSteps steps = testing::steps_of(*kernel);
      EXPECT_EQ(steps.count(std::string(onednn::kPackedRecurrenceStep)), 1) << threads;
      std::vector<Tensor> got;
      for (ValueId v : g.outputs) got.emplace_back(DType::kFloat32, g.value(v).shape);
      kernel->run(inputs, got);
      EXPECT_TRUE(testing::outputs_match(got, want)) << threads << " threads";
      EXPECT_TRUE(testing::outputs_match(testing::run_in_a_lane(*kernel, g, inputs), want))
          << threads << " threads, in a lane";
    }
    use_threads_on_this_thread(2);
    EXPECT_TRUE(
        testing::expect_session_like_reference("onednn", g, 2, inputs, want, c.text()).empty());
  }
}

TEST(OnednnRecurrent, WhatTheCellsDoNotComputeIsLeftToTheReference) {
  RecurrentCase clipped;
  clipped.clip = 0.5f;
  RecurrentCase functions;
  functions.cell = "GRU";
  functions.activations = {"HardSigmoid", "Softsign"};
  RecurrentCase lengths;
  lengths.sequence_lens = true;
  lengths.batch = 3;
  RecurrentCase batch_major;
  batch_major.cell = "RNN";
  batch_major.layout = 1;
  RecurrentCase elu;
  elu.cell = "RNN";
  elu.activations = {"Elu"};
  for (const RecurrentCase& c : {clipped, functions, lengths, batch_major, elu}) {
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
