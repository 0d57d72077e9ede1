// The blas backend's compiled kernels against bare cblas_sgemm calls (plus an im2col
// written here for the convolutions) on ResNet-50 and BERT-base shapes: the wrapper's
// overhead is the ratio of the two. Also times a reference (OpenMP) op followed by an
// sgemm, to see whether OpenMP's spinning workers slow OpenBLAS's pthreads down.
//
//   build-blas/bench/bench_blas [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdio>
#include <map>
#include <memory>

#include "backends/reference/reference_backend.h"
#include "bench_util.h"
#include "graph_builder.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::attr_ints;
using testing::GraphBuilder;

struct Compiled {
  Graph graph;
  std::unique_ptr<Kernel> kernel;
  std::vector<Tensor> inputs, outputs;
};

Compiled compile_on(Backend& backend, Graph g) {
  Compiled c;
  c.kernel = backend.compile(g, bench::bench_options());
  c.inputs = random_inputs(g, 1);
  for (ValueId v : g.outputs) c.outputs.emplace_back(g.value(v).dtype, g.value(v).shape);
  c.graph = std::move(g);
  return c;
}

void run_kernel(benchmark::State& state, Compiled& c, double flops) {
  c.kernel->run(c.inputs, c.outputs);  // warm up
  for (auto _ : state) {
    c.kernel->run(c.inputs, c.outputs);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- MatMul shapes (BERT-base).

struct MatMulShape {
  const char* name;
  int64_t batch, m, k, n;
  bool shared_b;  // B is a constant weight shared by every batch
  bool gelu;      // with the bias + GELU epilogue
};

Graph matmul_graph(const MatMulShape& s) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {s.batch, s.m, s.k});
  ValueId w = s.shared_b ? b.random_constant("w", {s.k, s.n}, 0.05f)
                         : b.input("w", DType::kFloat32, {s.batch, s.k, s.n});
  ValueId y = b.add1("MatMul", {x, w});
  if (s.gelu) {
    y = b.add1("Add", {y, b.random_constant("bias", {s.n})});
    ValueId d = b.add1("Div", {y, b.constant("sqrt2", Tensor::scalar<float>(1.4142135f))});
    ValueId p = b.add1("Add", {b.add1("Erf", {d}), b.constant("one", Tensor::scalar<float>(1))});
    y = b.add1("Mul", {b.add1("Mul", {y, p}), b.constant("half", Tensor::scalar<float>(0.5f))});
  }
  b.output(y);
  return b.finish();
}

void bm_matmul_kernel(benchmark::State& state, MatMulShape s) {
  Compiled c = compile_on(BackendRegistry::global().get("blas"), matmul_graph(s));
  run_kernel(state, c, 2.0 * s.batch * s.m * s.n * s.k);
}

void bm_matmul_direct(benchmark::State& state, MatMulShape s) {
  std::vector<float> a(s.batch * s.m * s.k, 0.5f), b((s.shared_b ? 1 : s.batch) * s.k * s.n, 0.25f),
      c(s.batch * s.m * s.n);
  auto once = [&] {
    if (s.shared_b) {  // what the backend does too: one call over all rows
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.batch * s.m, s.n, s.k, 1.0f,
                  a.data(), s.k, b.data(), s.n, 0.0f, c.data(), s.n);
      return;
    }
    for (int64_t i = 0; i < s.batch; ++i)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, s.n, s.k, 1.0f,
                  a.data() + i * s.m * s.k, s.k, b.data() + i * s.k * s.n, s.n, 0.0f,
                  c.data() + i * s.m * s.n, s.n);
  };
  once();
  for (auto _ : state) {
    once();
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * s.batch * s.m * s.n * s.k,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// ---- Conv shapes (ResNet-50), 2-D, square kernels, symmetric pads.

struct ConvShape {
  const char* name;
  int64_t c, h, w, m, k, stride, pad;
  bool relu;
  int64_t out_h() const { return (h + 2 * pad - k) / stride + 1; }
  int64_t out_w() const { return (w + 2 * pad - k) / stride + 1; }
  double flops() const { return 2.0 * m * c * k * k * out_h() * out_w(); }
};

Graph conv_graph(const ConvShape& s) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, s.c, s.h, s.w});
  ValueId y = b.add1(
      "Conv",
      {x, b.random_constant("w", {s.m, s.c, s.k, s.k}, 0.05f), b.random_constant("b", {s.m})},
      {{"strides", attr_ints({s.stride, s.stride})},
       {"pads", attr_ints({s.pad, s.pad, s.pad, s.pad})}});
  if (s.relu) y = b.add1("Relu", {y});
  b.output(y);
  return b.finish();
}

void bm_conv_kernel(benchmark::State& state, ConvShape s) {
  Compiled c = compile_on(BackendRegistry::global().get("blas"), conv_graph(s));
  run_kernel(state, c, s.flops());
}

// The plain version: a straightforward single-threaded im2col, then one sgemm; no bias.
void bm_conv_direct(benchmark::State& state, ConvShape s) {
  const int64_t oh = s.out_h(), ow = s.out_w(), rows = s.c * s.k * s.k;
  const bool pointwise = s.k == 1 && s.stride == 1 && s.pad == 0;
  std::vector<float> x(s.c * s.h * s.w, 0.5f), w(s.m * rows, 0.25f), y(s.m * oh * ow);
  std::vector<float> col(pointwise ? 0 : rows * oh * ow, 0.0f);
  auto once = [&] {
    if (!pointwise) {
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t ch = r / (s.k * s.k), ky = r / s.k % s.k, kx = r % s.k;
        float* dst = col.data() + r * oh * ow;
        for (int64_t oy = 0; oy < oh; ++oy) {
          const int64_t iy = oy * s.stride + ky - s.pad;
          for (int64_t ox = 0; ox < ow; ++ox) {
            const int64_t ix = ox * s.stride + kx - s.pad;
            dst[oy * ow + ox] =
                iy >= 0 && iy < s.h && ix >= 0 && ix < s.w ? x[(ch * s.h + iy) * s.w + ix] : 0.0f;
          }
        }
      }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, oh * ow, rows, 1.0f, w.data(), rows,
                pointwise ? x.data() : col.data(), oh * ow, 0.0f, y.data(), oh * ow);
  };
  once();
  for (auto _ : state) {
    once();
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(s.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- OpenMP / OpenBLAS interplay: a reference Conv (an OpenMP parallel loop) then a
// blas MatMul, alone and back to back.

void bm_interplay(benchmark::State& state, int which) {
  ConvShape small{"", 16, 28, 28, 16, 3, 1, 1, false};
  Graph ref_graph = conv_graph(small);
  Compiled ref;
  ref.kernel = compile_reference_node(ref_graph, 0);
  // A node kernel takes every input of its node, constants included.
  const Tensor x = random_inputs(ref_graph, 1)[0];
  for (ValueId v : ref_graph.node(0).inputs)
    ref.inputs.push_back(ref_graph.value(v).is_constant() ? ref_graph.value(v).constant : x);
  for (ValueId v : ref_graph.outputs)
    ref.outputs.emplace_back(ref_graph.value(v).dtype, ref_graph.value(v).shape);
  Compiled mm = compile_on(BackendRegistry::global().get("blas"),
                           matmul_graph({"", 1, 128, 768, 768, true, false}));
  for (auto _ : state) {
    if (which & 1) ref.kernel->run(ref.inputs, ref.outputs);
    if (which & 2) mm.kernel->run(mm.inputs, mm.outputs);
    benchmark::ClobberMemory();
  }
}

// Records each benchmark's time so the kernel/direct ratios can be printed at the end.
class RatioReporter : public bench::TimeKeepingReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      auto it = run.counters.find("GFLOP/s");
      if (run.run_type == Run::RT_Iteration && it != run.counters.end())
        gflops_[run.run_name.function_name] = it->second.value;
    }
    TimeKeepingReporter::ReportRuns(runs);
  }
  void print_ratios(const std::vector<std::string>& names) const {
    std::printf("\n%-34s %12s %12s %8s\n", "shape", "kernel GF/s", "direct GF/s", "ratio");
    for (const std::string& name : names) {
      const double k = seconds("kernel/" + name), d = seconds("direct/" + name);
      if (k <= 0 || d <= 0) continue;
      std::printf("%-34s %12.1f %12.1f %8.3f\n", name.c_str(), gflops_.at("kernel/" + name),
                  gflops_.at("direct/" + name), d / k);
    }
    auto us = [&](const char* n) { return std::max(0.0, seconds(n) * 1e6); };
    if (us("interplay/ref_then_blas") > 0)
      std::printf("\ninterplay: ref %.1f us + blas %.1f us = %.1f us; back to back %.1f us\n",
                  us("interplay/ref_only"), us("interplay/blas_only"),
                  us("interplay/ref_only") + us("interplay/blas_only"),
                  us("interplay/ref_then_blas"));
  }

 private:
  std::map<std::string, double> gflops_;
};

}  // namespace
}  // namespace collage

int main(int argc, char** argv) {
  using namespace collage;
  const std::vector<MatMulShape> matmuls = {
      {"bert_qkv_128x768x768", 1, 128, 768, 768, true, false},
      {"bert_ffn1_128x768x3072", 1, 128, 768, 3072, true, false},
      {"bert_ffn2_128x3072x768", 1, 128, 3072, 768, true, false},
      {"bert_scores_12x128x64x128", 12, 128, 64, 128, false, false},
      {"bert_ffn1_bias_gelu", 1, 128, 768, 3072, true, true},
  };
  const std::vector<ConvShape> convs = {
      {"r50_3x3_64_56", 64, 56, 56, 64, 3, 1, 1, false},
      {"r50_1x1_256to64_56", 256, 56, 56, 64, 1, 1, 0, false},
      {"r50_1x1_64to256_56", 64, 56, 56, 256, 1, 1, 0, false},
      {"r50_1x1_s2_512to1024_28", 512, 28, 28, 1024, 1, 2, 0, false},
      {"r50_stem_7x7_s2_224", 3, 224, 224, 64, 7, 2, 3, false},
      {"r50_3x3_64_56_bias_relu", 64, 56, 56, 64, 3, 1, 1, true},
  };
  std::vector<std::string> names;
  for (const MatMulShape& s : matmuls) {
    names.push_back(s.name);
    benchmark::RegisterBenchmark((std::string("kernel/") + s.name).c_str(), bm_matmul_kernel, s)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("direct/") + s.name).c_str(), bm_matmul_direct, s)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
  for (const ConvShape& s : convs) {
    names.push_back(s.name);
    benchmark::RegisterBenchmark((std::string("kernel/") + s.name).c_str(), bm_conv_kernel, s)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("direct/") + s.name).c_str(), bm_conv_direct, s)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark("interplay/ref_only", bm_interplay, 1)
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("interplay/blas_only", bm_interplay, 2)
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("interplay/ref_then_blas", bm_interplay, 3)
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();

  bench::set_threads_from_env("BLAS_BENCH_THREADS", 0);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  for (const std::string& line : BackendRegistry::global().get("blas").details())
    std::printf("blas: %s\n", line.c_str());
  std::printf("threads: %d\n", bench::bench_threads());
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios(names);
  benchmark::Shutdown();
  return 0;
}
