#include "backends/libxsmm/epilogue.h"

#include <algorithm>
#include <limits>

namespace collage::xsmm {
namespace {

std::optional<float> scalar_constant(const Graph& g, ValueId v) {
  if (v == kNoValue || !g.value(v).is_constant()) return std::nullopt;
  const Tensor& t = g.value(v).constant;
  if (t.numel() != 1 || t.dtype() != DType::kFloat32) return std::nullopt;
  return t.data<float>()[0];
}

// A float32 constant broadcast along `axis` of a rank-`rank` output only, as `channels`
// values; nullopt for any other shape.
std::optional<std::vector<float>> channel_constant(const Graph& g, ValueId v, size_t axis,
                                                   size_t rank, int64_t channels) {
  if (v == kNoValue || !g.value(v).is_constant()) return std::nullopt;
  const Tensor& t = g.value(v).constant;
  if (t.dtype() != DType::kFloat32) return std::nullopt;
  const Shape& s = t.shape();
  if (s.size() > rank) return std::nullopt;
  // Right-aligned (numpy broadcasting): dim i of s is output dim i + rank - s.size().
  int64_t along = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t out_dim = i + rank - s.size();
    if (out_dim == axis)
      along = s[i];
    else if (s[i] != 1)
      return std::nullopt;
  }
  if (along != 1 && along != channels) return std::nullopt;
  const float* d = t.data<float>();
  std::vector<float> out(channels);
  for (int64_t c = 0; c < channels; ++c) out[c] = d[along == 1 ? 0 : c];
  return out;
}

}  // namespace

void Epilogue::apply(float* y, int64_t count, int64_t channel) const {
  const float b = bias.empty() ? 0.0f : bias[channel];
  const float s = scale;
  switch (act) {
    case Act::kNone:
      if (s == 1 && b == 0) return;
      for (int64_t i = 0; i < count; ++i) y[i] = s * y[i] + b;
      return;
    case Act::kRelu:
      for (int64_t i = 0; i < count; ++i) y[i] = std::max(s * y[i] + b, 0.0f);
      return;
    case Act::kClip:
      for (int64_t i = 0; i < count; ++i) y[i] = std::min(std::max(s * y[i] + b, lo), hi);
      return;
  }
}

void Epilogue::apply_along(float* y, int64_t count, int64_t first) const {
  const float s = scale;
  const float* b = bias.empty() ? nullptr : bias.data() + first;
  auto at = [&](int64_t i) { return b ? s * y[i] + b[i] : s * y[i]; };
  switch (act) {
    case Act::kNone:
      if (s == 1 && !b) return;
      for (int64_t i = 0; i < count; ++i) y[i] = at(i);
      return;
    case Act::kRelu:
      for (int64_t i = 0; i < count; ++i) y[i] = std::max(at(i), 0.0f);
      return;
    case Act::kClip:
      for (int64_t i = 0; i < count; ++i) y[i] = std::min(std::max(at(i), lo), hi);
      return;
  }
}

std::optional<ParsedTail> parse_tail(const Graph& g, ValueId y, size_t axis, int64_t channels) {
  ParsedTail r;
  r.out = y;
  const size_t rank = g.value(y).shape.size();
  const auto consumers = g.consumers();
  size_t next = 1;
  auto is_output = [&](ValueId v) {
    return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
  };
  // Node `next` must be the only reader of the current value, which must not leave the kernel.
  auto sole_next = [&]() -> const Node* {
    if (next >= g.num_nodes()) return nullptr;
    if (is_output(r.out) || consumers[r.out].size() != 1 ||
        consumers[r.out][0] != static_cast<NodeId>(next))
      return nullptr;
    const Node& n = g.node(static_cast<NodeId>(next));
    if (!n.domain.empty() || n.outputs.size() != 1 ||
        g.value(n.outputs[0]).dtype != DType::kFloat32 ||
        g.value(n.outputs[0]).shape != g.value(y).shape)
      return nullptr;
    return &n;
  };
  if (const Node* n = next < g.num_nodes() ? sole_next() : nullptr; n && n->op_type == "Add") {
    const ValueId other = n->input(0) == r.out ? n->input(1) : n->input(0);
    std::optional<std::vector<float>> bias = channel_constant(g, other, axis, rank, channels);
    if (!bias) return std::nullopt;
    r.epilogue.bias = std::move(*bias);
    r.out = n->outputs[0];
    ++next;
  }
  if (next < g.num_nodes()) {
    const Node* n = sole_next();
    if (!n || n->input(0) != r.out) return std::nullopt;
    if (n->op_type == "Relu") {
      r.epilogue.act = Epilogue::Act::kRelu;
    } else if (n->op_type == "Clip") {
      std::optional<float> lo = -std::numeric_limits<float>::infinity(),
                           hi = std::numeric_limits<float>::infinity();
      if (g.opset < 11) {
        lo = n->attr_float("min", *lo);
        hi = n->attr_float("max", *hi);
      } else {
        if (n->input(1) != kNoValue) lo = scalar_constant(g, n->input(1));
        if (n->input(2) != kNoValue) hi = scalar_constant(g, n->input(2));
      }
      if (!lo || !hi) return std::nullopt;
      r.epilogue.act = Epilogue::Act::kClip;
      r.epilogue.lo = *lo;
      r.epilogue.hi = *hi;
    } else {
      return std::nullopt;
    }
    r.out = n->outputs[0];
    ++next;
  }
  if (next != g.num_nodes() || g.outputs != std::vector<ValueId>{r.out}) return std::nullopt;
  return r;
}

}  // namespace collage::xsmm
