#pragma once
// The live scheduling loop: keeps the core's Snapshot current from watch events (pods, nodes, resource
// quotas), pops pending pods of our schedulerName from the PendingQueue, decides with schedule(), and carries
// each decision out HAMi's way (hami-protocol.md §4-5, §10), with one write on the pod:
//
//   1. assume the decision in the snapshot (later pods see it at once);
//   2. only for a pod carrying scheduler-owned annotations nobody trusted wrote: remove them (merge patch with
//      the pod's resourceVersion; a Binding can only add keys);
//   3. with node_lock "hami", take hami.io/mutex.lock on the node (merge patch with the node's
//      resourceVersion), waiting for its release on node events when another live pod holds it;
//   4. POST pods/binding with the pod's UID as precondition, carrying the allocation annotations (vgpu-node,
//      vgpu-time, vgpu-devices-to-allocate, vgpu-devices-allocated, bind-phase=allocating, bind-time) and the
//      hami.io/vgpu-node label: kube-apiserver writes them with spec.nodeName in one update. On failure (read
//      back when the answer is unclear) release the lock and drop the assumption.
// No fit: PodScheduled=False/Unschedulable with the core's message; a failed bind: PodScheduled=False/
// SchedulerError "binding rejected: ..."; Events FailedScheduling, Scheduled, HAMi's FilteringFailed and
// BindingFailed. These, and the label on an API server that does not copy a Binding's labels, go through the
// side path (its own client and rate limit), rate-limited and never awaited by scheduling.
//
// This class is the informer bookkeeping and the bind pipeline; its other concerns are parts of their own: the
// node-lock I/O (NodeLocker, node_locker.h), conditions and Events (LoopReporter, loop_reporter.h) and the
// metrics (loop_metrics.h). The decisions are pure core functions: schedule(), decide_node_lock() and
// classify_lock_owner() (node_lock.h), allocation_binding_metadata() (allocation.h), filtering_failed_note()
// (schedule.h).
//
// Crash safety: nothing lives only here, and nothing is written on a pod that does not end bound. The allocation
// reaches the pod only with its Binding, so a restart (list of every pod) counts exactly the bound pods'
// reservations; an unbound pod is simply decided again. A crash between the lock and the Binding leaves a lock
// whose owner is unbound and of our schedulerName: once this scheduler leads and is not binding that pod, the lock
// is abandoned and taken over after kAbandonedLockGrace. Locks past their timeout, or whose owner is deleted,
// finished, or bound and done allocating on that node, are released (on node events and by a periodic sweep).
//
// Threading: every member runs on one executor (the kube::Client's); event handlers are called by the
// Reflectors on it. Only ready()/leading() may be read from other threads.

#include "common/config.h"
#include "common/metrics.h"
#include "common/rfc3339.h"
#include "kube/reflector.h"
#include "scheduler/loop_api.h"
#include "scheduler/loop_clock.h"
#include "scheduler/loop_queue.h"
#include "scheduler/loop_reporter.h"
#include "scheduler/node_lock.h"
#include "scheduler/node_locker.h"
#include "scheduler/pod_text.h"
#include "scheduler/preemption.h"
#include "scheduler/schedule.h"
#include "scheduler/snapshot.h"
#include "scheduler/status_view.h"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace gpuslice::scheduler {

struct LoopOptions {
  std::string scheduler_name = "gpuslice-scheduler";
  DeviceConfig devices;
  SchedulerConfig scheduler;          ///< policies, node_lock ("hami" | "off"), node_lock_timeout, max_backoff
  std::string identity = "gpuslice";  ///< Events' reportingInstance
  std::size_t queue_capacity = 100000;
  std::size_t max_binds_in_flight = 64;
  std::size_t max_side_effects_in_flight = 32;      ///< events + condition patches; beyond this they are dropped
  std::chrono::milliseconds event_interval{30000};  ///< same pod, same message: at most one event per interval
  std::chrono::milliseconds lock_wait{30000};       ///< give up waiting for a node lock after this, re-decide
  /// A lock held by an unbound pod of ours that we are not binding is taken over after this (node_lock.h).
  std::chrono::milliseconds lock_abandon_grace = kAbandonedLockGrace;
  std::chrono::milliseconds lock_release_grace = kPluginReleaseGrace;  ///< NodeLockerOptions::release_grace
  /// WaitForFirstConsumer claims: after writing volume.kubernetes.io/selected-node, wait this long for the
  /// provisioner to bind them before giving up and re-deciding (kube-scheduler's bindTimeoutSeconds, 600 s).
  std::chrono::milliseconds volume_bind_timeout{600000};
  std::chrono::seconds assume_ttl{120};          ///< drop assumptions never confirmed by a watch event
  std::chrono::milliseconds sweep_period{5000};  ///< lock janitor, assumption expiry, gauges
  LoopClock clock;
};

struct LoopStats {
  uint64_t scheduled = 0;
  uint64_t unschedulable = 0;
  uint64_t errors = 0;  ///< conflicts, API errors, lock waits given up
  uint64_t conflicts = 0;
  uint64_t locks_taken = 0;
  uint64_t locks_released = 0;  ///< by us: bind failures and the janitor
  uint64_t events_dropped = 0;
  uint64_t preemptions = 0;  ///< nominations made by preempting (scheduler/loop_preemption.cc)
  uint64_t victims = 0;      ///< pods deleted by preemption (graceful delete accepted)
};

/// The cluster objects the default plugins (and preemption: PodDisruptionBudgets) read besides Pods and Nodes
/// (one Reflector each); the last four only for their selectors (default spreading, spread_sources.h).
enum class ClusterObjectKind : size_t {
  namespace_labels,
  claim,
  volume,
  storage_class,
  csi_node,
  disruption_budget,
  service,
  replication_controller,
  replica_set,
  stateful_set,
};
inline constexpr size_t kClusterObjectKinds = 10;
std::string_view cluster_object_kind_name(ClusterObjectKind kind);

class SchedulingLoop : public std::enable_shared_from_this<SchedulingLoop> {
 public:
  /// `api` carries the bind path (locks, Bindings, reads); `side_api` (default: `api`) carries what must never
  /// delay a bind: Events, PodScheduled=False conditions and the vgpu-node label. In production it is a second
  /// client with its own rate limit, as kube-scheduler's event client is. `lock_api` (default: `api`) carries the
  /// node lock's reads and writes (NodeLocker): in production a third client, as HAMi's lock is written by its
  /// scheduler extender's own client beside kube-scheduler's, so a pod's two writes (lock, Binding) do not share
  /// one token bucket.
  SchedulingLoop(boost::asio::any_io_executor executor, LoopOptions options, std::shared_ptr<LoopApi> api,
                 std::shared_ptr<LoopApi> side_api = nullptr, std::shared_ptr<LoopApi> lock_api = nullptr);
  ~SchedulingLoop();

  // ---- informer inputs (from kube::Reflector handlers, or tests) ----
  void on_pod_event(const kube::ReflectorEvent& event);
  void on_node_event(const kube::ReflectorEvent& event);
  void on_quota_event(const kube::ReflectorEvent& event);
  /// Namespaces, PVCs, PVs, StorageClasses, CSINodes into snapshot().objects() (scheduler/loop_objects.cc);
  /// every event re-queues the pending pods.
  void on_cluster_object_event(ClusterObjectKind kind, const kube::ReflectorEvent& event);
  /// All informers have delivered their first list: scheduling may start (never before: an empty snapshot
  /// would double-book every card).
  void set_synced(bool synced);
  /// Leadership: only an active loop writes. Losing it stops new decisions at once; binds in flight stop before
  /// their next write.
  void set_active(bool active);

  /// The worker: pops and decides until stop(). co_spawn it on the executor.
  boost::asio::awaitable<void> run();
  /// The janitor: sweeps locks and assumptions every sweep_period until stop().
  boost::asio::awaitable<void> run_sweeper();
  void stop();

  // ---- state ----
  bool synced() const { return synced_flag_.load(); }
  bool active() const { return active_flag_.load(); }
  const Snapshot& snapshot() const { return snapshot_; }
  const PendingQueue& queue() const { return queue_; }
  LoopStats stats() const;
  std::size_t binds_in_flight() const { return binders_.size(); }
  std::size_t side_effects_in_flight() const { return reporter_.in_flight(); }
  /// Preemptors holding a nomination while their victims go away (capped by scheduler.preemption.maxInFlight).
  std::size_t preemptions_in_flight() const { return nominations_.size(); }
  /// The node a pod is nominated to by this loop ("" when none).
  std::string nomination_of(const PodKey& key) const {
    auto it = nominations_.find(key);
    return it == nominations_.end() ? std::string() : it->second.node;
  }
  /// Runs one janitor pass now (tests; the sweeper calls it).
  void sweep();
  /// The status page's view (scheduler/loop_status.cc): the snapshot, the pending GPU pods with their last
  /// unschedulable message, queue sizes and sync state over `state` (leadership and identity come from the caller).
  status::StatusView status_view(status::SchedulerState state) const;

 private:
  /// An unbound pod of ours. Kept as its JSON text packed (scheduler/pod_text.h: ~190 bytes for a 1.7 KB pod;
  /// 40,000 pending pods were ~110 MB decoded, ~75 MB as text) and decoded again when it is decided; what the
  /// status page shows is kept beside it, so publishing a view never decodes every pending pod.
  struct PendingPod {
    std::string packed;  ///< PodTextCodec::pack of boost::json::serialize of the pod as last seen
    SteadyTime first_seen{};
    bool gpu_pod = false;    ///< parse_pod succeeded and the pod asks for a device (the status page lists it)
    bool parsed = false;     ///< parse_pod succeeded
    PodGpuRequest gpu;       ///< parse_pod's request, when gpu_pod
    std::string message;     ///< parse_pod's error, else the PodScheduled=False message the pod carries
    int64_t since_unix = 0;  ///< metadata.creationTimestamp
    boost::json::object object(PodTextCodec& codec) const;  ///< the pod decoded again
  };
  struct Binding;
  /// A preemptor's nomination (kube-scheduler's nominator): the node and cards it holds in the snapshot while
  /// its victims terminate.
  struct Nomination {
    std::string node;
    int32_t priority = 0;
    PodDevices devices;
    std::vector<std::string> victims;  ///< "ns/name", as chosen
  };

  void apply_pod(const boost::json::object& pod, bool deleted);
  /// Fills what the status page shows of a pending pod (its request, message, age) from the pod.
  void note_pending(PendingPod& pending, const boost::json::object& pod) const;
  void release_heap_after_burst();
  void apply_node(const boost::json::object& node, bool deleted);
  void wake();
  void schedule_one(const PodKey& key);
  /// snapshot_.upsert_pod, except that a pending pod of ours we are not binding is counted without its
  /// scheduler-owned annotations (they are not ours to trust).
  Status count_pod(const PodKey& key, const boost::json::object& pod);
  /// A pending pod of ours found unschedulable that carries scheduler-owned annotations: removes them (one
  /// patch in flight per pod, resourceVersion precondition), so no allocation stays on a pod that holds nothing.
  void scrub_owned_annotations(const PodKey& key, const boost::json::object& pod);
  boost::asio::awaitable<void> bind_task(std::shared_ptr<Binding> b);
  std::optional<LockOwnerState> cached_lock_owner(const std::string& ns, const std::string& pod,
                                                  const std::string& node) const;
  /// VolumeBinding's PreBind: selected-node on each WaitForFirstConsumer claim, then wait for them to bind.
  /// Returns "" when bound, else why not (the bind is then retried after a backoff and the pod re-decided).
  boost::asio::awaitable<std::string> bind_volumes(Binding& b);
  void update_gauges();
  /// Bound pods of ours whose API server did not copy the Binding's labels (before Kubernetes 1.33) get the
  /// hami.io/vgpu-node label by a patch on the side path; bounded, retried by the sweep, never dropped.
  void note_label(const PodKey& key, const boost::json::object& pod, const PodBrief& brief);
  void start_labels();

  // ---- preemption (scheduler/loop_preemption.cc) ----
  /// Nominations of pods with priority below `priority` leave the snapshot for one decision (a more important
  /// pod may take what they hold); restore_nominations puts them back.
  std::vector<PodRecord> hide_nominations_below(int32_t priority);
  void restore_nominations(std::vector<PodRecord> hidden);
  /// The pod's nominated node, when it passes every filter there now (kube-scheduler's evaluateNominatedNode).
  std::optional<Decision> decide_on_nominated_node(const PodKey& key, const PodInfo& info);
  /// After no fit: preempt (or keep waiting for the victims of an earlier preemption). Returns the text added
  /// to the unschedulable message, "" when preemption is off.
  std::string preempt_or_wait(const PodKey& key, const PodInfo& info, const boost::json::object& pod);
  /// Holds the nominated node's cards again for a pod whose victims are still terminating.
  void hold_nomination(const PodKey& key, const PodInfo& info, const std::string& node);
  void drop_nomination(const PodKey& key);
  /// A nomination left nominations_ (its pod bound): the in-flight gauge, and a retry of the pods waiting for a
  /// place under scheduler.preemption.maxInFlight.
  void nomination_ended();
  /// Carries a preemption out: status.nominatedNodeName, then per victim DisruptionTarget and a graceful
  /// delete, with a Preempted Event.
  boost::asio::awaitable<void> preempt_task(PodKey key, PreemptionCandidate chosen, boost::json::object event_ref);
  /// Clears status.nominatedNodeName of a pod whose nomination became invalid and found no new one.
  void clear_nominated_node(const PodKey& key);
  /// Runs a detached task on the executor, keeping the loop (and its locker and reporter) alive until it ends.
  void spawn(boost::asio::awaitable<void> task);

  boost::asio::any_io_executor executor_;
  LoopOptions options_;
  ScheduleOptions schedule_options_;
  std::shared_ptr<const framework::Framework> profile_;  ///< default profile with scheduler.scoreWeights
  std::shared_ptr<LoopApi> api_;
  std::shared_ptr<LoopApi> side_api_;
  Snapshot snapshot_;
  PendingQueue queue_;
  LoopStats stats_;

  std::map<PodKey, PendingPod> pending_;                    // unbound pods of our schedulerName
  PodTextCodec text_codec_;                                 // packs and unpacks PendingPod::packed
  std::unordered_map<std::string, LockOwnerBrief> briefs_;  // "ns/name" -> every live pod
  std::map<std::string, std::string> nodes_;  // name -> the fields that can change a fit (a fingerprint), packed
  kube::KeyedSet<std::pair<std::string, std::string>> quotas_;                // ns, name
  std::array<kube::KeyedSet<std::string>, kClusterObjectKinds> object_keys_;  // per ClusterObjectKind: name or ns/name
  std::size_t pending_high_water_ = 0;                  // most pods pending or binding since the last heap trim
  static constexpr std::size_t kTrimBurst = 1000;       // a burst this large is worth a malloc_trim once drained
  std::set<std::string> relist_pods_;                   // "ns/name" of the pods a paged pod list had so far
  std::set<std::string> relist_nodes_;                  // names of the nodes a paged node list had so far
  std::map<PodKey, std::string> binders_;               // pods being bound -> node
  std::map<std::string, int, std::less<>> lock_binds_;  // node -> binds in flight that need its lock
  std::function<size_t(std::string_view)> busy_node_;   // ScheduleOptions::busy (lock-aware choice)
  std::map<PodKey, std::pair<std::string, SteadyTime>> recent_binds_;  // bound by us lately (watch may lag)
  std::map<PodKey, int> conflict_retries_;                             // immediate re-decisions after a 409, bounded
  std::set<PodKey> scrubbing_;                                         // stale-annotation removals in flight
  std::map<PodKey, std::string> needs_label_;  // bound by us, hami.io/vgpu-node label missing -> node
  std::set<PodKey> labelling_;                 // label patches in flight (at most kMaxLabelsInFlight)
  std::map<PodKey, Nomination> nominations_;   // preemptors waiting for their victims
  NodeLocker locker_;                          // hami.io/mutex.lock: takes, releases, janitor
  LoopReporter reporter_;                      // PodScheduled condition and Events
  /// update_gauges(): the node names and card types the metrics' card rows share (pruned after each sweep).
  metrics::LabelInterner card_labels_;

  boost::asio::steady_timer wake_timer_;
  boost::asio::steady_timer sweep_timer_;
  bool wake_pending_ = false;
  bool stopped_ = false;
  bool synced_ = false;
  bool active_ = false;
  std::atomic<bool> synced_flag_{false};
  std::atomic<bool> active_flag_{false};
};

}  // namespace gpuslice::scheduler
