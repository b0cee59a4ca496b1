// A set of nodes by address, kept in one array (open addressing, linear probing): a round on a
// big graph claims, removes, creates and touches hundreds of thousands of nodes, and
// std::unordered_set allocates a heap node for each and a bucket array besides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

#include <onnx/onnx_pb.h>

namespace onnx_rewrite {

class NodeSet {
 public:
  using Node = const onnx::NodeProto*;

  NodeSet() = default;
  NodeSet(const NodeSet&) = default;
  NodeSet& operator=(const NodeSet&) = default;
  // A set moved from is empty and usable (the size must go with the slots).
  NodeSet(NodeSet&& other) noexcept : slots_(std::exchange(other.slots_, {})), size_(std::exchange(other.size_, 0)) {}
  NodeSet& operator=(NodeSet&& other) noexcept {
    slots_ = std::exchange(other.slots_, {});
    size_ = std::exchange(other.size_, 0);
    return *this;
  }

  // Whether `node` was not in the set.
  bool insert(Node node) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();
    size_t i = home(node);
    for (; slots_[i]; i = next(i)) {
      if (slots_[i] == node) return false;
    }
    slots_[i] = node;
    ++size_;
    return true;
  }

  bool contains(Node node) const {
    if (size_ == 0) return false;
    for (size_t i = home(node); slots_[i]; i = next(i)) {
      if (slots_[i] == node) return true;
    }
    return false;
  }

  // Whether `node` was in the set. The entries after it in its run move back to fill the hole
  // (no tombstones: a set that sees many erasures never fills up with them).
  bool erase(Node node) {
    if (size_ == 0) return false;
    size_t hole = home(node);
    for (; slots_[hole] != node; hole = next(hole)) {
      if (!slots_[hole]) return false;
    }
    for (size_t i = next(hole); slots_[i]; i = next(i)) {
      const size_t wanted = home(slots_[i]);
      // An entry moves into the hole unless its home lies after the hole, up to where it is.
      const bool stays = hole <= i ? (hole < wanted && wanted <= i) : (hole < wanted || wanted <= i);
      if (!stays) {
        slots_[hole] = slots_[i];
        hole = i;
      }
    }
    slots_[hole] = nullptr;
    --size_;
    return true;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void clear() {
    slots_.clear();
    size_ = 0;
  }

  // In no particular order (that of the addresses' hashes).
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Node;
    using difference_type = std::ptrdiff_t;
    using pointer = const Node*;
    using reference = Node;

    const_iterator(const Node* at, const Node* end) : at_(at), end_(end) { skip_empty(); }
    Node operator*() const { return *at_; }
    const_iterator& operator++() {
      ++at_;
      skip_empty();
      return *this;
    }
    bool operator==(const const_iterator& other) const { return at_ == other.at_; }
    bool operator!=(const const_iterator& other) const { return at_ != other.at_; }

   private:
    void skip_empty() {
      while (at_ != end_ && !*at_) ++at_;
    }
    const Node* at_;
    const Node* end_;
  };
  const_iterator begin() const { return {slots_.data(), slots_.data() + slots_.size()}; }
  const_iterator end() const { return {slots_.data() + slots_.size(), slots_.data() + slots_.size()}; }

 private:
  // An address's low bits are alignment: the multiplication spreads every bit of it into the
  // upper half, whose low bits pick the slot. (Its top bits would order the slots as the hashes
  // are ordered, and filling a small set in the order a big one iterates would pile every entry
  // onto the first slots.)
  size_t home(Node node) const {
    return static_cast<size_t>((reinterpret_cast<uintptr_t>(node) * 0x9E3779B97F4A7C15ull) >> 32) & (slots_.size() - 1);
  }
  size_t next(size_t i) const { return (i + 1) & (slots_.size() - 1); }

  void grow() {
    std::vector<Node> old(slots_.empty() ? 16 : slots_.size() * 2, nullptr);
    old.swap(slots_);
    size_ = 0;
    for (Node node : old) {
      if (node) insert(node);
    }
  }

  std::vector<Node> slots_;  // nullptr: empty
  size_t size_ = 0;
};

}  // namespace onnx_rewrite
