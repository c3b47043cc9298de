// The loop's side of priority preemption (the decision is scheduler/preemption.h, pure): kube-scheduler's
// PostFilter as carried out by pkg/scheduler/framework/preemption/preemption.go (prepareCandidate) and the
// nominator of pkg/scheduler/backend/queue/nominator.go, followed in our own code:
//
//   1. a pod that fits nowhere and may preempt gets a candidate node and victims (find_preemption);
//   2. its nomination holds the cards it will take in the snapshot at once (Snapshot::nominate): pods of lower or
//      equal priority cannot take them while the victims terminate; a more important pod can (its decision
//      hides lower nominations, hide_nominations_below);
//   3. status.nominatedNodeName is written first, then each victim gets DisruptionTarget=True
//      (PreemptionByScheduler) and a graceful delete with its UID as precondition, and a Preempted Event;
//   4. when a victim's deletion arrives, every pending pod is retried; the preemptor tries its nominated node
//      first and binds through the normal path (node lock included).
//
// Bounded and safe: at most scheduler.preemption.maxInFlight nominations at once; a nominated pod whose victims
// are still terminating waits (not eligible, kube-scheduler's rule) and holds its nomination again, so nothing is
// evicted twice; crash safety follows from the order of writes: the nomination is on the pod before any victim
// is touched, victims carry DisruptionTarget before they are deleted, so a restarted scheduler reads
// status.nominatedNodeName and the terminating victims and waits rather than preempting again.

#include "common/json_access.h"
#include "common/log.h"
#include "scheduler/loop.h"
#include "scheduler/loop_metrics.h"

#include <boost/json/serialize.hpp>

namespace gpuslice::scheduler {
namespace {

namespace asio = boost::asio;

int64_t unix_now(WallTime t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

void set_in_flight_gauge(size_t nominations) {
  LoopMetrics::get().preemptions_in_flight.with({}).set(static_cast<double>(nominations));
}

int32_t priority_of(const PodInfo& info) {
  return info.facts ? info.facts->priority : 0;
}

boost::json::object ref_of(std::string_view ns, std::string_view name, std::string_view uid) {
  boost::json::object meta;
  meta["namespace"] = ns;
  meta["name"] = name;
  meta["uid"] = uid;
  boost::json::object o;
  o["metadata"] = std::move(meta);
  return o;
}

}  // namespace

std::vector<PodRecord> SchedulingLoop::hide_nominations_below(int32_t priority) {
  std::vector<PodRecord> hidden;
  for (const auto& [key, n] : nominations_) {
    if (n.priority >= priority) {
      continue;
    }
    const PodRecord* rec = snapshot_.find_pod(key.ns, key.name);
    if (rec != nullptr && rec->nominated) {
      if (auto taken = snapshot_.detach_pod(key.ns, key.name)) {
        hidden.push_back(std::move(*taken));
      }
    }
  }
  return hidden;
}

void SchedulingLoop::restore_nominations(std::vector<PodRecord> hidden) {
  for (PodRecord& rec : hidden) {
    const PodRecord* now = snapshot_.find_pod(rec.ns, rec.name);
    if (now == nullptr || now->nominated) {  // a record that arrived meanwhile (bound, assumed) stays
      snapshot_.restore_pod(std::move(rec));
    }
  }
}

std::optional<Decision> SchedulingLoop::decide_on_nominated_node(const PodKey& key, const PodInfo& info) {
  std::string node = nomination_of(key);
  if (node.empty() && info.facts) {
    node = info.facts->nominated_node();
  }
  if (node.empty()) {
    return std::nullopt;
  }
  const NodeState* n = snapshot_.find_node(node);
  if (n == nullptr) {
    return std::nullopt;
  }
  ScheduleOptions quiet = schedule_options_;
  quiet.explain_failures = false;
  auto check = profile_of(schedule_options_).check_node(snapshot_, info, quiet, *n);
  if (!check.status.ok()) {
    return std::nullopt;
  }
  return std::move(check.decision);
}

void SchedulingLoop::drop_nomination(const PodKey& key) {
  nominations_.erase(key);
  set_in_flight_gauge(nominations_.size());
  if (const PodRecord* rec = snapshot_.find_pod(key.ns, key.name); rec != nullptr && rec->nominated) {
    snapshot_.forget(key.ns, key.name);
  }
}

void SchedulingLoop::nomination_ended() {
  set_in_flight_gauge(nominations_.size());
  // A place under scheduler.preemption.maxInFlight is free: the preemptors told "retried when one completes"
  // are retried now rather than at the end of their backoff.
  if (options_.scheduler.preemption.enabled) {
    queue_.move_all_to_active(options_.clock.steady());
    wake();
  }
}

void SchedulingLoop::hold_nomination(const PodKey& key, const PodInfo& info, const std::string& node) {
  auto it = nominations_.find(key);
  if (it == nominations_.end() || it->second.node != node) {
    // Read back from status.nominatedNodeName (a restart, or another incarnation nominated it): the cards it will
    // take are those it gets once the pods terminating there by preemption are gone.
    Nomination n;
    n.node = node;
    n.priority = priority_of(info);
    if (const NodeState* ns = snapshot_.find_node(node)) {
      std::vector<PodRecord> going;
      std::vector<std::pair<std::string, std::string>> keys;
      snapshot_.for_each_pod_on(node, [&](const PodRecord& rec) {
        const PodFacts& f = rec.facts ? *rec.facts : *empty_pod_facts();
        if (!rec.nominated && f.terminating && f.preemption_target && f.priority < n.priority) {
          keys.emplace_back(rec.ns, rec.name);
        }
      });
      for (const auto& [pns, pname] : keys) {
        if (auto rec = snapshot_.detach_pod(pns, pname)) {
          n.victims.push_back(pns + "/" + pname);
          going.push_back(std::move(*rec));
        }
      }
      ScheduleOptions quiet = schedule_options_;
      quiet.explain_failures = false;
      auto check = profile_of(schedule_options_).check_node(snapshot_, info, quiet, *ns);
      for (PodRecord& rec : going) {
        snapshot_.restore_pod(std::move(rec));
      }
      if (check.status.ok()) {
        n.devices = std::move(check.decision.devices);
      }
    }
    it = nominations_.insert_or_assign(key, std::move(n)).first;
    set_in_flight_gauge(nominations_.size());
  }
  if (auto st = snapshot_.nominate(info, node, it->second.devices, unix_now(options_.clock.wall())); !st) {
    log::warning("nomination not held", {{"pod", key.str()}, {"node", node}, {"error", st.message()}});
  }
}

std::string SchedulingLoop::preempt_or_wait(const PodKey& key, const PodInfo& info, const boost::json::object& pod) {
  const PreemptionConfig& config = options_.scheduler.preemption;
  if (!config.enabled) {
    return std::string();
  }
  // Every PostFilter run counts, as DefaultPreemption.PostFilter's deferred PreemptionAttempts.Inc() does
  // (kubernetes pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go): eligible or not.
  LoopMetrics::get().preemption_attempts.with({}).inc();
  std::string nominated = nomination_of(key);
  if (nominated.empty() && info.facts) {
    nominated = info.facts->nominated_node();
  }
  if (auto it = nominations_.find(key); it != nominations_.end()) {
    // Our own nomination stays valid while a victim we chose is still there (terminating, or its delete not
    // answered yet; a pod with no grace period never shows as terminating): wait for it, never preempt again.
    size_t left = 0;
    for (const std::string& v : it->second.victims) {
      const size_t slash = v.find('/');
      const PodRecord* rec = snapshot_.find_pod(v.substr(0, slash), v.substr(slash + 1));
      left += rec != nullptr && !rec->nominated ? 1 : 0;
    }
    if (left > 0 && snapshot_.find_node(it->second.node) != nullptr) {
      hold_nomination(key, info, it->second.node);
      return "preemption: nominated to node " + it->second.node + ", waiting for " + std::to_string(left) +
             (left == 1 ? " victim" : " victims") + " to terminate.";
    }
  }
  std::string why;
  if (!eligible_to_preempt(snapshot_, info, nominated, schedule_options_, &why)) {
    if (why == preemption_msg::kTerminatingOnNominated) {
      hold_nomination(key, info, nominated);  // still valid: its victims are on their way out
    } else {
      drop_nomination(key);
    }
    return "preemption: " + why;
  }
  // Eligible: an earlier nomination, if any, is no longer valid (its victims are gone and the pod still does not
  // fit there, or the node cannot take it any more). Preempt again, counting against the cap like a new one.
  if (nominations_.erase(key) != 0) {
    set_in_flight_gauge(nominations_.size());
  }
  if (nominations_.size() >= static_cast<size_t>(config.max_in_flight)) {
    return "preemption: " + std::to_string(nominations_.size()) +
           " preemptions in flight (scheduler.preemption.maxInFlight " + std::to_string(config.max_in_flight) +
           "); retried when one completes.";
  }
  PreemptionResult r = find_preemption(snapshot_, info, nominated, schedule_options_);
  if (!r.found) {
    if (!nominated.empty()) {
      clear_nominated_node(key);
    }
    return "preemption: " + r.message;
  }
  Nomination n;
  n.node = r.chosen.node;
  n.priority = priority_of(info);
  n.devices = r.chosen.placement.devices;
  for (const PreemptionVictim& v : r.chosen.victims) {
    n.victims.push_back(v.key());
  }
  if (auto st = snapshot_.nominate(info, n.node, n.devices, unix_now(options_.clock.wall())); !st) {
    log::warning("nomination not held", {{"pod", key.str()}, {"node", n.node}, {"error", st.message()}});
  }
  nominations_[key] = std::move(n);
  set_in_flight_gauge(nominations_.size());
  ++stats_.preemptions;
  // Observed when the chosen candidate's preparation starts, as prepareCandidate does (kubernetes
  // pkg/scheduler/framework/preemption/preemption.go): every victim chosen, terminating ones included.
  LoopMetrics::get().preemption_victims.with({}).observe(static_cast<double>(r.chosen.victims.size()));
  const std::string summary = preemption_summary(r.chosen);
  log::info("preempting", {{"pod", key.str()}, {"node", r.chosen.node}, {"summary", summary}});
  boost::json::object ref = ref_of(key.ns, key.name, kube::uid_of(pod));
  spawn(preempt_task(key, std::move(r.chosen), std::move(ref)));
  return "preemption: " + summary + "; nominated, waiting for them to terminate.";
}

void SchedulingLoop::clear_nominated_node(const PodKey& key) {
  spawn([](std::shared_ptr<SchedulingLoop> self, PodKey key) -> asio::awaitable<void> {
    if (self->stopped_ || !self->active_) {
      co_return;
    }
    std::string patch = R"({"status":{"nominatedNodeName":null}})";
    auto r = co_await self->api_->patch_pod_status(key.ns, key.name, std::move(patch));
    if (!r && !r.error().is_not_found()) {
      log::warning("clearing nominatedNodeName failed", {{"pod", key.str()}, {"error", r.error().to_string()}});
    }
  }(shared_from_this(), key));
}

asio::awaitable<void> SchedulingLoop::preempt_task(PodKey key, PreemptionCandidate chosen,
                                                   boost::json::object event_ref) {
  auto self = shared_from_this();
  if (stopped_ || !active_) {
    drop_nomination(key);
    co_return;
  }
  // 1. The nomination on the pod first: a restart reads it back and does not preempt a second time.
  {
    boost::json::object status;
    status["nominatedNodeName"] = chosen.node;
    boost::json::object body;
    body["status"] = std::move(status);
    std::string patch = boost::json::serialize(body);
    auto r = co_await api_->patch_pod_status(key.ns, key.name, std::move(patch));
    if (!r) {
      // Gone, or the API refused: no victim is touched without a recorded nomination.
      if (!r.error().is_not_found()) {
        log::warning("writing nominatedNodeName failed; no pod preempted",
                     {{"pod", key.str()}, {"node", chosen.node}, {"error", r.error().to_string()}});
      }
      drop_nomination(key);
      queue_.move_all_to_active(options_.clock.steady());
      wake();
      co_return;
    }
  }
  // 2. Each victim: DisruptionTarget, then a graceful delete (its own grace period), then the Event.
  const std::string scheduler_name = options_.scheduler_name;
  for (const PreemptionVictim& v : chosen.victims) {
    if (stopped_ || !active_) {
      co_return;  // the next leader reads the nomination back; the victims not touched yet are its to decide
    }
    if (v.terminating) {
      continue;  // already on its way out (an earlier preemption, or deleted by its owner): nothing to write
    }
    {
      kube::PodCondition c;
      c.type = "DisruptionTarget";
      c.status = "True";
      c.reason = "PreemptionByScheduler";
      c.message = scheduler_name + ": preempting to accommodate a higher priority pod";
      c.last_transition_time = options_.clock.wall();
      auto cr = co_await api_->patch_condition(v.ns, v.name, std::move(c));
      if (!cr) {
        if (cr.error().is_not_found()) {
          continue;  // already gone
        }
        log::warning("DisruptionTarget condition patch failed; deleting all the same",
                     {{"pod", v.key()}, {"error", cr.error().to_string()}});
      }
    }
    auto dr = co_await api_->remove_pod(v.ns, v.name, v.uid);
    if (!dr) {
      if (!dr.error().is_not_found()) {
        log::warning("preempting a pod failed",
                     {{"pod", v.key()}, {"preemptor", key.str()}, {"error", dr.error().to_string()}});
        // Not going away: the nomination does not wait for it (the next attempt decides again).
        if (auto it = nominations_.find(key); it != nominations_.end()) {
          std::erase(it->second.victims, v.key());
        }
      }
      continue;
    }
    ++stats_.victims;
    log::info("preempted", {{"pod", v.key()}, {"preemptor", key.str()}, {"node", chosen.node}});
    reporter_.event(ref_of(v.ns, v.name, v.uid), "Preempted", "Normal",
                    "Preempted by pod " + key.str() + " on node " + chosen.node);
  }
  reporter_.event(event_ref, "Nominated", "Normal",
                  "Nominated to node " + chosen.node + ": " + preemption_summary(chosen));
}

}  // namespace gpuslice::scheduler
