// fibra/detail/imap.hpp: the range that imap and imap_unordered return (ImapResults), read in the
// caller's thread while the pool computes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "fibra/detail/codec.hpp"
#include "fibra/detail/core.hpp"
#include "fibra/detail/stream.hpp"

namespace fibra::detail {

/// The results of imap (ordered: yields R) or imap_unordered (yields {index, R}), as an input range
/// that computes while it is read. Memory stays bounded by the window of chunks in flight.
template <class R, class View, class Enc, bool Ordered>
class ImapResults {
  using Stream = ChunkStream<View, Enc>;

 public:
  using value_type = std::conditional_t<Ordered, R, std::pair<std::size_t, R>>;

  ImapResults(std::unique_ptr<Stream> s) : s_(std::move(s)) {}

  class iterator {
   public:
    using value_type = ImapResults::value_type;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    explicit iterator(ImapResults* r) : r_(r) { r_->advance(); }
    value_type& operator*() const { return r_->current_; }
    value_type* operator->() const { return &r_->current_; }
    iterator& operator++() {
      r_->advance();
      return *this;
    }
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return r_ == nullptr || r_->at_end_; }

   private:
    ImapResults* r_ = nullptr;
  };

  /// Starts (or resumes) reading; an ImapResults is read once.
  iterator begin() { return iterator(this); }
  std::default_sentinel_t end() { return {}; }

 private:
  void advance() {
    if (at_end_) return;
    while (pos_ >= buf_.size()) {
      if (!load_chunk()) {
        at_end_ = true;
        return;
      }
    }
    if constexpr (Ordered)
      current_ = std::move(buf_[pos_]);
    else
      current_ = value_type(static_cast<std::size_t>(first_ + pos_), std::move(buf_[pos_]));
    ++pos_;
  }

  // Decodes the next chunk to yield into buf_; false when all are done.
  bool load_chunk() {
    static_assert(!std::is_same_v<R, bool>,
                  "fibra: imap cannot return bool results (std::vector<bool> is packed): return int or char");
    if (have_chunk_) s_->release();
    have_chunk_ = false;
    ChunkOutcome o;
    if constexpr (Ordered) {
      while (!waiting_.count(next_first_)) {
        if (!s_->next(o)) return false;
        std::uint64_t f = o.first;
        if (f != next_first_) o.unshare();  // it may wait here long: not in the slot its executor needs
        waiting_.emplace(f, std::move(o));
      }
      auto node = waiting_.extract(next_first_);
      o = std::move(node.mapped());
      next_first_ += o.count;
    } else {
      if (!s_->next(o)) return false;
    }
    buf_.assign(o.count, R{});
    decode_items(o.bytes(), buf_.data(), o.count);
    first_ = o.first;
    pos_ = 0;
    have_chunk_ = true;
    return true;
  }

  std::unique_ptr<Stream> s_;
  std::vector<R> buf_;
  std::size_t pos_ = 0;
  std::uint64_t first_ = 0;
  std::uint64_t next_first_ = 0;
  bool have_chunk_ = false;
  bool at_end_ = false;
  std::map<std::uint64_t, ChunkOutcome> waiting_;
  value_type current_{};
};

}  // namespace fibra::detail
