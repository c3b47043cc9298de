#pragma once
// Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it, as a pure state
// machine: the driver (leader_runner.h) GETs the Lease every retry period, hands it to observe(), performs the
// create/update it is told to (update carries the observed resourceVersion, so a concurrent writer gets 409),
// and reports the outcome with on_write().
//
// Expiry is judged by when THIS process last saw the record change (steady clock), never by comparing the
// renewTime written by another node with our wall clock. A leader whose renewals keep failing stops being
// leader renew_deadline after the start of its last successful renewal, which is before any other replica
// can consider the lease expired (lease_duration after it saw that renewal), so two leaders never overlap
// while clocks run at the same rate.
//
// The Lease is kube::Lease, the client's own type: the elector plans with it and the runner sends it as is.
// Times in it are MicroTime (microseconds), so the elector stamps wall time truncated to microseconds and what it
// holds compares equal to what the server echoes back.

#include "common/config.h"
#include "common/rfc3339.h"
#include "kube/objects.h"  // kube::Lease and its codec (kube_core, pure)
#include "scheduler/loop_queue.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace gpuslice::scheduler {

class LeaderElector {
 public:
  LeaderElector(std::string identity, std::string ns, std::string name, LeaderElectionConfig config);

  enum class Op { none, create, update };
  struct Plan {
    Op op = Op::none;
    kube::Lease desired;  ///< the object to create, or to PUT (with the observed resourceVersion)
    std::string reason;   ///< why (for logs): "lease held by X, valid for 12s", "lease expired", ...
  };

  /// One attempt, after GET: `current` is the Lease (nullopt on 404). `now` is steady time, `wall` what is
  /// written into acquireTime/renewTime (informational for other clients).
  Plan observe(const std::optional<kube::Lease>& current, SteadyTime now, WallTime wall);

  enum class WriteResult { ok, conflict, error };
  /// The outcome of the create/update planned by the last observe(); `written` is the server's answer on ok
  /// (its resourceVersion is kept so the next renewal can detect interference).
  void on_write(WriteResult result, const std::optional<kube::Lease>& written, SteadyTime now);
  /// The GET failed (network, 5xx): nothing observed; leadership may lapse by the renew deadline.
  void on_get_error(SteadyTime now);

  /// True while we hold the lease and the last successful renewal started less than renew_deadline ago.
  bool is_leader(SteadyTime now) const;
  /// The holder we last observed (ourselves when leading); empty when none.
  const std::string& observed_holder() const { return observed_.spec.holder_identity; }
  const std::string& identity() const { return identity_; }
  const std::string& lease_namespace() const { return ns_; }
  const std::string& lease_name() const { return name_; }
  const LeaderElectionConfig& config() const { return config_; }
  /// When the next attempt should run: retry_period after the start of the last one.
  std::chrono::milliseconds retry_period() const { return config_.retry_period; }

  /// On graceful shutdown, the update that gives the lease up (holder cleared, duration 1 s, as client-go's
  /// ReleaseOnCancel); nullopt when we are not the holder. After it, is_leader() is false.
  std::optional<kube::Lease> release(WallTime wall);

 private:
  std::string identity_;
  std::string ns_;
  std::string name_;
  LeaderElectionConfig config_;

  bool have_observed_ = false;
  kube::Lease observed_;      // last record seen (or written)
  SteadyTime observed_at_{};  // when it last changed, by our clock
  bool leader_ = false;
  SteadyTime last_renew_start_{};
  SteadyTime attempt_start_{};
  Op pending_ = Op::none;
  kube::Lease pending_desired_;
};

}  // namespace gpuslice::scheduler
