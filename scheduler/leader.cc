#include "scheduler/leader.h"

#include <algorithm>

namespace gpuslice::scheduler {
namespace {

/// MicroTime precision: what the Lease carries on the wire.
WallTime micro_time(WallTime wall) {
  return std::chrono::floor<std::chrono::microseconds>(wall);
}

}  // namespace

LeaderElector::LeaderElector(std::string identity, std::string ns, std::string name, LeaderElectionConfig config)
    : identity_(std::move(identity)), ns_(std::move(ns)), name_(std::move(name)), config_(std::move(config)) {}

bool LeaderElector::is_leader(SteadyTime now) const {
  return leader_ && now - last_renew_start_ < config_.renew_deadline;
}

LeaderElector::Plan LeaderElector::observe(const std::optional<kube::Lease>& current, SteadyTime now, WallTime wall) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  attempt_start_ = now;
  pending_ = Op::none;
  Plan plan;
  const int32_t duration_s =
      static_cast<int32_t>(std::clamp<int64_t>(duration_cast<seconds>(config_.lease_duration).count(), 1, INT32_MAX));
  const WallTime stamp = micro_time(wall);

  if (!current) {
    plan.op = Op::create;
    plan.desired.namespace_ = ns_;
    plan.desired.name = name_;
    plan.desired.spec = {identity_, duration_s, stamp, stamp, 0};
    plan.reason = "lease does not exist";
    pending_ = plan.op;
    pending_desired_ = plan.desired;
    return plan;
  }

  // Any change of the record restarts its expiry clock, ours: a holder that keeps renewing stays valid however
  // far its wall clock is from ours.
  if (!have_observed_ || !(current->spec == observed_.spec)) {
    observed_at_ = now;
  }
  have_observed_ = true;
  observed_ = *current;

  const auto& holder = current->spec.holder_identity;
  const bool ours = holder == identity_;
  if (!ours) {
    // Someone else holds it (or it was released): we are not the leader whatever we thought.
    leader_ = false;
  }
  if (!holder.empty() && !ours) {
    int64_t valid_s = current->spec.lease_duration_seconds > 0 ? current->spec.lease_duration_seconds : duration_s;
    const auto expires = observed_at_ + seconds(valid_s);
    if (now < expires) {
      plan.op = Op::none;
      plan.reason = "lease held by " + holder + ", valid for another " +
                    std::to_string(duration_cast<milliseconds>(expires - now).count()) + "ms";
      return plan;
    }
  }

  plan.op = Op::update;
  plan.desired = *current;  // keeps the resourceVersion: the precondition of the update
  plan.desired.namespace_ = ns_;
  plan.desired.name = name_;
  plan.desired.spec.holder_identity = identity_;
  plan.desired.spec.lease_duration_seconds = duration_s;
  plan.desired.spec.renew_time = stamp;
  if (!ours) {
    plan.desired.spec.acquire_time = stamp;
    plan.desired.spec.lease_transitions = current->spec.lease_transitions + 1;
    plan.reason = holder.empty() ? "lease is free" : "lease held by " + holder + " expired";
  } else {
    if (!plan.desired.spec.acquire_time) {
      plan.desired.spec.acquire_time = stamp;
    }
    plan.reason = "renewing";
  }
  pending_ = plan.op;
  pending_desired_ = plan.desired;
  return plan;
}

void LeaderElector::on_write(WriteResult result, const std::optional<kube::Lease>& written, SteadyTime now) {
  const Op op = pending_;
  pending_ = Op::none;
  if (op == Op::none) {
    return;
  }
  if (result == WriteResult::ok) {
    leader_ = true;
    last_renew_start_ = attempt_start_;
    observed_ = written ? *written : pending_desired_;
    have_observed_ = true;
    observed_at_ = now;
    return;
  }
  // 409: someone else wrote first. Leadership (if any) stays until the renew deadline: a single lost race
  // while renewing is normal under API latency, and the next GET tells who holds it.
  (void)now;
}

void LeaderElector::on_get_error(SteadyTime /*now*/) {
  pending_ = Op::none;
}

std::optional<kube::Lease> LeaderElector::release(WallTime wall) {
  if (!leader_ || observed_.spec.holder_identity != identity_) {
    leader_ = false;
    return std::nullopt;
  }
  leader_ = false;
  kube::Lease out = observed_;
  out.namespace_ = ns_;
  out.name = name_;
  out.spec.holder_identity.clear();
  out.spec.lease_duration_seconds = 1;
  out.spec.renew_time = micro_time(wall);
  return out;
}

}  // namespace gpuslice::scheduler
