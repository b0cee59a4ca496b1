// No step may cost more than its share as a model grows (issue #37): models from bench's
// gen-chain, a chain of model-local functions nested N deep and a value read by N nodes, are
// rewritten at N and 2N as `onnx-rewrite rewrite` does (load, rewrite, check, write), under the
// default target and --target ort, counting the work steps (src/graph/work_count.h: walks,
// indexing, loops that were quadratic once) and the heap allocations (copies, fresh names,
// tables): twice the model may take at most 2.2 times either. A step quadratic in the depth or in
// the number of readers shows here without timing anything.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "cli/outcome.h"
#include "graph/work_count.h"
#include "onnx_rewrite/target.h"
#include "test_support.h"

// Every allocation of this process (the library and protobuf included) is counted. Every plain
// form of new and delete is replaced: one left to the runtime (the nothrow new of std::stable_sort's
// buffer) would pair its allocator with ours, which AddressSanitizer reports as a mismatch.
std::atomic<uint64_t> allocations{0};

// GCC matches the standard operator new it knows against the free below once both are inlined,
// and warns (-Wmismatched-new-delete); they are this file's own matched pair.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* counted_malloc(std::size_t size) noexcept {
  allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new(std::size_t size) {
  if (void* block = counted_malloc(size)) return block;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return counted_malloc(size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return counted_malloc(size); }
void operator delete(void* block) noexcept { std::free(block); }
void operator delete[](void* block) noexcept { std::free(block); }
void operator delete(void* block, std::size_t) noexcept { std::free(block); }
void operator delete[](void* block, std::size_t) noexcept { std::free(block); }
void operator delete(void* block, const std::nothrow_t&) noexcept { std::free(block); }
void operator delete[](void* block, const std::nothrow_t&) noexcept { std::free(block); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace onnx_rewrite {
namespace {

using namespace testing;

constexpr double kMostGrowth = 2.2;  // for twice the size

fs::path generate(const TempDir& dir, const std::vector<std::string>& shape, int64_t size) {
  const fs::path path = dir / fmt::format("{}-{}.onnx", fmt::join(shape, ""), size);
  std::vector<std::string> argv{(build_dir() / "gen-chain").string(), "--out", path.string()};
  argv.insert(argv.end(), shape.begin(), shape.end());
  argv.push_back(std::to_string(size));
  const CommandResult generated = run_command(argv);
  EXPECT_EQ(generated.exit_code, 0) << generated.err;
  return path;
}

struct Work {
  uint64_t steps = 0;
  uint64_t allocations = 0;
};

// The work it takes to rewrite the model as the CLI does (the output prepared, not committed).
Work work_to_rewrite(const TempDir& dir, const fs::path& model, const std::string& target) {
  RewriteOptions options;
  options.target = target;
  const RewriteOptions effective = effective_options(options, {});
  const RuleSet& rules = builtin_rules();  // loaded once, before the count
  const Work before{work_steps, allocations.load()};
  const Processed processed = process(model.string(), (dir / "out.onnx").string(), rules, effective,
                                      find_target(target), ProcessOptions{});
  EXPECT_FALSE(processed.outcome.error) << error_text(processed.outcome);
  return {work_steps - before.steps, allocations.load() - before.allocations};
}

void expect_at_most_twice(const std::string& what, uint64_t at_size, uint64_t at_twice) {
  std::cout << fmt::format("[ work     ] {}: {} -> {} ({:.2f}×)\n", what, at_size, at_twice,
                           static_cast<double>(at_twice) / static_cast<double>(at_size));
  EXPECT_LE(static_cast<double>(at_twice), kMostGrowth * static_cast<double>(at_size)) << what << ": twice the size, more than twice the work";
}

// `shape`: gen-chain's options choosing the model, the one taking the size last (e.g. --fan-out).
void expect_linear(const std::vector<std::string>& shape, int64_t size) {
  TempDir dir;
  const fs::path small = generate(dir, shape, size);
  const fs::path twice = generate(dir, shape, 2 * size);
  for (const std::string target : {"onnx", "ort"}) {
    const Work at_size = work_to_rewrite(dir, small, target);
    const Work at_twice = work_to_rewrite(dir, twice, target);
    const std::string what = fmt::format("{} {} -> {}, --target {}", fmt::join(shape, " "), size, 2 * size, target);
    EXPECT_GT(at_size.steps, static_cast<uint64_t>(size)) << what << ": every node is walked at least once";
    expect_at_most_twice(what + ", steps", at_size.steps, at_twice.steps);
    expect_at_most_twice(what + ", allocations", at_size.allocations, at_twice.allocations);
  }
}

TEST(Scaling, NestedFunctionCallsCostInProportionToTheirDepth) { expect_linear({"--function-depth"}, 4000); }

TEST(Scaling, AValueWithManyReadersCostsInProportionToThem) { expect_linear({"--fan-out"}, 4000); }

TEST(Scaling, AValueReadByManyMultiNodePatternsCostsInProportionToThem) {
  expect_linear({"--consumer", "gelu", "--fan-out"}, 2000);
}

}  // namespace
}  // namespace onnx_rewrite
