// A set of node ids as a bitset: the search's state and candidates' footprints.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "collage/graph.h"

namespace collage {

class NodeSet {
 public:
  NodeSet() = default;
  explicit NodeSet(size_t num_nodes) : words_(words_for(num_nodes), 0) {}
  // 64-bit words of a set over `num_nodes` nodes.
  static size_t words_for(size_t num_nodes) { return (num_nodes + 63) / 64; }
  NodeSet(size_t num_nodes, const std::vector<NodeId>& nodes) : NodeSet(num_nodes) {
    for (NodeId n : nodes) insert(n);
  }

  void insert(NodeId n) { words_[n / 64] |= uint64_t{1} << (n % 64); }
  bool contains(NodeId n) const { return (words_[n / 64] >> (n % 64)) & 1; }
  bool intersects(const NodeSet& o) const {
    for (size_t i = 0; i < words_.size(); ++i)
      if (words_[i] & o.words_[i]) return true;
    return false;
  }
  // True when every element of this set is in `o`.
  bool subset_of(const NodeSet& o) const {
    for (size_t i = 0; i < words_.size(); ++i)
      if (words_[i] & ~o.words_[i]) return false;
    return true;
  }
  NodeSet& operator|=(const NodeSet& o) {
    for (size_t i = 0; i < words_.size(); ++i) words_[i] |= o.words_[i];
    return *this;
  }
  // The smallest id not in the set, or `num_nodes` when all are in.
  NodeId first_missing(size_t num_nodes) const {
    for (size_t i = 0; i < words_.size(); ++i)
      if (~words_[i]) {
        NodeId n = static_cast<NodeId>(i * 64 + __builtin_ctzll(~words_[i]));
        return n < static_cast<NodeId>(num_nodes) ? n : static_cast<NodeId>(num_nodes);
      }
    return static_cast<NodeId>(num_nodes);
  }
  bool operator==(const NodeSet& o) const { return words_ == o.words_; }
  // The bits, 64 nodes per word: for storing many sets side by side (the op-level search
  // keeps a million of them in one array rather than a million small allocations).
  const std::vector<uint64_t>& words() const { return words_; }
  void assign_words(const uint64_t* words) {
    std::copy(words, words + words_.size(), words_.begin());
  }
  size_t hash() const {
    size_t h = 0;
    for (uint64_t w : words_) h = h * 1000003u ^ std::hash<uint64_t>()(w);
    return h;
  }

 private:
  std::vector<uint64_t> words_;
};

struct NodeSetHash {
  size_t operator()(const NodeSet& s) const { return s.hash(); }
};

}  // namespace collage
