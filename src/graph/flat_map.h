// An open-addressing hash map for the per-round indexes of huge graphs: one allocation for the
// entries and one for the slots instead of one per entry, which is what building and freeing
// millions of std::unordered_map nodes costs. Insert and find only; keys are cheap values (views,
// pointers). Entries are kept dense, in the order they were added; a slot is 8 bytes (a tag and
// an entry's index), and the slots are at most three quarters full (linear probing then reads
// about 3 slots to find a key, all in a cache line): on a graph of a million values the slots of
// a table take 16 MiB, where slots holding the entries at half load took 80.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

namespace onnx_rewrite {

template <typename Key, typename Value, typename Hash = std::hash<Key>>
class FlatMap {
 public:
  void reserve(size_t entries) {
    entries_.reserve(entries);
    size_t capacity = 16;
    while (capacity * 3 < entries * 4) capacity *= 2;
    if (capacity > slots_.size()) rehash(capacity);
  }

  // The value for `key`, default-constructed on first use. Valid until the next insertion.
  Value& operator[](const Key& key) { return entries_[index_of(key)].value; }

  // Where `key`'s entry is (added, default-constructed, if new). Entries stay in the order they
  // were added: an index outlives insertions, which a reference does not.
  uint32_t index_of(const Key& key) {
    if ((entries_.size() + 1) * 4 > slots_.size() * 3) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    const uint32_t tag = tag_of(key);
    const size_t mask = slots_.size() - 1;
    for (size_t i = tag & mask;; i = (i + 1) & mask) {
      Slot& slot = slots_[i];
      if (slot.entry == kEmpty) {
        slot = Slot{tag, static_cast<uint32_t>(entries_.size())};
        entries_.push_back(Entry{key, Value()});
        return slot.entry;
      }
      if (slot.tag == tag && entries_[slot.entry].key == key) return slot.entry;
    }
  }
  Value& at(uint32_t entry) { return entries_[entry].value; }
  const Value& at(uint32_t entry) const { return entries_[entry].value; }
  const Key& key_at(uint32_t entry) const { return entries_[entry].key; }

  static constexpr uint32_t npos = std::numeric_limits<uint32_t>::max();
  // Where `key`'s entry is, or npos.
  uint32_t entry_of(const Key& key) const {
    if (slots_.empty()) return npos;
    const uint32_t tag = tag_of(key);
    const size_t mask = slots_.size() - 1;
    for (size_t i = tag & mask;; i = (i + 1) & mask) {
      const Slot& slot = slots_[i];
      if (slot.entry == kEmpty) return npos;
      if (slot.tag == tag && entries_[slot.entry].key == key) return slot.entry;
    }
  }

  const Value* find(const Key& key) const {
    const uint32_t entry = entry_of(key);
    return entry == npos ? nullptr : &entries_[entry].value;
  }
  bool contains(const Key& key) const { return find(key) != nullptr; }
  size_t size() const { return entries_.size(); }

  // In the order the keys were added.
  template <typename Visit>
  void for_each(Visit&& visit) {
    for (auto& entry : entries_) visit(entry.key, entry.value);
  }

 private:
  static constexpr uint32_t kEmpty = std::numeric_limits<uint32_t>::max();
  // The tag spares reading the entry (and comparing keys: names, memcmp) of keys that only share
  // a slot, and hashing the keys again when the table grows.
  struct Slot {
    uint32_t tag = 0;
    uint32_t entry = kEmpty;
  };
  struct Entry {
    Key key;
    Value value;
  };

  // std::hash of a pointer is the address, whose low bits are alignment: multiplying spreads
  // every bit of it into the high half, which linear probing then uses.
  static uint32_t tag_of(const Key& key) {
    return static_cast<uint32_t>((static_cast<uint64_t>(Hash()(key)) * 0x9E3779B97F4A7C15ull) >> 32);
  }

  void rehash(size_t capacity) {
    std::vector<Slot> old(capacity, Slot{});
    old.swap(slots_);
    const size_t mask = capacity - 1;
    for (const Slot& slot : old) {  // the tags place the entries: no key is hashed again
      if (slot.entry == kEmpty) continue;
      size_t i = slot.tag & mask;
      while (slots_[i].entry != kEmpty) i = (i + 1) & mask;
      slots_[i] = slot;
    }
  }

  std::vector<Slot> slots_;
  std::vector<Entry> entries_;
};

}  // namespace onnx_rewrite
