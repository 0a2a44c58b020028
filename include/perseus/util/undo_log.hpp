#pragma once
// A log of changes that can be undone back to a mark. Marks count entries from the log's start, so
// they stay valid when the entries before the oldest mark still needed are dropped.
#include <cstddef>
#include <vector>

namespace perseus {

template <typename Entry>
class UndoLog {
 public:
  std::size_t mark() const { return base_ + entries_.size(); }
  void push(const Entry& entry) { entries_.push_back(entry); }
  // Calls `undo` on every entry after `mark`, newest first, and drops them.
  template <typename Undo>
  void undo_to(std::size_t mark, Undo undo) {
    while (this->mark() > mark) {
      undo(entries_.back());
      entries_.pop_back();
    }
  }
  // Drops the entries before `mark` once they are at least half the log (amortized: each entry is
  // moved at most once).
  void forget_before(std::size_t mark) {
    const std::size_t dead = mark - base_;
    if (dead == 0 || dead < entries_.size() / 2) return;
    entries_.erase(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(dead));
    base_ = mark;
  }
  void clear() {
    base_ += entries_.size();
    entries_.clear();
  }

 private:
  std::vector<Entry> entries_;
  std::size_t base_ = 0;  // the mark of entries_[0]
};

}  // namespace perseus
