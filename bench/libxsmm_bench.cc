// The libxsmm backend's kernels against the onednn, blas and xnnpack backends' kernels for
// the same nodes, each through Backend::compile + Kernel::run with the same boundary (plain
// NCHW / row-major in and out, bias + Relu fused where the backend fuses it): what the search
// chooses between. Shapes: ResNet-50's and MobileNetV2's 1x1 convolutions and classifiers.
// A table of per-backend times (us) and onednn/libxsmm ratios is printed at the end.
//
// Threads: LIBXSMM_BENCH_THREADS (default 1, steadier on a shared machine; 0 = all cores).
// With one thread the table reports CPU time (time preempted by other work does not count; shared
// caches still do).
#include <benchmark/benchmark.h>

#include <algorithm>

#include <cstdio>
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
using testing::GraphBuilder;

struct Case {
  const char* name;
  int64_t c, hw, m;  // a 1x1 conv c -> m at hw x hw; hw == 0: a classifier Gemm c -> m
};

const Case kCases[] = {
    {"resnet50_1x1_256to64_56", 256, 56, 64},      {"resnet50_1x1_64to256_56", 64, 56, 256},
    {"resnet50_1x1_512to128_28", 512, 28, 128},    {"resnet50_1x1_128to512_28", 128, 28, 512},
    {"resnet50_1x1_1024to256_14", 1024, 14, 256},  {"resnet50_1x1_256to1024_14", 256, 14, 1024},
    {"resnet50_1x1_2048to512_7", 2048, 7, 512},    {"resnet50_1x1_512to2048_7", 512, 7, 2048},
    {"resnet50_fc_2048to1000", 2048, 0, 1000},     {"mobilenetv2_1x1_16to96_112", 16, 112, 96},
    {"mobilenetv2_1x1_144to24_56", 144, 56, 24},   {"mobilenetv2_1x1_24to144_56", 24, 56, 144},
    {"mobilenetv2_1x1_192to32_28", 192, 28, 32},   {"mobilenetv2_1x1_384to64_14", 384, 14, 64},
    {"mobilenetv2_1x1_96to576_14", 96, 14, 576},   {"mobilenetv2_1x1_960to160_7", 960, 7, 160},
    {"mobilenetv2_1x1_320to1280_7", 320, 7, 1280}, {"mobilenetv2_fc_1280to1000", 1280, 0, 1000},
};

const char* const kBackends[] = {"libxsmm", "onednn", "blas", "xnnpack"};

// Conv 1x1 + bias + Relu (a ResNet / MobileNet expansion), or Gemm + bias (a classifier).
Graph make_graph(const Case& c) {
  GraphBuilder b;
  if (c.hw == 0) {
    ValueId x = b.input("x", DType::kFloat32, {1, c.c});
    b.output(b.add1("Gemm",
                    {x, b.random_constant("w", {c.m, c.c}, 0.05f), b.random_constant("b", {c.m})},
                    {{"transB", attr_i(1)}}));
  } else {
    ValueId x = b.input("x", DType::kFloat32, {1, c.c, c.hw, c.hw});
    b.output(b.add1("Relu", {b.add1("Conv", {x, b.random_constant("w", {c.m, c.c, 1, 1}, 0.05f),
                                             b.random_constant("b", {c.m})})}));
  }
  return b.graph();
}

void BM_Kernel(benchmark::State& state, const Case& c, const std::string& backend_name) {
  Backend* backend = BackendRegistry::global().find(backend_name);
  if (!backend || !backend->available()) {
    state.SkipWithError("backend not built");
    return;
  }
  const Graph g = make_graph(c);
  std::unique_ptr<Kernel> kernel;
  try {
    kernel = backend->compile(g, bench::bench_options());
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  std::vector<Tensor> inputs = random_inputs(g, 1), outputs;
  for (ValueId v : g.outputs) outputs.emplace_back(g.value(v).dtype, g.value(v).shape);
  kernel->run(inputs, outputs);  // warm-up: first touches
  for (auto _ : state) kernel->run(inputs, outputs);
  const double flops = 2.0 * c.c * c.m * (c.hw ? c.hw * c.hw : 1);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

class TableReporter : public bench::TimeKeepingReporter {
 public:
  // One thread: CPU time (robust to other load on the machine); more: wall time.
  // Repeated (--benchmark_repetitions): the fastest repetition, the least disturbed by other
  // work on a shared machine.
  TableReporter() : TimeKeepingReporter(bench::bench_threads() == 1, "min") {}
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n%-32s", "case (us)");
    for (const char* b : kBackends) std::printf(" %10s", b);
    std::printf(" %14s\n", "onednn/libxsmm");
    for (const Case& c : kCases) {
      std::printf("%-32s", c.name);
      for (const char* b : kBackends) {
        const double s = seconds(std::string(b) + "/" + c.name);
        if (s > 0)
          std::printf(" %10.1f", s * 1e6);
        else
          std::printf(" %10s", "-");
      }
      const double x = seconds(std::string("libxsmm/") + c.name),
                   o = seconds(std::string("onednn/") + c.name);
      if (x > 0 && o > 0)
        std::printf(" %14.2f\n", o / x);
      else
        std::printf(" %14s\n", "-");
    }
  }
};

}  // namespace
}  // namespace collage

int main(int argc, char** argv) {
  collage::bench::set_threads_from_env("LIBXSMM_BENCH_THREADS");
  for (const auto& c : collage::kCases)
    for (const char* b : collage::kBackends)
      collage::bench::with_min_statistic(
          benchmark::RegisterBenchmark((std::string(b) + "/" + c.name).c_str(), collage::BM_Kernel,
                                       c, std::string(b))
              ->Unit(benchmark::kMicrosecond));
  collage::TableReporter reporter;
  return collage::bench::run_benchmarks(&argc, argv, reporter);
}
