#include "scheduler/loop_queue.h"

#include <algorithm>

namespace gpuslice::scheduler {

PendingQueue::PendingQueue(QueueOptions options) : options_(options) {
  if (options_.initial_backoff.count() <= 0) {
    options_.initial_backoff = std::chrono::milliseconds(1);
  }
  if (options_.max_backoff < options_.initial_backoff) {
    options_.max_backoff = options_.initial_backoff;
  }
}

std::chrono::milliseconds PendingQueue::backoff_for(int attempts) const {
  auto b = options_.initial_backoff;
  for (int i = 1; i < attempts && b < options_.max_backoff; ++i) {
    b *= 2;
  }
  return std::min(b, options_.max_backoff);
}

int PendingQueue::attempts(const PodKey& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? 0 : it->second.attempts;
}

void PendingQueue::unlink(const PodKey& key, Entry& e) {
  if (e.state == State::active) {
    active_.erase({e.seq, key});
  } else if (e.state == State::waiting) {
    waiting_.erase({e.ready_at, key});
  } else {
    in_flight_.erase(key);
  }
}

void PendingQueue::to_active(const PodKey& key, Entry& e) {
  unlink(key, e);
  e.state = State::active;
  e.seq = next_seq_++;
  active_.insert({e.seq, key});
}

void PendingQueue::to_waiting(const PodKey& key, Entry& e, SteadyTime at) {
  unlink(key, e);
  e.state = State::waiting;
  e.ready_at = at;
  waiting_.insert({at, key});
}

PendingQueue::AddResult PendingQueue::add(const PodKey& key, SteadyTime /*now*/, bool changed) {
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    Entry& e = it->second;
    if (e.state == State::in_flight) {
      e.forget_on_return = false;
      if (changed) {
        e.moved_while_in_flight = true;
      }
      return AddResult::in_flight;
    }
    if (changed && e.state == State::waiting) {
      to_active(key, e);
    }
    return AddResult::already_queued;
  }
  if (entries_.size() >= options_.capacity) {
    return AddResult::full;
  }
  Entry& e = entries_[key];
  e.state = State::in_flight;  // not in any index yet, so to_active's unlink finds nothing
  to_active(key, e);
  return AddResult::added;
}

std::optional<PodKey> PendingQueue::pop(SteadyTime now) {
  // Waiting pods whose time has come go behind the already-active ones, in deadline order.
  while (!waiting_.empty() && waiting_.begin()->first <= now) {
    PodKey key = waiting_.begin()->second;
    to_active(key, entries_.at(key));
  }
  if (active_.empty()) {
    return std::nullopt;
  }
  PodKey key = active_.begin()->second;
  Entry& e = entries_.at(key);
  unlink(key, e);
  e.state = State::in_flight;
  in_flight_.insert(key);
  e.moved_while_in_flight = false;
  e.forget_on_return = false;
  ++e.attempts;
  return key;
}

PendingQueue::Entry* PendingQueue::returned(const PodKey& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return nullptr;
  }
  if (it->second.forget_on_return) {
    unlink(key, it->second);
    entries_.erase(it);
    return nullptr;
  }
  return &it->second;
}

void PendingQueue::done_unschedulable(const PodKey& key, SteadyTime now) {
  Entry* found = returned(key);
  if (found == nullptr) {
    return;
  }
  Entry& e = *found;
  if (e.moved_while_in_flight) {
    e.moved_while_in_flight = false;
    to_active(key, e);
    return;
  }
  to_waiting(key, e, now + backoff_for(e.attempts));
}

void PendingQueue::done_error(const PodKey& key, SteadyTime now) {
  Entry* found = returned(key);
  if (found == nullptr) {
    return;
  }
  Entry& e = *found;
  // A transient failure is not cured by a cluster event: always back off, so a conflict storm cannot spin.
  e.moved_while_in_flight = false;
  to_waiting(key, e, now + backoff_for(e.attempts));
}

void PendingQueue::done(const PodKey& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return;
  }
  unlink(key, it->second);
  entries_.erase(it);
}

void PendingQueue::forget(const PodKey& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return;
  }
  if (it->second.state == State::in_flight) {
    it->second.forget_on_return = true;
    return;
  }
  unlink(key, it->second);
  entries_.erase(it);
}

std::size_t PendingQueue::move_all_to_active(SteadyTime /*now*/) {
  std::size_t moved = 0;
  while (!waiting_.empty()) {
    PodKey key = waiting_.begin()->second;
    to_active(key, entries_.at(key));
    ++moved;
  }
  for (const PodKey& key : in_flight_) {
    entries_.at(key).moved_while_in_flight = true;
  }
  return moved;
}

std::optional<SteadyTime> PendingQueue::next_ready(SteadyTime now) const {
  if (!active_.empty()) {
    return now;
  }
  if (waiting_.empty()) {
    return std::nullopt;
  }
  return std::max(now, waiting_.begin()->first);
}

}  // namespace gpuslice::scheduler
