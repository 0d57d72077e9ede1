#include "backends/onednn/dnnl_common.h"

#include <algorithm>
#include <cstring>

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
  constexpr int kKernelRevision = 5;
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

bool is_reference_impl(const std::string& impl_info) {
  return impl_info.rfind("ref", 0) == 0;
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
  dnnl::memory m = buffer(md);
  copy(from, m);
  return m;
}

void Program::copy(const dnnl::memory& from, const dnnl::memory& to) {
  dnnl::primitive_attr attr = base_attr();
  auto pd = create_pd("reorder", [&] {
    return dnnl::reorder::primitive_desc(cpu_engine(), from.get_desc(), cpu_engine(), to.get_desc(),
                                         attr);
  });
  add(dnnl::reorder(pd), pd, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

void Program::add(const dnnl::primitive& primitive, const dnnl::primitive_desc_base& pd,
                  std::vector<std::pair<int, dnnl::memory>> args) {
  Step step;
  step.primitive = primitive;
  for (auto& [arg, memory] : args) {
    step.args.push_back({arg, memory.get()});
    step.memories.push_back(memory);
  }
  step.scratchpad_md = pd.scratchpad_desc();
  steps_.push_back(std::move(step));
}

void Program::rollback(const Mark& mark) {
  inputs_.resize(mark.inputs);
  outputs_.resize(mark.outputs);
  steps_.resize(mark.steps);
}

void Program::finalize() {
  size_t bytes = 0;
  for (const Step& s : steps_) bytes = std::max(bytes, s.scratchpad_md.get_size());
  if (bytes == 0) return;
  scratchpad_ = buffer(dnnl::memory::desc({static_cast<int64_t>(bytes)}, dt::u8, tag::a));
  for (Step& s : steps_) {
    if (s.scratchpad_md.get_size() == 0) continue;
    dnnl::memory m(s.scratchpad_md, cpu_engine(), scratchpad_.get_data_handle());
    s.args.push_back({DNNL_ARG_SCRATCHPAD, m.get()});
    s.memories.push_back(m);
  }
}

void Program::run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  for (auto& [index, memory] : inputs_) memory.set_data_handle(inputs[index].raw());
  for (auto& [index, memory] : outputs_) memory.set_data_handle(outputs[index].raw());
  for (const Step& s : steps_) {
    dnnl_status_t status = dnnl_primitive_execute(s.primitive.get(), stream_.get(),
                                                  static_cast<int>(s.args.size()), s.args.data());
    if (status != dnnl_success)
      fail(ErrorKind::kBackend, "onednn: primitive execution failed (status {})",
           static_cast<int>(status));
  }
  dnnl_stream_wait(stream_.get());
}

int input_index(const Graph& subgraph, ValueId value) {
  auto it = std::find(subgraph.inputs.begin(), subgraph.inputs.end(), value);
  return it == subgraph.inputs.end() ? -1 : static_cast<int>(it - subgraph.inputs.begin());
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
