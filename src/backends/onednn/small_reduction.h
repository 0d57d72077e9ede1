// A sum or mean over a few elements per output (the reduced axes hold at most
// kMaxSmallReduction elements in all), read through any strides: ResNeSt's and SKNet's sum
// over their split branches (a [1,2,C,H,W] view of a channels-last conv output), a complex
// value's power summed over its (re, im) pair. oneDNN 2.6's jit reduction vectorises over
// the reduced dims, so with two of them it runs near scalar: measured here (2 threads)
// 0.5 ms for a 1x2x64x56x56 sum inside a region, six of them 3.1 of a ResNeSt's 15.6 ms of
// primitives. This step (one output row at a time, each reduced slice added into it as a
// vector loop) adds 0.05-0.08 ms to a region of a 64->128 3x3 conv at 56x56 (1.08-1.09 ms
// with the sum after it, 1.00-1.03 without). Its output keeps the order of the input's kept
// dims (a channels-last input gives a channels-last output), so no transpose follows it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <dnnl.hpp>

namespace collage::onednn {

// The step's name in a program (ProgramSteps::implementations).
inline constexpr const char* kSmallReductionStep = "collage:small_reduction";

// The most reduced elements per output this step takes: fewer than one AVX-512 vector.
inline constexpr int64_t kMaxSmallReduction = 16;

struct SmallReduction {
  dnnl::memory::desc out;  // the output's dims (the reduced ones 1, or dropped without
                           // keepdims), dense in the order of the input's strides
  // Runs it: `from` is the input's data handle (its descriptor's offset included), `to` the
  // output's. Splits the output rows over the calling thread's OpenMP team, or runs on this
  // thread alone inside a parallel region.
  std::function<void(const float* from, float* to)> run;
};

// The step reducing `in` (float32, strides of any order, no blocks) over `axes` (sorted,
// distinct), a sum or (`mean`) its average, keeping the reduced dims as 1 or dropping them;
// nullopt where the reduced axes hold more than kMaxSmallReduction elements, `in` has blocks,
// or no dim would be left.
std::optional<SmallReduction> small_reduction(const dnnl::memory::desc& in,
                                              const std::vector<int64_t>& axes, bool mean,
                                              bool keepdims);

}  // namespace collage::onednn
