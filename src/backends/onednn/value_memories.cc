#include "backends/onednn/value_memories.h"

#include <algorithm>

namespace collage::onednn {
namespace {

Shape dims_of(const dnnl::memory::desc& md) {
  const Dims d = md.dims();
  return Shape(d.begin(), d.end());
}

}  // namespace

void ValueMemories::bind_input(ValueId v, int index, const Shape& shape) {
  entries_[v] = Entry{BoundMemory{program_->input(index, plain_md(shape)), index, -1}, {}};
}

void ValueMemories::bind_output(ValueId v, int index, const Shape& shape) {
  entries_[v] = Entry{BoundMemory{program_->output(index, plain_md(shape)), -1, index}, {}};
}

void ValueMemories::bind_plain_boundary(const Graph& graph) {
  for (size_t i = 0; i < graph.inputs.size(); ++i)
    bind_input(graph.inputs[i], static_cast<int>(i), graph.value(graph.inputs[i]).shape);
  for (size_t i = 0; i < graph.outputs.size(); ++i)
    bind_output(graph.outputs[i], static_cast<int>(i), graph.value(graph.outputs[i]).shape);
}

const ValueMemories::Entry& ValueMemories::entry(ValueId v) const {
  auto it = entries_.find(v);
  if (it == entries_.end())
    fail(ErrorKind::kUnsupported, "onednn: value {} is not available to this kernel", v);
  return it->second;
}

ValueMemories::Entry& ValueMemories::at(ValueId v) {
  return const_cast<Entry&>(entry(v));
}

dnnl::memory ValueMemories::view_of(const BoundMemory& b, const dnnl::memory::desc& md) {
  if (b.memory.get_desc() == md) return b.memory;
  if (md.get_size() > b.memory.get_desc().get_size())
    fail(ErrorKind::kUnsupported, "onednn: a view larger than its value");
  if (b.input >= 0) return program_->input(b.input, md);
  if (b.output >= 0) return program_->output(b.output, md);
  // A program buffer: it outlives the program's steps, so its handle is stable.
  return dnnl::memory(md, cpu_engine(), b.memory.get_data_handle());
}

const BoundMemory* ValueMemories::plain_form(const Entry& e) {
  if (is_plain(e.primary.memory.get_desc())) return &e.primary;
  for (const BoundMemory& c : e.copies)
    if (is_plain(c.memory.get_desc())) return &c;
  return nullptr;
}

BoundMemory ValueMemories::plain(ValueId v) {
  Entry& e = at(v);
  if (const BoundMemory* made = plain_form(e)) return *made;
  dnnl::memory m = program_->rewritten_buffer(plain_md(dims_of(e.primary.memory.get_desc())));
  program_->copy(e.primary.memory, m);
  e.copies.push_back(BoundMemory{m});
  return e.copies.back();
}

dnnl::memory ValueMemories::as_is(ValueId v, const Shape& shape) {
  const dnnl::memory& m = at(v).primary.memory;
  const Dims want = to_dims(shape);
  if (m.get_desc().dims() == want) return m;
  return view(v, plain_md(shape));
}

bool ValueMemories::would_reorder(ValueId v, const dnnl::memory::desc& md) const {
  const Entry& e = entry(v);
  const dnnl::memory::desc have = e.primary.memory.get_desc();
  if (have == md || is_plain(have) || have.dims() != md.dims()) return false;
  return std::none_of(e.copies.begin(), e.copies.end(),
                      [&](const BoundMemory& c) { return c.memory.get_desc() == md; });
}

dnnl::memory ValueMemories::read(ValueId v, const dnnl::memory::desc& md) {
  Entry& e = at(v);
  if (e.primary.memory.get_desc() == md) return e.primary.memory;
  for (const BoundMemory& c : e.copies)
    if (c.memory.get_desc() == md) return c.memory;
  if (dims_of(e.primary.memory.get_desc()) != dims_of(md)) {
    dnnl::memory p = view(v, plain_md(dims_of(md)));
    return program_->in_layout(p, md);
  }
  dnnl::memory m = program_->rewritten_buffer(md);
  program_->copy(e.primary.memory, m);
  at(v).copies.push_back(BoundMemory{m});
  return m;
}

dnnl::memory ValueMemories::view(ValueId v, const dnnl::memory::desc& md) {
  return view_of(plain(v), md);
}

dnnl::memory ValueMemories::destination(ValueId v, const dnnl::memory::desc& md) {
  auto it = entries_.find(v);
  if (it != entries_.end()) {
    const BoundMemory& b = it->second.primary;
    if (b.memory.get_desc() == md) return b.memory;
    if (is_plain(b.memory.get_desc()) && is_plain(md) &&
        md.get_size() == b.memory.get_desc().get_size())
      return view_of(b, md);
  }
  // Every emitter that asks for a destination writes it whole with the step it adds next
  // (fresh_destination is for those that do not: Pad fills its border once).
  dnnl::memory m = program_->rewritten_buffer(md);
  if (it != entries_.end()) staged_[v] = m;
  return m;
}

void ValueMemories::produced(ValueId v, const dnnl::memory& written) {
  auto it = entries_.find(v);
  if (it == entries_.end()) {
    entries_[v] = Entry{BoundMemory{written}, {}};
    return;
  }
  Entry& e = it->second;
  if (e.home && written.get() == e.home.get()) {
    e.written = true;  // its producer wrote the home
    return;
  }
  // Readers inside the kernel keep the producer's layout; the bound output (or the home)
  // gets a copy.
  auto staged = staged_.find(v);
  if (staged != staged_.end() && staged->second.get() == written.get()) {
    program_->copy(written, e.primary.memory);
    e.written = e.written || (e.home && e.primary.memory.get() == e.home.get());
    e.copies = {e.primary};
    staged_.erase(staged);
  } else if (e.home && !e.written) {
    // A value with a home written elsewhere (an emitter that picks its own memory).
    program_->copy(written, e.home);
    e.copies = {BoundMemory{e.home}};
    e.written = true;
  } else {
    return;
  }
  e.primary = BoundMemory{written};
  e.last_read = false;
}

void ValueMemories::place(ValueId v, const dnnl::memory& home) {
  Entry e{BoundMemory{home}, {}};
  e.aliased = true;  // other values share its buffer: nothing overwrites it in place
  e.home = home;
  entries_[v] = std::move(e);
}

std::optional<dnnl::memory::desc> ValueMemories::home_layout(ValueId v) const {
  auto it = entries_.find(v);
  if (it == entries_.end() || !it->second.home || it->second.written) return std::nullopt;
  return it->second.home.get_desc();
}

std::optional<dnnl::memory::desc> ValueMemories::kept_layout(ValueId v, const Shape& shape) const {
  if (!keep_input_layouts_) return std::nullopt;
  return activation_layout(v, shape);
}

std::optional<dnnl::memory::desc> ValueMemories::activation_layout(ValueId v,
                                                                   const Shape& shape) const {
  auto it = entries_.find(v);
  if (it == entries_.end()) return std::nullopt;
  const dnnl::memory::desc md = it->second.primary.memory.get_desc();
  if (md.dims() != to_dims(shape) || is_plain(md)) return std::nullopt;
  return md;
}

bool ValueMemories::concat_in_place(ValueId y, const std::vector<ValueId>& xs) {
  auto out = entries_.find(y);
  if (out == entries_.end() || !out->second.home || xs.empty()) return false;
  const dnnl::memory& whole = out->second.home;
  const char* next = static_cast<const char*>(whole.get_data_handle());
  for (ValueId x : xs) {
    auto it = entries_.find(x);
    if (it == entries_.end() || !it->second.home) return false;
    const dnnl::memory& h = it->second.home;
    if (static_cast<const char*>(h.get_data_handle()) != next) return false;
    next += h.get_desc().get_size();
  }
  if (next != static_cast<const char*>(whole.get_data_handle()) + whole.get_desc().get_size())
    return false;
  for (ValueId x : xs) {
    Entry& e = entries_.at(x);
    if (e.written) continue;
    const Dims dims = e.home.get_desc().dims();
    program_->copy(as_is(x, Shape(dims.begin(), dims.end())), e.home);
    e.copies.push_back(BoundMemory{e.home});
    e.written = true;
  }
  Entry& e = out->second;
  e.primary = BoundMemory{whole};
  e.written = true;
  return true;
}

bool ValueMemories::can_overwrite(ValueId v, const dnnl::memory& m, ValueId out,
                                  const dnnl::memory::desc& md) const {
  auto it = entries_.find(v);
  if (it == entries_.end() || has(out)) return false;
  const Entry& e = it->second;
  return e.last_read && !e.aliased && e.primary.input < 0 && e.primary.output < 0 &&
         e.primary.memory.get() == m.get() && m.get_desc() == md;
}

dnnl::memory ValueMemories::sub_view(ValueId v, const Shape& whole, const Dims& dims,
                                     const Dims& offsets) {
  const BoundMemory primary = at(v).primary;
  const dnnl::memory::desc have = primary.memory.get_desc();
  if (have.dims() == to_dims(whole)) {
    // dnnl_memory_desc_init_submemory refuses (an error status, no throw with allow_empty)
    // what the layout can't describe: then the row-major form, where every cut can.
    const dnnl::memory::desc sub = have.submemory_desc(dims, offsets, true);
    if (sub.data.ndims != 0) return view_of(primary, sub);
  }
  // MaxViT's qkv MatMul writes [3136, 192] for the [1, 64, 49, 192] its Split cuts: a
  // sub-memory of the 2-D desc took the first two of the cut's dims, and the reorder from
  // [1, 64] to the cut refused the whole region.
  return view_of(plain(v), plain_md(whole).submemory_desc(dims, offsets));
}

dnnl::memory ValueMemories::fresh_destination(ValueId v, const dnnl::memory::desc& md) {
  dnnl::memory m = program_->buffer(md);
  if (has(v)) staged_[v] = m;
  return m;
}

void ValueMemories::reshape(ValueId out, ValueId in, const Shape& shape) {
  const dnnl::memory::desc md = plain_md(shape);
  if (has(out)) {
    // A blocked value flattened into a bound output (a detector's heatmap going to a TopK
    // outside the kernel): one reorder straight into the output, which is the value's
    // row-major form too, instead of a reorder into a buffer and a copy (CenterNet's
    // 1x80x128x128 heatmap: 0.52 + 0.23 ms). Later readers of that form read it there.
    Entry& source = at(in);
    const Entry& target = at(out);
    const dnnl::memory::desc in_plain = plain_md(dims_of(source.primary.memory.get_desc()));
    if (!plain_form(source) && !target.home && target.primary.output >= 0 &&
        is_plain(target.primary.memory.get_desc()) &&
        target.primary.memory.get_desc().get_size() == in_plain.get_size()) {
      const dnnl::memory into = view_of(target.primary, in_plain);
      program_->copy(source.primary.memory, into);
      source.copies.push_back(BoundMemory{into, -1, target.primary.output});
      return;
    }
  }
  BoundMemory src = plain(in);
  if (has(out)) {
    dnnl::memory dst = destination(out, md);
    program_->copy(view_of(src, md), dst);
    produced(out, dst);
    return;
  }
  at(in).aliased = true;
  entries_[out] = Entry{BoundMemory{view_of(src, md), src.input, src.output}, {}};
  entries_[out].aliased = true;
}

}  // namespace collage::onednn
