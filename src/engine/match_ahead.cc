#include "engine/match_ahead.h"

#include <limits>
#include <system_error>
#include <utility>

namespace onnx_rewrite {

MatchAhead::MatchAhead(const Scope& scope, const NodeSet* only, const CandidateIndex& candidates)
    : scope_(scope), only_(only), candidates_(candidates), count_(scope.nodes().size()), slots_(kLead) {
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::system_error&) {  // no thread to be had (a busy batch at its limit): the walk matches alone
    failed_from_.store(0);
    matched_below_.store(count_);
  }
}

MatchAhead::~MatchAhead() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  released_below_.store(std::numeric_limits<int>::max(), std::memory_order_release);
  released_below_.notify_one();
  thread_.join();
}

MatchAhead::Answers* MatchAhead::at(int position) {
  if (position - released_ >= kBatch) release_below(position);
  int matched = matched_below_.load(std::memory_order_acquire);
  if (matched <= position) {
    release_below(position);  // the thread may be waiting for room
    while (matched <= position) {
      matched_below_.wait(matched, std::memory_order_acquire);
      matched = matched_below_.load(std::memory_order_acquire);
    }
  }
  const int failed = failed_from_.load(std::memory_order_relaxed);  // stored before matched_below_
  if (failed >= 0 && position >= failed) return nullptr;
  return &slots_[static_cast<size_t>(position % kLead)];
}

void MatchAhead::release_below(int position) {
  released_ = position;
  released_below_.store(position, std::memory_order_release);
  released_below_.notify_one();
}

void MatchAhead::run() {
  static const NodeSet kNothingClaimed;
  int position = 0;
  try {
    Matcher matcher(scope_, kNothingClaimed, Scope::Reader::kAhead);
    for (; position < count_; ++position) {
      if (position % kBatch == 0) {
        matched_below_.store(position, std::memory_order_release);
        matched_below_.notify_one();
        // The batch's slots are free once the walk is done with the positions kLead before.
        int released = released_below_.load(std::memory_order_acquire);
        while (released < position + kBatch - kLead && !stop_.load()) {
          released_below_.wait(released, std::memory_order_acquire);
          released = released_below_.load(std::memory_order_acquire);
        }
        if (stop_.load()) break;
      }
      search(position, matcher);
    }
  } catch (...) {
    failed_from_.store(position, std::memory_order_relaxed);  // published with matched_below_ below
  }
  scope_.forget_facts(Scope::Reader::kAhead);  // this thread's alone
  matched_below_.store(count_, std::memory_order_release);
  matched_below_.notify_one();
}

void MatchAhead::search(int position, Matcher& matcher) {
  Answers& answers = slots_[static_cast<size_t>(position % kLead)];
  answers.found.clear();  // what the walk skipped
  answers.searched = 0;
  onnx::NodeProto* node = scope_.nodes().Mutable(position);  // a match names its nodes as the walk's do
  if (only_ && !only_->contains(node)) return;
  const auto candidates = candidates_.find(OpView::of(*node));
  if (candidates == candidates_.end()) return;
  for (const auto& candidate : candidates->second) {
    ++answers.searched;
    bool on_facts = false;
    auto match = matcher.match(*candidate.rule, *candidate.pattern, node, position, nullptr, &on_facts);
    if (!match && !on_facts) continue;
    const bool matched = match.has_value();
    answers.found.push_back({candidate.pattern, std::move(match)});
    if (matched) return;
  }
}

}  // namespace onnx_rewrite
