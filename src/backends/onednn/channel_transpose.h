// A layout copy between channel-first (NCHW, NCDHW, NCW) and channels-last (NHWC, ...)
// float32 tensors of 2 to 4 channels (one channel is the same memory either way): an image
// model's input (RGB, RGBA) going into a region whose convolutions read channels-last, or a
// few-class output going back. oneDNN
// 2.6's reorder (`jit:uni`) is slow at it: measured here (2 threads, this EPYC Zen 5, warm
// cache) 1x3x224x224 in 24-27 us, 3x299x299 39-47, 3x520x520 124, against 6.4, 12-14 and 43
// us for a loop specialised for the channel count (one contiguous C-float write per pixel,
// GCC vectorising it), 3.5-4x; from 6 channels on oneDNN's is faster (6x224x224: 52 us
// against 74), so wider tensors keep it. Inside MobileNetV2's region the input reorder took
// 32-65 us of a 3.0 ms run; whole small CNNs run ~1 % faster with this (docs/DESIGN.md).
#pragma once

#include <functional>
#include <optional>

#include <dnnl.hpp>

namespace collage::onednn {

// The largest channel count channel_transpose takes (see above).
inline constexpr int kMaxTransposedChannels = 4;

// A copy of a tensor described by `from` into one described by `to`, where both are dense
// float32 over the same dims (N, C, spatial...), one channel-first and the other
// channels-last, with 2 to kMaxTransposedChannels channels and no offset; nullopt for any
// other pair. The function takes the two data pointers; it splits the pixels over the
// calling thread's OpenMP team, or runs on this thread alone inside a parallel region.
using ChannelTranspose = std::function<void(const float* from, float* to)>;
std::optional<ChannelTranspose> channel_transpose(const dnnl::memory::desc& from,
                                                  const dnnl::memory::desc& to);

}  // namespace collage::onednn
