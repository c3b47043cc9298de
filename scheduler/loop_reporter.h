#pragma once
// What the scheduling loop tells about a pod (hami-protocol.md §10), the way kube-scheduler does: the
// PodScheduled=False/Unschedulable condition (pods/status strategic merge) and Events (FailedScheduling, HAMi's
// FilteringFailed, Scheduled, BindingFailed). Never awaited by scheduling: each write runs as a detached task; at most
// max_in_flight run at once, Events beyond that wait in a FIFO of at most max_queued (client-go's events broadcaster
// queues 1000, maxQueuedEvents, and drops beyond), and only beyond that are they dropped and counted, so a slow API
// server cannot pile up work and a burst of binds does not shed its Scheduled events. When a write finishes, owed
// conditions go first (they are state), then the queued Events. The same
// pod and message are reported at most once per interval, and a condition that already says the message is not patched
// again. The PodScheduled condition is state, not news: one that finds no free slot, or whose write fails (the API
// server unreachable, 5xx, 429), is owed, never dropped; flush_owed() (the loop's sweep, while leading) writes the
// owed conditions as slots free, the newest message per pod, until the pod is bound, deleted or no longer ours.
//
// Threading: everything runs on the loop's executor.

#include "scheduler/loop_api.h"
#include "scheduler/loop_clock.h"
#include "scheduler/loop_queue.h"

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gpuslice::scheduler {

struct LoopReporterOptions {
  std::string identity = "gpuslice";          ///< Events' reportingInstance
  std::size_t max_in_flight = 32;             ///< events + condition patches written at once
  std::size_t max_queued = 1000;              ///< Events waiting for a slot; beyond this they are dropped
  std::chrono::milliseconds interval{30000};  ///< same pod, same message: at most one report per interval
  /// An Event isomorphic to one created less than this ago (same pod, reason and note) updates that Event's series
  /// (count, lastObservedTime) instead of creating another: client-go's events broadcaster, 6 minutes.
  std::chrono::milliseconds series_window{360000};
  LoopClock clock;
};

class LoopReporter {
 public:
  /// Runs a detached task on the executor while keeping the reporter's owner alive.
  using Spawn = std::function<void(boost::asio::awaitable<void>)>;

  LoopReporter(LoopReporterOptions options, std::shared_ptr<LoopApi> api, Spawn spawn);

  /// No fit for `pod`: PodScheduled=False/Unschedulable with `message` (unless the pod's condition already says
  /// it), Event FailedScheduling, and FilteringFailed with `hami_note` when not empty. Rate-limited per pod.
  void unschedulable(const PodKey& key, const boost::json::object& pod, const std::string& message,
                     const std::string& hami_note);
  /// A decided pod whose bind failed (kube-scheduler's handleSchedulingFailure with a bind error):
  /// PodScheduled=False/SchedulerError with `message` (unless already said) and a FailedScheduling Event.
  /// Rate-limited per pod with unschedulable().
  void scheduler_error(const PodKey& key, const boost::json::object& pod, const std::string& message);
  /// Annotations on `pod` that are ignored because its author cannot be trusted to write them (PodInfo's
  /// ignored_annotations and unbound scheduler-owned keys): a warning log line and a Warning Event
  /// `AnnotationIgnored` joining `lines`, once per distinct message while the pod is pending.
  void ignored_annotations(const PodKey& key, const boost::json::object& pod, const std::vector<std::string>& lines);
  /// One Event about `pod` (read: namespace, name, uid, resourceVersion), when a slot is free.
  void event(const boost::json::object& pod, std::string reason, std::string type, std::string note);
  /// Forgets the rate-limit record of a pod (bound, deleted or no longer ours), and any condition owed to it.
  void forget(const PodKey& key) {
    reported_.erase(key);
    ignored_reported_.erase(key);
    owed_.erase(key);
  }
  /// Writes owed PodScheduled conditions while slots are free (oldest pod key first).
  void flush_owed() { flush_owed(/*failed_too=*/true); }
  /// Conditions not yet written: no slot was free or the write failed.
  std::size_t owed() const { return owed_.size(); }
  /// Forgets the records of every pod `keep` answers false for.
  void retain(const std::function<bool(const PodKey&)>& keep);

  /// The last unschedulable message reported for `key` (the status page's reason), null when none.
  const std::string* last_message(const PodKey& key) const {
    auto it = reported_.find(key);
    return it == reported_.end() ? nullptr : &it->second.message;
  }
  std::size_t in_flight() const { return in_flight_; }
  /// Events waiting for a free slot.
  std::size_t queued() const { return queued_.size(); }
  uint64_t dropped() const { return dropped_; }
  /// Events folded into an existing Event's series instead of created.
  uint64_t series_updates() const { return series_updates_; }

 private:
  struct Reported {
    std::string message;
    SteadyTime at{};
  };

  struct Series {
    std::string ns, name;  ///< the Event holding the series
    int32_t count = 1;
    SteadyTime last{};
  };
  using Write = std::function<boost::asio::awaitable<void>()>;
  /// A slot for one write, if one is free.
  bool take_slot();
  /// True (and counted) when neither a slot nor a place in the queue is free: the Event is dropped.
  bool shed_if_full();
  /// Starts `write` in a free slot, else queues it (FIFO; shed_if_full() said there is room).
  void submit(Write write);
  /// A write finished: its slot goes to an owed condition first (unless `then_owed` is false: a condition write
  /// that just failed waits for the sweep rather than retrying at once), then to the oldest queued Event.
  void release_slot(bool then_owed = true);
  /// flush_owed(), leaving conditions whose write failed unless `failed_too`.
  void flush_owed(bool failed_too);
  boost::asio::awaitable<void> patch_series(std::string key, std::string ns, std::string name, std::string patch);
  /// The rate-limited condition + FailedScheduling pair of unschedulable() and scheduler_error().
  bool failed(const PodKey& key, const boost::json::object& pod, const std::string& reason, const std::string& message);
  boost::asio::awaitable<void> patch_condition(PodKey key, kube::PodCondition condition);
  boost::asio::awaitable<void> create_event(kube::EventRecord event, std::string series_key);

  LoopReporterOptions options_;
  std::shared_ptr<LoopApi> api_;
  Spawn spawn_;
  std::map<PodKey, Reported> reported_;             // last FailedScheduling per pod (rate limit)
  std::map<PodKey, std::string> ignored_reported_;  // last AnnotationIgnored message per pending pod
  struct Owed {
    kube::PodCondition condition;
    bool failed = false;  ///< its write failed: retried by the sweep (flush_owed), not by a freed slot
  };
  std::map<PodKey, Owed> owed_;           // PodScheduled conditions still to write, the newest per pod
  std::map<std::string, Series> series_;  // "ns/pod\nreason\nnote" -> the Event carrying its series
  uint64_t series_updates_ = 0;
  std::deque<Write> queued_;  // Events waiting for a slot (at most max_queued)
  std::size_t in_flight_ = 0;
  bool pumping_ = false;  // release_slot() is filling slots: a write completing inside it only frees its slot
  uint64_t dropped_ = 0;
};

}  // namespace gpuslice::scheduler
