#pragma once
// The pending-pod queue of the scheduling loop, in the spirit of kube-scheduler's scheduling queue but
// pure and single-threaded (the loop owns it on one strand; time is a parameter):
//  - active:   ready to be tried now, FIFO;
//  - backoff:  failed recently, ready again at a deadline (initial x 2^(attempts-1), capped at max_backoff);
//  - parked:   unschedulable; retried when its backoff ends, or at once when the cluster changes in a way that
//              can make it fit (move_all_to_active: a pod deleted or finished, a node added or changed, a
//              quota changed). This is what lets a freed slice be used within a second (HAMi #1368).
// A pod that is in flight (popped, not yet reported) and sees a move event is retried at once when it comes
// back unschedulable: its failure was judged against a snapshot that is already stale.
// Bounded: `add` refuses pods beyond the capacity; the loop's periodic resync offers them again.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace gpuslice::scheduler {

using SteadyTime = std::chrono::steady_clock::time_point;

/// namespace/name of a pod.
struct PodKey {
  std::string ns;
  std::string name;
  auto operator<=>(const PodKey&) const = default;
  std::string str() const { return ns + "/" + name; }
};

struct QueueOptions {
  std::size_t capacity = 100000;
  std::chrono::milliseconds initial_backoff{1000};
  std::chrono::milliseconds max_backoff{10000};
};

class PendingQueue {
 public:
  explicit PendingQueue(QueueOptions options);

  enum class AddResult { added, already_queued, in_flight, full };

  /// Offers a pod (new, or its object changed). A queued pod in backoff or parked is moved to active when
  /// `changed` is true (the pod itself was edited, so its last failure may not hold). A pod in flight is
  /// marked so that it is retried at once after the current attempt.
  AddResult add(const PodKey& key, SteadyTime now, bool changed = false);

  /// The next pod ready at `now` (active first, then the earliest expired backoff/parked), marked in flight.
  std::optional<PodKey> pop(SteadyTime now);

  /// The attempt for `key` ended with no fit: park it with backoff (or retry at once if the cluster changed
  /// while it was in flight).
  void done_unschedulable(const PodKey& key, SteadyTime now);
  /// The attempt failed for a transient reason (conflict, API error, node lock contention): backoff.
  void done_error(const PodKey& key, SteadyTime now);
  /// The attempt ended for good (bound, deleted, no longer ours): forget the pod and its attempt count.
  void done(const PodKey& key);

  /// Removes a pod wherever it is (deleted or bound by someone else). In flight it is forgotten on return.
  void forget(const PodKey& key);

  /// Cluster event that can make unschedulable pods fit: all parked and backing-off pods become active.
  /// Returns how many moved.
  std::size_t move_all_to_active(SteadyTime now);

  /// When the next pod becomes ready (now if any is active); nullopt when empty. For arming the timer.
  std::optional<SteadyTime> next_ready(SteadyTime now) const;

  std::size_t size() const { return entries_.size(); }
  std::size_t active_size() const { return active_.size(); }
  std::size_t waiting_size() const { return waiting_.size(); }
  std::size_t in_flight_size() const { return in_flight_.size(); }
  bool contains(const PodKey& key) const { return entries_.count(key) != 0; }
  /// Attempts so far for `key` (0 when unknown).
  int attempts(const PodKey& key) const;
  /// The backoff that the next failure of a pod with `attempts` previous attempts gets.
  std::chrono::milliseconds backoff_for(int attempts) const;

 private:
  enum class State { active, waiting, in_flight };
  struct Entry {
    State state = State::active;
    int attempts = 0;
    uint64_t seq = 0;       // FIFO order within active
    SteadyTime ready_at{};  // for waiting
    bool moved_while_in_flight = false;
    bool forget_on_return = false;
  };

  void to_active(const PodKey& key, Entry& e);
  void to_waiting(const PodKey& key, Entry& e, SteadyTime at);
  void unlink(const PodKey& key, Entry& e);
  /// The entry of a pod coming back from a scheduling attempt, or nullptr when it is unknown or was forgotten
  /// while in flight (then dropped here).
  Entry* returned(const PodKey& key);

  QueueOptions options_;
  uint64_t next_seq_ = 0;
  std::map<PodKey, Entry> entries_;
  std::set<std::pair<uint64_t, PodKey>> active_;
  std::set<std::pair<SteadyTime, PodKey>> waiting_;
  std::set<PodKey> in_flight_;
};

}  // namespace gpuslice::scheduler
