// NodeSet against std::unordered_set: the same answers through growth, erasures that move
// entries back across the end of the table, and clearing.
#include "graph/node_set.h"

#include <algorithm>
#include <random>
#include <unordered_set>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace onnx_rewrite {
namespace {

// The set never reads a node: addresses are all it needs, so the tests make them up (aligned as
// real nodes are, and close together, as nodes the same round built are).
NodeSet::Node address(uint64_t n) { return reinterpret_cast<NodeSet::Node>(0x10000 + n * 16); }

// The nodes of a NodeSet or of the standard set it is checked against, in address order.
template <typename Set>
std::vector<NodeSet::Node> sorted(const Set& set) {
  std::vector<NodeSet::Node> nodes(set.begin(), set.end());
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

TEST(NodeSet, AnswersAsAStandardSetThroughInsertionsAndErasures) {
  std::mt19937_64 random(7);
  NodeSet set;
  std::unordered_set<NodeSet::Node> expected;
  // Few distinct addresses and many operations: runs form, wrap around the table's end and are
  // cut by erasures, which must leave every other entry findable.
  for (int step = 0; step < 200000; ++step) {
    const auto node = address(random() % 3000);
    switch (random() % 3) {
      case 0:
      case 1:
        ASSERT_EQ(set.insert(node), expected.insert(node).second) << "step " << step;
        break;
      default:
        ASSERT_EQ(set.erase(node), expected.erase(node) == 1) << "step " << step;
    }
    ASSERT_EQ(set.size(), expected.size());
    if (step % 997 == 0) {
      for (uint64_t n = 0; n < 3000; ++n) ASSERT_EQ(set.contains(address(n)), expected.count(address(n)) == 1) << n;
      ASSERT_EQ(sorted(set), sorted(expected));
    }
  }
}

TEST(NodeSet, ErasingEverythingLeavesItEmptyAndUsable) {
  NodeSet set;
  for (uint64_t n = 0; n < 1000; ++n) EXPECT_TRUE(set.insert(address(n)));
  EXPECT_FALSE(set.insert(address(10)));
  for (uint64_t n = 0; n < 1000; n += 2) EXPECT_TRUE(set.erase(address(n)));
  EXPECT_FALSE(set.erase(address(0)));
  EXPECT_EQ(set.size(), 500u);
  for (uint64_t n = 0; n < 1000; ++n) EXPECT_EQ(set.contains(address(n)), n % 2 == 1) << n;
  for (uint64_t n = 1; n < 1000; n += 2) EXPECT_TRUE(set.erase(address(n)));
  EXPECT_TRUE(set.empty());
  EXPECT_EQ(set.begin(), set.end());
  EXPECT_TRUE(set.insert(address(3)));
  EXPECT_EQ(sorted(set), std::vector<NodeSet::Node>{address(3)});
  set.clear();
  EXPECT_FALSE(set.contains(address(3)));
  EXPECT_FALSE(set.erase(address(3)));
  EXPECT_TRUE(set.insert(address(3)));
}

TEST(NodeSet, ASetMovedFromIsEmptyAndUsable) {
  NodeSet set;
  for (uint64_t n = 0; n < 100; ++n) set.insert(address(n));
  NodeSet taken = std::move(set);
  EXPECT_EQ(taken.size(), 100u);
  EXPECT_TRUE(taken.contains(address(99)));
  EXPECT_TRUE(set.empty());  // NOLINT(bugprone-use-after-move): what is tested
  EXPECT_FALSE(set.contains(address(99)));
  EXPECT_FALSE(set.erase(address(99)));
  EXPECT_TRUE(set.insert(address(99)));
  NodeSet assigned;
  assigned.insert(address(5));
  assigned = std::move(taken);
  EXPECT_EQ(assigned.size(), 100u);
  EXPECT_FALSE(assigned.contains(address(100)));
  EXPECT_TRUE(taken.empty());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(taken.insert(address(1)));
}

TEST(NodeSet, AnEmptySetFindsNothing) {
  const NodeSet set;
  EXPECT_FALSE(set.contains(address(1)));
  EXPECT_EQ(set.size(), 0u);
  EXPECT_EQ(set.begin(), set.end());
}

}  // namespace
}  // namespace onnx_rewrite
