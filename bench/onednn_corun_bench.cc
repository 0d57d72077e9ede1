// Do two one-thread convolutions side by side slow each other down on this machine? The
// question behind issue 17's concurrent stages (lanes.h): a stage runs each lane's primitives
// on one thread, beside the other lane. For each shape (GoogLeNet's and Inception-v3's
// branch convolutions, channels-last as in a region) it times, medians of 100:
//   narrow   the conv on one thread of a team whose other thread idles (as program_lanes.cc does);
//   co-run   two copies (own buffers) at once, one per thread: the slower copy's time;
// and prints co-run / narrow, the interference. Caches are warm (each conv runs 200 times).
// Left out: the wide (every-thread) time beside them. Timed right after the nested teams of a
// co-run, the wide conv of some shapes took 4-8 ms instead of 0.05-0.9 ms on this VM, even
// with its workers woken first (`run --profile` shows no such stall in models, whose wide
// steps follow wide steps); `COLLAGE_ONEDNN_LANES=verbose` reports wide and narrow per step.
//
//   build/bench/bench_onednn_corun
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

// Wakes the OpenMP workers before a sample. After a few ms alone (a shape's set-up) they
// have gone to sleep, and waking a sleeping vCPU of this VM took 4-8 ms: a
// 0.07 ms wide conv timed 5-8 ms. In a model the steps come back to back and the workers
// spin between them.
void wake_team() {
#pragma omp parallel num_threads(2)
  {}
}

}  // namespace

int main() {
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream first(engine), second(engine);
  std::printf("%d threads, warm caches; ms, medians of 100\n", omp_get_max_threads());
  std::printf("%-22s %8s %8s %10s\n", "conv", "narrow", "co-run", "co/narrow");
  for (const Shape& s : kShapes) {
    Conv a = make_conv(engine, s), b = make_conv(engine, s);
    std::vector<double> narrow, corun;
    for (int r = 0; r < 100; ++r) {
      wake_team();
      double alone = 0;
#pragma omp parallel num_threads(2)
      if (omp_get_thread_num() == 0) {
        // A team of one: oneDNN runs the primitive on this thread (as in a lane).
#pragma omp parallel num_threads(1)
        alone = time_ms(a, first);
      }
      narrow.push_back(alone);
      wake_team();
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
    const double n = median(narrow), c = median(corun);
    std::printf("%-22s %8.4f %8.4f %9.2fx\n", name, n, c, c / n);
  }
}
