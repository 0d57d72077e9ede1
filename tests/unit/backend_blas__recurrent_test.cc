// RNN, GRU and LSTM over one sequence on OpenBLAS (recurrent_kernel.h): random cells,
// directions and sizes, constant and computed weights, with and without bias, initial states
// and peepholes, on one thread (the directions one after another) and two (a bidirectional
// node's directions at once): equal to the reference kernel, the node on blas in a session.
// What the kernel does not compute (several sequences, clip, other functions, sequence_lens,
// layout 1) is refused, and the session leaves it to the reference.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/blas/recurrent_kernel.h"
#include "collage/backend.h"
#include "collage/pattern.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "recurrent_test_util.h"

namespace collage {
namespace {

using testing::recurrent_graph;
using testing::RecurrentCase;

TEST(BlasRecurrent, RandomCellsOfOneSequenceLikeReference) {
  Backend& blas = BackendRegistry::global().get("blas");
  for (const RecurrentCase& c : testing::random_recurrent_cases(
           testing::random_graph_count(24), 11, /*batch=*/1, /*rnn_functions=*/false)) {
    SCOPED_TRACE(c.text());
    const Graph g = recurrent_graph(c);
    const NodeId node = 1;  // after the Tanh
    ASSERT_TRUE(blas::recurrent_takes(g, g.node(node)));
    const std::vector<Tensor> inputs = random_inputs(g, static_cast<uint64_t>(c.hidden));
    const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
    for (int threads : {1, 2}) {
      EXPECT_EQ(testing::expect_session_like_reference("blas", g, threads, inputs, want, c.text()),
                (std::vector<NodeId>{0, 2}))
          << threads << " threads: the recurrent node is not on blas";
    }
    // The node alone, every output it has, through the backend's own compile.
    const Graph alone = extract_subgraph(g, {node});
    const std::vector<Tensor> alone_inputs = random_inputs(alone, 5);
    const std::vector<Tensor> alone_want = Session(alone, SessionOptions{}).run(alone_inputs);
    for (int threads : {1, 2}) {
      std::unique_ptr<Kernel> kernel = blas.compile(alone, testing::test_options(threads));
      std::vector<Tensor> got;
      for (ValueId v : alone.outputs) got.emplace_back(DType::kFloat32, alone.value(v).shape);
      kernel->run(alone_inputs, got);
      EXPECT_TRUE(testing::outputs_match(got, alone_want)) << threads << " threads, node alone";
    }
  }
}

TEST(BlasRecurrent, WhatTheKernelDoesNotComputeIsLeftToTheReference) {
  RecurrentCase sequences;
  sequences.batch = 3;
  RecurrentCase clipped;
  clipped.batch = 1;
  clipped.clip = 0.5f;
  RecurrentCase functions;
  functions.batch = 1;
  functions.cell = "GRU";
  functions.activations = {"HardSigmoid", "Softsign"};
  RecurrentCase relu;
  relu.batch = 1;
  relu.cell = "RNN";
  relu.activations = {"Relu"};
  RecurrentCase lengths;
  lengths.sequence_lens = true;
  lengths.batch = 1;
  lengths.seq = 4;
  RecurrentCase batch_major;
  batch_major.batch = 1;
  batch_major.layout = 1;
  for (const RecurrentCase& c : {sequences, clipped, functions, relu, lengths, batch_major}) {
    SCOPED_TRACE(c.text());
    const Graph g = recurrent_graph(c);
    EXPECT_FALSE(blas::recurrent_takes(g, g.node(1)));
    const std::vector<Tensor> inputs = random_inputs(g, 3);
    const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
    EXPECT_EQ(testing::expect_session_like_reference("blas", g, 2, inputs, want, c.text()),
              (std::vector<NodeId>{0, 1, 2}));
  }
}

}  // namespace
}  // namespace collage
