#pragma once
// HAMi's per-node lock (hami-protocol.md §5) as pure decisions. The node annotation `hami.io/mutex.lock`
// holds `<RFC3339>,<namespace>,<pod>` (legacy: a bare RFC 3339 time). The scheduler takes it before binding
// a GPU pod to the node; the device plugin (or the lab's mock agent) releases it after Allocate; the
// scheduler releases it when binding fails. Nothing here talks to the API: the caller reads the node (and,
// when asked, the owner pod) and applies the decision with a resourceVersion precondition (node_lock_patch);
// scheduler/node_locker.h is that caller.

#include "common/result.h"
#include "common/rfc3339.h"
#include "scheduler/allocation.h"  // kNodeLockAnnotation

#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpuslice::scheduler {

struct NodeLockValue {
  WallTime time;
  std::string ns;   ///< empty for the legacy form
  std::string pod;  ///< empty for the legacy form
  bool legacy = false;
};

/// `<RFC3339 UTC>,<ns>,<pod>`, the form HAMi's device plugin reads with util.GetPendingPod.
std::string format_node_lock(WallTime time, std::string_view ns, std::string_view pod);

/// Parses either form. Errors name the annotation and quote the value.
Result<NodeLockValue> parse_node_lock(std::string_view value);

/// How old the lock of an `abandoned` owner must be before it is taken over: longer than a request's deadline
/// (kube client timeout, 30 s by default) plus a lease's duration (15 s), so a Binding sent by a leader that has
/// since stopped has landed or failed by then.
inline constexpr std::chrono::milliseconds kAbandonedLockGrace{60000};

/// How long the janitor leaves a lock whose owner is done allocating (bound with bind-phase success/failed, or
/// finished) to the device plugin, which releases it itself right after Allocate (HAMi's
/// PodAllocationTrySuccess/Failed -> ReleaseNodeLock), counted from the lock's time. Stepping in earlier only races
/// the plugin's own release, one failed write and one read each time. A binder waiting for the node does not wait
/// for it: it takes the lock over in one write.
inline constexpr std::chrono::milliseconds kPluginReleaseGrace{10000};

/// What the caller knows about the pod that owns an existing lock.
enum class LockOwnerState {
  unknown,   ///< not looked up yet
  active,    ///< exists and has not finished (phase not Succeeded/Failed, no deletionTimestamp honoured)
  finished,  ///< phase Succeeded or Failed: it will never run Allocate (HAMi PR #3047)
  deleted,   ///< GET answered NotFound, or a different UID holds the name
  /// Bound, and can never call Allocate under this lock again: bound to another node, or bound to this node
  /// with bind-phase success or failed (a pod is bound once). An owner that is not bound yet is never this: any
  /// scheduler (HAMi's included, which locks before it writes bind-phase) may be between lock and bind.
  allocation_over,
  /// Not bound, of this scheduler's schedulerName, and this scheduler (the leader, the only one that binds such a
  /// pod) is neither binding it nor has just bound it: the bind that took the lock ended without binding (a crash
  /// or lost leadership between the lock and the Binding). Taken over once the lock is older than the abandon
  /// grace, which covers a Binding a previous leader sent just before it stopped.
  abandoned,
};

enum class LockAction {
  take,             ///< no lock: write ours
  already_ours,     ///< the lock names this pod: proceed
  take_expired,     ///< older than the timeout (or unparsable): overwrite it
  take_owner_gone,  ///< owner deleted or finished: overwrite it
  lookup_owner,     ///< held by another pod within the timeout: look the owner up, then decide again
  contention,       ///< held by a live pod within the timeout: retry later
};

struct LockDecision {
  LockAction action = LockAction::contention;
  std::string reason;  ///< human-readable, names the node, the holder and the age
  /// When the lock is held (lookup_owner/contention), the holder; empty for the legacy form.
  std::string holder_ns;
  std::string holder_pod;
  /// For contention: how long until the lock expires by the timeout (never negative).
  std::chrono::milliseconds expires_in{0};
};

/// HAMi's LockNode decision for pod `ns/pod` on `node`, given the current annotation value (nullopt when
/// absent), the wall clock `now` (the lock's own timestamps are wall-clock, written by whichever scheduler
/// took it), the timeout (HAMi: 5 min), and the owner's state when already looked up. A value that does not
/// parse is treated as expired: it can never be released by its owner, and keeping it would stall the node.
/// An `abandoned` owner's lock is taken over once older than `abandon_grace`.
LockDecision decide_node_lock(std::string_view node, const std::optional<std::string>& current, std::string_view ns,
                              std::string_view pod, WallTime now, std::chrono::milliseconds timeout,
                              LockOwnerState owner = LockOwnerState::unknown,
                              std::chrono::milliseconds abandon_grace = kAbandonedLockGrace);

/// True when `current` may be removed by pod `ns/pod`: it names that pod (HAMi requires the value to end with
/// `,<ns>,<pod>` unless forced). An absent value needs no release.
bool lock_held_by(const std::optional<std::string>& current, std::string_view ns, std::string_view pod);

/// True when the lock is past its timeout at `now` (or unparsable).
bool lock_expired(std::string_view value, WallTime now, std::chrono::milliseconds timeout);

/// Merge patch of a node's lock annotation (nullopt removes it: null deletes the key), with the node's
/// resourceVersion as precondition when non-empty.
std::string node_lock_patch(std::string_view resource_version, const std::optional<std::string>& value);

/// JSON Patch (RFC 6902) that changes the lock annotation from `expected` (nullopt: absent) to `value` (nullopt:
/// removed), and fails (422) when the annotation is not `expected` at the moment the API server applies it. The
/// precondition is the lock itself, not the node's resourceVersion, so the node's other writers (kubelet's status,
/// the device plugin's register annotations) do not make it fail: kube-apiserver re-applies a patch to the
/// current object on a storage conflict (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go), and the
/// test op of gopkg.in/evanphx/json-patch.v4 treats an absent member as equal to null. The node must already have
/// a metadata.annotations map (else 422 too; the caller falls back to node_lock_patch).
std::string node_lock_test_and_set(const std::optional<std::string>& expected, const std::optional<std::string>& value);

/// What the lock janitor knows of a pod (from the pod watch or a GET).
struct PodBrief {
  std::string uid;
  std::string node_name;       ///< spec.nodeName
  std::string vgpu_node;       ///< hami.io/vgpu-node
  std::string bind_phase;      ///< hami.io/bind-phase
  std::string phase;           ///< status.phase
  std::string scheduler_name;  ///< spec.schedulerName
  /// hami.io/vgpu-devices-to-allocate is present and holds no NVIDIA entry: the device plugin has consumed every
  /// entry (HAMi's PodAllocationTrySuccess test), so the pod has nothing left to allocate under a lock.
  bool devices_consumed = false;
};
/// Reads the brief from a pod object; absent or non-string fields are empty.
PodBrief brief_of(const boost::json::object& pod);

/// What the loop keeps of every live pod's PodBrief (SchedulingLoop's briefs_): exactly what
/// classify_lock_owner() reads of an owner that is not finished, and whether the bind-phase changed. 40 bytes
/// instead of PodBrief's 200 plus its uid and schedulerName on the heap (40,000 pods: ~9 MB less).
struct LockOwnerBrief {
  enum class BindPhase : uint8_t { other, allocating, success, failed };  ///< other: absent or another value
  std::string node_name;                                                  ///< spec.nodeName
  BindPhase bind_phase = BindPhase::other;
  bool ours = false;              ///< spec.schedulerName is `our_scheduler`
  bool devices_consumed = false;  ///< PodBrief::devices_consumed

  static LockOwnerBrief of(const PodBrief& brief, std::string_view our_scheduler);
  /// A PodBrief on which classify_lock_owner(., node, binding_now, our_scheduler) decides as on the brief this
  /// was made from, when that pod is not finished (uid, vgpu_node and phase are left empty; another bind-phase
  /// value reads as none, which classify_lock_owner does not tell apart).
  PodBrief brief(std::string_view our_scheduler) const;
};

/// Whether the owner of a lock on `node` may still need it. Only what is provable frees a lock before its
/// timeout, whoever wrote it: deleted (nullopt), Succeeded/Failed (finished), or bound and unable to allocate
/// under it again (allocation_over: bound to another node, or bound here with bind-phase success/failed, or bound
/// here with every device entry consumed: the plugin's success write was lost, e.g. to a partition).
/// Being bound by us (`binding_now`) is active. Not bound yet is active (any scheduler may be between lock and
/// bind) unless its schedulerName is `our_scheduler` (non-empty only when the caller is the leader and knows it is
/// not binding that pod): then it is abandoned. Pure.
LockOwnerState classify_lock_owner(const std::optional<PodBrief>& owner, std::string_view node, bool binding_now,
                                   std::string_view our_scheduler = {});

}  // namespace gpuslice::scheduler
