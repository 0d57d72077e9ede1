// Steps the onednn Program tests add by hand (backend_onednn__buffers_test.cc,
// backend_onednn__lanes_test.cc): elementwise primitives whose results a test can compute.
#pragma once

#include <vector>

#include "backends/onednn/dnnl_common.h"

namespace collage::onednn::program_steps {

// Adds dst = src * alpha + beta (an eltwise linear step).
inline void add_linear(Program& p, const dnnl::memory& src, const dnnl::memory& dst, float alpha,
                       float beta) {
  auto pd = dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference,
                                  dnnl::algorithm::eltwise_linear, src.get_desc(), alpha, beta),
      base_attr(), cpu_engine());
  p.add(dnnl::eltwise_forward(pd), pd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
}

// Adds dst = a + b.
inline void add_sum(Program& p, const dnnl::memory& a, const dnnl::memory& b,
                    const dnnl::memory& dst) {
  auto pd = dnnl::binary::primitive_desc(
      dnnl::binary::desc(dnnl::algorithm::binary_add, a.get_desc(), b.get_desc(), dst.get_desc()),
      base_attr(), cpu_engine());
  p.add(dnnl::binary(pd), pd, {{DNNL_ARG_SRC_0, a}, {DNNL_ARG_SRC_1, b}, {DNNL_ARG_DST, dst}});
}

// Adds dst = batch norm of src over its channels (dimension 1), inference with global
// statistics; mean, variance, scale and shift all 0.5 + 0.01 * (c % 40), constants.
inline void add_batch_norm(Program& p, const dnnl::memory& src, const dnnl::memory& dst) {
  const dnnl::memory::desc md = src.get_desc();
  const int64_t channels = md.dims()[1];
  const dnnl::memory::desc cmd({channels}, dnnl::memory::data_type::f32,
                               dnnl::memory::format_tag::a);
  std::vector<float> stat(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) stat[c] = 0.5f + 0.01f * static_cast<float>(c % 40);
  const Tensor stats = Tensor::from_vector<float>({channels}, stat);
  const dnnl::memory mean = p.constant(stats, cmd, cmd), var = p.constant(stats, cmd, cmd);
  const dnnl::memory scale = p.constant(stats, cmd, cmd), shift = p.constant(stats, cmd, cmd);
  const auto flags = dnnl::normalization_flags::use_global_stats |
                     dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  auto pd = dnnl::batch_normalization_forward::primitive_desc(
      dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_inference, md, 1e-3f, flags),
      base_attr(), cpu_engine());
  p.add(dnnl::batch_normalization_forward(pd), pd,
        {{DNNL_ARG_SRC, src},
         {DNNL_ARG_DST, dst},
         {DNNL_ARG_MEAN, mean},
         {DNNL_ARG_VARIANCE, var},
         {DNNL_ARG_SCALE, scale},
         {DNNL_ARG_SHIFT, shift}});
}

}  // namespace collage::onednn::program_steps
