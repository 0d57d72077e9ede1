// What the onednn backends' variants and fusions are worth, kernel by kernel, through
// Backend::compile + Kernel::run with plain NCHW in and out (what the search measures):
//   winograd/<shape>, direct/<shape>: a ResNet-50 3x3 stride-1 conv + bias + Relu as
//     `onednn/winograd` and as `onednn` (direct); the table adds Winograd's error against
//     the reference on the output's scale (max |diff| / max |reference|).
//   fused/<shape>, separate/<shape>: a MobileNetV2 expansion (1x1 + ReLU6) and depthwise
//     3x3 (+ ReLU6) as ONE onednn kernel (append_dw) and as two onednn kernels;
//     region/<shape>: the same two convs as one onednn-graph region (no plain round trip).
//   se/<shape>, se_split/<shape>: an EfficientNet-B0 squeeze-excitation block (spatial mean,
//     1x1 + SiLU, 1x1 + Sigmoid, Mul) as collage's one step (onednn's squeeze_excitation
//     fusion) and as four onednn kernels; channels-last input (as in a region) for both.
//
// Threads: ONEDNN_BENCH_THREADS (default 1, steadier on a shared machine; 0 = all cores).
// With one thread the table reports CPU time (time preempted by other work does not count; shared
// caches still do).
#include <benchmark/benchmark.h>

#include <algorithm>

#include <cmath>
#include <cstdio>
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

struct Conv3x3 {
  const char* name;
  int64_t c, hw;
};
const Conv3x3 kConvs[] = {
    {"resnet50_3x3_64_56", 64, 56},
    {"resnet50_3x3_128_28", 128, 28},
    {"resnet50_3x3_256_14", 256, 14},
    {"resnet50_3x3_512_7", 512, 7},
};

struct Expansion {
  const char* name;
  int64_t c, m, hw, stride;
};
// MobileNetV2 (224x224) expansion + depthwise pairs.
const Expansion kExpansions[] = {
    {"mbv2_16to96_112_s2", 16, 96, 112, 2}, {"mbv2_24to144_56_s1", 24, 144, 56, 1},
    {"mbv2_24to144_56_s2", 24, 144, 56, 2}, {"mbv2_32to192_28_s1", 32, 192, 28, 1},
    {"mbv2_64to384_14_s1", 64, 384, 14, 1}, {"mbv2_96to576_14_s1", 96, 576, 14, 1},
    {"mbv2_160to960_7_s1", 160, 960, 7, 1}, {"large_16to192_112_s1", 16, 192, 112, 1},
};

struct SqueezeExcitation {
  const char* name;
  int64_t c, hw, reduced;
};
// EfficientNet-B0's blocks (224x224).
const SqueezeExcitation kBlocks[] = {
    {"effb0_32_112", 32, 112, 8},  {"effb0_96_56", 96, 56, 4},    {"effb0_144_56", 144, 56, 6},
    {"effb0_240_28", 240, 28, 10}, {"effb0_480_14", 480, 14, 20}, {"effb0_672_14", 672, 14, 28},
    {"effb0_1152_7", 1152, 7, 48},
};

// Nodes: 0 mean, 1 conv, 2 Sigmoid, 3 Mul (SiLU), 4 conv, 5 Sigmoid, 6 Mul.
Graph squeeze_excitation(const SqueezeExcitation& e) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, e.c, e.hw, e.hw});
  ValueId s = b.add1("GlobalAveragePool", {x});
  ValueId h = b.add1("Conv", {s, b.random_constant("w1", {e.reduced, e.c, 1, 1}, 0.2f),
                              b.random_constant("b1", {e.reduced})});
  h = b.add1("Mul", {h, b.add1("Sigmoid", {h})});
  ValueId g =
      b.add1("Sigmoid", {b.add1("Conv", {h, b.random_constant("w2", {e.c, e.reduced, 1, 1}, 0.2f),
                                         b.random_constant("b2", {e.c})})});
  b.output(b.add1("Mul", {g, x}));
  return b.graph();
}

Graph conv3x3(const Conv3x3& c) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, c.c, c.hw, c.hw});
  b.output(b.add1("Relu", {b.add1("Conv",
                                  {x, b.random_constant("w", {c.c, c.c, 3, 3}, 0.05f),
                                   b.random_constant("b", {c.c})},
                                  {{"pads", attr_ints({1, 1, 1, 1})}})}));
  return b.graph();
}

ValueId relu6(GraphBuilder& b, ValueId v) {
  return b.add1(
      "Clip", {v, b.constant("lo", Tensor::scalar(0.0f)), b.constant("hi", Tensor::scalar(6.0f))});
}

// Nodes: 0 1x1 conv, 1 ReLU6, 2 depthwise conv, 3 ReLU6.
Graph expansion(const Expansion& e) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, e.c, e.hw, e.hw});
  ValueId y = relu6(b, b.add1("Conv", {x, b.random_constant("w1", {e.m, e.c, 1, 1}, 0.2f),
                                       b.random_constant("b1", {e.m})}));
  y = b.add1("Conv",
             {y, b.random_constant("wd", {e.m, 1, 3, 3}, 0.2f), b.random_constant("bd", {e.m})},
             {{"group", attr_i(e.m)},
              {"strides", attr_ints({e.stride, e.stride})},
              {"pads", attr_ints({1, 1, 1, 1})}});
  b.output(relu6(b, y));
  return b.graph();
}

struct Compiled {
  std::vector<std::unique_ptr<Kernel>> kernels;
  std::vector<std::vector<Tensor>> io_in, io_out;
};

// `parts` node sets of `g` compiled on `backend` as `variant`, chained through plain tensors.
bool compile_parts(benchmark::State& state, const Graph& g, const std::string& backend,
                   const std::string& variant, const std::vector<std::vector<NodeId>>& parts,
                   Compiled& out) {
  Backend& b = BackendRegistry::global().get(backend);
  CompileOptions options = bench::bench_options();
  options.variant = variant;
  std::vector<Tensor> values(g.num_values());
  std::vector<Tensor> graph_inputs = random_inputs(g, 1);
  for (size_t i = 0; i < g.inputs.size(); ++i) values[g.inputs[i]] = graph_inputs[i];
  for (const auto& nodes : parts) {
    const Graph sub = extract_subgraph(g, nodes);
    const Boundary bd = boundary_of(g, nodes);
    try {
      out.kernels.push_back(b.compile(sub, options));
    } catch (const Error& e) {
      state.SkipWithError(e.what());
      return false;
    }
    std::vector<Tensor> in, o;
    for (ValueId v : bd.inputs) in.push_back(values[v]);
    for (ValueId v : bd.outputs) {
      values[v] = Tensor(DType::kFloat32, g.value(v).shape);
      o.push_back(values[v]);
    }
    out.io_in.push_back(in);
    out.io_out.push_back(o);
  }
  return true;
}

void run_parts(benchmark::State& state, Compiled& c, double flops) {
  auto once = [&] {
    for (size_t k = 0; k < c.kernels.size(); ++k) c.kernels[k]->run(c.io_in[k], c.io_out[k]);
  };
  once();
  for (auto _ : state) once();
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

std::map<std::string, double>& errors() {
  static std::map<std::string, double> e;
  return e;
}

void BM_Conv(benchmark::State& state, Conv3x3 c, std::string variant) {
  const Graph g = conv3x3(c);
  Compiled k;
  if (!compile_parts(state, g, "onednn", variant, {{0, 1}}, k)) return;
  if (variant == "winograd") {
    // The error on the output's scale, against the reference backend.
    k.kernels[0]->run(k.io_in[0], k.io_out[0]);
    // On the benchmark's thread count: a team of more threads would stay spinning (libgomp)
    // beside the kernel timed next.
    SessionOptions one;
    one.threads = bench::bench_threads();
    Session reference(g, one);
    const Tensor want = reference.run(k.io_in[0])[0];
    double err = 0, scale = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      err =
          std::max(err, std::fabs(double(k.io_out[0][0].data<float>()[i]) - want.data<float>()[i]));
      scale = std::max(scale, std::fabs(double(want.data<float>()[i])));
    }
    errors()[c.name] = err / scale;
  }
  run_parts(state, k, 2.0 * c.c * c.c * 9 * c.hw * c.hw);
}

void BM_Expansion(benchmark::State& state, Expansion e, int how) {
  const Graph g = expansion(e);
  Compiled k;
  const int64_t out = (e.hw - 1) / e.stride + 1;
  const double flops = 2.0 * e.c * e.m * e.hw * e.hw + 2.0 * 9 * e.m * out * out;
  bool ok = how == 0   ? compile_parts(state, g, "onednn", "", {{0, 1, 2, 3}}, k)
            : how == 1 ? compile_parts(state, g, "onednn", "", {{0, 1}, {2, 3}}, k)
                       : compile_parts(state, g, "onednn-graph", "", {{0, 1, 2, 3}}, k);
  if (ok) run_parts(state, k, flops);
}

void BM_SqueezeExcitation(benchmark::State& state, SqueezeExcitation e, bool fused) {
  const Graph g = squeeze_excitation(e);
  Compiled k;
  const bool ok = fused ? compile_parts(state, g, "onednn", "", {{0, 1, 2, 3, 4, 5, 6}}, k)
                        : compile_parts(state, g, "onednn", "", {{0}, {1, 2, 3}, {4, 5}, {6}}, k);
  if (ok) run_parts(state, k, 3.0 * e.c * e.hw * e.hw);
}

class TableReporter : public bench::TimeKeepingReporter {
 public:
  // One thread: CPU time (robust to other load on the machine); more: wall time.
  // Repeated (--benchmark_repetitions): the fastest repetition, the least disturbed by other
  // work on a shared machine.
  TableReporter() : TimeKeepingReporter(bench::bench_threads() == 1, "min") {}
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n%-26s %10s %10s %8s %12s\n", "3x3 conv (us)", "direct", "winograd", "speedup",
                "wino err");
    for (const Conv3x3& c : kConvs) {
      const double d = seconds(std::string("direct/") + c.name),
                   w = seconds(std::string("winograd/") + c.name);
      std::printf("%-26s %10.1f %10.1f %8.2f %12.2g\n", c.name, d * 1e6, w * 1e6,
                  d > 0 && w > 0 ? d / w : 0.0, errors()[c.name]);
    }
    std::printf("\n%-26s %10s %10s %10s %8s\n", "1x1 + dw (us)", "separate", "fused", "region",
                "sep/fused");
    for (const Expansion& e : kExpansions) {
      const double s = seconds(std::string("separate/") + e.name),
                   f = seconds(std::string("fused/") + e.name),
                   r = seconds(std::string("region/") + e.name);
      std::printf("%-26s %10.1f %10.1f %10.1f %8.2f\n", e.name, s * 1e6, f * 1e6, r * 1e6,
                  s > 0 && f > 0 ? s / f : 0.0);
    }
    std::printf("\n%-26s %10s %10s %8s\n", "squeeze-excitation (us)", "split", "one step",
                "speedup");
    for (const SqueezeExcitation& e : kBlocks) {
      const double s = seconds(std::string("se_split/") + e.name),
                   f = seconds(std::string("se/") + e.name);
      std::printf("%-26s %10.1f %10.1f %8.2f\n", e.name, s * 1e6, f * 1e6,
                  s > 0 && f > 0 ? s / f : 0.0);
    }
  }
};

}  // namespace
}  // namespace collage

int main(int argc, char** argv) {
  collage::bench::set_threads_from_env("ONEDNN_BENCH_THREADS");
  for (const auto& c : collage::kConvs)
    for (const char* v : {"", "winograd"})
      collage::bench::with_min_statistic(
          benchmark::RegisterBenchmark((std::string(*v ? v : "direct") + "/" + c.name).c_str(),
                                       collage::BM_Conv, c, std::string(v))
              ->Unit(benchmark::kMicrosecond));
  const char* kHow[] = {"fused", "separate", "region"};
  for (const auto& e : collage::kExpansions)
    for (int how = 0; how < 3; ++how)
      collage::bench::with_min_statistic(
          benchmark::RegisterBenchmark((std::string(kHow[how]) + "/" + e.name).c_str(),
                                       collage::BM_Expansion, e, how)
              ->Unit(benchmark::kMicrosecond));
  for (const auto& e : collage::kBlocks)
    for (bool fused : {false, true})
      collage::bench::with_min_statistic(
          benchmark::RegisterBenchmark((std::string(fused ? "se/" : "se_split/") + e.name).c_str(),
                                       collage::BM_SqueezeExcitation, e, fused)
              ->Unit(benchmark::kMicrosecond));
  collage::TableReporter reporter;
  return collage::bench::run_benchmarks(&argc, argv, reporter);
}
