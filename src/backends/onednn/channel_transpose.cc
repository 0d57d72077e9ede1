#include "backends/onednn/channel_transpose.h"

#include <algorithm>
#include <cstdint>

#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/kernels.h"

namespace collage::onednn {
namespace {

enum class Order { kChannelFirst, kChannelsLast };

// Whether `md` is the plain (channel-first) or the channels-last float32 layout of its dims,
// rank 3 to 5; nullopt for anything else (another permutation, blocks, an offset view). A
// dim of 1 has no stride of its own in oneDNN's comparison, so one channel is both: such a
// copy is no transpose.
std::optional<Order> dense_order(const dnnl::memory::desc& md) {
  const dnnl::memory::dims dims = md.dims();
  const std::optional<dnnl::memory::desc> last = channels_last_md(Shape(dims.begin(), dims.end()));
  if (!last) return std::nullopt;
  if (is_plain(md)) return Order::kChannelFirst;
  if (md == *last) return Order::kChannelsLast;
  return std::nullopt;
}

// Pixels per work item: 4-16 KiB of each plane, enough to amortise the loop and few enough
// that two threads share a 224x224 image evenly.
constexpr int64_t kPixelsPerItem = 1024;

template <int C, bool kToLast>
void transpose_pixels(const float* from, float* to, int64_t images, int64_t pixels) {
  const int64_t blocks = (pixels + kPixelsPerItem - 1) / kPixelsPerItem;
  const int64_t items = images * blocks;
  auto item = [&](int64_t i) {
    const int64_t image = i / blocks, begin = (i % blocks) * kPixelsPerItem;
    const int64_t end = std::min(pixels, begin + kPixelsPerItem);
    const float* src = from + image * C * pixels;
    float* dst = to + image * C * pixels;
    for (int64_t p = begin; p < end; ++p) {
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        if constexpr (kToLast)
          dst[p * C + c] = src[c * pixels + p];
        else
          dst[c * pixels + p] = src[p * C + c];
      }
    }
  };
  for_each_item(items, item);
}

template <bool kToLast>
ChannelTranspose transpose_for(int channels, int64_t images, int64_t pixels) {
  switch (channels) {
    case 2:
      return [=](const float* f, float* t) { transpose_pixels<2, kToLast>(f, t, images, pixels); };
    case 3:
      return [=](const float* f, float* t) { transpose_pixels<3, kToLast>(f, t, images, pixels); };
    default:
      return [=](const float* f, float* t) { transpose_pixels<4, kToLast>(f, t, images, pixels); };
  }
}

}  // namespace

std::optional<ChannelTranspose> channel_transpose(const dnnl::memory::desc& from,
                                                  const dnnl::memory::desc& to) {
  if (from.dims() != to.dims()) return std::nullopt;
  const auto from_order = dense_order(from), to_order = dense_order(to);
  if (!from_order || !to_order || *from_order == *to_order) return std::nullopt;
  const dnnl::memory::dims dims = from.dims();
  const int64_t channels = dims[1];
  if (channels < 2 || channels > kMaxTransposedChannels || dims[0] < 1) return std::nullopt;
  int64_t pixels = 1;
  for (size_t i = 2; i < dims.size(); ++i) pixels *= dims[i];
  if (pixels < 1) return std::nullopt;
  const int c = static_cast<int>(channels);
  return *to_order == Order::kChannelsLast ? transpose_for<true>(c, dims[0], pixels)
                                           : transpose_for<false>(c, dims[0], pixels);
}

}  // namespace collage::onednn
