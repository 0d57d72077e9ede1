// The xnnpack backend's kernels against direct XNNPACK operator calls on the same shapes:
// ResNet-50 / MobileNetV2 convolutions and BERT-base fully-connected layers.
//
//   Kernel/<shape>     collage's `xnnpack` kernel: NCHW in/out, so it pays the
//                      NCHW<->NHWC transposes at its boundary (conv shapes)
//   GraphKernel/<shape> the same op through `xnnpack-graph` (one-node subgraph runtime)
//   Direct/<shape>     xnn_run_operator on NHWC buffers set up once: XNNPACK's own speed
//   Transposes/<shape> just the boundary transposes the conv kernels do
//
// Flags: Google Benchmark's, plus --threads=N (default: every core).
//
// Kernel - Transposes vs Direct isolates what the wrapper itself costs.
#include <benchmark/benchmark.h>
#include <pthreadpool.h>
#include <xnnpack.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/xnnpack/layout.h"
#include "bench_util.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"

namespace {

using collage::DType;
using collage::Graph;
using collage::Shape;
using collage::Tensor;
using collage::testing::attr_i;
using collage::testing::attr_ints;
using collage::testing::GraphBuilder;

struct ConvShape {
  const char* name;
  int64_t n, c, h, w, m, k, stride, pad, groups;
  int64_t oh() const { return (h + 2 * pad - k) / stride + 1; }
  int64_t ow() const { return (w + 2 * pad - k) / stride + 1; }
  double flops() const { return 2.0 * n * m * oh() * ow() * (c / groups) * k * k; }
};

struct FcShape {
  const char* name;
  int64_t m, k, n;
  double flops() const { return 2.0 * m * k * n; }
};

const ConvShape kConvs[] = {
    {"resnet_3x3_64", 1, 64, 56, 56, 64, 3, 1, 1, 1},
    {"resnet_1x1_256to64", 1, 256, 56, 56, 64, 1, 1, 0, 1},
    {"resnet_1x1_64to256", 1, 64, 56, 56, 256, 1, 1, 0, 1},
    {"resnet_stem_7x7s2", 1, 3, 224, 224, 64, 7, 2, 3, 1},
    {"mobilenet_dw3x3_144", 1, 144, 56, 56, 144, 3, 1, 1, 144},
};

const FcShape kFcs[] = {
    {"bert_768x768", 128, 768, 768},
    {"bert_768x3072", 128, 768, 3072},
    {"bert_3072x768", 128, 3072, 768},
};

Graph conv_graph(const ConvShape& s) {
  GraphBuilder b;
  collage::ValueId x = b.input("x", DType::kFloat32, {s.n, s.c, s.h, s.w});
  b.output(b.add1("Conv",
                  {x, b.random_constant("w", {s.m, s.c / s.groups, s.k, s.k}, 0.1f),
                   b.random_constant("b", {s.m})},
                  {{"strides", attr_ints({s.stride, s.stride})},
                   {"pads", attr_ints({s.pad, s.pad, s.pad, s.pad})},
                   {"group", attr_i(s.groups)}}));
  return b.finish();
}

Graph fc_graph(const FcShape& s) {
  GraphBuilder b;
  collage::ValueId a = b.input("a", DType::kFloat32, {s.m, s.k});
  b.output(b.add1("MatMul", {a, b.random_constant("w", {s.k, s.n}, 0.05f)}));
  return b.finish();
}

void set_flops(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void run_collage_kernel(benchmark::State& state, const Graph& graph, const char* backend,
                        double flops) {
  std::unique_ptr<collage::Kernel> kernel = collage::BackendRegistry::global().get(backend).compile(
      graph, collage::bench::bench_options());
  std::vector<Tensor> inputs = collage::random_inputs(graph, 1);
  std::vector<Tensor> outputs;
  for (collage::ValueId v : graph.outputs)
    outputs.emplace_back(graph.value(v).dtype, graph.value(v).shape);
  kernel->run(inputs, outputs);  // warm-up: first setup, page faults
  for (auto _ : state) kernel->run(inputs, outputs);
  set_flops(state, flops);
}

// One pool for the direct calls, sized like the backend's.
pthreadpool_t direct_pool() {
  static pthreadpool_t pool = [] {
    xnn_initialize(nullptr);
    int threads = collage::bench::bench_threads();
    return threads > 1 ? pthreadpool_create(threads) : nullptr;
  }();
  return pool;
}

void check(xnn_status status, const char* what) {
  if (status != xnn_status_success)
    throw std::runtime_error(std::string(what) + " failed: " + std::to_string(status));
}

void direct_conv(benchmark::State& state, const ConvShape& s) {
  pthreadpool_t pool = direct_pool();
  std::vector<float> weights(s.m * (s.c / s.groups) * s.k * s.k, 0.01f), bias(s.m, 0.1f);
  std::vector<float> in(s.n * s.h * s.w * s.c, 0.5f), out(s.n * s.oh() * s.ow() * s.m);
  xnn_operator_t op = nullptr;
  uint32_t p = static_cast<uint32_t>(s.pad);
  check(xnn_create_convolution2d_nhwc_f32(p, p, p, p, s.k, s.k, s.stride, s.stride, 1, 1, s.groups,
                                          s.c / s.groups, s.m / s.groups, s.c, s.m, weights.data(),
                                          bias.data(), -INFINITY, INFINITY, 0, &op),
        "create convolution");
  check(xnn_setup_convolution2d_nhwc_f32(op, s.n, s.h, s.w, in.data(), out.data(), pool),
        "setup convolution");
  check(xnn_run_operator(op, pool), "run");
  for (auto _ : state) xnn_run_operator(op, pool);
  xnn_delete_operator(op);
  set_flops(state, s.flops());
}

void direct_fc(benchmark::State& state, const FcShape& s) {
  pthreadpool_t pool = direct_pool();
  std::vector<float> weights(s.n * s.k, 0.01f), in(s.m * s.k, 0.5f), out(s.m * s.n);
  xnn_operator_t op = nullptr;
  check(xnn_create_fully_connected_nc_f32(s.k, s.n, s.k, s.n, weights.data(), nullptr, -INFINITY,
                                          INFINITY, 0, &op),
        "create fully connected");
  check(xnn_setup_fully_connected_nc_f32(op, s.m, in.data(), out.data(), pool), "setup");
  check(xnn_run_operator(op, pool), "run");
  for (auto _ : state) xnn_run_operator(op, pool);
  xnn_delete_operator(op);
  set_flops(state, s.flops());
}

// The two transposes a conv kernel adds: input NCHW->NHWC, output NHWC->NCHW.
void boundary_transposes(benchmark::State& state, const ConvShape& s) {
  pthreadpool_t pool = direct_pool();
  Shape in_shape = {s.n, s.c, s.h, s.w}, out_shape = {s.n, s.m, s.oh(), s.ow()};
  std::vector<float> in(collage::shape_numel(in_shape), 0.5f), in_nhwc(in.size());
  std::vector<float> out_nhwc(collage::shape_numel(out_shape), 0.5f), out(out_nhwc.size());
  for (auto _ : state) {
    collage::xnnpack::nchw_to_nhwc(in.data(), in_nhwc.data(), in_shape, pool);
    collage::xnnpack::nhwc_to_nchw(out_nhwc.data(), out.data(), out_shape, pool);
  }
  state.SetBytesProcessed(state.iterations() * (in.size() + out.size()) * 2 * sizeof(float));
}

void register_all() {
  for (const ConvShape& s : kConvs) {
    Graph g = conv_graph(s);
    benchmark::RegisterBenchmark(
        (std::string("Kernel/") + s.name).c_str(),
        [g, s](benchmark::State& st) { run_collage_kernel(st, g, "xnnpack", s.flops()); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(
        (std::string("GraphKernel/") + s.name).c_str(),
        [g, s](benchmark::State& st) { run_collage_kernel(st, g, "xnnpack-graph", s.flops()); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark((std::string("Direct/") + s.name).c_str(),
                                 [s](benchmark::State& st) { direct_conv(st, s); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark((std::string("Transposes/") + s.name).c_str(),
                                 [s](benchmark::State& st) { boundary_transposes(st, s); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  for (const FcShape& s : kFcs) {
    Graph g = fc_graph(s);
    benchmark::RegisterBenchmark(
        (std::string("Kernel/") + s.name).c_str(),
        [g, s](benchmark::State& st) { run_collage_kernel(st, g, "xnnpack", s.flops()); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(
        (std::string("GraphKernel/") + s.name).c_str(),
        [g, s](benchmark::State& st) { run_collage_kernel(st, g, "xnnpack-graph", s.flops()); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark((std::string("Direct/") + s.name).c_str(),
                                 [s](benchmark::State& st) { direct_fc(st, s); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  collage::bench::set_bench_threads(0);
  // --threads=N sizes both the backend's pool and the direct calls' pool (default: the
  // process budget, every core). One thread gives stable numbers on a shared machine.
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--threads=", 0) != 0) continue;
    collage::bench::set_bench_threads(std::stoi(arg.substr(10)));
    for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
    --argc;
    break;
  }
  benchmark::Initialize(&argc, argv);
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
