// Steps the onednn Program tests add by hand (backend_onednn__buffers_test.cc,
// backend_onednn__lanes_test.cc): elementwise primitives whose results a test can compute.
#pragma once

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

}  // namespace collage::onednn::program_steps
