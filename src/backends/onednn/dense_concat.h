// A concatenation of dense values that share one plain layout (row-major, channels-last or
// another order of strides, no blocks) into that layout: copies of contiguous runs, split
// over the threads. oneDNN 2.6's concat (`simple:any`) runs such a copy far below memory
// speed: measured here (2 threads) 0.43 ms for four row-major 1x3x208x208 parts joined on
// the channels (YOLOv5's Focus; 2 MB), 0.84 inside that model. With these copies a Focus
// layer and the 3x3 conv after it run in 0.94-0.97 ms against 1.38-1.40 (alternating).
// Channels-last parts are runs of a few channels per pixel; the step copies a pixel's runs
// in turn. Blocked parts (nChw16c) stay oneDNN's concat.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include <dnnl.hpp>

namespace collage::onednn {

// The step's name in a program (ProgramSteps::implementations).
inline constexpr const char* kDenseConcatStep = "collage:dense_concat";

// The copies joining `parts` along `axis` into `out`; nullopt unless every part and `out`
// are dense float32 with the same order of strides (no blocks, no offset). Runs over the
// calling thread's OpenMP team, or on this thread alone inside a parallel region. The
// function takes the parts' data pointers in order and the output's.
using DenseConcat = std::function<void(const std::vector<const float*>& parts, float* out)>;
std::optional<DenseConcat> dense_concat(const std::vector<dnnl::memory::desc>& parts,
                                        const dnnl::memory::desc& out, int axis);

}  // namespace collage::onednn
