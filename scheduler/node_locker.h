#pragma once
// The node-lock I/O of the scheduling loop (hami-protocol.md §5): takes `hami.io/mutex.lock` on a node before a
// GPU pod is bound there, releases it when binding fails, and releases locks whose owner is gone or whose time is
// up (the janitor). The decisions are node_lock.h's pure functions; this class reads and writes the API through
// the LoopApi seam. Every write is a test-and-set of the lock annotation alone (node_lock_test_and_set): it
// fails when the lock is not what this process last saw, and only then, so the node's other writers (kubelet's
// status, the device plugin) cost no conflict and no re-read. A node without an annotations map falls back to a
// merge patch with the node's resourceVersion as precondition, as HAMi's own lock (an Update) does.
//
// Binders of one node queue in arrival order and only the head tries to take the lock, so a release wakes one
// writer instead of a herd of conflicting patches (which would also drain the client's QPS budget).
//
// Threading: everything runs on the loop's executor. The loop feeds it every node's lock annotation (observe /
// forget) and answers what it knows of a lock owner (Hooks::cached_owner); written nodes go back to the loop
// (Hooks::node_written), which observes them again.

#include "scheduler/loop_api.h"
#include "scheduler/loop_clock.h"
#include "scheduler/loop_queue.h"
#include "scheduler/node_lock.h"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gpuslice::scheduler {

struct NodeLockerOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  ///< a lock older than this is expired (HAMi: 5 min)
  std::chrono::milliseconds wait{30000};                       ///< acquire() gives up after this
  /// The schedulerName this loop binds: an unbound pod of it that holds a lock and that the loop is not binding
  /// has abandoned the lock (classify_lock_owner); empty: never judged so.
  std::string scheduler_name;
  std::chrono::milliseconds abandon_grace = kAbandonedLockGrace;
  std::chrono::milliseconds release_grace = kPluginReleaseGrace;
  LoopClock clock;
};

class NodeLocker {
 public:
  struct Hooks {
    /// May locks be taken now (not stopped, leading)?
    std::function<bool()> may_write;
    /// May the janitor release stale locks now (may_write and synced)?
    std::function<bool()> may_sweep;
    /// The owner's state from the loop's caches, or nullopt when the loop does not know (then: GET the pod).
    std::function<std::optional<LockOwnerState>(const std::string& ns, const std::string& pod, const std::string& node)>
        cached_owner;
    /// A node object the API returned after a write or a read: the loop applies it (and observes it again).
    std::function<void(const boost::json::object& node)> node_written;
    /// Runs a detached task on the executor while keeping the loop alive.
    std::function<void(boost::asio::awaitable<void>)> spawn;
  };

  NodeLocker(boost::asio::any_io_executor executor, NodeLockerOptions options, std::shared_ptr<LoopApi> api,
             Hooks hooks);

  /// The node's current resourceVersion and lock annotation (from a watch event or a write). Wakes binders
  /// waiting for this node; a new lock value is judged by the janitor.
  void observe(const std::string& node, std::string resource_version, std::optional<std::string> lock);
  /// The node is gone.
  void forget(const std::string& node);

  /// Takes the lock on `node` for pod `key`: queues behind earlier binders of the node, waits for the current
  /// holder's release (or its expiry, or its owner's end), patches with the resourceVersion precondition.
  /// False when not taken within options.wait, when the node goes away, or when may_write() turns false.
  boost::asio::awaitable<bool> acquire(std::string node, PodKey key);
  /// Removes the lock if it still names `ns/pod` (bind failed). Retries a few times on conflicts.
  boost::asio::awaitable<void> release(std::string node, std::string ns, std::string pod, std::string why);

  /// Janitor: judges the lock of `node` now and releases it when expired or its owner is gone (detached).
  void check(const std::string& node);
  /// Janitor for every lock that names `ns/pod` (the pod finished, or was deleted).
  void check_held_by(const std::string& ns, const std::string& pod);
  /// Janitor pass over every locked node.
  void sweep();
  /// Cancels every wait; acquire() and release() return soon after.
  void stop();

  /// Nodes whose hami.io/mutex.lock is set now (as last observed), and nodes with binders queued for the lock.
  bool busy(std::string_view node) const {
    return locked_.count(std::string(node)) != 0 || lines_.count(std::string(node)) != 0;
  }
  uint64_t taken() const { return taken_; }
  uint64_t released() const { return released_; }

 private:
  struct NodeLockState {
    std::string resource_version;
    std::optional<std::string> lock;
  };

  boost::asio::awaitable<LockOwnerState> owner_state(const std::string& ns, const std::string& pod,
                                                     const std::string& node);
  boost::asio::awaitable<void> janitor(std::string node);
  /// One write of the node's lock from `expected` to `value`: a test-and-set JSON patch, or with
  /// `with_resource_version` a merge patch with the last observed resourceVersion as precondition.
  boost::asio::awaitable<kube::ApiResult<boost::json::object>> write_lock(const std::string& node,
                                                                          const std::optional<std::string>& expected,
                                                                          const std::optional<std::string>& value,
                                                                          bool with_resource_version);
  /// Removes the node's lock while `still(current value)` holds, re-reading the node after a failed write, at
  /// most `attempts` writes. True when this call removed it.
  boost::asio::awaitable<bool> remove_lock(std::string node,
                                           std::function<bool(const std::optional<std::string>&)> still, int attempts);
  boost::asio::awaitable<void> wait_change(const std::string& node, std::chrono::milliseconds max_wait);
  void notify(const std::string& node);

  boost::asio::any_io_executor executor_;
  NodeLockerOptions options_;
  std::shared_ptr<LoopApi> api_;
  Hooks hooks_;
  std::map<std::string, NodeLockState> nodes_;
  std::set<std::string> locked_;        // nodes whose lock annotation is set
  std::set<std::string> janitor_busy_;  // nodes with a janitor release in flight
  std::map<std::string, std::vector<std::shared_ptr<boost::asio::steady_timer>>> waiters_;
  std::map<std::string, std::deque<PodKey>> lines_;  // binders waiting for a node's lock, in arrival order
  uint64_t taken_ = 0;
  uint64_t released_ = 0;
  bool stopped_ = false;
};

}  // namespace gpuslice::scheduler
