// The inbox of submitted calls (submit_inbox.hpp).
#include "driver/submit_inbox.hpp"

namespace fibra::detail {

SubmitInbox::Put SubmitInbox::put(std::uint64_t pool_uid, Entry e) {
  std::lock_guard lk(mu_);
  if (!open_) return Put::refused;
  e.job->set_pool_uid(pool_uid);
  const bool first = in_.empty();
  in_.push_back(std::move(e));
  if (first) waiting_.store(true);
  return first ? Put::first : Put::queued;
}

void SubmitInbox::close() {
  std::lock_guard lk(mu_);
  open_ = false;
}

bool SubmitInbox::empty() {
  std::lock_guard lk(mu_);
  return in_.empty() && next_ == taken_.size();
}

bool SubmitInbox::refill() {
  next_ = 0;
  taken_.clear();
  if (taken_.capacity() > 4096) std::vector<Entry>().swap(taken_);  // after a burst
  std::lock_guard lk(mu_);
  if (in_.empty()) return false;
  in_.swap(taken_);
  waiting_.store(false);
  return true;
}

void SubmitInbox::fail(const std::exception_ptr& e) {
  {
    std::lock_guard lk(mu_);
    for (auto& t : in_) taken_.push_back(std::move(t));
    in_.clear();
    waiting_.store(false);
  }
  for (std::size_t i = next_; i < taken_.size(); ++i)
    taken_[i].job->deliver({taken_[i].first, taken_[i].count, {}, e, {}});
  taken_.clear();
  next_ = 0;
}

}  // namespace fibra::detail
