// The torch backend's 3-D convolutions against onednn's, both through collage's compile
// path (Backend::compile + Kernel::run, plain NCDHW at the boundary): ResNet3D-50's conv
// shapes (16x224x224 clips: 8x56x56 after the stem). Each case runs as "torch/..." and
// "onednn/..."; a table of GFLOP/s and the torch/onednn time ratio is printed at the end.
//
// Threads: TORCH_BENCH_THREADS (default 1, steadier on a shared machine; 0 = all cores).
#include <benchmark/benchmark.h>

#include <cstdio>
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

using testing::attr_ints;
using testing::GraphBuilder;

struct Conv3dCase {
  const char* name;
  int64_t c, d, h, w, m, k, stride, pad;
};

const Conv3dCase kConvs[] = {
    {"r3d50_3x3x3_64to64_8x56x56", 64, 8, 56, 56, 64, 3, 1, 1},
    {"r3d50_1x1x1_256to64_8x56x56", 256, 8, 56, 56, 64, 1, 1, 0},
    {"r3d50_3x3x3_128to128_4x28x28", 128, 4, 28, 28, 128, 3, 1, 1},
    {"r3d50_3x3x3_256to256_2x14x14", 256, 2, 14, 14, 256, 3, 1, 1},
    {"r3d50_3x3x3s2_128to128_8x56x56", 128, 8, 56, 56, 128, 3, 2, 1},
};

int64_t out_size(int64_t in, const Conv3dCase& c) {
  return (in + 2 * c.pad - c.k) / c.stride + 1;
}

double conv_flops(const Conv3dCase& c) {
  return 2.0 * c.m * c.c * c.k * c.k * c.k * out_size(c.d, c) * out_size(c.h, c) * out_size(c.w, c);
}

Graph conv_graph(const Conv3dCase& c) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, c.c, c.d, c.h, c.w});
  const int64_t p = c.pad, s = c.stride;
  ValueId y = b.add1(
      "Conv",
      {x, b.random_constant("w", {c.m, c.c, c.k, c.k, c.k}, 0.05f), b.random_constant("b", {c.m})},
      {{"strides", attr_ints({s, s, s})}, {"pads", attr_ints({p, p, p, p, p, p})}});
  b.output(b.add1("Relu", {y}));
  return b.finish();
}

void BM_Conv3d(benchmark::State& state, const char* backend, Conv3dCase c) {
  const Graph g = conv_graph(c);
  std::unique_ptr<Kernel> kernel =
      BackendRegistry::global().get(backend).compile(g, collage::bench::bench_options());
  std::vector<Tensor> inputs = random_inputs(g, 1), outputs;
  for (ValueId v : g.outputs) outputs.emplace_back(g.value(v).dtype, g.value(v).shape);
  kernel->run(inputs, outputs);  // warm-up
  for (auto _ : state) kernel->run(inputs, outputs);
  state.counters["GFLOP/s"] =
      benchmark::Counter(conv_flops(c) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

class RatioReporter : public bench::TimeKeepingReporter {
 public:
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n%-34s %12s %12s %8s\n", "case (GFLOP/s)", "torch", "onednn", "t/o time");
    for (const Conv3dCase& c : kConvs) {
      const double t = seconds(std::string("torch/") + c.name);
      const double o = seconds(std::string("onednn/") + c.name);
      if (t <= 0 || o <= 0) continue;
      const double gflop = conv_flops(c) * 1e-9;
      std::printf("%-34s %12.1f %12.1f %8.3f\n", c.name, gflop / t, gflop / o, t / o);
    }
  }
};

}  // namespace
}  // namespace collage

int main(int argc, char** argv) {
  collage::bench::set_threads_from_env("TORCH_BENCH_THREADS");
  for (const auto& c : collage::kConvs)
    for (const char* backend : {"torch", "onednn"}) {
      if (!collage::BackendRegistry::global().find(backend)) continue;
      benchmark::RegisterBenchmark((std::string(backend) + "/" + c.name).c_str(),
                                   collage::BM_Conv3d, backend, c)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  benchmark::Initialize(&argc, argv);
  collage::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
