// BERT-base's elementwise and normalisation chains (sequence 128, hidden 768) through the
// same collage path on each backend: Backend::compile of the whole chain as one subgraph,
// then Kernel::run on inputs prepared once. Backends: halide (one generated kernel per
// chain), onednn (its fused primitive for the chain), reference (the ops' own loops, one
// after another). Reports GB/s over the chain's boundary (inputs + outputs, each once) and
// prints a table of onednn/halide and reference/halide time ratios (> 1: halide faster).
//
// Threads: HALIDE_BENCH_THREADS (default 1, steadier on a shared machine; 0 = all cores).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::attr_ints;
using testing::GraphBuilder;

constexpr int64_t kSeq = 128, kHidden = 768, kFfn = 3072, kHeads = 12;

// LayerNorm as torch.onnx exports it (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul,
// Add) on BERT-base's 128x768 activations.
Graph layer_norm_graph() {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, kSeq, kHidden});
  b.output(testing::decomposed_layer_norm(b, x, kHidden, 1e-12f));
  return b.finish();
}

// GELU as exported: x * (1 + erf(x / sqrt 2)) * 0.5, on the FFN's 128x3072 activations.
Graph gelu_graph() {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {kSeq, kFfn});
  ValueId d = b.add1("Div", {x, b.constant("sqrt2", Tensor::scalar(1.4142135f))});
  ValueId one = b.add1("Add", {b.add1("Erf", {d}), b.constant("one", Tensor::scalar(1.0f))});
  ValueId m = b.add1("Mul", {x, one});
  b.output(b.add1("Mul", {m, b.constant("half", Tensor::scalar(0.5f))}));
  return b.finish();
}

// The attention probabilities: Softmax over the last axis of 12x128x128 scores.
Graph softmax_graph() {
  GraphBuilder b;
  ValueId x = b.input("scores", DType::kFloat32, {1, kHeads, kSeq, kSeq});
  b.output(b.add1("Softmax", {x}, {{"axis", attr_i(-1)}}));
  return b.finish();
}

// The output projection's epilogue: + bias, + residual.
Graph bias_residual_graph() {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, kSeq, kHidden});
  ValueId r = b.input("residual", DType::kFloat32, {1, kSeq, kHidden});
  ValueId y = b.add1("Add", {x, b.random_constant("bias", {kHidden})});
  b.output(b.add1("Add", {y, r}));
  return b.finish();
}

struct Case {
  const char* name;
  Graph (*make)();
};

const Case kCases[] = {
    {"layernorm_1x128x768", layer_norm_graph},
    {"gelu_128x3072", gelu_graph},
    {"softmax_12x128x128", softmax_graph},
    {"bias_residual_1x128x768", bias_residual_graph},
};

double boundary_bytes(const Graph& g) {
  double bytes = 0;
  for (ValueId v : g.inputs) bytes += 4.0 * shape_numel(g.value(v).shape);
  for (ValueId v : g.outputs) bytes += 4.0 * shape_numel(g.value(v).shape);
  return bytes;
}

void BM_Chain(benchmark::State& state, const Case* c, const char* backend_name) {
  Graph g = c->make();
  Backend& backend = BackendRegistry::global().get(backend_name);
  std::unique_ptr<Kernel> kernel;
  try {
    kernel = backend.compile(g, collage::bench::bench_options());
  } catch (const Error& e) {
    state.SkipWithError(e.what());  // reported as an error row, never as a time
    return;
  }
  std::vector<Tensor> inputs = random_inputs(g, 1), outputs;
  for (ValueId v : g.outputs) outputs.emplace_back(g.value(v).dtype, g.value(v).shape);
  kernel->run(inputs, outputs);  // warm-up: first touches, thread pool start
  for (auto _ : state) kernel->run(inputs, outputs);
  state.counters["GB/s"] =
      benchmark::Counter(boundary_bytes(g) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

const char* const kBackends[] = {"halide", "onednn", "reference"};

// Console output plus a closing table of time ratios against halide.
class RatioReporter : public bench::TimeKeepingReporter {
 public:
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n%-26s %11s %11s %11s %14s %17s\n", "case (us)", "halide", "onednn", "reference",
                "onednn/halide", "reference/halide");
    for (const Case& c : kCases) {
      auto get = [&](const char* b) { return seconds(std::string(b) + "/" + c.name) * 1e6; };
      const double h = get("halide"), o = get("onednn"), r = get("reference");
      auto cell = [](double v) { return v < 0 ? std::string("n/a") : fmt::format("{:.2f}", v); };
      auto ratio = [&](double v) {
        return v < 0 || h <= 0 ? std::string("n/a") : fmt::format("{:.2f}", v / h);
      };
      std::printf("%-26s %11s %11s %11s %14s %17s\n", c.name, cell(h).c_str(), cell(o).c_str(),
                  cell(r).c_str(), ratio(o).c_str(), ratio(r).c_str());
    }
  }
};

}  // namespace
}  // namespace collage

int main(int argc, char** argv) {
  collage::bench::set_threads_from_env("HALIDE_BENCH_THREADS");
  for (const auto& c : collage::kCases)
    for (const char* b : collage::kBackends) {
      if (!collage::BackendRegistry::global().find(b)) continue;
      benchmark::RegisterBenchmark((std::string(b) + "/" + c.name).c_str(), collage::BM_Chain, &c,
                                   b)
          ->Unit(benchmark::kMicrosecond);
    }
  benchmark::Initialize(&argc, argv);
  collage::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
