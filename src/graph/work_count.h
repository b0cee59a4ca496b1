// How much work this thread has done, in steps whose number must grow in proportion to the
// model: node lists walked and indexed (with their nodes), nodes the inliner placed, import
// entries and uses visited. tests/scaling_test.cc rewrites a model and one twice its size and
// checks that the count at most doubles, so a quadratic step shows without timing anything.
// Counted in bulk where a loop is cheap (per node list, not per node).
#pragma once

#include <cstdint>

namespace onnx_rewrite {

inline thread_local uint64_t work_steps = 0;

inline void count_work(uint64_t steps) { work_steps += steps; }

}  // namespace onnx_rewrite
