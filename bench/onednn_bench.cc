// The onednn backend's compiled kernels against direct oneDNN calls with the same shapes
// and the same boundary (plain NCHW / row-major in and out): what the wrapper costs.
// Shapes: ResNet-50's convolutions and BERT-base's matmuls. Each case runs twice,
// "kernel/..." (Backend::compile + Kernel::run) and "direct/..." (hand-written oneDNN:
// weights reordered once, src reorder -> primitive -> dst reorder per iteration); a table
// of kernel/direct time ratios is printed at the end.
//
// Threads: ONEDNN_BENCH_THREADS (default 1, steadier on a shared machine; 0 = all cores).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <dnnl.hpp>
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
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

struct ConvCase {
  const char* name;
  int64_t c, h, w, m, k, stride, pad;
};

const ConvCase kConvs[] = {
    {"resnet50_stem_7x7s2_3to64_224", 3, 224, 224, 64, 7, 2, 3},
    {"resnet50_3x3_64to64_56", 64, 56, 56, 64, 3, 1, 1},
    {"resnet50_1x1_256to64_56", 256, 56, 56, 64, 1, 1, 0},
    {"resnet50_1x1_64to256_56", 64, 56, 56, 256, 1, 1, 0},
    {"resnet50_3x3_128to128_28", 128, 28, 28, 128, 3, 1, 1},
    {"resnet50_1x1s2_512to1024_28", 512, 28, 28, 1024, 1, 2, 0},
    {"resnet50_3x3_256to256_14", 256, 14, 14, 256, 3, 1, 1},
    {"resnet50_3x3_512to512_7", 512, 7, 7, 512, 3, 1, 1},
};

struct MatmulCase {
  const char* name;
  int64_t batch, m, k, n;
  bool const_b;
};

const MatmulCase kMatmuls[] = {
    {"bert_qkv_128x768x768", 1, 128, 768, 768, true},
    {"bert_ffn1_128x768x3072", 1, 128, 768, 3072, true},
    {"bert_ffn2_128x3072x768", 1, 128, 3072, 768, true},
    {"bert_scores_12x128x64x128", 12, 128, 64, 128, false},
};

int64_t out_size(int64_t in, const ConvCase& c) {
  return (in + 2 * c.pad - c.k) / c.stride + 1;
}

double conv_flops(const ConvCase& c) {
  return 2.0 * c.m * out_size(c.h, c) * out_size(c.w, c) * c.c * c.k * c.k;
}

Tensor random_tensor(Shape shape) {
  Tensor t(DType::kFloat32, std::move(shape));
  float* d = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    d[i] = static_cast<float>((i * 7919) % 2001) / 1000.0f - 1.0f;
  return t;
}

void set_flops(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// Runs a compiled kernel over graph inputs/outputs prepared once.
void run_kernel(benchmark::State& state, const Graph& g, double flops) {
  std::unique_ptr<Kernel> kernel =
      BackendRegistry::global().get("onednn").compile(g, collage::bench::bench_options());
  std::vector<Tensor> inputs = random_inputs(g, 1), outputs;
  for (ValueId v : g.outputs) outputs.emplace_back(g.value(v).dtype, g.value(v).shape);
  kernel->run(inputs, outputs);  // warm-up: first touches
  for (auto _ : state) kernel->run(inputs, outputs);
  set_flops(state, flops);
}

void BM_KernelConv(benchmark::State& state, ConvCase c) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, c.c, c.h, c.w});
  b.output(b.add1("Conv",
                  {x, b.random_constant("w", {c.m, c.c, c.k, c.k}), b.random_constant("b", {c.m})},
                  {{"strides", attr_ints({c.stride, c.stride})},
                   {"pads", attr_ints({c.pad, c.pad, c.pad, c.pad})}}));
  run_kernel(state, b.graph(), conv_flops(c));
}

void BM_DirectConv(benchmark::State& state, ConvCase c) {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const int64_t oh = out_size(c.h, c), ow = out_size(c.w, c);
  Tensor x = random_tensor({1, c.c, c.h, c.w}), w = random_tensor({c.m, c.c, c.k, c.k}),
         bias = random_tensor({c.m}), y(DType::kFloat32, {1, c.m, oh, ow});
  dnnl::memory::desc x_plain({1, c.c, c.h, c.w}, dt::f32, tag::nchw),
      y_plain({1, c.m, oh, ow}, dt::f32, tag::nchw),
      w_plain({c.m, c.c, c.k, c.k}, dt::f32, tag::oihw), b_md({c.m}, dt::f32, tag::x);
  auto any = [](const dnnl::memory::desc& d) {
    return dnnl::memory::desc(d.dims(), dt::f32, tag::any);
  };
  dnnl::convolution_forward::primitive_desc pd(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                      dnnl::algorithm::convolution_direct, any(x_plain),
                                      any(w_plain), b_md, any(y_plain), {c.stride, c.stride},
                                      {0, 0}, {c.pad, c.pad}, {c.pad, c.pad}),
      eng);
  dnnl::memory x_user(x_plain, eng, x.raw()), y_user(y_plain, eng, y.raw()),
      w_user(w_plain, eng, w.raw()), b_mem(b_md, eng, bias.raw());
  dnnl::memory w_mem(pd.weights_desc(), eng);
  dnnl::reorder(w_user, w_mem).execute(s, w_user, w_mem);
  const bool reorder_src = pd.src_desc() != x_plain, reorder_dst = pd.dst_desc() != y_plain;
  dnnl::memory x_mem = reorder_src ? dnnl::memory(pd.src_desc(), eng) : x_user;
  dnnl::memory y_mem = reorder_dst ? dnnl::memory(pd.dst_desc(), eng) : y_user;
  dnnl::convolution_forward conv(pd);
  dnnl::reorder to_blocked, to_plain;
  if (reorder_src) to_blocked = dnnl::reorder(x_user, x_mem);
  if (reorder_dst) to_plain = dnnl::reorder(y_mem, y_user);
  auto once = [&] {
    if (reorder_src) to_blocked.execute(s, x_user, x_mem);
    conv.execute(s, {{DNNL_ARG_SRC, x_mem},
                     {DNNL_ARG_WEIGHTS, w_mem},
                     {DNNL_ARG_BIAS, b_mem},
                     {DNNL_ARG_DST, y_mem}});
    if (reorder_dst) to_plain.execute(s, y_mem, y_user);
    s.wait();
  };
  once();
  for (auto _ : state) once();
  set_flops(state, conv_flops(c));
}

double matmul_flops(const MatmulCase& c) {
  return 2.0 * c.batch * c.m * c.k * c.n;
}

Shape a_shape(const MatmulCase& c) {
  return c.batch == 1 ? Shape{c.m, c.k} : Shape{c.batch, c.m, c.k};
}
Shape b_shape(const MatmulCase& c) {
  return c.batch == 1 ? Shape{c.k, c.n} : Shape{c.batch, c.k, c.n};
}
Shape y_shape(const MatmulCase& c) {
  return c.batch == 1 ? Shape{c.m, c.n} : Shape{c.batch, c.m, c.n};
}

void BM_KernelMatmul(benchmark::State& state, MatmulCase c) {
  GraphBuilder b;
  ValueId a = b.input("a", DType::kFloat32, a_shape(c));
  ValueId w =
      c.const_b ? b.random_constant("w", b_shape(c)) : b.input("w", DType::kFloat32, b_shape(c));
  b.output(b.add1("MatMul", {a, w}));
  run_kernel(state, b.graph(), matmul_flops(c));
}

void BM_DirectMatmul(benchmark::State& state, MatmulCase c) {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  Tensor a = random_tensor(a_shape(c)), w = random_tensor(b_shape(c)),
         y(DType::kFloat32, y_shape(c));
  const tag t = c.batch == 1 ? tag::ab : tag::abc;
  dnnl::memory::desc a_md(a_shape(c), dt::f32, t), w_plain(b_shape(c), dt::f32, t),
      y_md(y_shape(c), dt::f32, t);
  dnnl::memory::desc w_md = c.const_b ? dnnl::memory::desc(b_shape(c), dt::f32, tag::any) : w_plain;
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, w_md, y_md), eng);
  dnnl::memory a_mem(a_md, eng, a.raw()), y_mem(y_md, eng, y.raw()), w_user(w_plain, eng, w.raw());
  dnnl::memory w_mem = w_user;
  if (c.const_b && pd.weights_desc() != w_plain) {
    w_mem = dnnl::memory(pd.weights_desc(), eng);
    dnnl::reorder(w_user, w_mem).execute(s, w_user, w_mem);
  }
  dnnl::matmul mm(pd);
  auto once = [&] {
    mm.execute(s, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_DST, y_mem}});
    s.wait();
  };
  once();
  for (auto _ : state) once();
  set_flops(state, matmul_flops(c));
}

// A 64-float Relu: the primitive does ~nothing, so kernel - direct is the wrapper's fixed
// cost per call (handle binding, the C execute call).
void BM_KernelTinyRelu(benchmark::State& state) {
  GraphBuilder b;
  b.output(b.add1("Relu", {b.input("x", DType::kFloat32, {1, 64})}));
  run_kernel(state, b.graph(), 64);
}

void BM_DirectTinyRelu(benchmark::State& state) {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  Tensor x = random_tensor({1, 64}), y(DType::kFloat32, {1, 64});
  dnnl::memory::desc md({1, 64}, dt::f32, tag::ab);
  dnnl::eltwise_forward::primitive_desc pd(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_relu,
                                  md),
      eng);
  dnnl::memory x_mem(md, eng, x.raw()), y_mem(md, eng, y.raw());
  dnnl::eltwise_forward relu(pd);
  for (auto _ : state) {
    relu.execute(s, {{DNNL_ARG_SRC, x_mem}, {DNNL_ARG_DST, y_mem}});
    s.wait();
  }
  set_flops(state, 64);
}

// Console output plus a closing table: kernel time / direct time per case.
class RatioReporter : public bench::TimeKeepingReporter {
 public:
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n%-34s %12s %12s %8s\n", "case (us)", "kernel", "direct", "ratio");
    for (const auto& [name, t] : all_seconds()) {
      if (name.rfind("kernel/", 0) != 0) continue;
      const std::string base = name.substr(7);
      const double direct = seconds("direct/" + base);
      if (direct <= 0) continue;
      std::printf("%-34s %12.2f %12.2f %8.3f\n", base.c_str(), t * 1e6, direct * 1e6, t / direct);
    }
  }
};

}  // namespace
}  // namespace collage

int main(int argc, char** argv) {
  collage::bench::set_threads_from_env("ONEDNN_BENCH_THREADS");
  for (const auto& c : collage::kConvs) {
    benchmark::RegisterBenchmark((std::string("kernel/") + c.name).c_str(), collage::BM_KernelConv,
                                 c)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark((std::string("direct/") + c.name).c_str(), collage::BM_DirectConv,
                                 c)
        ->Unit(benchmark::kMicrosecond);
  }
  for (const auto& c : collage::kMatmuls) {
    benchmark::RegisterBenchmark((std::string("kernel/") + c.name).c_str(),
                                 collage::BM_KernelMatmul, c)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark((std::string("direct/") + c.name).c_str(),
                                 collage::BM_DirectMatmul, c)
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RegisterBenchmark("kernel/tiny_relu_64", collage::BM_KernelTinyRelu)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("direct/tiny_relu_64", collage::BM_DirectTinyRelu)
      ->Unit(benchmark::kMicrosecond);
  benchmark::Initialize(&argc, argv);
  collage::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
