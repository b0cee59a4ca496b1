// What a big graph is, and fork and join for work split in two on one (loading its nodes,
// indexing their reads).
#pragma once

#include <cstddef>
#include <exception>
#include <system_error>
#include <thread>

namespace onnx_rewrite {

// A graph of this many nodes or more is big: work on it split over a second thread (loading,
// indexing, matching, writing) gains more than the thread's start costs. A smaller graph is done
// before a thread would have started. (RewriteOptions::second_thread_from, public, defaults to it.)
inline constexpr size_t kBigGraphNodes = 50'000;

// Runs `second` on another thread while `first` runs here (both here, one after the other,
// without a thread to be had); what either throws comes out here, once both are done.
template <typename Second, typename First>
void on_two_threads(Second&& second, First&& first) {
  std::exception_ptr failed;
  std::thread helper;
  try {
    helper = std::thread([&] {
      try {
        second();
      } catch (...) {
        failed = std::current_exception();
      }
    });
  } catch (const std::system_error&) {
    second();
  }
  try {
    first();
  } catch (...) {
    if (helper.joinable()) helper.join();
    throw;
  }
  if (helper.joinable()) helper.join();
  if (failed) std::rethrow_exception(failed);
}

}  // namespace onnx_rewrite
