// Where a kernel's activations live while its Program is built. Emitters read their
// operands from and record their results in a ValueMemories instead of binding kernel
// inputs and outputs themselves, so one emitter serves both a single-group kernel (plain
// memories at its boundary) and a whole region, where each value stays in the layout its
// producer preferred and is reordered only where a consumer wants another.
#pragma once

#include <map>
#include <optional>
#include <vector>

#include "backends/onednn/dnnl_common.h"

namespace collage::onednn {

// A memory holding a value. Kernel inputs and outputs get their data handle only when the
// program runs, so a view of one must be registered with the program under the same
// index rather than built on its (still empty) handle.
struct BoundMemory {
  dnnl::memory memory;
  int input = -1, output = -1;
};

class ValueMemories {
 public:
  // The value in the layout its producer wrote, and the conversions made of it so far
  // (reused by later readers instead of reordering again).
  struct Entry {
    BoundMemory primary;
    std::vector<BoundMemory> copies;
    // Set by a region for a value the group being emitted reads last: its buffer may then
    // be overwritten (a residual summed in place). Never for a buffer another value views.
    bool last_read = false;
    bool aliased = false;
    // Its slice of a concatenation done in place (concat_in_place.h), when it has one: the
    // producer writes there, or the value is copied there once it is produced.
    dnnl::memory home;
    bool written = false;  // the home holds the value
  };

  explicit ValueMemories(Program& program) : program_(&program) {}
  Program& program() { return *program_; }

  // `v` is kernel input (output) `index`, plain row-major of `shape`.
  void bind_input(ValueId v, int index, const Shape& shape);
  void bind_output(ValueId v, int index, const Shape& shape);
  // Binds every input and output of `graph` plain, at its index.
  void bind_plain_boundary(const Graph& graph);

  bool has(ValueId v) const { return entries_.count(v) != 0; }
  const Entry& entry(ValueId v) const;
  void set(ValueId v, Entry entry) { entries_[v] = std::move(entry); }

  // `v` as it is, when its memory has `shape`'s dims; else its row-major data viewed as
  // `shape` (a value a folded MatMul wrote 2-D). Primitives that take any layout read this.
  dnnl::memory as_is(ValueId v, const Shape& shape);
  // True when reading `v` in layout `md` would add a reorder of a value a producer in the
  // program wrote in another activation layout (not a row-major kernel input, not a copy
  // made already).
  bool would_reorder(ValueId v, const dnnl::memory::desc& md) const;
  // `v` in layout `md` (same dims), reordered once per distinct layout.
  dnnl::memory read(ValueId v, const dnnl::memory::desc& md);
  // `v`'s row-major data seen through `md` (a reshape, a broadcast-padded rank, a
  // transposed stride); a blocked `v` is reordered to row-major first.
  dnnl::memory view(ValueId v, const dnnl::memory::desc& md);

  // The memory the primitive producing `v` writes in layout `md`: v's bound output (or a
  // view of it) when the layouts agree, else a new buffer. Call produced() after adding
  // the primitive: it adds the conversion into the bound output when one was staged.
  dnnl::memory destination(ValueId v, const dnnl::memory::desc& md);
  void produced(ValueId v, const dnnl::memory& written);
  // True when the primitive producing `out` in layout `md` may write over `v`'s memory `m`
  // in place: `v` is read last here, `m` is its own program buffer in that layout, and
  // `out` has no bound memory of its own.
  bool can_overwrite(ValueId v, const dnnl::memory& m, ValueId out,
                     const dnnl::memory::desc& md) const;
  // `out` is `in`'s row-major data with `shape` (Flatten, Reshape): no data moves unless
  // `in` is blocked or `out` is a bound output.
  void reshape(ValueId out, ValueId in, const Shape& shape);

  // The part of `v` (of shape `whole`) of `dims` starting at `offsets` (Slice, Split), in
  // the layout `v` has when a sub-memory of it can be described there (a blocked layout
  // cuts channels only at block boundaries), else in its row-major form seen as `whole`
  // (its producer may have written it with other dims: a MatMul's flattened batch).
  dnnl::memory sub_view(ValueId v, const Shape& whole, const Dims& dims, const Dims& offsets);
  // `v`'s memory as it is, described by `md` (the same bytes seen with other dims and
  // strides: a split dimension, permuted strides).
  dnnl::memory reinterpret(ValueId v, const dnnl::memory::desc& md) {
    return view_of(at(v).primary, md);
  }
  // A new program buffer of layout `md` that the primitive producing `v` writes, never a
  // view of v's bound output (a Pad keeps its border in it from compile time on; a
  // Transpose writes it through permuted strides). produced() copies it to the bound output.
  dnnl::memory fresh_destination(ValueId v, const dnnl::memory::desc& md);
  // Concatenations in place (concat_in_place.h). `v` is to live in `home` (a dense slice of
  // a root buffer), written by its producer when it writes that layout, else copied there.
  void place(ValueId v, const dnnl::memory& home);
  // The layout of v's home while nothing is written there yet: what its producer should
  // write.
  std::optional<dnnl::memory::desc> home_layout(ValueId v) const;
  // When every input of the concatenation `y` of `xs` has its home and these homes tile y's
  // side by side: fills the homes not yet written and makes y's home its memory (no step
  // moves the data already in place). False otherwise (nothing done: the caller copies).
  bool concat_in_place(ValueId y, const std::vector<ValueId>& xs);
  // In a region with concatenations in place, convolutions read their input in the layout it
  // has rather than reordering it to the one they would pick (keeps the channel-blocked
  // slices' readers in that layout).
  void keep_input_layouts(bool keep) { keep_input_layouts_ = keep; }
  bool keeps_input_layouts() const { return keep_input_layouts_; }
  // `v`'s layout when readers should keep it (above) and it is not row-major with `shape`'s
  // dims; else nullopt.
  std::optional<dnnl::memory::desc> kept_layout(ValueId v, const Shape& shape) const;
  // `v`'s layout when it has `shape`'s dims and is not row-major (an activation layout a
  // producer chose); else nullopt.
  std::optional<dnnl::memory::desc> activation_layout(ValueId v, const Shape& shape) const;

  // No later group may write over `v`'s memory in place (its buffer holds more than the
  // value each run rewrites).
  void keep_intact(ValueId v) { at(v).aliased = true; }

 private:
  Entry& at(ValueId v);
  // The row-major form of `v`, made by a reorder if it has none yet.
  BoundMemory plain(ValueId v);
  // The row-major form `e` has already (its own layout or a copy made), else nullptr.
  static const BoundMemory* plain_form(const Entry& e);
  dnnl::memory view_of(const BoundMemory& b, const dnnl::memory::desc& md);

  Program* program_;
  bool keep_input_layouts_ = false;
  std::map<ValueId, Entry> entries_;
  std::map<ValueId, dnnl::memory> staged_;
};

}  // namespace collage::onednn
