#include "scheduler/node_lock.h"

#include "common/json_access.h"
#include "common/json_patch.h"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <initializer_list>

namespace gpuslice::scheduler {

std::string format_node_lock(WallTime time, std::string_view ns, std::string_view pod) {
  std::string out = format_rfc3339(time);
  out += ',';
  out += ns;
  out += ',';
  out += pod;
  return out;
}

Result<NodeLockValue> parse_node_lock(std::string_view value) {
  NodeLockValue out;
  const size_t first = value.find(',');
  std::string_view time_text = first == std::string_view::npos ? value : value.substr(0, first);
  auto t = parse_rfc3339(time_text);
  if (!t) {
    return make_error(std::string(kNodeLockAnnotation) + ": " + t.message());
  }
  out.time = *t;
  if (first == std::string_view::npos) {
    out.legacy = true;
    return out;
  }
  std::string_view rest = value.substr(first + 1);
  const size_t second = rest.find(',');
  if (second == std::string_view::npos || second == 0 || second + 1 >= rest.size() ||
      rest.find(',', second + 1) != std::string_view::npos) {
    return make_error(std::string(kNodeLockAnnotation) + ": \"" + std::string(value.substr(0, 128)) +
                      "\" is not <RFC3339>,<namespace>,<pod>");
  }
  out.ns = std::string(rest.substr(0, second));
  out.pod = std::string(rest.substr(second + 1));
  return out;
}

bool lock_expired(std::string_view value, WallTime now, std::chrono::milliseconds timeout) {
  auto parsed = parse_node_lock(value);
  if (!parsed) {
    return true;
  }
  return now - parsed->time > timeout;
}

bool lock_held_by(const std::optional<std::string>& current, std::string_view ns, std::string_view pod) {
  if (!current) {
    return false;
  }
  auto parsed = parse_node_lock(*current);
  return parsed && !parsed->legacy && parsed->ns == ns && parsed->pod == pod;
}

LockDecision decide_node_lock(std::string_view node, const std::optional<std::string>& current, std::string_view ns,
                              std::string_view pod, WallTime now, std::chrono::milliseconds timeout,
                              LockOwnerState owner, std::chrono::milliseconds abandon_grace) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  LockDecision d;
  const std::string node_s(node);
  if (!current) {
    d.action = LockAction::take;
    d.reason = "node " + node_s + " is not locked";
    return d;
  }
  auto parsed = parse_node_lock(*current);
  if (!parsed) {
    d.action = LockAction::take_expired;
    d.reason = "node " + node_s + ": " + parsed.message() + "; overwriting it";
    return d;
  }
  const auto age = duration_cast<milliseconds>(now - parsed->time);
  d.holder_ns = parsed->ns;
  d.holder_pod = parsed->pod;
  const std::string holder = parsed->legacy ? std::string("(legacy lock)") : parsed->ns + "/" + parsed->pod;
  if (!parsed->legacy && parsed->ns == ns && parsed->pod == pod) {
    d.action = LockAction::already_ours;
    d.reason = "node " + node_s + " is already locked by this pod";
    return d;
  }
  // A lock from the future (clock skew between schedulers) ages from zero: it still expires within
  // timeout + skew, and the owner checks below free it early.
  if (age > timeout) {
    d.action = LockAction::take_expired;
    d.reason = "node " + node_s + " lock by " + holder + " is " + std::to_string(age.count() / 1000) +
               "s old, past the timeout " + std::to_string(timeout.count() / 1000) + "s";
    return d;
  }
  if (!parsed->legacy) {
    switch (owner) {
      case LockOwnerState::deleted:
        d.action = LockAction::take_owner_gone;
        d.reason = "node " + node_s + " lock owner " + holder + " no longer exists";
        return d;
      case LockOwnerState::finished:
        d.action = LockAction::take_owner_gone;
        d.reason = "node " + node_s + " lock owner " + holder + " has finished";
        return d;
      case LockOwnerState::allocation_over:
        d.action = LockAction::take_owner_gone;
        d.reason = "node " + node_s + " lock owner " + holder + " is bound and can no longer allocate on this node";
        return d;
      case LockOwnerState::abandoned:
        if (age >= abandon_grace) {
          d.action = LockAction::take_owner_gone;
          d.reason = "node " + node_s + " lock owner " + holder + " is not bound and no bind of it is in progress (" +
                     std::to_string(age.count() / 1000) + "s old): abandoned";
          return d;
        }
        break;
      case LockOwnerState::unknown:
        d.action = LockAction::lookup_owner;
        d.reason = "node " + node_s + " is locked by " + holder + "; checking the owner";
        return d;
      case LockOwnerState::active:
        break;
    }
  }
  d.action = LockAction::contention;
  const auto positive_age = age.count() < 0 ? milliseconds(0) : age;
  auto left = timeout - positive_age;
  if (owner == LockOwnerState::abandoned) {
    left = std::min(left, abandon_grace - positive_age);
  }
  d.expires_in = left.count() < 0 ? milliseconds(0) : left;
  d.reason = "node " + node_s + " has been locked within " + std::to_string(timeout.count() / 1000) + "s by " + holder +
             ": node lock contention";
  return d;
}

std::string node_lock_patch(std::string_view resource_version, const std::optional<std::string>& value) {
  boost::json::object meta;
  if (!resource_version.empty()) {
    meta["resourceVersion"] = resource_version;
  }
  boost::json::object ann;
  if (value) {
    ann[kNodeLockAnnotation] = *value;
  } else {
    ann[kNodeLockAnnotation] = nullptr;  // merge patch: null deletes the key
  }
  meta["annotations"] = std::move(ann);
  return boost::json::serialize(boost::json::object{{"metadata", std::move(meta)}});
}

std::string node_lock_test_and_set(const std::optional<std::string>& expected,
                                   const std::optional<std::string>& value) {
  const std::string path = "/metadata/annotations/" + json_pointer_escape(kNodeLockAnnotation);
  Patch p;
  p.push_back({PatchOp::Kind::test, path, expected ? boost::json::value(*expected) : boost::json::value(nullptr)});
  if (value) {
    p.push_back({PatchOp::Kind::add, path, boost::json::value(*value)});
  } else if (expected) {
    p.push_back({PatchOp::Kind::remove, path, {}});
  }
  return serialize_patch(p);
}

PodBrief brief_of(const boost::json::object& pod) {
  // The string at pod[path[0]][path[1]]..., or "" when a step is absent or of another type.
  auto at = [&pod](std::initializer_list<std::string_view> path) {
    const boost::json::object* o = &pod;
    auto last = path.end() - 1;
    for (auto it = path.begin(); o != nullptr && it != last; ++it) {
      o = object_at(*o, *it);
    }
    return o != nullptr ? string_at(*o, *last) : std::string();
  };
  PodBrief b;
  b.uid = at({"metadata", "uid"});
  b.node_name = at({"spec", "nodeName"});
  b.vgpu_node = at({"metadata", "annotations", kVgpuNodeAnnotation});
  b.bind_phase = at({"metadata", "annotations", kBindPhaseAnnotation});
  b.phase = at({"status", "phase"});
  b.scheduler_name = at({"spec", "schedulerName"});
  if (const auto* meta = object_at(pod, "metadata"); meta != nullptr) {
    if (const auto* ann = object_at(*meta, "annotations");
        ann != nullptr && ann->contains(kDevicesToAllocateAnnotation)) {
      b.devices_consumed = string_at(*ann, kDevicesToAllocateAnnotation).find(kNvidiaVendorWord) == std::string::npos;
    }
  }
  return b;
}

LockOwnerBrief LockOwnerBrief::of(const PodBrief& brief, std::string_view our_scheduler) {
  LockOwnerBrief b;
  b.node_name = brief.node_name;
  b.bind_phase = brief.bind_phase == kBindPhaseAllocating ? BindPhase::allocating
                 : brief.bind_phase == kBindPhaseSuccess  ? BindPhase::success
                 : brief.bind_phase == kBindPhaseFailed   ? BindPhase::failed
                                                          : BindPhase::other;
  b.ours = brief.scheduler_name == our_scheduler;
  b.devices_consumed = brief.devices_consumed;
  return b;
}

PodBrief LockOwnerBrief::brief(std::string_view our_scheduler) const {
  PodBrief b;
  b.node_name = node_name;
  b.bind_phase = bind_phase == BindPhase::allocating ? std::string(kBindPhaseAllocating)
                 : bind_phase == BindPhase::success  ? std::string(kBindPhaseSuccess)
                 : bind_phase == BindPhase::failed   ? std::string(kBindPhaseFailed)
                                                     : std::string();
  b.scheduler_name = ours ? std::string(our_scheduler) : std::string();
  b.devices_consumed = devices_consumed;
  return b;
}

LockOwnerState classify_lock_owner(const std::optional<PodBrief>& owner, std::string_view node, bool binding_now,
                                   std::string_view our_scheduler) {
  if (binding_now) {
    return LockOwnerState::active;
  }
  if (!owner) {
    return LockOwnerState::deleted;
  }
  if (owner->phase == "Succeeded" || owner->phase == "Failed") {
    return LockOwnerState::finished;
  }
  // Only what is provable frees a lock early. An unbound owner may be mid-bind by any scheduler (HAMi's takes the
  // lock before it writes bind-phase), so it is active whatever its annotations say; a bound pod is never bound
  // again, so bound elsewhere, or bound here with the allocation finished, can never use this lock.
  if (owner->node_name.empty()) {
    // Ours alone to bind, and we are not binding it: nobody is between its lock and a Binding (after the grace).
    return !our_scheduler.empty() && owner->scheduler_name == our_scheduler ? LockOwnerState::abandoned
                                                                            : LockOwnerState::active;
  }
  if (owner->node_name != node || owner->bind_phase == kBindPhaseSuccess || owner->bind_phase == kBindPhaseFailed ||
      owner->devices_consumed) {
    return LockOwnerState::allocation_over;
  }
  return LockOwnerState::active;
}

}  // namespace gpuslice::scheduler
