// A model's GEMM floor: every MatMul and Gemm node of an ONNX model, each distinct shape
// timed alone and hot at oneDNN's matmul (constant weights in its own layout, packed once)
// and OpenBLAS's sgemm, the faster of the two summed over the nodes. oneDNN is the fastest
// fp32 GEMM among collage's CPU backends on transformer shapes here (it is what the tuned
// plans pick), and a plan runs its products no faster than the library does alone with the
// operands in cache; everything else the model does (Softmax, LayerNorm, GELU, copies, its
// convolutions) comes on top. So a speed target that needs less time than this sum is out
// of reach for any placement in fp32 on this machine, and a plan's distance from it is what
// its other work and its kernels' in-model losses cost (issue 16's ViT-B/16; docs/DESIGN.md,
// "Transformers (issue 16)").
//
//   build/bench/gemm_floor MODEL.onnx [--threads 2] [--repeat 50]
//
// Prints one line per distinct shape and the sum; run it beside ORT and `collage run` in the
// same minutes (this shared machine's speed drifts 10-20 % over an hour).
#include <cblas.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <dnnl.hpp>
#include <exception>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "collage/model.h"
#include "runtime/interleaved_timing.h"
#include "runtime/threads.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;

// One matrix product: `batch` independent [m, k] x [k, n] products.
struct GemmShape {
  int64_t batch, m, k, n;
  bool constant_b;  // B is a weight (packed once) rather than an activation
  auto tie() const { return std::tie(batch, m, k, n, constant_b); }
  bool operator<(const GemmShape& o) const { return tie() < o.tie(); }
  double flops() const { return 2.0 * static_cast<double>(batch * m * k * n); }
};

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

// MatMul with both operands of rank >= 2 (batch dims broadcast to the output's) and Gemm
// (transA/transB: the product's sizes are the same). Other forms (rank-1 operands) are
// skipped: the zoo's transformers have none.
std::map<GemmShape, int> gemm_shapes(const Graph& graph) {
  std::map<GemmShape, int> count;
  for (const Node& node : graph.nodes()) {
    if (node.op_type != "MatMul" && node.op_type != "Gemm") continue;
    const Value& a = graph.value(node.inputs[0]);
    const Value& b = graph.value(node.inputs[1]);
    const Shape& out = graph.value(node.outputs[0]).shape;
    if (a.shape.size() < 2 || b.shape.size() < 2) continue;
    const bool trans_a = node.op_type == "Gemm" && node.attr_int("transA", 0) != 0;
    const int64_t k = trans_a ? a.shape[0] : a.shape.back();
    // A B without batch dims is one matrix for all of A's rows: one [rows, k] x [k, n].
    const bool one_b = b.shape.size() == 2;
    GemmShape s{one_b ? 1 : product(out, 0, out.size() - 2),
                one_b ? product(out, 0, out.size() - 1) : out[out.size() - 2], k, out.back(),
                one_b && b.is_constant()};
    ++count[s];
  }
  return count;
}

// A shape's median and fastest sample: the floor from the medians is the typical one; the
// one from the fastest samples (every product at its least disturbed run on this shared
// machine, all at once) is the most optimistic.
struct Timing {
  double median_ms, min_ms;
};

template <typename Run>
Timing time_ms(int repeat, Run run) {
  for (int i = 0; i < 5; ++i) run();  // JIT, first touch, caches
  std::vector<double> samples;
  for (int i = 0; i < repeat; ++i) {
    auto t0 = Clock::now();
    run();
    samples.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return {median_of(samples), *std::min_element(samples.begin(), samples.end())};
}

Timing onednn_ms(const GemmShape& s, int repeat) {
  using dnnl::memory;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  // One product as a 2-D matmul, as the onednn backend folds it (matmul_kernel.cc): oneDNN
  // 2.6 runs [1, m, k] x [1, k, n] as a batch of one 15-20 % slower than [m, k] x [k, n]
  // (197 x 3072 x 768: 3.09 vs 2.56 ms, same brg:avx512_core implementation).
  auto dims = [&](int64_t rows, int64_t cols) {
    return s.batch == 1 ? memory::dims{rows, cols} : memory::dims{s.batch, rows, cols};
  };
  const memory::format_tag plain = s.batch == 1 ? memory::format_tag::ab : memory::format_tag::abc;
  const memory::desc a_desc(dims(s.m, s.k), memory::data_type::f32, plain);
  const memory::desc c_desc(dims(s.m, s.n), memory::data_type::f32, plain);
  // Weights in the layout the primitive prefers (a plan packs them once at compile).
  const memory::desc b_desc(dims(s.k, s.n), memory::data_type::f32,
                            s.constant_b ? memory::format_tag::any : plain);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, b_desc, c_desc), engine);
  memory a(a_desc, engine), b(pd.weights_desc(), engine), c(c_desc, engine);
  std::fill_n(static_cast<float*>(a.get_data_handle()), a_desc.get_size() / sizeof(float), 0.5f);
  std::fill_n(static_cast<float*>(b.get_data_handle()),
              pd.weights_desc().get_size() / sizeof(float), 0.25f);
  dnnl::matmul matmul(pd);
  return time_ms(repeat, [&] {
    matmul.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
  });
}

Timing openblas_ms(const GemmShape& s, int repeat) {
  std::vector<float> a(s.batch * s.m * s.k, 0.5f), b(s.batch * s.k * s.n, 0.25f),
      c(s.batch * s.m * s.n);
  return time_ms(repeat, [&] {
    for (int64_t i = 0; i < s.batch; ++i)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, s.n, s.k, 1.0f,
                  a.data() + i * s.m * s.k, s.k, b.data() + i * s.k * s.n, s.n, 0.0f,
                  c.data() + i * s.m * s.n, s.n);
  });
}

int run(int argc, char** argv) {
  CLI::App app{"a model's GEMM floor: its MatMul/Gemm nodes timed alone, hot, best library"};
  std::string path;
  int threads = 2, repeat = 50;
  app.add_option("model", path, "ONNX model")->required()->check(CLI::ExistingFile);
  app.add_option("--threads", threads, "threads for both libraries")->check(CLI::PositiveNumber);
  app.add_option("--repeat", repeat, "timed runs per shape")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  const Graph graph = load_model(path);
  const std::map<GemmShape, int> shapes = gemm_shapes(graph);
  if (shapes.empty()) {
    std::fprintf(stderr, "%s has no MatMul or Gemm node with operands of rank >= 2\n",
                 path.c_str());
    return 1;
  }
  use_threads_on_this_thread(threads);  // oneDNN's OpenMP team
  openblas_set_num_threads(threads);
  std::printf("%-30s %5s %21s %21s\n", "batch x m x k x n", "nodes", "onednn ms (min)",
              "openblas ms (min)");
  double median_floor_ms = 0, min_floor_ms = 0, gflops = 0;
  for (const auto& [shape, nodes] : shapes) {
    const Timing dnnl = onednn_ms(shape, repeat), blas = openblas_ms(shape, repeat);
    const std::string name = fmt::format("{} x {} x {} x {}{}", shape.batch, shape.m, shape.k,
                                         shape.n, shape.constant_b ? " (weights)" : "");
    std::printf("%-30s %5d %10.3f (%8.3f) %10.3f (%8.3f)\n", name.c_str(), nodes, dnnl.median_ms,
                dnnl.min_ms, blas.median_ms, blas.min_ms);
    median_floor_ms += nodes * std::min(dnnl.median_ms, blas.median_ms);
    min_floor_ms += nodes * std::min(dnnl.min_ms, blas.min_ms);
    gflops += nodes * shape.flops() / 1e9;
  }
  std::printf(
      "GEMM floor: %.3f GFLOP in %.2f ms (medians; %.0f GFLOP/s), %.2f ms (fastest samples; %.0f "
      "GFLOP/s), %d threads\n",
      gflops, median_floor_ms, gflops / median_floor_ms * 1e3, min_floor_ms,
      gflops / min_floor_ms * 1e3, threads);
  return 0;
}

}  // namespace
}  // namespace collage

int main(int argc, char** argv) {
  try {
    return collage::run(argc, argv);
  } catch (const std::exception& e) {  // a model that does not load, a shape oneDNN refuses
    std::fprintf(stderr, "gemm_floor: %s\n", e.what());
    return 1;
  }
}
