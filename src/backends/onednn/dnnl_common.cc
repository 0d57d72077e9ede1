#include "backends/onednn/dnnl_common.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>

#include "backends/onednn/channel_transpose.h"

namespace collage::onednn {

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

std::string library_version() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
}

std::string backend_version() {
  // Part of every cost key: a change to how kernels run re-measures them. 6: a program's
  // rewritten buffers share one arena (Program::finalize). 7: regions run independent
  // steps in concurrent stages where measured faster (program_lanes.cc); 8: stages judged
  // inside whole runs. 9: binary broadcasts over merged dimensions (eltwise_kernel.cc).
  // 10: x * HardSigmoid(x, 1/6) is one hardswish post-op (epilogue.cc). 11: a concatenation
  // of inputs in different layouts keeps an activation layout (layout_kernel.cc). 12: regions hold
  // the LayerNorm decomposition, LayerNormalization, Softmax and erf GELUs (norm_kernel.cc).
  // 13: chains of concatenations in place, their blocks channel-blocked (concat_in_place.h).
  // 14: a region splits a 1x1 + depthwise pair that would reorder its input (conv_kernel.cc).
  // 15: a ConvTranspose's bias and post-ops run as a binary primitive after it (conv_kernel.cc).
  // 16: a conv reads its input in the layout it has where oneDNN runs the same kernel there.
  // 17: Slices with steps and Gathers of one constant index are cuts (layout_kernel.cc); a
  // failure cached for them before is tried again. 18: the "winograd" variant of a conv with an
  // eltwise tail is collage's channels-last F(4x4, 3x3) (winograd_conv.h). 19: a squeeze-excitation
  // block is one step (squeeze_excite.h). 20: concatenations of two parts read by convs alone are
  // split into them (concat_into_convs.h); no full-shape binary post-op after a sum.
  // 21: ReduceMean/Max/Min/Sum over any axes on the reduction primitive (layout_kernel.cc); a
  // Concat takes the first layout with an optimized kernel; DepthToSpace/SpaceToDepth;
  // InstanceNormalization of N images (norm_kernel.cc). 22: the Winograd variants of a conv
  // with a residual Add are collage's channels-last Winograd (the Add in its output
  // transform), no longer oneDNN's nChw16c kernel (winograd_conv.h). 23: the exported RMSNorm
  // is one step, in groups and regions (norm_kernel.cc). 24: collage's Winograd transforms on
  // 16-channel vector values, its tile blocks split by rows first (winograd_conv.cc). 25: a
  // Slice/Split of a value its producer wrote with other dims (a MatMul's flattened batch) cuts
  // its row-major form (ValueMemories::sub_view); MaxViT's attention regions had failed.
  // 26: a region takes a 1x1 + depthwise pair only in oneDNN's one-pass form (conv_kernel.cc).
  // 27: a BatchNorm oneDNN would run in its non-jit kernel is a binary Mul + Add (norm_kernel.cc).
  // 28: tensors' storage is 64-byte aligned (util/tensor.cc): a large output written with
  // non-temporal stores into a caller's tensor had crashed; a failure cached for it is tried
  // again. 29: a layout copy of a 2-4 channel image between channel-first and channels-last is
  // collage's channel transpose (channel_transpose.h). 30: a Resize oneDNN's resampling does
  // not compute is collage's taps step (taps_resize.h), and the functions oneDNN has no
  // eltwise for (Sin, Floor, Sign, a lone Erf...) a step of their own (unary_math.h); a
  // failure cached for a region holding one is tried again. 31: a Where of a computed condition
  // and the nodes computing it are one step (masked_select.h), an Expand a broadcast copy
  // (expand_kernel.h), a flip or a Gather of an index list a copy (index_copy.h), GridSample a
  // sampling step (grid_sample_kernel.h); failures cached for regions holding one of these
  // are tried again. 32: RNN, GRU and LSTM as oneDNN's RNN primitives (recurrent_kernel.h).
  // 33: the exported GroupNorm is one step, and InstanceNormalization a step where oneDNN's
  // batch normalization would run its non-jit kernel (group_norm.h). 34: grouped 1-D convs
  // run as 2-D ones of height 1 (conv1d_as_2d.h). 35: the GroupNorm step reads and writes
  // channels-last where its producer wrote that, and takes a SiLU after it (group_norm.h). 36:
  // one sequence's recurrence with constant weights is oneDNN matmuls with packed weights
  // around collage's cell (packed_recurrence.h). 37: convolutions with computed weights
  // (reordered by a step each run); failures cached for them are tried again. 38: the Sin and
  // Cos steps are vectorized (util/fast_math.h's fast_sin_or_cos). 39: TopK (top_k.h). 40:
  // depthwise 3-D convs as collage's own step (depthwise_conv3d.h). 41: sums and means over
  // a few elements per output as collage's step (small_reduction.h). 42: concatenations of
  // dense parts of one plain layout as collage's copies (dense_concat.h). 43: a blocked value
  // flattened into a bound output is reordered straight into it (value_memories.cc). 44: a
  // gemm convolution writing channels-last takes no post-op operand varying over space (it
  // misplaced it: conv_kernel.cc); failures cached for such groups are tried again. 45:
  // collage's Winograd takes dilated convs and pads up to the dilated taps' span, so a
  // region's "winograd" variant builds more of its convs with it, and its tile blocks grow
  // where the transformed weights are large (winograd_conv.h). 46: the squeeze-excitation
  // step reads and writes channel blocks, so a "blocked" region stays blocked across it
  // (squeeze_excite.cc). 47: in a region built blocked, 3x3 depthwise convs run as collage's
  // own step (depthwise_conv2d.h). 48: that step splits its rows evenly over the threads
  // (it had split by channel block: an odd count of blocks left one thread more). 49: grouped
  // 3x3 convs of 4-channel groups (8 at stride 2) run as collage's own step (grouped_conv2d.h).
  constexpr int kKernelRevision = 49;
  return fmt::format("{}+r{}", library_version(), kKernelRevision);
}

std::string effective_isa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx512_mic:
      return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    default:
      return "other";
  }
}

Dims to_dims(const Shape& shape) {
  if (shape.empty()) return {1};
  return Dims(shape.begin(), shape.end());
}

std::string md_text(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  auto list = [](const dnnl_dim_t* v, int n) {
    return fmt::format("[{}]", fmt::join(v, v + n, ","));
  };
  std::string text = list(d.dims, d.ndims);
  if (d.format_kind != dnnl_blocked) return text + " (any layout)";
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  text += " strides " + list(b.strides, d.ndims);
  for (int i = 0; i < b.inner_nblks; ++i)
    text += fmt::format(" block {}:{}", b.inner_idxs[i], b.inner_blks[i]);
  if (d.offset0 != 0) text += fmt::format(" offset {}", d.offset0);
  return text;
}

dnnl::memory::desc plain_md(const Shape& shape) {
  Dims dims = to_dims(shape);
  if (dims.size() > DNNL_MAX_NDIMS)
    fail(ErrorKind::kUnsupported, "onednn: rank {} is beyond oneDNN's {}", dims.size(),
         DNNL_MAX_NDIMS);
  Dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * std::max<int64_t>(dims[i + 1], 1);
  return dnnl::memory::desc(dims, dt::f32, strides);
}

dnnl::memory::desc channel_blocked_md(const Dims& dims) {
  static const tag kBlocked[] = {tag::aBc16b, tag::aBcd16b, tag::aBcde16b};
  if (dims.size() < 3 || dims.size() > 5)
    fail(ErrorKind::kUnsupported, "onednn: no channel-blocked layout of rank {}", dims.size());
  return dnnl::memory::desc(dims, dt::f32, kBlocked[dims.size() - 3]);
}

dnnl::memory::desc axis_innermost_md(const Dims& dims, int axis) {
  Dims strides(dims.size());
  dnnl::memory::dim stride = 1;
  strides[axis] = stride;
  stride *= dims[axis];
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    if (d == axis) continue;
    strides[d] = stride;
    stride *= dims[d];
  }
  return dnnl::memory::desc(dims, dt::f32, strides);
}

Shape pad_rank(const Shape& shape, size_t rank) {
  Shape out(rank > shape.size() ? rank - shape.size() : 0, 1);
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

dnnl::primitive_attr base_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

OpenMpThreadsInScope::OpenMpThreadsInScope(int threads) : saved_(omp_get_max_threads()) {
  omp_set_num_threads(threads);
}

OpenMpThreadsInScope::~OpenMpThreadsInScope() {
  omp_set_num_threads(saved_);
}

bool is_reference_impl(const std::string& impl_info) {
  // Pooling's generic loops are as slow: "simple_nchw" ran a 3x3 MaxPool over 64x147x147 in
  // 9.4 ms, its jit kernel on channel blocks in 0.7 (pool_kernel.cc).
  for (const char* slow : {"ref", "simple_nchw", "simple_nhwc"})
    if (impl_info.rfind(slow, 0) == 0) return true;
  return false;
}

bool is_gemm_impl(const std::string& impl_info) {
  return impl_info.find("gemm") != std::string::npos;
}

Program::Program() : stream_(cpu_engine()) {}

dnnl::memory Program::input(int index, const dnnl::memory::desc& md) {
  dnnl::memory m(md, cpu_engine(), DNNL_MEMORY_NONE);
  inputs_.emplace_back(index, m);
  return m;
}

dnnl::memory Program::output(int index, const dnnl::memory::desc& md) {
  dnnl::memory m(md, cpu_engine(), DNNL_MEMORY_NONE);
  outputs_.emplace_back(index, m);
  return m;
}

dnnl::memory Program::buffer(const dnnl::memory::desc& md) {
  dnnl::memory m(md, cpu_engine());
  // Touch the pages now: a first touch inside run() costs a page fault per 4 KiB.
  std::memset(m.get_data_handle(), 0, md.get_size());
  buffers_.push_back(m);
  return m;
}

dnnl::memory Program::rewritten_buffer(const dnnl::memory::desc& md) {
  // Not touched: until finalize() it only stands for an address range, and then its memory
  // objects move into the arena (which is touched). A rewritten buffer no step uses is
  // never touched at all.
  dnnl::memory m(md, cpu_engine());
  buffers_.push_back(m);
  rewritten_.push_back(m);
  return m;
}

std::vector<std::string> Program::implementations() const {
  std::vector<std::string> out;
  for (const Step& step : steps_) {
    if (step.custom) {
      out.push_back(step.custom_name);
      continue;
    }
    const char* info = nullptr;
    dnnl_primitive_desc_query(step.primitive.get_primitive_desc(), dnnl_query_impl_info_str, 0,
                              &info);
    out.emplace_back(info ? info : "");
  }
  return out;
}

std::vector<dnnl::primitive::kind> Program::step_kinds() const {
  std::vector<dnnl::primitive::kind> out;
  for (const Step& step : steps_)
    out.push_back(step.custom ? step.custom_kind : step.primitive.get_kind());
  return out;
}

size_t Program::rewritten_bytes() const {
  size_t bytes = 0;
  for (const dnnl::memory& m : rewritten_) bytes += m.get_desc().get_size();
  return bytes;
}

void Program::find_rewritten_views() {
  // Each rewritten buffer's address range as allocated, and every memory object the steps use
  // inside one (one object may serve several steps), by its place in that buffer.
  ranges_.clear();
  views_.clear();
  for (const dnnl::memory& m : rewritten_)
    ranges_.push_back({static_cast<const char*>(m.get_data_handle()), m.get_desc().get_size()});
  std::set<dnnl_memory_t> seen;
  for (const Step& step : steps_)
    for (const dnnl::memory& m : step.memories) {
      const char* c = static_cast<const char*>(m.get_data_handle());
      for (size_t r = 0; r < ranges_.size(); ++r)
        if (c >= ranges_[r].base && c < ranges_[r].base + ranges_[r].bytes) {
          if (seen.insert(m.get()).second)
            views_.push_back({m, r, static_cast<size_t>(c - ranges_[r].base)});
          break;
        }
    }
}

void Program::place_rewritten_buffers(const std::vector<std::pair<size_t, size_t>>& span) {
  // Each rewritten buffer's lifetime: the spans of the steps using memory inside it.
  struct Life {
    size_t first = SIZE_MAX, last = 0;
  };
  constexpr size_t kAlign = 64;
  std::vector<Life> lives(ranges_.size());
  std::map<dnnl_memory_t, size_t> range_of;
  for (const RewrittenView& v : views_) range_of[v.memory.get()] = v.range;
  for (size_t s = 0; s < steps_.size(); ++s)
    for (const dnnl::memory& m : steps_[s].memories)
      if (auto it = range_of.find(m.get()); it != range_of.end()) {
        const auto [first, last] = span.empty() ? std::make_pair(s, s) : span[s];
        lives[it->second].first = std::min(lives[it->second].first, first);
        lives[it->second].last = std::max(lives[it->second].last, last);
      }
  // Greedy by size: each at the lowest offset clear of the placed ones it overlaps in time.
  std::vector<size_t> order;
  for (size_t r = 0; r < ranges_.size(); ++r)
    if (lives[r].first != SIZE_MAX) order.push_back(r);
  if (order.empty()) return;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ranges_[a].bytes > ranges_[b].bytes; });
  std::vector<size_t> placed;
  size_t total = 0;
  for (size_t r : order) {
    std::vector<std::pair<size_t, size_t>> taken;  // [begin, end) of live neighbours
    for (size_t p : placed)
      if (lives[p].first <= lives[r].last && lives[r].first <= lives[p].last)
        taken.emplace_back(ranges_[p].offset, ranges_[p].offset + ranges_[p].bytes);
    std::sort(taken.begin(), taken.end());
    size_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (offset + ranges_[r].bytes <= begin) break;
      offset = std::max(offset, (end + kAlign - 1) / kAlign * kAlign);
    }
    ranges_[r].offset = offset;
    total = std::max(total, offset + ranges_[r].bytes);
    placed.push_back(r);
  }
  // A new arena replaces the last one (placed again for concurrent stages).
  if (arena_) {
    buffers_.erase(std::remove_if(buffers_.begin(), buffers_.end(),
                                  [&](const dnnl::memory& m) { return m.get() == arena_.get(); }),
                   buffers_.end());
  }
  arena_ = buffer(dnnl::memory::desc({static_cast<int64_t>(total)}, dt::u8, tag::a));
  char* arena = static_cast<char*>(arena_.get_data_handle());
  for (RewrittenView& v : views_)
    v.memory.set_data_handle(arena + ranges_[v.range].offset + v.offset);
}

void Program::bind_scratchpads() {
  // One scratchpad per lane: steps of one lane run one after another, so they share it.
  const size_t lanes = std::max<size_t>(1, lane_streams_.size() + 1);
  size_t bytes = 0;
  for (const Step& s : steps_) bytes = std::max(bytes, s.scratchpad_md.get_size());
  if (bytes == 0) return;
  while (scratchpads_.size() < lanes)
    scratchpads_.push_back(
        buffer(dnnl::memory::desc({static_cast<int64_t>(bytes)}, dt::u8, tag::a)));
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& s = steps_[i];
    if (s.scratchpad_md.get_size() == 0) continue;
    const size_t lane = lane_of_step_.empty() ? 0 : lane_of_step_[i];
    dnnl::memory m(s.scratchpad_md, cpu_engine(), scratchpads_[lane].get_data_handle());
    if (s.scratchpad_arg < 0) {
      s.scratchpad_arg = static_cast<int>(s.args.size());
      s.args.push_back({DNNL_ARG_SCRATCHPAD, m.get()});
      s.memories.push_back(m);
    } else {
      s.args[s.scratchpad_arg].memory = m.get();
      s.memories[s.scratchpad_arg] = m;
    }
  }
}

dnnl::memory Program::constant(const Tensor& tensor, const dnnl::memory::desc& from,
                               const dnnl::memory::desc& to) {
  if (tensor.dtype() != DType::kFloat32)
    fail(ErrorKind::kUnsupported, "onednn: constant of type {}", dtype_name(tensor.dtype()));
  dnnl::memory src(from, cpu_engine(), tensor.raw());
  dnnl::memory dst = buffer(to);
  dnnl::stream s(cpu_engine());
  create_pd("constant reorder", [&] { return dnnl::reorder(src, dst); }).execute(s, src, dst);
  s.wait();
  return dst;
}

dnnl::memory Program::in_layout(const dnnl::memory& from, const dnnl::memory::desc& md) {
  if (from.get_desc() == md) return from;
  dnnl::memory m = rewritten_buffer(md);  // the reorder below writes it whole each run
  copy(from, m);
  return m;
}

void Program::copy(const dnnl::memory& from, const dnnl::memory& to) {
  if (auto transpose = channel_transpose(from.get_desc(), to.get_desc())) {
    add_custom(
        "collage:channel_transpose",
        [transpose = std::move(*transpose)](const dnnl_exec_arg_t* args, int count) {
          transpose(custom_step_data(args, count, DNNL_ARG_FROM),
                    custom_step_data(args, count, DNNL_ARG_TO));
          return dnnl_success;
        },
        {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}, dnnl::primitive::kind::reorder);
    return;
  }
  dnnl::primitive_attr attr = base_attr();
  auto pd = create_pd(
      fmt::format("reorder from {} to {}", md_text(from.get_desc()), md_text(to.get_desc())), [&] {
        return dnnl::reorder::primitive_desc(cpu_engine(), from.get_desc(), cpu_engine(),
                                             to.get_desc(), attr);
      });
  add(dnnl::reorder(pd), pd, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

void Program::add(const dnnl::primitive& primitive, const dnnl::primitive_desc_base& pd,
                  std::vector<std::pair<int, dnnl::memory>> args) {
  Step step;
  step.primitive = primitive;
  step.scratchpad_md = pd.scratchpad_desc();
  push_step(std::move(step), args);
}

void Program::add_custom(std::string name, CustomStep custom,
                         std::vector<std::pair<int, dnnl::memory>> args,
                         dnnl::primitive::kind kind) {
  Step step;
  step.custom = std::move(custom);
  step.custom_name = std::move(name);
  step.custom_kind = kind;
  push_step(std::move(step), args);
}

void Program::add_unary_custom(std::string name, UnaryCustomStep run, const dnnl::memory& src,
                               const dnnl::memory& dst, dnnl::primitive::kind kind) {
  add_custom(
      std::move(name),
      [run = std::move(run)](const dnnl_exec_arg_t* args, int count) {
        return run(custom_step_data(args, count, DNNL_ARG_SRC),
                   custom_step_data(args, count, DNNL_ARG_DST));
      },
      {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, kind);
}

void Program::push_step(Step step, const std::vector<std::pair<int, dnnl::memory>>& args) {
  for (const auto& [arg, memory] : args) {
    step.args.push_back({arg, memory.get()});
    step.memories.push_back(memory);
  }
  steps_.push_back(std::move(step));
}

void Program::rollback(const Mark& mark) {
  inputs_.resize(mark.inputs);
  outputs_.resize(mark.outputs);
  steps_.resize(mark.steps);
}

void Program::finalize(Lanes lanes, LaneMemo* memo) {
  find_rewritten_views();
  place_rewritten_buffers({});
  bind_scratchpads();
  if (lanes != Lanes::kSequential) choose_lanes(lanes, memo);
}

dnnl_status_t Program::execute(size_t step, dnnl::stream& stream) {
  return execute_with(steps_[step], stream, steps_[step].args);
}

dnnl_status_t Program::execute_with(const Step& step, dnnl::stream& stream,
                                    const std::vector<dnnl_exec_arg_t>& args) {
  if (step.custom) return step.custom(args.data(), static_cast<int>(args.size()));
  return dnnl_primitive_execute(step.primitive.get(), stream.get(), static_cast<int>(args.size()),
                                args.data());
}

void Program::run_steps(size_t begin, size_t end) {
  for (size_t s = begin; s < end; ++s) check(execute(s, stream_));
}

void Program::run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  for (auto& [index, memory] : inputs_) memory.set_data_handle(inputs[index].raw());
  for (auto& [index, memory] : outputs_) memory.set_data_handle(outputs[index].raw());
  if (stages_.empty()) {
    run_steps(0, steps_.size());
  } else {
    for (size_t i = 0; i < stages_.size(); ++i) {
      if (stages_[i].lanes.empty())
        run_steps(stages_[i].begin, stages_[i].end);
      else
        run_lanes(i);
    }
  }
  dnnl_stream_wait(stream_.get());
}

float* custom_step_data(const dnnl_exec_arg_t* args, int count, int arg) {
  void* p = nullptr;
  for (int i = 0; i < count && !p; ++i)
    if (args[i].arg == arg) dnnl_memory_get_data_handle(args[i].memory, &p);
  return static_cast<float*>(p);
}

std::optional<Dims> plain_strides(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked || d.format_desc.blocking.inner_nblks != 0) return std::nullopt;
  return Dims(d.format_desc.blocking.strides, d.format_desc.blocking.strides + d.ndims);
}

bool flat_f32(const dnnl::memory& m, int64_t numel) {
  const dnnl::memory::desc md = m.get_desc();
  return md.data.data_type == dnnl_f32 && md.data.offset0 == 0 &&
         md.get_size() == static_cast<size_t>(numel) * sizeof(float);
}

bool is_graph_output(const Graph& g, ValueId v) {
  return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
}

NodeId sole_reader(const Graph& g, const std::vector<std::vector<NodeId>>& consumers, ValueId v) {
  if (v == kNoValue || consumers[v].size() != 1 || is_graph_output(g, v)) return -1;
  return g.node(consumers[v][0]).domain.empty() ? consumers[v][0] : -1;
}

int input_index(const Graph& subgraph, ValueId value) {
  auto it = std::find(subgraph.inputs.begin(), subgraph.inputs.end(), value);
  return it == subgraph.inputs.end() ? -1 : static_cast<int>(it - subgraph.inputs.begin());
}

bool is_f32(const Graph& g, ValueId v) {
  return v != kNoValue && g.value(v).dtype == DType::kFloat32;
}

void require_f32(const Graph& graph, ValueId value, const char* what) {
  if (value == kNoValue || graph.value(value).dtype != DType::kFloat32)
    fail(ErrorKind::kUnsupported, "onednn: {} must be float32", what);
}

bool is_plain(const dnnl::memory::desc& md) {
  const Dims dims = md.dims();
  return md.data_type() == dt::f32 && md == plain_md(Shape(dims.begin(), dims.end()));
}

}  // namespace collage::onednn
