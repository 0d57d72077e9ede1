#include "backends/onednn/dnnl_common.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>

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
  // rewritten buffers share one arena (Program::finalize).
  constexpr int kKernelRevision = 6;
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

dnnl::memory Program::rewritten_buffer(const dnnl::memory::desc& md) {
  // Not touched: until finalize() it only stands for an address range, and then its memory
  // objects move into the arena (which is touched). A rewritten buffer no step uses is
  // never touched at all.
  dnnl::memory m(md, cpu_engine());
  buffers_.push_back(m);
  rewritten_.push_back(m);
  return m;
}

size_t Program::rewritten_bytes() const {
  size_t bytes = 0;
  for (const dnnl::memory& m : rewritten_) bytes += m.get_desc().get_size();
  return bytes;
}

void Program::share_rewritten_buffers() {
  // Each rewritten buffer's lifetime: the first and last step using memory inside it (the
  // buffer itself, or a view made from its address).
  struct Life {
    const char* base;
    size_t bytes, first = SIZE_MAX, last = 0, offset = 0;
  };
  constexpr size_t kAlign = 64;
  std::vector<Life> lives;
  for (const dnnl::memory& m : rewritten_)
    lives.push_back({static_cast<const char*>(m.get_data_handle()), m.get_desc().get_size()});
  auto owner = [&](const void* p) -> Life* {
    const char* c = static_cast<const char*>(p);
    for (Life& l : lives)
      if (c >= l.base && c < l.base + l.bytes) return &l;
    return nullptr;
  };
  for (size_t s = 0; s < steps_.size(); ++s)
    for (const dnnl::memory& m : steps_[s].memories)
      if (Life* l = owner(m.get_data_handle())) {
        l->first = std::min(l->first, s);
        l->last = std::max(l->last, s);
      }
  // Greedy by size: each at the lowest offset clear of the placed ones it overlaps in time.
  std::vector<Life*> order;
  for (Life& l : lives)
    if (l.first != SIZE_MAX) order.push_back(&l);
  if (order.empty()) return;
  std::stable_sort(order.begin(), order.end(),
                   [](const Life* a, const Life* b) { return a->bytes > b->bytes; });
  std::vector<Life*> placed;
  size_t total = 0;
  for (Life* l : order) {
    std::vector<std::pair<size_t, size_t>> taken;  // [begin, end) of live neighbours
    for (const Life* p : placed)
      if (p->first <= l->last && l->first <= p->last)
        taken.emplace_back(p->offset, p->offset + p->bytes);
    std::sort(taken.begin(), taken.end());
    size_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (offset + l->bytes <= begin) break;
      offset = std::max(offset, (end + kAlign - 1) / kAlign * kAlign);
    }
    l->offset = offset;
    total = std::max(total, offset + l->bytes);
    placed.push_back(l);
  }
  arena_ = buffer(dnnl::memory::desc({static_cast<int64_t>(total)}, dt::u8, tag::a));
  char* arena = static_cast<char*>(arena_.get_data_handle());
  // Every memory object the steps use once (one object may serve several steps), moved by
  // its address's place in its buffer.
  std::vector<std::pair<dnnl::memory, char*>> moves;
  std::set<dnnl_memory_t> seen;
  for (const Step& step : steps_)
    for (const dnnl::memory& m : step.memories)
      if (const Life* l = owner(m.get_data_handle()); l && seen.insert(m.get()).second)
        moves.emplace_back(
            m, arena + l->offset + (static_cast<const char*>(m.get_data_handle()) - l->base));
  for (auto& [m, handle] : moves) m.set_data_handle(handle);
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
  share_rewritten_buffers();
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
