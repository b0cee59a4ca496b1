// An open-addressing hash map for the per-round indexes of huge graphs: one allocation per
// table instead of one per entry, which is what building and freeing millions of
// std::unordered_map nodes costs. Insert and find only; keys are cheap values (views, pointers).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

namespace onnx_rewrite {

template <typename Key, typename Value, typename Hash = std::hash<Key>>
class FlatMap {
 public:
  void reserve(size_t entries) {
    size_t capacity = 16;
    while (capacity < entries * 2) capacity *= 2;
    if (capacity > slots_.size()) rehash(capacity);
  }

  // The value for `key`, default-constructed on first use.
  Value& operator[](const Key& key) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    Slot& slot = probe(key);
    if (!slot.used) {
      slot = Slot{true, key, Value()};
      ++size_;
    }
    return slot.value;
  }

  const Value* find(const Key& key) const {
    if (slots_.empty()) return nullptr;
    const Slot& slot = const_cast<FlatMap*>(this)->probe(key);
    return slot.used ? &slot.value : nullptr;
  }
  bool contains(const Key& key) const { return find(key) != nullptr; }
  size_t size() const { return size_; }

  template <typename Visit>
  void for_each(Visit&& visit) {
    for (auto& slot : slots_) {
      if (slot.used) visit(slot.key, slot.value);
    }
  }

 private:
  struct Slot {
    bool used = false;
    Key key{};
    Value value{};
  };

  Slot& probe(const Key& key) {
    const size_t mask = slots_.size() - 1;
    for (size_t i = Hash()(key) & mask;; i = (i + 1) & mask) {
      if (!slots_[i].used || slots_[i].key == key) return slots_[i];
    }
  }

  void rehash(size_t capacity) {
    std::vector<Slot> old(capacity);
    old.swap(slots_);
    size_ = 0;
    for (auto& slot : old) {
      if (!slot.used) continue;
      probe(slot.key) = std::move(slot);
      ++size_;
    }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace onnx_rewrite
