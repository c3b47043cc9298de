#include "scheduler/leader.h"

#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>

namespace gpuslice::scheduler {
namespace {

std::string str_field(const boost::json::object& o, const char* key) {
  if (const auto* v = o.if_contains(key); v != nullptr && v->is_string()) {
    return std::string(v->get_string());
  }
  return {};
}

}  // namespace

boost::json::object lease_to_json(const Lease& lease) {
  boost::json::object meta{{"name", lease.name}, {"namespace", lease.ns}};
  if (!lease.resource_version.empty()) {
    meta["resourceVersion"] = lease.resource_version;
  }
  boost::json::object spec;
  // holderIdentity is written even when empty: a release must clear it (PUT replaces the object).
  spec["holderIdentity"] = lease.spec.holder_identity;
  spec["leaseDurationSeconds"] = lease.spec.lease_duration_seconds;
  if (!lease.spec.acquire_time.empty()) {
    spec["acquireTime"] = lease.spec.acquire_time;
  }
  if (!lease.spec.renew_time.empty()) {
    spec["renewTime"] = lease.spec.renew_time;
  }
  spec["leaseTransitions"] = lease.spec.lease_transitions;
  return {{"apiVersion", "coordination.k8s.io/v1"},
          {"kind", "Lease"},
          {"metadata", std::move(meta)},
          {"spec", std::move(spec)}};
}

Result<Lease> lease_from_json(const boost::json::value& value) {
  if (!value.is_object()) {
    return make_error("lease: not a JSON object");
  }
  const auto& o = value.get_object();
  Lease out;
  const auto* meta = o.if_contains("metadata");
  if (meta == nullptr || !meta->is_object()) {
    return make_error("lease: metadata missing");
  }
  out.name = str_field(meta->get_object(), "name");
  out.ns = str_field(meta->get_object(), "namespace");
  out.resource_version = str_field(meta->get_object(), "resourceVersion");
  if (const auto* spec_v = o.if_contains("spec"); spec_v != nullptr) {
    if (!spec_v->is_object()) {
      return make_error("lease " + out.name + ": spec is not an object");
    }
    const auto& spec = spec_v->get_object();
    out.spec.holder_identity = str_field(spec, "holderIdentity");
    out.spec.acquire_time = str_field(spec, "acquireTime");
    out.spec.renew_time = str_field(spec, "renewTime");
    if (const auto* d = spec.if_contains("leaseDurationSeconds"); d != nullptr && !d->is_null()) {
      if (!d->is_int64()) {
        return make_error("lease " + out.name + ": spec.leaseDurationSeconds " + boost::json::serialize(*d) +
                          " is not an integer");
      }
      out.spec.lease_duration_seconds = d->get_int64();
    }
    if (const auto* t = spec.if_contains("leaseTransitions"); t != nullptr && !t->is_null()) {
      if (!t->is_int64()) {
        return make_error("lease " + out.name + ": spec.leaseTransitions " + boost::json::serialize(*t) +
                          " is not an integer");
      }
      out.spec.lease_transitions = t->get_int64();
    }
  }
  return out;
}

LeaderElector::LeaderElector(std::string identity, std::string ns, std::string name, LeaderElectionConfig config)
    : identity_(std::move(identity)), ns_(std::move(ns)), name_(std::move(name)), config_(std::move(config)) {}

bool LeaderElector::is_leader(SteadyTime now) const {
  return leader_ && now - last_renew_start_ < config_.renew_deadline;
}

LeaderElector::Plan LeaderElector::observe(const std::optional<Lease>& current, SteadyTime now, WallTime wall) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  attempt_start_ = now;
  pending_ = Op::none;
  Plan plan;
  const int64_t duration_s = std::max<int64_t>(1, duration_cast<seconds>(config_.lease_duration).count());
  const std::string stamp = format_rfc3339(wall, 6);

  if (!current) {
    plan.op = Op::create;
    plan.desired.ns = ns_;
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
  plan.desired.ns = ns_;
  plan.desired.name = name_;
  plan.desired.spec.holder_identity = identity_;
  plan.desired.spec.lease_duration_seconds = duration_s;
  plan.desired.spec.renew_time = stamp;
  if (!ours) {
    plan.desired.spec.acquire_time = stamp;
    plan.desired.spec.lease_transitions = current->spec.lease_transitions + 1;
    plan.reason = holder.empty() ? "lease is free" : "lease held by " + holder + " expired";
  } else {
    if (plan.desired.spec.acquire_time.empty()) {
      plan.desired.spec.acquire_time = stamp;
    }
    plan.reason = "renewing";
  }
  pending_ = plan.op;
  pending_desired_ = plan.desired;
  return plan;
}

void LeaderElector::on_write(WriteResult result, const std::optional<Lease>& written, SteadyTime now) {
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

std::optional<Lease> LeaderElector::release(WallTime wall) {
  if (!leader_ || observed_.spec.holder_identity != identity_) {
    leader_ = false;
    return std::nullopt;
  }
  leader_ = false;
  Lease out = observed_;
  out.ns = ns_;
  out.name = name_;
  out.spec.holder_identity.clear();
  out.spec.lease_duration_seconds = 1;
  out.spec.renew_time = format_rfc3339(wall, 6);
  return out;
}

}  // namespace gpuslice::scheduler
