// Do two one-thread convolutions side by side slow each other down on this machine? The
// question behind issue 17's concurrent stages (lanes.h): a stage runs each lane's primitives
// on one thread, beside the other lane. For each shape (GoogLeNet's and Inception-v3's
// branch convolutions, channels-last as in a region) it times, medians of 100:
//   wide     the conv on every thread (2 here), alone;
//   narrow   the conv on one thread of a team whose other thread idles (as program_lanes.cc
//            does);
//   co-run   two copies (own buffers) at once, one per thread: the slower copy's time;
// and prints co-run / narrow (the interference) and co-run / (2 x wide) (a stage of two such
// convs against the two one after another on every thread). `--cold` reads 64 MiB before
// each sample, so weights and activations come from memory, as in a model bigger than the L3.
// Run it on an otherwise idle machine: a busy core stalls a two-thread team for a time slice.
//
//   build/bench/bench_onednn_corun [--cold]
#include <omp.h>
#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

struct Shape {
  int ic, oc, hw, k;
};

// Branch convolutions of GoogLeNet's inception blocks and of Inception-v3's.
const Shape kShapes[] = {{512, 128, 14, 1}, {192, 96, 28, 1}, {480, 192, 14, 1},
                         {832, 256, 7, 1},  {96, 128, 28, 3}, {128, 192, 28, 3},
                         {160, 320, 14, 3}, {288, 64, 35, 1}, {48, 64, 35, 5}};

struct Conv {
  dnnl::convolution_forward primitive;
  dnnl::memory src, weights, dst, scratchpad;
};

Conv make_conv(const dnnl::engine& engine, const Shape& s) {
  const dnnl::memory::desc src({1, s.ic, s.hw, s.hw}, dt::f32, tag::nhwc);
  const dnnl::memory::desc weights({s.oc, s.ic, s.k, s.k}, dt::f32, tag::any);
  const dnnl::memory::desc dst({1, s.oc, s.hw, s.hw}, dt::f32, tag::nhwc);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const int pad = s.k / 2;
  const dnnl::convolution_forward::primitive_desc pd(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                      dnnl::algorithm::convolution_direct, src, weights, dst,
                                      {1, 1}, {pad, pad}, {pad, pad}),
      attr, engine);
  Conv c{dnnl::convolution_forward(pd), dnnl::memory(pd.src_desc(), engine),
         dnnl::memory(pd.weights_desc(), engine), dnnl::memory(pd.dst_desc(), engine),
         dnnl::memory(pd.scratchpad_desc(), engine)};
  std::memset(c.src.get_data_handle(), 0, pd.src_desc().get_size());
  std::memset(c.weights.get_data_handle(), 0, pd.weights_desc().get_size());
  return c;
}

double time_ms(Conv& c, dnnl::stream& stream) {
  const auto t0 = std::chrono::steady_clock::now();
  c.primitive.execute(stream, {{DNNL_ARG_SRC, c.src},
                               {DNNL_ARG_WEIGHTS, c.weights},
                               {DNNL_ARG_DST, c.dst},
                               {DNNL_ARG_SCRATCHPAD, c.scratchpad}});
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Reads and writes 64 MiB (more than this VM's L3), so what the next sample reads comes
// from memory.
void evict() {
  static std::vector<float> junk(size_t{64} << 18, 1.0f);
  for (size_t i = 0; i < junk.size(); i += 16) junk[i] += 1.0f;
}

}  // namespace

int main(int argc, char** argv) {
  const bool cold = argc > 1 && !std::strcmp(argv[1], "--cold");
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream first(engine), second(engine);
  std::printf("%d threads, %s caches; ms, medians of 100\n", omp_get_max_threads(),
              cold ? "cold" : "warm");
  std::printf("%-22s %8s %8s %8s %10s %14s\n", "conv", "wide", "narrow", "co-run", "co/narrow",
              "co/(2 x wide)");
  for (const Shape& s : kShapes) {
    Conv a = make_conv(engine, s), b = make_conv(engine, s);
    std::vector<double> wide, narrow, corun;
    for (int r = 0; r < 100; ++r) {
      if (cold) evict();
      wide.push_back(time_ms(a, first));
      if (cold) evict();
      double alone = 0;
#pragma omp parallel num_threads(2)
      if (omp_get_thread_num() == 0) {
        // A team of one: oneDNN runs the primitive on this thread (as in a lane).
#pragma omp parallel num_threads(1)
        alone = time_ms(a, first);
      }
      narrow.push_back(alone);
      if (cold) evict();
      double t[2] = {0, 0};
#pragma omp parallel num_threads(2)
      {
        const int lane = omp_get_thread_num();
#pragma omp parallel num_threads(1)
        t[lane] = lane == 0 ? time_ms(a, first) : time_ms(b, second);
      }
      corun.push_back(std::max(t[0], t[1]));
    }
    char name[64];
    std::snprintf(name, sizeof name, "%d->%d %dx%d k%d", s.ic, s.oc, s.hw, s.hw, s.k);
    const double w = median(wide), n = median(narrow), c = median(corun);
    std::printf("%-22s %8.4f %8.4f %8.4f %9.2fx %13.2fx\n", name, w, n, c, c / n, c / (2 * w));
  }
}
