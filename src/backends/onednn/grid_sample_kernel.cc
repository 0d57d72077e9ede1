// GridSample as a step of collage's own (grid_sample_kernel.h says why).
#include "backends/onednn/grid_sample_kernel.h"

#include "backends/onednn/dnnl_common.h"
#include "ops/tensor_util.h"

namespace collage::onednn {

bool grid_sample_takes(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.op_type != "GridSample" || n.inputs.size() != 2 ||
      n.outputs.size() != 1 || !is_f32(g, n.input(0)) || !is_f32(g, n.input(1)) ||
      !is_f32(g, n.outputs[0]))
    return false;
  for (ValueId v : {n.input(0), n.input(1), n.outputs[0]})
    if (!g.value(v).shape_known || g.value(v).shape.size() != 4) return false;
  try {
    ops::grid_sample_spec(n);
  } catch (const Error&) {
    return false;
  }
  return true;
}

void emit_grid_sample(const Graph& sub, ValueMemories& values) {
  if (sub.num_nodes() != 1 || !grid_sample_takes(sub, sub.node(0)))
    fail(ErrorKind::kUnsupported, "onednn: not one GridSample of 4-D float32 values");
  const Node& n = sub.node(0);
  const ValueId x = n.input(0), grid = n.input(1), y = n.outputs[0];
  for (ValueId v : {x, grid})
    if (!values.has(v) && !sub.value(v).is_constant())
      fail(ErrorKind::kUnsupported, "onednn: GridSample input is not a kernel input");
  const ops::GridSampleSpec spec = ops::grid_sample_spec(n);
  const Shape& xs = sub.value(x).shape;
  const Shape& gs = sub.value(grid).shape;
  const Shape& ys = sub.value(y).shape;
  // Channels-last where X's producer wrote it so (a brgconv's layout): each tap is then a
  // contiguous channel vector, and no layout copy of X and Y goes around the step. A small
  // spatial transformer (64 channels sampled at 112x112, 2 threads) ran in 4.1-4.4 ms so
  // against 11.5-12.3 row-major (strided gathers per channel and two reorders).
  const dnnl::memory::desc nhwc(to_dims(xs), dnnl::memory::data_type::f32,
                                dnnl::memory::format_tag::nhwc);
  const bool channels_last = values.as_is(x, xs).get_desc() == nhwc;
  const dnnl::memory::desc x_md = channels_last ? nhwc : plain_md(xs);
  const dnnl::memory::desc y_md =
      channels_last ? dnnl::memory::desc(to_dims(ys), dnnl::memory::data_type::f32,
                                         dnnl::memory::format_tag::nhwc)
                    : plain_md(ys);
  const dnnl::memory src = values.read(x, x_md);
  if (!flat_f32(src, shape_numel(xs))) fail(ErrorKind::kUnsupported, "onednn: X is no flat array");
  dnnl::memory dst = values.destination(y, y_md);
  if (!flat_f32(dst, shape_numel(ys))) dst = values.fresh_destination(y, y_md);
  std::vector<std::pair<int, dnnl::memory>> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
  // A constant grid (an affine warp fixed at export) is copied into the step.
  std::shared_ptr<const std::vector<float>> fixed;
  if (sub.value(grid).is_constant()) {
    const Tensor& t = sub.value(grid).constant;
    fixed =
        std::make_shared<const std::vector<float>>(t.data<float>(), t.data<float>() + t.numel());
  } else {
    const dnnl::memory g = values.read(grid, plain_md(gs));
    if (!flat_f32(g, shape_numel(gs)))
      fail(ErrorKind::kUnsupported, "onednn: grid is no flat array");
    args.emplace_back(DNNL_ARG_WEIGHTS, g);
  }
  values.program().add_custom(
      kGridSampleStep,
      [spec, xs, ys, fixed, channels_last](const dnnl_exec_arg_t* a, int count) {
        const float* grid_data =
            fixed ? fixed->data() : custom_step_data(a, count, DNNL_ARG_WEIGHTS);
        ops::grid_sample(spec, custom_step_data(a, count, DNNL_ARG_SRC), xs, grid_data, ys[2],
                         ys[3], custom_step_data(a, count, DNNL_ARG_DST), true, channels_last);
        return dnnl_success;
      },
      std::move(args), dnnl::primitive::kind::resampling);
  values.produced(y, dst);
}

}  // namespace collage::onednn
