#include "scheduler/loop.h"

#include "common/json_access.h"
#include "common/log.h"
#include "scheduler/allocation.h"
#include "scheduler/framework/framework.h"
#include "scheduler/framework/plugins.h"
#include "scheduler/loop_metrics.h"
#include "scheduler/pod_info.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <charconv>
#include <mutex>
#include <system_error>

namespace gpuslice::scheduler {
namespace {

namespace asio = boost::asio;
using std::chrono::milliseconds;

constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);

int64_t unix_seconds(WallTime t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

bool finished_phase(std::string_view phase) {
  return phase == "Succeeded" || phase == "Failed";
}

bool has_scheduling_gates(const boost::json::object& pod) {
  const auto* spec = pod.if_contains("spec");
  if (spec == nullptr || !spec->is_object()) {
    return false;
  }
  const auto* gates = spec->get_object().if_contains("schedulingGates");
  return gates != nullptr && gates->is_array() && !gates->get_array().empty();
}

bool deleting(const boost::json::object& obj) {
  const auto* meta = obj.if_contains("metadata");
  return meta != nullptr && meta->is_object() && meta->get_object().if_contains("deletionTimestamp") != nullptr &&
         !meta->get_object().at("deletionTimestamp").is_null();
}

// What can change a fit: labels, spec (taints, unschedulable), allocatable, the register and cordon
// annotations. Heartbeats (conditions) and the lock do not.
std::string fit_fingerprint(const boost::json::object& node) {
  boost::json::object fp;
  if (const auto* m = node.if_contains("metadata"); m != nullptr && m->is_object()) {
    if (const auto* l = m->get_object().if_contains("labels")) {
      fp["l"] = *l;
    }
  }
  if (const auto* s = node.if_contains("spec")) {
    fp["s"] = *s;
  }
  if (const auto* st = node.if_contains("status"); st != nullptr && st->is_object()) {
    if (const auto* a = st->get_object().if_contains("allocatable")) {
      fp["a"] = *a;
    }
  }
  fp["r"] = annotation(node, kNodeRegisterAnnotation).value_or("");
  fp["c"] = annotation(node, kDeviceCordonAnnotation).value_or("");
  return boost::json::serialize(fp);
}

// True when the pod carries any of HAMi's scheduler-owned annotations (kSchedulerOwnedAnnotations).
bool carries_owned_annotations(const boost::json::object& pod) {
  return std::any_of(std::begin(kSchedulerOwnedAnnotations), std::end(kSchedulerOwnedAnnotations),
                     [&](std::string_view k) { return annotation(pod, k).has_value(); });
}

}  // namespace

// ---- the loop ------------------------------------------------------------------------------------------------

struct SchedulingLoop::Binding {
  PodKey key;
  PodInfo info;
  Decision decision;
  std::string resource_version;
  std::string uid;
  SteadyTime first_seen{};
  bool needs_lock = false;
  /// The pod carries scheduler-owned annotations it has no allocation for: they are removed before binding.
  bool scrub_owned = false;
  /// The pod's identity (metadata only) for Events: the watch may deliver the bound pod, and drop it from
  /// pending_, before the bind call returns, so events must not depend on pending_.
  boost::json::object event_ref;
};

SchedulingLoop::SchedulingLoop(asio::any_io_executor executor, LoopOptions options, std::shared_ptr<LoopApi> api,
                               std::shared_ptr<LoopApi> side_api, std::shared_ptr<LoopApi> lock_api)
    : executor_(executor),
      options_(std::move(options)),
      schedule_options_([this] {
        ScheduleOptions o = ScheduleOptions::from(options_.scheduler);
        o.select_volume_nodes = true;  // bind_volumes() writes selected-node and waits (VolumeBinding's PreBind)
        return o;
      }()),
      api_(std::move(api)),
      side_api_(side_api ? std::move(side_api) : api_),
      snapshot_(options_.devices),
      queue_(QueueOptions{options_.queue_capacity, milliseconds(1000),
                          std::max(options_.scheduler.max_backoff, milliseconds(1000))}),
      locker_(executor,
              NodeLockerOptions{.timeout = options_.scheduler.node_lock_timeout,
                                .wait = options_.lock_wait,
                                .scheduler_name = options_.scheduler_name,
                                .abandon_grace = options_.lock_abandon_grace,
                                .release_grace = options_.lock_release_grace,
                                .clock = options_.clock},
              lock_api ? std::move(lock_api) : api_,
              NodeLocker::Hooks{
                  .may_write = [this] { return !stopped_ && active_; },
                  .may_sweep = [this] { return !stopped_ && active_ && synced_; },
                  .cached_owner = [this](const std::string& ns, const std::string& pod,
                                         const std::string& node) { return cached_lock_owner(ns, pod, node); },
                  .node_written = [this](const boost::json::object& node) { apply_node(node, false); },
                  .spawn = [this](asio::awaitable<void> task) { spawn(std::move(task)); },
              }),
      reporter_(LoopReporterOptions{.identity = options_.identity,
                                    .max_in_flight = options_.max_side_effects_in_flight,
                                    .interval = options_.event_interval,
                                    .clock = options_.clock},
                side_api_, [this](asio::awaitable<void> task) { spawn(std::move(task)); }),
      wake_timer_(executor),
      sweep_timer_(executor) {
  (void)LoopMetrics::get();
  profile_ =
      framework::Framework::default_profile(options_.scheduler.score_weights, options_.scheduler.default_spreading);
  schedule_options_.profile = profile_.get();
  if (options_.scheduler.node_lock == "hami") {
    // A node with a bind holding or waiting for its lock takes no other GPU pod until the device plugin is done:
    // prefer another node the policy finds as good (ScheduleOptions::busy), so a burst spreads over locks.
    // Its load: the binds in flight that need its lock, plus one while the locker holds or awaits it (a finished
    // bind's lock stays until the device plugin releases it).
    busy_node_ = [this](std::string_view node) -> size_t {
      auto it = lock_binds_.find(node);
      const size_t binds = it == lock_binds_.end() ? 0 : static_cast<size_t>(std::max(0, it->second));
      return binds + (locker_.busy(node) ? 1 : 0);
    };
    schedule_options_.busy = &busy_node_;
    schedule_options_.busy_lookahead = static_cast<size_t>(std::max(1, options_.scheduler.node_lock_lookahead));
  }
}

LoopStats SchedulingLoop::stats() const {
  LoopStats s = stats_;
  s.locks_taken = locker_.taken();
  s.locks_released = locker_.released();
  s.events_dropped = reporter_.dropped();
  return s;
}

void SchedulingLoop::spawn(asio::awaitable<void> task) {
  auto keep = [](std::shared_ptr<SchedulingLoop>, asio::awaitable<void> t) -> asio::awaitable<void> {
    co_await std::move(t);
  };
  asio::co_spawn(executor_, keep(shared_from_this(), std::move(task)), asio::detached);
}

SchedulingLoop::~SchedulingLoop() = default;

void SchedulingLoop::stop() {
  stopped_ = true;
  wake_timer_.cancel();
  sweep_timer_.cancel();
  locker_.stop();
}

void SchedulingLoop::wake() {
  wake_pending_ = true;
  wake_timer_.cancel();
}

void SchedulingLoop::set_synced(bool synced) {
  synced_ = synced;
  synced_flag_.store(synced);
  if (synced) {
    queue_.move_all_to_active(options_.clock.steady());
    wake();
  }
}

void SchedulingLoop::set_active(bool active) {
  const bool was = active_;
  active_ = active;
  active_flag_.store(active);
  if (active && !was) {
    log::info("scheduling loop active", {{"identity", options_.identity}});
    queue_.move_all_to_active(options_.clock.steady());
    wake();
    sweep();
  } else if (!active && was) {
    log::warning("scheduling loop inactive: not the leader", {{"identity", options_.identity}});
  }
}

// ---- informer inputs ----

void SchedulingLoop::on_pod_event(const kube::ReflectorEvent& event) {
  using T = kube::ReflectorEventType;
  switch (event.type) {
    case T::relisted: {
      // A page of a list: what no page of the whole list had is gone, decided on its last page.
      std::set<std::string>& seen = relist_pods_;
      if (event.relist_begins) {
        seen.clear();
      }
      for (const auto& item : *event.items) {
        seen.insert(kube::namespace_of(item) + "/" + kube::name_of(item));
        apply_pod(item, false);
      }
      if (!event.relist_complete) {
        break;
      }
      std::vector<std::pair<std::string, std::string>> gone;
      for (const auto& [key, brief] : briefs_) {
        if (!seen.count(key)) {
          const auto slash = key.find('/');
          gone.emplace_back(key.substr(0, slash), key.substr(slash + 1));
        }
      }
      snapshot_.for_each_pod([&](const PodRecord& rec) {
        if (!rec.assumed && !seen.count(rec.ns + "/" + rec.name) && !briefs_.count(rec.ns + "/" + rec.name)) {
          gone.emplace_back(rec.ns, rec.name);
        }
      });
      std::set<std::string>().swap(seen);
      for (const auto& [ns, name] : gone) {
        boost::json::object stub{{"metadata", boost::json::object{{"namespace", ns}, {"name", name}}}};
        apply_pod(stub, true);
      }
      queue_.move_all_to_active(options_.clock.steady());
      wake();
      break;
    }
    case T::added:
    case T::modified:
      apply_pod(*event.object, false);
      break;
    case T::deleted:
      apply_pod(*event.object, true);
      break;
    case T::bookmark:
      break;
  }
}

void SchedulingLoop::apply_pod(const boost::json::object& pod, bool deleted) {
  PodKey key{kube::namespace_of(pod), kube::name_of(pod)};
  if (key.name.empty()) {
    return;
  }
  const std::string skey = key.str();
  const auto now = options_.clock.steady();
  PodBrief brief = brief_of(pod);
  if (deleted || finished_phase(brief.phase)) {
    const bool had = snapshot_.remove_pod(key.ns, key.name);
    briefs_.erase(skey);
    pending_.erase(key);
    nominations_.erase(key);
    queue_.forget(key);
    reporter_.forget(key);
    recent_binds_.erase(key);
    needs_label_.erase(key);
    if (had) {
      // A pod that held cpu, memory or a slice is gone: everything waiting may fit now (HAMi #1368).
      queue_.move_all_to_active(now);
      wake();
    }
    locker_.check_held_by(key.ns, key.name);
    return;
  }
  LockOwnerBrief live = LockOwnerBrief::of(brief, options_.scheduler_name);
  const bool phase_changed = [&] {
    auto it = briefs_.find(skey);
    return it != briefs_.end() && it->second.bind_phase != live.bind_phase;
  }();
  briefs_[skey] = std::move(live);
  if (auto st = count_pod(key, pod); !st) {
    log::warning("pod counted without its bad field", {{"pod", skey}, {"error", st.message()}});
  }
  const bool ours = string_at_pointer(pod, "/spec/schedulerName") == options_.scheduler_name &&
                    brief.node_name.empty() && !deleting(pod) && !has_scheduling_gates(pod);
  if (ours) {
    if (auto rb = recent_binds_.find(key); rb != recent_binds_.end()) {
      return;  // we bound it a moment ago; this event predates the binding
    }
    auto [it, inserted] = pending_.try_emplace(key);
    it->second.packed = text_codec_.pack(boost::json::serialize(pod));
    note_pending(it->second, pod);
    if (inserted) {
      it->second.first_seen = now;
    }
    if (!binders_.count(key)) {
      if (queue_.add(key, now, false) == PendingQueue::AddResult::full) {
        log::warning("scheduling queue full; the pod waits for the next resync", {{"pod", skey}});
      }
      wake();
    }
  } else {
    recent_binds_.erase(key);
    note_label(key, pod, brief);
    if (pending_.erase(key) != 0) {
      queue_.forget(key);
      reporter_.forget(key);
    }
    if (auto n = nominations_.find(key); n != nominations_.end() && !binders_.count(key)) {
      // Bound elsewhere, gated, being deleted or no longer ours: whatever it held as a nominee is free again.
      nominations_.erase(n);
      if (const PodRecord* rec = snapshot_.find_pod(key.ns, key.name); rec != nullptr && rec->nominated) {
        snapshot_.forget(key.ns, key.name);
        (void)count_pod(key, pod);
      }
    }
  }
  if (phase_changed && (brief.bind_phase == kBindPhaseSuccess || brief.bind_phase == kBindPhaseFailed)) {
    // The device plugin finished this pod: a lock naming it must go (the plugin normally releases it).
    locker_.check_held_by(key.ns, key.name);
  }
}

void SchedulingLoop::scrub_owned_annotations(const PodKey& key, const boost::json::object& pod) {
  if (!carries_owned_annotations(pod) || !scrubbing_.insert(key).second) {
    return;
  }
  // A pending pod that stays Pending must not keep an allocation: HAMi's accounting (and anything reading the
  // annotations as HAMi does) would count it on a card it does not hold. We write them only inside a Binding, so
  // these were written by the pod's author (or by an older gpuslice that patched before binding): ours to remove.
  // resourceVersion as precondition: a conflict means the pod changed, and the next attempt looks again.
  spawn([](std::shared_ptr<SchedulingLoop> self, PodKey key, std::string patch) -> asio::awaitable<void> {
    auto r = co_await self->api_->patch_pod(key.ns, key.name, std::move(patch));
    if (!r && !r.error().is_not_found() && !r.error().is_conflict()) {
      log::warning("removing a pending pod's stale allocation annotations failed",
                   {{"pod", key.str()}, {"error", r.error().to_string()}});
    } else if (r) {
      log::info("removed a pending pod's stale allocation annotations", {{"pod", key.str()}}, 1);
    }
    self->scrubbing_.erase(key);
  }(shared_from_this(), key, owned_annotations_removal_patch(kube::resource_version_of(pod))));
}

Status SchedulingLoop::count_pod(const PodKey& key, const boost::json::object& pod) {
  const bool unbound_ours = string_at_pointer(pod, "/spec/nodeName").empty() &&
                            string_at_pointer(pod, "/spec/schedulerName") == options_.scheduler_name &&
                            !binders_.count(key) && !recent_binds_.count(key);
  if (!unbound_ours || !carries_owned_annotations(pod)) {
    return snapshot_.upsert_pod(pod);
  }
  // A pending pod of ours that we are not binding holds nothing: allocation annotations on it were written by its
  // author (or by an attempt of ours that did not bind, which is decided again). Counting them would let anyone
  // who can create pods reserve cards.
  boost::json::object copy = pod;
  if (auto* meta = copy.if_contains("metadata"); meta != nullptr && meta->is_object()) {
    if (auto* ann = meta->as_object().if_contains("annotations"); ann != nullptr && ann->is_object()) {
      for (std::string_view k : kSchedulerOwnedAnnotations) {
        ann->as_object().erase(k);
      }
    }
  }
  return snapshot_.upsert_pod(copy);
}

void SchedulingLoop::on_node_event(const kube::ReflectorEvent& event) {
  using T = kube::ReflectorEventType;
  switch (event.type) {
    case T::relisted: {
      std::set<std::string>& seen = relist_nodes_;
      if (event.relist_begins) {
        seen.clear();
      }
      for (const auto& item : *event.items) {
        seen.insert(kube::name_of(item));
        apply_node(item, false);
      }
      if (!event.relist_complete) {
        break;
      }
      std::vector<std::string> gone;
      for (const auto& [name, fingerprint] : nodes_) {
        if (!seen.count(name)) {
          gone.push_back(name);
        }
      }
      std::set<std::string>().swap(seen);
      for (const auto& name : gone) {
        apply_node(boost::json::object{{"metadata", boost::json::object{{"name", name}}}}, true);
      }
      queue_.move_all_to_active(options_.clock.steady());
      wake();
      break;
    }
    case T::added:
    case T::modified:
      apply_node(*event.object, false);
      break;
    case T::deleted:
      apply_node(*event.object, true);
      break;
    case T::bookmark:
      break;
  }
}

void SchedulingLoop::apply_node(const boost::json::object& node, bool deleted) {
  const std::string name = kube::name_of(node);
  if (name.empty()) {
    return;
  }
  if (deleted) {
    snapshot_.remove_node(name);
    nodes_.erase(name);
    locker_.forget(name);
    return;
  }
  // Packed (equal texts pack equal, different ones differently): a node's register annotation makes the text
  // ~1.5 KB with 8 cards, packed ~0.2 KB.
  std::string fingerprint = text_codec_.pack(fit_fingerprint(node));
  auto it = nodes_.find(name);
  const bool changed = it == nodes_.end() || it->second != fingerprint;
  if (changed) {
    if (auto st = snapshot_.upsert_node(node); !st) {
      log::warning("node left unregistered", {{"node", name}, {"error", st.message()}});
    }
  }
  nodes_[name] = std::move(fingerprint);
  if (changed) {
    queue_.move_all_to_active(options_.clock.steady());
    wake();
  }
  // Last: the locker may start a janitor task that reads what this event stored.
  locker_.observe(name, kube::resource_version_of(node), annotation(node, kNodeLockAnnotation));
}

void SchedulingLoop::on_quota_event(const kube::ReflectorEvent& event) {
  using Key = std::pair<std::string, std::string>;
  auto key_of = [](const boost::json::object& q) { return Key{kube::namespace_of(q), kube::name_of(q)}; };
  auto upsert = [&](const boost::json::object& q) {
    quotas_.known.insert(key_of(q));
    if (auto st = snapshot_.upsert_quota(q); !st) {
      log::warning("resource quota ignored", {{"error", st.message()}});
    }
  };
  auto remove = [&](const Key& k) { snapshot_.remove_quota(k.first, k.second); };
  if (kube::apply_keyed(event, quotas_, key_of, upsert, remove)) {
    queue_.move_all_to_active(options_.clock.steady());
    wake();
  }
}

// ---- the worker ----

asio::awaitable<void> SchedulingLoop::run() {
  auto self = shared_from_this();
  int since_yield = 0;
  while (!stopped_) {
    const auto now = options_.clock.steady();
    const bool can_work = synced_ && active_ && binders_.size() < options_.max_binds_in_flight;
    if (can_work) {
      if (auto key = queue_.pop(now)) {
        schedule_one(*key);
        // Let watch events and binders run between decisions: a burst of thousands of pods must not starve
        // the events that confirm or free capacity.
        if (++since_yield >= 8) {
          since_yield = 0;
          co_await asio::post(executor_, asio::use_awaitable);
        }
        continue;
      }
    }
    since_yield = 0;
    if (wake_pending_) {
      wake_pending_ = false;
      co_await asio::post(executor_, asio::use_awaitable);
      continue;
    }
    std::chrono::steady_clock::duration wait = std::chrono::hours(1);
    if (can_work) {
      if (auto next = queue_.next_ready(now)) {
        wait = *next - now;
      }
    }
    wake_timer_.expires_after(wait);
    co_await wake_timer_.async_wait(kAwait);
    wake_pending_ = false;
  }
}

// Runs only from run(), while synced, active and not stopped: its reports need no leadership check.
void SchedulingLoop::schedule_one(const PodKey& key) {
  auto& m = LoopMetrics::get();
  auto it = pending_.find(key);
  if (it == pending_.end()) {
    queue_.done(key);
    return;
  }
  const auto now = options_.clock.steady();
  const auto wall = options_.clock.wall();
  const boost::json::object pod = it->second.object(text_codec_);
  auto info = parse_pod(pod, options_.devices);
  if (!info) {
    ++stats_.unschedulable;
    m.attempts.with({"unschedulable"}).inc();
    queue_.done_unschedulable(key, now);
    scrub_owned_annotations(key, pod);
    reporter_.unschedulable(key, pod, info.message(), "");  // parse_pod's message names the pod
    return;
  }
  {
    std::vector<std::string> lines = info->ignored_annotations;
    if (!info->unbound_owned_annotations.empty()) {
      std::string keys;
      for (const auto& k : info->unbound_owned_annotations) {
        keys += (keys.empty() ? "" : ", ") + k;
      }
      lines.push_back(keys +
                      " on a pod that is not bound yet: not this scheduler's placement (it writes them only in the "
                      "Binding); not counted, and removed once the pod is decided");
    }
    if (!lines.empty()) {
      reporter_.ignored_annotations(key, pod, lines);
    }
  }
  // HAMi drops the pod's old reservation before filtering; so do we (an earlier attempt may have annotated it).
  // A nomination of its own (preemption) goes too: the pod is decided again, on its nominated node first.
  snapshot_.remove_pod(key.ns, key.name);
  const auto decide_start = options_.clock.steady();
  // Capacity nominated to less important pods is not theirs yet (kube-scheduler's addNominatedPods).
  std::vector<PodRecord> hidden = hide_nominations_below(info->facts ? info->facts->priority : 0);
  std::optional<Decision> on_nominated = decide_on_nominated_node(key, *info);
  Decision d = on_nominated ? std::move(*on_nominated) : schedule(snapshot_, *info, schedule_options_);
  m.algorithm.with({d.scheduled ? "scheduled" : "unschedulable"})
      .observe(std::chrono::duration<double>(options_.clock.steady() - decide_start).count());
  if (!d.scheduled) {
    scrub_owned_annotations(key, pod);
    (void)count_pod(key, pod);  // put back what the API says it holds
    // PostFilter: preemption (scheduler/loop_preemption.cc), with the same nominations hidden.
    const std::string preemption = preempt_or_wait(key, *info, pod);
    restore_nominations(std::move(hidden));
    const std::string message = preemption.empty() ? d.message : d.message + " " + preemption;
    ++stats_.unschedulable;
    m.attempts.with({"unschedulable"}).inc();
    queue_.done_unschedulable(key, now);
    log::info("pod unschedulable", {{"pod", key.str()}, {"message", message}}, 2);
    reporter_.unschedulable(key, pod, message, info->gpu.any() ? filtering_failed_note(d) : std::string());
    return;
  }
  restore_nominations(std::move(hidden));
  if (auto st = snapshot_.assume(*info, d.node, d.devices, unix_seconds(wall)); !st) {
    (void)count_pod(key, pod);
    ++stats_.errors;
    m.attempts.with({"error"}).inc();
    log::warning("assume failed", {{"pod", key.str()}, {"node", d.node}, {"error", st.message()}});
    queue_.done_error(key, now);
    return;
  }
  for (const StaticBinding& sb : d.volumes_to_bind) {
    // Later decisions see the PV as this claim's until its watch event shows a claimRef (kube-scheduler's
    // AssumePodVolumes); snapshot_.forget()/remove_pod() undo it.
    snapshot_.objects().assume_claim_ref(sb.volume, AssumedClaimRef{key.ns, sb.claim, sb.claim_uid, key.str()});
  }
  auto b = std::make_shared<Binding>();
  b->key = key;
  // Every pod with a device entry: kubelet calls Allocate for init containers too, and the plugin finds the pod
  // through the lock first (HAMi v2.10 skips the lock for init-only pods, #2640, leaving them to the fallback).
  b->needs_lock = options_.scheduler.node_lock == "hami" && info->gpu.any();
  b->scrub_owned = carries_owned_annotations(pod);
  b->info = std::move(*info);
  b->decision = std::move(d);
  b->resource_version = kube::resource_version_of(pod);
  b->uid = kube::uid_of(pod);
  b->first_seen = it->second.first_seen;
  {
    boost::json::object meta;
    meta["namespace"] = key.ns;
    meta["name"] = key.name;
    meta["uid"] = b->uid;
    meta["resourceVersion"] = b->resource_version;
    b->event_ref["metadata"] = std::move(meta);
  }
  binders_[key] = b->decision.node;
  if (b->needs_lock) {
    ++lock_binds_[b->decision.node];
  }
  m.binds_in_flight.with({}).set(static_cast<double>(binders_.size()));
  asio::co_spawn(executor_, bind_task(std::move(b)), asio::detached);
}

asio::awaitable<void> SchedulingLoop::bind_task(std::shared_ptr<Binding> b) {
  auto self = shared_from_this();
  auto& m = LoopMetrics::get();
  const PodKey key = b->key;
  const std::string& node = b->decision.node;
  enum class Outcome { bound, bound_elsewhere, gone, retry, conflict } outcome = Outcome::retry;
  bool lock_taken = false;
  std::string failure;
  std::optional<boost::json::object> fresh_pod;  // read back after an unclear Binding answer

  do {
    if (stopped_ || !active_) {
      failure = "lost leadership before writing";
      break;
    }
    if (b->scrub_owned) {
      // The pod carries scheduler-owned annotations nobody trusted wrote (the webhook strips them at CREATE, the
      // allocation guard refuses them at UPDATE, so only a pod admitted around both has them). A Binding can only
      // add annotations: remove them first, with the resourceVersion the decision read as precondition.
      auto r = co_await api_->patch_pod(key.ns, key.name, owned_annotations_removal_patch(b->resource_version));
      if (!r) {
        if (r.error().is_not_found()) {
          outcome = Outcome::gone;
        } else if (r.error().is_conflict()) {
          // Usually our own PodScheduled patch (or another writer) moved the resourceVersion and its watch event
          // has not arrived yet. Read the pod now and decide again at once rather than after a backoff.
          ++stats_.conflicts;
          outcome = Outcome::conflict;
          auto fresh = co_await api_->get_pod(key.ns, key.name);
          if (fresh) {
            apply_pod(*fresh, false);
          } else if (fresh.error().is_not_found()) {
            outcome = Outcome::gone;
          }
        } else {
          failure = "removing scheduler-owned annotations: " + r.error().to_string();
        }
        break;
      }
      b->uid = kube::uid_of(*r).empty() ? b->uid : kube::uid_of(*r);
    }
    if (!b->decision.claims_to_select.empty() || !b->decision.volumes_to_bind.empty()) {
      // Before the node lock: provisioning may take a while and must not hold the node's lock meanwhile.
      failure = co_await bind_volumes(*b);
      if (!failure.empty()) {
        break;
      }
    }
    if (b->needs_lock) {
      lock_taken = co_await locker_.acquire(node, key);
      if (!lock_taken) {
        failure = "node lock on " + node + " not acquired within " + std::to_string(options_.lock_wait.count()) + "ms";
        break;
      }
    }
    if (stopped_ || !active_) {
      failure = "lost leadership before binding";
      break;
    }
    // One write: spec.nodeName, PodScheduled=True and the allocation annotations (with the vgpu-node label) in the
    // same guaranteed update, the pod's UID as precondition (kube::BindingMetadata). Nothing is ever written on a
    // pod that does not end bound, so a crash or a failed Binding leaves no allocation behind.
    kube::BindingMetadata metadata;
    if (b->info.gpu.any()) {
      metadata = allocation_binding_metadata(node, b->decision.devices, unix_seconds(options_.clock.wall()));
    }
    auto s = co_await api_->bind(key.ns, key.name, node, b->uid, std::move(metadata));
    if (s) {
      outcome = Outcome::bound;
      break;
    }
    if (s.error().is_not_found()) {
      outcome = Outcome::gone;
      break;
    }
    // A conflict (bound already, or the name now belongs to another pod) or an answer we never got (the Binding
    // may have been applied): the pod itself says which.
    const bool conflict = s.error().is_conflict();
    failure = "binding rejected: " + s.error().to_string();
    auto fresh = co_await api_->get_pod(key.ns, key.name);
    if (!fresh) {
      if (fresh.error().is_not_found()) {
        outcome = Outcome::gone;
      }
      break;
    }
    const std::string bound_to = string_at_pointer(*fresh, "/spec/nodeName");
    if (kube::uid_of(*fresh) != b->uid) {
      outcome = Outcome::gone;  // another pod of that name: its own watch event brings it
    } else if (bound_to == node && !conflict) {
      outcome = Outcome::bound;  // our Binding was applied; only its answer was lost
      log::info("binding answer lost, the pod is bound", {{"pod", key.str()}, {"node", node}}, 1);
    } else if (!bound_to.empty()) {
      outcome = Outcome::bound_elsewhere;  // by an earlier incarnation of ours, or by another scheduler
      fresh_pod = std::move(*fresh);
      log::info("pod already bound", {{"pod", key.str()}, {"node", bound_to}, {"error", s.error().to_string()}}, 1);
    }
  } while (false);

  binders_.erase(key);
  if (b->needs_lock) {
    if (auto it = lock_binds_.find(node); it != lock_binds_.end() && --it->second <= 0) {
      lock_binds_.erase(it);
    }
  }
  m.binds_in_flight.with({}).set(static_cast<double>(binders_.size()));
  const auto now = options_.clock.steady();
  if (outcome != Outcome::conflict) {
    conflict_retries_.erase(key);
  }
  switch (outcome) {
    case Outcome::conflict:
      snapshot_.forget(key.ns, key.name);
      if (!pending_.count(key)) {
        queue_.done(key);  // bound or gone meanwhile
      } else if (++conflict_retries_[key] <= 3) {
        queue_.done(key);
        (void)queue_.add(key, now);
      } else {
        conflict_retries_.erase(key);
        ++stats_.errors;
        m.attempts.with({"error"}).inc();
        queue_.done_error(key, now);
      }
      break;
    case Outcome::bound: {
      ++stats_.scheduled;
      m.attempts.with({"scheduled"}).inc();
      m.e2e.with({}).observe(std::chrono::duration<double>(now - b->first_seen).count());
      recent_binds_[key] = {node, now};
      const bool was_nominated = nominations_.erase(key) != 0;  // the assumption replaced its nominated record
      queue_.done(key);
      if (was_nominated) {
        nomination_ended();
      }
      reporter_.forget(key);
      reporter_.event(b->event_ref, "Scheduled", "Normal", "Successfully assigned " + key.str() + " to " + node);
      pending_.erase(key);
      log::info("pod bound", {{"pod", key.str()}, {"node", node}}, 1);
      break;
    }
    case Outcome::gone:
      snapshot_.forget(key.ns, key.name);
      queue_.done(key);
      if (lock_taken) {
        co_await locker_.release(node, key.ns, key.name, "owner deleted");
      }
      break;
    case Outcome::bound_elsewhere: {
      // Our assumption is not what the pod holds: count what the API says instead.
      snapshot_.forget(key.ns, key.name);
      queue_.done(key);
      pending_.erase(key);
      reporter_.forget(key);
      const std::string bound_to = string_at_pointer(*fresh_pod, "/spec/nodeName");
      apply_pod(*fresh_pod, false);
      if (lock_taken && bound_to != node) {
        co_await locker_.release(node, key.ns, key.name, "bound to another node");
      }
      queue_.move_all_to_active(now);
      break;
    }
    case Outcome::retry:
      ++stats_.errors;
      m.attempts.with({"error"}).inc();
      log::warning("binding failed; retrying", {{"pod", key.str()}, {"node", node}, {"error", failure}});
      if (auto pit = pending_.find(key); pit != pending_.end() && !failure.empty() && !stopped_ && active_) {
        // kube-scheduler's handleSchedulingFailure for a failed bind: PodScheduled=False/SchedulerError and a
        // FailedScheduling Event with the error; HAMi's BindingFailed Event as HAMi's scheduler writes it.
        const boost::json::object pod = pit->second.object(text_codec_);
        reporter_.scheduler_error(key, pod, failure);
        reporter_.event(pod, "BindingFailed", "Warning", failure);
      }
      if (lock_taken) {
        co_await locker_.release(node, key.ns, key.name, "bind failed");
      }
      snapshot_.forget(key.ns, key.name);
      // Capacity the assumption held may be free again for others; this pod itself backs off (done_error
      // ignores the move while it is in flight, so a failing API cannot make it spin).
      queue_.move_all_to_active(options_.clock.steady());
      queue_.done_error(key, options_.clock.steady());
      break;
  }
  wake();
}

// ---- volumes (VolumeBinding's PreBind, pkg/scheduler/framework/plugins/volumebinding/binder.go BindPodVolumes) ----

asio::awaitable<std::string> SchedulingLoop::bind_volumes(Binding& b) {
  auto self = shared_from_this();
  const PodKey key = b.key;
  const std::string node = b.decision.node;
  const std::vector<StaticBinding> bindings = b.decision.volumes_to_bind;
  const std::vector<std::string> claims = b.decision.claims_to_select;
  // bindAPIUpdate, static bindings first: the PV's claimRef (GetBindVolumeToClaim) with the resourceVersion the
  // decision read as precondition, so a PV changed meanwhile (claimed by another scheduler, relabelled) answers
  // 409 and the pod is decided again. A merge patch with metadata.resourceVersion has the same precondition as
  // upstream's PUT of the whole object, without gpuslice keeping whole PVs (the store keeps a few fields each).
  std::vector<std::string> written_rv(bindings.size());
  for (size_t i = 0; i < bindings.size(); ++i) {
    const StaticBinding& sb = bindings[i];
    if (!sb.needs_write) {
      continue;
    }
    boost::json::object ref;
    ref["kind"] = "PersistentVolumeClaim";
    ref["namespace"] = key.ns;
    ref["name"] = sb.claim;
    ref["uid"] = sb.claim_uid;
    ref["apiVersion"] = "v1";
    ref["resourceVersion"] = sb.claim_resource_version;
    boost::json::object meta;
    meta["resourceVersion"] = sb.volume_resource_version;
    if (!sb.pre_bound) {
      boost::json::object ann;
      ann[std::string(kBoundByControllerAnnotation)] = "yes";
      meta["annotations"] = std::move(ann);
    }
    boost::json::object spec;
    spec["claimRef"] = std::move(ref);
    boost::json::object patch;
    patch["metadata"] = std::move(meta);
    patch["spec"] = std::move(spec);
    auto r = co_await api_->patch_volume(sb.volume, boost::json::serialize(patch));
    if (!r) {
      co_return "binding persistentvolume " + sb.volume + " (resourceVersion " + sb.volume_resource_version +
          ") to persistentvolumeclaim " + key.ns + "/" + sb.claim + ": " + r.error().to_string();
    }
    written_rv[i] = kube::resource_version_of(*r);
    log::info("volume claimRef written",
              {{"pod", key.str()}, {"claim", key.ns + "/" + sb.claim}, {"volume", sb.volume}, {"node", node}}, 1);
  }
  for (const std::string& claim : claims) {
    const ClaimInfo* c = snapshot_.objects().find_claim(key.ns, claim);
    if (c != nullptr && (!c->volume_name.empty() || c->selected_node == node)) {
      continue;  // bound meanwhile, or already asked for this node
    }
    boost::json::object ann;
    ann[std::string(kSelectedNodeAnnotation)] = node;
    boost::json::object meta;
    meta["annotations"] = std::move(ann);
    boost::json::object patch;
    patch["metadata"] = std::move(meta);
    auto r = co_await api_->patch_claim(key.ns, claim, boost::json::serialize(patch));
    if (!r) {
      co_return "selecting node " + node + " for persistentvolumeclaim " + key.ns + "/" + claim + ": " +
          r.error().to_string();
    }
    log::info("volume node selected", {{"pod", key.str()}, {"claim", key.ns + "/" + claim}, {"node", node}}, 1);
  }
  // checkBindings on the watched objects: the PV controller (static) or the provisioner (dynamic) binds the claim.
  const auto deadline = options_.clock.steady() + options_.volume_bind_timeout;
  asio::steady_timer timer(executor_);
  auto older = [](const std::string& seen, const std::string& written) {
    // The watch has not delivered our own write yet (storage.APIObjectVersioner: resourceVersions are integers).
    uint64_t a = 0;
    uint64_t w = 0;
    auto pa = std::from_chars(seen.data(), seen.data() + seen.size(), a);
    auto pw = std::from_chars(written.data(), written.data() + written.size(), w);
    return pa.ec == std::errc() && pw.ec == std::errc() && a < w;
  };
  while (true) {
    std::string waiting;
    for (size_t i = 0; i < bindings.size() && waiting.empty(); ++i) {
      const StaticBinding& sb = bindings[i];
      const VolumeInfo* pv = snapshot_.objects().find_volume(sb.volume);
      const ClaimInfo* c = snapshot_.objects().find_claim(key.ns, sb.claim);
      if (pv == nullptr) {
        co_return "persistentvolume " + sb.volume + " was deleted while binding persistentvolumeclaim " + key.ns + "/" +
            sb.claim;
      }
      if (c == nullptr) {
        co_return "persistentvolumeclaim " + key.ns + "/" + sb.claim + " was deleted while waiting for it to bind";
      }
      if (!written_rv[i].empty() && older(pv->resource_version, written_rv[i])) {
        waiting = sb.claim;
        break;
      }
      if (const NodeState* n = snapshot_.find_node(node);
          n != nullptr && !pv->node_affinity.empty() && !framework::node_matches_terms(*n, pv->node_affinity)) {
        co_return "persistentvolume " + sb.volume + ": spec.nodeAffinity no longer matches node " + node;
      }
      if (pv->claim_name.empty() || pv->claim_uid.empty()) {
        co_return "persistentvolume " + sb.volume + ": spec.claimRef was reset while binding persistentvolumeclaim " +
            key.ns + "/" + sb.claim;
      }
      if (!volume_bound_to_claim(pv->claim_ns, pv->claim_name, pv->claim_uid, *c)) {
        co_return "persistentvolume " + sb.volume + ": spec.claimRef: now " + pv->claim_ns + "/" + pv->claim_name +
            " (uid " + pv->claim_uid + "), not persistentvolumeclaim " + key.ns + "/" + sb.claim;
      }
      if (!c->volume_name.empty() && c->volume_name != sb.volume) {
        co_return "persistentvolumeclaim " + key.ns + "/" + sb.claim + ": spec.volumeName: \"" + c->volume_name +
            "\", not the chosen persistentvolume " + sb.volume;
      }
      if (c->volume_name.empty() || !c->bind_completed) {  // isPVCFullyBound
        waiting = sb.claim;
      }
    }
    for (const std::string& claim : claims) {
      if (!waiting.empty()) {
        break;
      }
      const ClaimInfo* c = snapshot_.objects().find_claim(key.ns, claim);
      if (c == nullptr) {
        co_return "persistentvolumeclaim " + key.ns + "/" + claim + " was deleted while waiting for it to bind";
      }
      if (c->volume_name.empty()) {
        waiting = claim;
      }
    }
    if (waiting.empty()) {
      co_return std::string();
    }
    if (stopped_ || !active_) {
      co_return std::string("lost leadership while waiting for volumes");
    }
    if (pending_.count(key) == 0) {
      co_return std::string("pod deleted or bound elsewhere while waiting for its volumes");
    }
    if (options_.clock.steady() >= deadline) {
      const bool is_static =
          std::any_of(bindings.begin(), bindings.end(), [&](const StaticBinding& sb) { return sb.claim == waiting; });
      co_return "persistentvolumeclaim " + key.ns + "/" + waiting + " not bound within " +
          std::to_string(options_.volume_bind_timeout.count()) + "ms after " +
          (is_static ? "writing the claimRef of its persistentvolume (is kube-controller-manager's PV controller "
                       "running?)"
                     : "selecting node " + node + " (WaitForFirstConsumer: is its provisioner running?)");
    }
    timer.expires_after(std::chrono::milliseconds(100));
    co_await timer.async_wait(kAwait);
  }
}

// ---- the vgpu-node label ----

namespace {
constexpr std::size_t kMaxLabelsInFlight = 16;
}

void SchedulingLoop::note_label(const PodKey& key, const boost::json::object& pod, const PodBrief& brief) {
  const bool ours_bound = !brief.node_name.empty() && brief.vgpu_node == brief.node_name &&
                          brief.scheduler_name == options_.scheduler_name && brief.node_name.size() <= 63;
  const auto* meta = object_at(pod, "metadata");
  const auto* labels = meta != nullptr ? object_at(*meta, "labels") : nullptr;
  const bool labelled = labels != nullptr && string_at(*labels, kVgpuNodeAnnotation) == brief.node_name;
  if (!ours_bound || labelled) {
    needs_label_.erase(key);
    return;
  }
  needs_label_[key] = brief.node_name;
  start_labels();
}

void SchedulingLoop::start_labels() {
  if (stopped_ || !active_) {
    return;
  }
  // Chosen first, spawned after: a spawned patch may run to its end at once (co_spawn dispatches) and its
  // apply_pod erases from needs_label_, which would invalidate this walk's iterator.
  std::vector<std::pair<PodKey, std::string>> starts;
  for (const auto& [key, node] : needs_label_) {
    if (labelling_.size() >= kMaxLabelsInFlight) {
      break;
    }
    if (labelling_.insert(key).second) {
      starts.emplace_back(key, node);
    }
  }
  for (const auto& [key, node] : starts) {
    spawn([](std::shared_ptr<SchedulingLoop> self, PodKey key, std::string patch) -> asio::awaitable<void> {
      auto r = co_await self->side_api_->patch_pod(key.ns, key.name, std::move(patch));
      self->labelling_.erase(key);
      if (!r && !r.error().is_not_found()) {
        // Kept in needs_label_: the sweep tries again.
        log::warning("writing the hami.io/vgpu-node label failed",
                     {{"pod", key.str()}, {"error", r.error().to_string()}});
        co_return;
      }
      if (!r) {
        self->needs_label_.erase(key);
        co_return;
      }
      self->apply_pod(*r, false);  // drops it from needs_label_ and starts the next one
    }(shared_from_this(), key, vgpu_node_label_patch(node)));
  }
}

// ---- node lock ----

std::optional<LockOwnerState> SchedulingLoop::cached_lock_owner(const std::string& ns, const std::string& pod,
                                                                const std::string& node) const {
  const PodKey key{ns, pod};
  if (auto it = binders_.find(key); it != binders_.end() && it->second == node) {
    return LockOwnerState::active;
  }
  if (auto it = recent_binds_.find(key); it != recent_binds_.end() && it->second.first == node) {
    return LockOwnerState::active;
  }
  if (auto it = briefs_.find(ns + "/" + pod); it != briefs_.end()) {
    return classify_lock_owner(it->second.brief(options_.scheduler_name), node, false, options_.scheduler_name);
  }
  return std::nullopt;
}

// ---- sweeper ----

void SchedulingLoop::sweep() {
  const auto now = options_.clock.steady();
  for (const auto& key : snapshot_.expire_assumed(unix_seconds(options_.clock.wall()), options_.assume_ttl.count())) {
    log::warning("assumption expired without confirmation", {{"pod", key}});
  }
  for (auto it = recent_binds_.begin(); it != recent_binds_.end();) {
    it = now - it->second.second > std::chrono::seconds(60) ? recent_binds_.erase(it) : std::next(it);
  }
  reporter_.retain([this](const PodKey& key) { return pending_.count(key) != 0; });
  reporter_.flush_owed();  // conditions that found no slot or whose write failed (the API was unreachable)
  for (auto it = conflict_retries_.begin(); it != conflict_retries_.end();) {
    it = pending_.count(it->first) ? std::next(it) : conflict_retries_.erase(it);
  }
  for (auto it = nominations_.begin(); it != nominations_.end();) {
    if (pending_.count(it->first) || binders_.count(it->first)) {
      ++it;
      continue;
    }
    if (const PodRecord* rec = snapshot_.find_pod(it->first.ns, it->first.name); rec != nullptr && rec->nominated) {
      snapshot_.forget(it->first.ns, it->first.name);
    }
    it = nominations_.erase(it);
  }
  // Offer again pods the queue refused when it was full.
  if (queue_.size() < pending_.size() + binders_.size()) {
    for (const auto& [key, p] : pending_) {
      if (!binders_.count(key) && !queue_.contains(key)) {
        if (queue_.add(key, now) == PendingQueue::AddResult::full) {
          break;
        }
      }
    }
    wake();
  }
  locker_.sweep();
  start_labels();
  update_gauges();
  release_heap_after_burst();
}

void SchedulingLoop::release_heap_after_burst() {
  // After a burst has drained, glibc keeps the freed pending pods and binds in its arenas: RSS would stay at the
  // burst's peak. Once the pending pods have halved since the last high-water mark (and it was a real burst),
  // hand whole free pages back to the system. malloc_trim walks the heap: a few ms at a few hundred MB, at most
  // once per burst.
  pending_high_water_ = std::max(pending_high_water_, pending_.size() + binders_.size());
  const std::size_t now_pending = pending_.size() + binders_.size();
  if (pending_high_water_ >= kTrimBurst && now_pending <= pending_high_water_ / 2) {
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
    log::info(
        "returned free heap after a burst",
        {{"pendingPeak", static_cast<int64_t>(pending_high_water_)}, {"pending", static_cast<int64_t>(now_pending)}},
        2);
    pending_high_water_ = now_pending;
  }
}

void SchedulingLoop::update_gauges() {
  auto& m = LoopMetrics::get();
  m.pending.with({"active"}).set(static_cast<double>(queue_.active_size()));
  m.pending.with({"backoff"}).set(static_cast<double>(queue_.waiting_size()));
  m.pending.with({"in_flight"}).set(static_cast<double>(queue_.in_flight_size()));
  m.binds_in_flight.with({}).set(static_cast<double>(binders_.size()));
  m.preemptions_in_flight.with({}).set(static_cast<double>(nominations_.size()));
  m.side_effects_in_flight.with({}).set(static_cast<double>(reporter_.in_flight()));
  m.side_effects_queued.with({}).set(static_cast<double>(reporter_.queued()));
  // Exactly as many rows as visible cards: grown by doubling, 40,000 cards would leave ~25,000 rows (2.5 MB)
  // unused, and sized as the last sweep's they would keep the room of cards since gone.
  size_t visible = 0;
  snapshot_.for_each_node([&](const NodeState& n) {
    visible += static_cast<size_t>(
        std::count_if(n.cards.begin(), n.cards.end(), [](const CardState& c) { return c.visible(); }));
  });
  std::vector<CardRow> rows;
  rows.reserve(visible);
  metrics::LabelInterner::Value type;
  snapshot_.for_each_node([&](const NodeState& n) {
    metrics::LabelInterner::Value node;
    for (const auto& c : n.cards) {
      if (!c.visible()) {
        continue;
      }
      if (!node) {
        node = card_labels_.intern(n.name);
      }
      if (!type || *type != c.info.type) {  // a fleet has few types: most rows take the last row's
        type = card_labels_.intern(c.info.type);
      }
      rows.push_back(CardRow{node, c.info.id, type, static_cast<double>(c.used_mem_mib) * 1048576.0,
                             static_cast<double>(c.info.devmem) * 1048576.0,
                             c.info.devcore > 0 ? static_cast<double>(c.used_cores) / c.info.devcore : 0.0,
                             static_cast<double>(c.used_slots), static_cast<double>(c.info.count)});
    }
  });
  {
    std::lock_guard lock(m.cards_mutex);
    m.cards.swap(rows);
  }
  rows.clear();  // the last sweep's rows, freed outside the lock
  type.reset();
  card_labels_.prune();  // the names and types only they held
}

asio::awaitable<void> SchedulingLoop::run_sweeper() {
  auto self = shared_from_this();
  while (!stopped_) {
    sweep_timer_.expires_after(options_.sweep_period);
    co_await sweep_timer_.async_wait(kAwait);
    if (stopped_) {
      break;
    }
    if (synced_ && active_) {
      sweep();
    } else {
      update_gauges();
    }
  }
}

}  // namespace gpuslice::scheduler
