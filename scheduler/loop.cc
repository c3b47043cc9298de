#include "scheduler/loop.h"

#include "common/log.h"
#include "common/metrics.h"
#include "scheduler/allocation.h"
#include "scheduler/pod_info.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <mutex>

namespace gpuslice::scheduler {
namespace {

namespace asio = boost::asio;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);

int64_t unix_seconds(WallTime t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

std::string str_at(const boost::json::object& o, std::string_view pointer) {
  return string_at_pointer(o, pointer);
}

std::string annotation(const boost::json::object& pod, std::string_view key) {
  const auto* meta = pod.if_contains("metadata");
  if (meta == nullptr || !meta->is_object()) {
    return {};
  }
  const auto* ann = meta->get_object().if_contains("annotations");
  if (ann == nullptr || !ann->is_object()) {
    return {};
  }
  const auto* v = ann->get_object().if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
}

std::optional<std::string> optional_annotation(const boost::json::object& obj, std::string_view key) {
  const auto* meta = obj.if_contains("metadata");
  if (meta == nullptr || !meta->is_object()) {
    return std::nullopt;
  }
  const auto* ann = meta->get_object().if_contains("annotations");
  if (ann == nullptr || !ann->is_object()) {
    return std::nullopt;
  }
  const auto* v = ann->get_object().if_contains(key);
  if (v == nullptr || !v->is_string()) {
    return std::nullopt;
  }
  return std::string(v->get_string());
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

// True when the pod's PodScheduled condition already says exactly this: no need to patch it again.
bool condition_matches(const boost::json::object& pod, std::string_view message) {
  const auto* status = pod.if_contains("status");
  if (status == nullptr || !status->is_object()) {
    return false;
  }
  const auto* conds = status->get_object().if_contains("conditions");
  if (conds == nullptr || !conds->is_array()) {
    return false;
  }
  for (const auto& c : conds->get_array()) {
    if (!c.is_object()) {
      continue;
    }
    const auto& o = c.get_object();
    if (str_at(o, "/type") == "PodScheduled") {
      return str_at(o, "/status") == "False" && str_at(o, "/reason") == "Unschedulable" &&
             str_at(o, "/message") == message;
    }
  }
  return false;
}

// ---- metrics ----

struct CardRow {
  std::string node, uuid, type;
  double mem_used_bytes, mem_total_bytes, cores_used_ratio, slots_used, slots_total;
};

struct Metrics {
  metrics::Family<metrics::Counter>& attempts;
  metrics::HistogramFamily& e2e;
  metrics::Family<metrics::Gauge>& pending;
  metrics::Family<metrics::Gauge>& binds_in_flight;
  metrics::Family<metrics::Counter>& lock_ops;
  metrics::Family<metrics::Counter>& events_dropped;
  std::mutex cards_mutex;
  std::vector<CardRow> cards;

  static Metrics& get() {
    static Metrics* m = [] {
      auto& r = metrics::default_registry();
      auto* out = new Metrics{
          r.counter("gpuslice_scheduler_schedule_attempts_total",
                    "Scheduling attempts by result (scheduled, unschedulable, error).", {"result"}),
          r.histogram("gpuslice_scheduler_e2e_scheduling_duration_seconds",
                      "From first seeing a pending pod to its successful binding.", {},
                      metrics::exponential_buckets(0.001, 2, 18)),
          r.gauge("gpuslice_scheduler_pending_pods", "Pods in the scheduling queue by state.", {"queue"}),
          r.gauge("gpuslice_scheduler_binds_in_flight", "Decisions being written and bound.", {}),
          r.counter("gpuslice_scheduler_node_lock_operations_total",
                    "hami.io/mutex.lock operations by the scheduler (taken, released_bind_failed, released_expired, "
                    "released_owner_gone).",
                    {"operation"}),
          r.counter("gpuslice_scheduler_side_effects_dropped_total",
                    "Events and status patches dropped because too many were in flight.", {}),
          {},
          {}};
      r.add_collector([out](std::string& text) {
        std::lock_guard lock(out->cards_mutex);
        auto family = [&](const char* name, const char* help, double CardRow::*field) {
          text += "# HELP ";
          text += name;
          text += ' ';
          text += help;
          text += "\n# TYPE ";
          text += name;
          text += " gauge\n";
          for (const auto& c : out->cards) {
            text += name;
            text += "{node=\"" + metrics::escape_label_value(c.node) + "\",device_uuid=\"" +
                    metrics::escape_label_value(c.uuid) + "\",device_type=\"" + metrics::escape_label_value(c.type) +
                    "\"} " + metrics::format_value(c.*field) + "\n";
          }
        };
        if (out->cards.empty()) {
          return;
        }
        family("gpuslice_scheduler_card_memory_allocated_bytes", "GPU memory allocated on a card.",
               &CardRow::mem_used_bytes);
        family("gpuslice_scheduler_card_memory_bytes", "GPU memory registered for a card.", &CardRow::mem_total_bytes);
        family("gpuslice_scheduler_card_core_allocated_ratio", "Share of a card's cores allocated (0..1).",
               &CardRow::cores_used_ratio);
        family("gpuslice_scheduler_card_shared_count", "Containers sharing a card.", &CardRow::slots_used);
        family("gpuslice_scheduler_card_slots", "Time-slicing slots of a card.", &CardRow::slots_total);
      });
      return out;
    }();
    return *m;
  }
};

}  // namespace

// ---- pure helpers --------------------------------------------------------------------------------------------

PodBrief brief_of(const boost::json::object& pod) {
  PodBrief b;
  b.uid = kube::uid_of(pod);
  b.node_name = str_at(pod, "/spec/nodeName");
  b.vgpu_node = annotation(pod, kVgpuNodeAnnotation);
  b.bind_phase = annotation(pod, kBindPhaseAnnotation);
  b.phase = str_at(pod, "/status/phase");
  return b;
}

LockOwnerState classify_lock_owner(const std::optional<PodBrief>& owner, std::string_view node, bool binding_now) {
  if (binding_now) {
    return LockOwnerState::active;
  }
  if (!owner) {
    return LockOwnerState::deleted;
  }
  if (finished_phase(owner->phase)) {
    return LockOwnerState::finished;
  }
  // Only what is provable frees a lock early. An unbound owner may be mid-bind by any scheduler (HAMi's takes the
  // lock before it writes bind-phase), so it is active whatever its annotations say; a bound pod is never bound
  // again, so bound elsewhere, or bound here with the allocation finished, can never use this lock.
  if (owner->node_name.empty()) {
    return LockOwnerState::active;
  }
  if (owner->node_name != node || (owner->bind_phase == kBindPhaseSuccess || owner->bind_phase == kBindPhaseFailed)) {
    return LockOwnerState::allocation_over;
  }
  return LockOwnerState::active;
}

std::string allocation_patch(const Decision& decision, std::string_view resource_version, int64_t now_unix) {
  boost::json::object annotations = allocation_annotations(decision, now_unix);
  annotations[kBindPhaseAnnotation] = kBindPhaseAllocating;
  annotations[kBindTimeAnnotation] = std::to_string(now_unix);
  // Every scheduler-owned key we do not write goes (merge patch null): nothing a pod author wrote survives.
  for (std::string_view k : kSchedulerOwnedAnnotations) {
    if (!annotations.contains(k)) {
      annotations[k] = nullptr;
    }
  }
  boost::json::object meta;
  if (!resource_version.empty()) {
    meta["resourceVersion"] = resource_version;
  }
  meta["annotations"] = std::move(annotations);
  // Label values are at most 63 characters; a longer node name keeps only the annotation (HAMi would fail).
  if (decision.node.size() <= 63) {
    meta["labels"] = boost::json::object{{kVgpuNodeAnnotation, decision.node}};
  }
  return boost::json::serialize(boost::json::object{{"metadata", std::move(meta)}});
}

std::string owned_annotations_removal_patch(std::string_view resource_version) {
  boost::json::object annotations;
  for (std::string_view k : kSchedulerOwnedAnnotations) {
    annotations[k] = nullptr;
  }
  boost::json::object meta;
  if (!resource_version.empty()) {
    meta["resourceVersion"] = resource_version;
  }
  meta["annotations"] = std::move(annotations);
  return boost::json::serialize(boost::json::object{{"metadata", std::move(meta)}});
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

std::string filtering_failed_note(const Decision& decision) {
  std::map<std::string, std::vector<std::string>> by_reason;
  for (const auto& f : decision.failures) {
    for (const auto& r : f.reasons) {
      by_reason[r].push_back(f.node);
    }
  }
  std::string out = "no available node, " + std::to_string(decision.failures.size()) + " nodes do not meet";
  bool first = true;
  for (const auto& [reason, nodes] : by_reason) {
    out += first ? ": " : "; ";
    first = false;
    out += std::to_string(nodes.size()) + " nodes " + reason + "(";
    for (size_t i = 0; i < nodes.size() && i < 10; ++i) {
      out += (i ? ", " : "") + nodes[i];
    }
    if (nodes.size() > 10) {
      out += ", ...";
    }
    out += ")";
  }
  return out;
}

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

SchedulingLoop::SchedulingLoop(asio::any_io_executor executor, LoopOptions options, std::shared_ptr<LoopApi> api)
    : executor_(executor),
      options_(std::move(options)),
      schedule_options_([this] {
        ScheduleOptions o = ScheduleOptions::from(options_.scheduler);
        o.select_volume_nodes = true;  // bind_volumes() writes selected-node and waits (VolumeBinding's PreBind)
        return o;
      }()),
      api_(std::move(api)),
      snapshot_(options_.devices),
      queue_(QueueOptions{options_.queue_capacity, milliseconds(1000),
                          std::max(options_.scheduler.max_backoff, milliseconds(1000))}),
      wake_timer_(executor),
      sweep_timer_(executor) {
  (void)Metrics::get();
}

SchedulingLoop::~SchedulingLoop() = default;

void SchedulingLoop::stop() {
  stopped_ = true;
  wake_timer_.cancel();
  sweep_timer_.cancel();
  for (auto& [node, waiters] : node_waiters_) {
    for (auto& t : waiters) {
      t->cancel();
    }
  }
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
      std::set<std::string> seen;
      for (const auto& item : *event.items) {
        seen.insert(kube::namespace_of(item) + "/" + kube::name_of(item));
        apply_pod(item, false);
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
    queue_.forget(key);
    reported_.erase(key);
    recent_binds_.erase(key);
    if (had) {
      // A pod that held cpu, memory or a slice is gone: everything waiting may fit now (HAMi #1368).
      queue_.move_all_to_active(now);
      wake();
    }
    for (const auto& node : std::vector<std::string>(locked_nodes_.begin(), locked_nodes_.end())) {
      auto meta = nodes_.find(node);
      if (meta != nodes_.end() && lock_held_by(meta->second.lock, key.ns, key.name)) {
        check_node_lock(node);
      }
    }
    return;
  }
  const bool phase_changed = [&] {
    auto it = briefs_.find(skey);
    return it != briefs_.end() && it->second.bind_phase != brief.bind_phase;
  }();
  briefs_[skey] = brief;
  if (auto st = count_pod(key, pod); !st) {
    log::warning("pod counted without its bad field", {{"pod", skey}, {"error", st.message()}});
  }
  const bool ours = str_at(pod, "/spec/schedulerName") == options_.scheduler_name && brief.node_name.empty() &&
                    !deleting(pod) && !has_scheduling_gates(pod);
  if (ours) {
    if (auto rb = recent_binds_.find(key); rb != recent_binds_.end()) {
      return;  // we bound it a moment ago; this event predates the binding
    }
    auto [it, inserted] = pending_.try_emplace(key);
    it->second.object = pod;
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
    if (pending_.erase(key) != 0) {
      queue_.forget(key);
      reported_.erase(key);
    }
  }
  if (phase_changed && (brief.bind_phase == kBindPhaseSuccess || brief.bind_phase == kBindPhaseFailed)) {
    // The device plugin finished this pod: a lock naming it must go (the plugin normally releases it).
    for (const auto& node : std::vector<std::string>(locked_nodes_.begin(), locked_nodes_.end())) {
      auto meta = nodes_.find(node);
      if (meta != nodes_.end() && lock_held_by(meta->second.lock, key.ns, key.name)) {
        check_node_lock(node);
      }
    }
  }
}

Status SchedulingLoop::count_pod(const PodKey& key, const boost::json::object& pod) {
  const bool unbound_ours = str_at(pod, "/spec/nodeName").empty() &&
                            str_at(pod, "/spec/schedulerName") == options_.scheduler_name && !binders_.count(key) &&
                            !recent_binds_.count(key);
  if (!unbound_ours) {
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
      std::set<std::string> seen;
      for (const auto& item : *event.items) {
        seen.insert(kube::name_of(item));
        apply_node(item, false);
      }
      std::vector<std::string> gone;
      for (const auto& [name, meta] : nodes_) {
        if (!seen.count(name)) {
          gone.push_back(name);
        }
      }
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
    locked_nodes_.erase(name);
    notify_node(name);
    return;
  }
  NodeMeta meta;
  meta.resource_version = kube::resource_version_of(node);
  meta.lock = optional_annotation(node, kNodeLockAnnotation);
  // What can change a fit: labels, spec (taints, unschedulable), allocatable, the register and cordon
  // annotations. Heartbeats (conditions) and the lock do not.
  {
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
    fp["r"] = annotation(node, kNodeRegisterAnnotation);
    fp["c"] = annotation(node, kDeviceCordonAnnotation);
    meta.fingerprint = boost::json::serialize(fp);
  }
  auto it = nodes_.find(name);
  const bool changed = it == nodes_.end() || it->second.fingerprint != meta.fingerprint;
  if (changed) {
    if (auto st = snapshot_.upsert_node(node); !st) {
      log::warning("node left unregistered", {{"node", name}, {"error", st.message()}});
    }
  }
  const bool lock_changed = it == nodes_.end() || it->second.lock != meta.lock;
  nodes_[name] = std::move(meta);
  const auto& stored = nodes_[name];
  if (stored.lock) {
    locked_nodes_.insert(name);
  } else {
    locked_nodes_.erase(name);
  }
  if (changed) {
    queue_.move_all_to_active(options_.clock.steady());
    wake();
  }
  notify_node(name);
  if (lock_changed && stored.lock) {
    check_node_lock(name);
  }
}

void SchedulingLoop::on_quota_event(const kube::ReflectorEvent& event) {
  using T = kube::ReflectorEventType;
  auto upsert = [&](const boost::json::object& q) {
    quotas_.insert({kube::namespace_of(q), kube::name_of(q)});
    if (auto st = snapshot_.upsert_quota(q); !st) {
      log::warning("resource quota ignored", {{"error", st.message()}});
    }
  };
  switch (event.type) {
    case T::relisted: {
      std::set<std::pair<std::string, std::string>> seen;
      for (const auto& item : *event.items) {
        seen.insert({kube::namespace_of(item), kube::name_of(item)});
        upsert(item);
      }
      for (auto it = quotas_.begin(); it != quotas_.end();) {
        if (!seen.count(*it)) {
          snapshot_.remove_quota(it->first, it->second);
          it = quotas_.erase(it);
        } else {
          ++it;
        }
      }
      break;
    }
    case T::added:
    case T::modified:
      upsert(*event.object);
      break;
    case T::deleted:
      quotas_.erase({kube::namespace_of(*event.object), kube::name_of(*event.object)});
      snapshot_.remove_quota(kube::namespace_of(*event.object), kube::name_of(*event.object));
      break;
    case T::bookmark:
      return;
  }
  queue_.move_all_to_active(options_.clock.steady());
  wake();
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

void SchedulingLoop::schedule_one(const PodKey& key) {
  auto& m = Metrics::get();
  auto it = pending_.find(key);
  if (it == pending_.end()) {
    queue_.done(key);
    return;
  }
  const auto now = options_.clock.steady();
  const auto wall = options_.clock.wall();
  const boost::json::object& pod = it->second.object;
  auto info = parse_pod(pod, options_.devices);
  if (!info) {
    ++stats_.unschedulable;
    m.attempts.with({"unschedulable"}).inc();
    queue_.done_unschedulable(key, now);
    report_unschedulable(key, pod, "pod " + key.str() + ": " + info.message(), "");
    return;
  }
  {
    std::vector<std::string> lines = info->ignored_annotations;
    if (!info->unbound_owned_annotations.empty() && !annotated_by_us_.count(key)) {
      std::string keys;
      for (const auto& k : info->unbound_owned_annotations) {
        keys += (keys.empty() ? "" : ", ") + k;
      }
      lines.push_back(keys +
                      " on a pod that is not bound yet: written by its author, not by a scheduler; not "
                      "counted, replaced or removed when the pod is bound");
    }
    if (!lines.empty()) {
      report_ignored_annotations(key, pod, lines);
    }
  }
  // HAMi drops the pod's old reservation before filtering; so do we (an earlier attempt may have annotated it).
  snapshot_.remove_pod(key.ns, key.name);
  Decision d = schedule(snapshot_, *info, schedule_options_);
  if (!d.scheduled) {
    (void)count_pod(key, pod);  // put back what the API says it holds
    ++stats_.unschedulable;
    m.attempts.with({"unschedulable"}).inc();
    queue_.done_unschedulable(key, now);
    log::info("pod unschedulable", {{"pod", key.str()}, {"message", d.message}}, 2);
    report_unschedulable(key, pod, d.message, info->gpu.any() ? filtering_failed_note(d) : std::string());
    return;
  }
  if (auto st = snapshot_.assume(*info, d.node, d.devices, unix_seconds(wall)); !st) {
    (void)count_pod(key, pod);
    ++stats_.errors;
    m.attempts.with({"error"}).inc();
    log::warning("assume failed", {{"pod", key.str()}, {"node", d.node}, {"error", st.message()}});
    queue_.done_error(key, now);
    return;
  }
  auto b = std::make_shared<Binding>();
  b->key = key;
  // Every pod with a device entry: kubelet calls Allocate for init containers too, and the plugin finds the pod
  // through the lock first (HAMi v2.10 skips the lock for init-only pods, #2640, leaving them to the fallback).
  b->needs_lock = options_.scheduler.node_lock == "hami" && info->gpu.any();
  for (std::string_view k : kSchedulerOwnedAnnotations) {
    b->scrub_owned = b->scrub_owned || optional_annotation(pod, k).has_value();
  }
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
  m.binds_in_flight.with({}).set(static_cast<double>(binders_.size()));
  asio::co_spawn(executor_, bind_task(std::move(b)), asio::detached);
}

asio::awaitable<void> SchedulingLoop::bind_task(std::shared_ptr<Binding> b) {
  auto self = shared_from_this();
  auto& m = Metrics::get();
  const PodKey key = b->key;
  const std::string& node = b->decision.node;
  enum class Outcome { bound, gone, retry, conflict } outcome = Outcome::retry;
  bool lock_taken = false;
  std::string failure;

  do {
    if (stopped_ || !active_) {
      failure = "lost leadership before writing";
      break;
    }
    if (b->info.gpu.any() || b->scrub_owned) {
      // A GPU pod gets its allocation; a pod without one that carries scheduler-owned annotations (written by
      // its author: the webhook did not see it) loses them, so no device plugin can take them for ours.
      // Built before the co_await: g++ 12 destroys a conditional's temporary twice inside a coroutine.
      std::string patch;
      if (b->info.gpu.any()) {
        patch = allocation_patch(b->decision, b->resource_version, unix_seconds(options_.clock.wall()));
      } else {
        patch = owned_annotations_removal_patch(b->resource_version);
      }
      auto r = co_await api_->patch_pod(key.ns, key.name, std::move(patch));
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
          failure = "annotating pod: " + r.error().to_string();
        }
        break;
      }
      b->uid = kube::uid_of(*r).empty() ? b->uid : kube::uid_of(*r);
      if (b->info.gpu.any()) {
        annotated_by_us_.insert(key);  // a retry after a failed bind finds our own annotations: not forged
      }
    }
    if (!b->decision.claims_to_select.empty()) {
      // Before the node lock: provisioning may take a while and must not hold the node's lock meanwhile.
      failure = co_await bind_volumes(*b);
      if (!failure.empty()) {
        break;
      }
    }
    if (b->needs_lock) {
      lock_taken = co_await acquire_lock(*b);
      if (!lock_taken) {
        failure = "node lock on " + node + " not acquired within " + std::to_string(options_.lock_wait.count()) + "ms";
        break;
      }
    }
    if (stopped_ || !active_) {
      failure = "lost leadership before binding";
      break;
    }
    auto s = co_await api_->bind(key.ns, key.name, node, b->uid);
    if (s) {
      outcome = Outcome::bound;
    } else if (s.error().is_conflict()) {
      // Already bound: a previous incarnation of this scheduler bound it before a crash. Done either way.
      outcome = Outcome::bound;
      log::info("pod already bound", {{"pod", key.str()}, {"error", s.error().to_string()}}, 2);
    } else if (s.error().is_not_found()) {
      outcome = Outcome::gone;
    } else {
      failure = "binding: " + s.error().to_string();
    }
  } while (false);

  binders_.erase(key);
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
      queue_.done(key);
      reported_.erase(key);
      emit_event(b->event_ref, "Scheduled", "Normal", "Successfully assigned " + key.str() + " to " + node);
      pending_.erase(key);
      log::info("pod bound", {{"pod", key.str()}, {"node", node}}, 1);
      break;
    }
    case Outcome::gone:
      snapshot_.forget(key.ns, key.name);
      queue_.done(key);
      if (lock_taken) {
        co_await release_lock(node, key.ns, key.name, "owner deleted");
      }
      break;
    case Outcome::retry:
      ++stats_.errors;
      m.attempts.with({"error"}).inc();
      log::warning("binding failed; retrying", {{"pod", key.str()}, {"node", node}, {"error", failure}});
      if (auto pit = pending_.find(key); pit != pending_.end() && !failure.empty() && !stopped_ && active_) {
        emit_event(pit->second.object, "BindingFailed", "Warning", failure);
      }
      if (lock_taken) {
        co_await release_lock(node, key.ns, key.name, "bind failed");
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
  const std::vector<std::string> claims = b.decision.claims_to_select;
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
  // Wait for the provisioner: the PVC watch shows spec.volumeName once the claim is bound.
  const auto deadline = options_.clock.steady() + options_.volume_bind_timeout;
  asio::steady_timer timer(executor_);
  while (true) {
    std::string waiting;
    for (const std::string& claim : claims) {
      const ClaimInfo* c = snapshot_.objects().find_claim(key.ns, claim);
      if (c == nullptr) {
        co_return "persistentvolumeclaim " + key.ns + "/" + claim + " was deleted while waiting for it to bind";
      }
      if (c->volume_name.empty()) {
        waiting = claim;
        break;
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
      co_return "persistentvolumeclaim " + key.ns + "/" + waiting + " not bound within " +
          std::to_string(options_.volume_bind_timeout.count()) + "ms after selecting node " + node +
          " (WaitForFirstConsumer: is its provisioner running?)";
    }
    timer.expires_after(std::chrono::milliseconds(100));
    co_await timer.async_wait(kAwait);
  }
}

// ---- node lock ----

asio::awaitable<LockOwnerState> SchedulingLoop::owner_state(const std::string& ns, const std::string& pod,
                                                            const std::string& node) {
  const PodKey key{ns, pod};
  bool binding_now = false;
  if (auto it = binders_.find(key); it != binders_.end() && it->second == node) {
    binding_now = true;
  }
  if (auto it = recent_binds_.find(key); it != recent_binds_.end() && it->second.first == node) {
    binding_now = true;
  }
  if (binding_now) {
    co_return LockOwnerState::active;
  }
  if (auto it = briefs_.find(ns + "/" + pod); it != briefs_.end()) {
    co_return classify_lock_owner(it->second, node, false);
  }
  // Not in the cache: finished pods leave the watch; a brand-new pod may not have arrived. Ask.
  auto r = co_await api_->get_pod(ns, pod);
  if (!r) {
    if (r.error().is_not_found()) {
      co_return LockOwnerState::deleted;
    }
    co_return LockOwnerState::active;  // cannot tell: do not steal
  }
  co_return classify_lock_owner(brief_of(*r), node, false);
}

asio::awaitable<bool> SchedulingLoop::acquire_lock(Binding& b) {
  const std::string node = b.decision.node;
  auto& line = lock_lines_[node];
  line.push_back(b.key);
  // Leaving the line (taken, given up or stopped) lets the next binder of this node try.
  struct Leave {
    SchedulingLoop* self;
    std::string node;
    PodKey key;
    ~Leave() {
      auto it = self->lock_lines_.find(node);
      if (it != self->lock_lines_.end()) {
        auto& l = it->second;
        l.erase(std::remove(l.begin(), l.end(), key), l.end());
        if (l.empty()) {
          self->lock_lines_.erase(it);
        }
      }
      self->notify_node(node);
    }
  } leave{this, node, b.key};
  const auto deadline = options_.clock.steady() + options_.lock_wait;
  while (!stopped_ && active_) {
    if (auto it = lock_lines_.find(node);
        it != lock_lines_.end() && !it->second.empty() && !(it->second.front() == b.key)) {
      const auto now = options_.clock.steady();
      if (now >= deadline) {
        co_return false;
      }
      co_await wait_node_change(node, std::min(duration_cast<milliseconds>(deadline - now), milliseconds(2000)));
      continue;
    }
    auto mit = nodes_.find(node);
    if (mit == nodes_.end()) {
      co_return false;
    }
    LockDecision d = decide_node_lock(node, mit->second.lock, b.key.ns, b.key.name, options_.clock.wall(),
                                      options_.scheduler.node_lock_timeout);
    if (d.action == LockAction::lookup_owner) {
      const std::string seen_value = *mit->second.lock;
      LockOwnerState owner = co_await owner_state(d.holder_ns, d.holder_pod, node);
      mit = nodes_.find(node);
      if (mit == nodes_.end()) {
        co_return false;
      }
      if (mit->second.lock != seen_value) {
        continue;  // changed while we looked: judge the new value
      }
      d = decide_node_lock(node, mit->second.lock, b.key.ns, b.key.name, options_.clock.wall(),
                           options_.scheduler.node_lock_timeout, owner);
    }
    switch (d.action) {
      case LockAction::already_ours:
        co_return true;
      case LockAction::take:
      case LockAction::take_expired:
      case LockAction::take_owner_gone: {
        if (d.action != LockAction::take) {
          log::info("taking over node lock", {{"node", node}, {"pod", b.key.str()}, {"reason", d.reason}});
          Metrics::get()
              .lock_ops.with({d.action == LockAction::take_expired ? "released_expired" : "released_owner_gone"})
              .inc();
        }
        auto r = co_await api_->patch_node(
            node, node_lock_patch(mit->second.resource_version,
                                  format_node_lock(options_.clock.wall(), b.key.ns, b.key.name)));
        if (r) {
          apply_node(*r, false);
          ++stats_.locks_taken;
          Metrics::get().lock_ops.with({"taken"}).inc();
          co_return true;
        }
        if (r.error().is_not_found()) {
          co_return false;
        }
        if (r.error().is_conflict()) {
          // Someone changed the node (often: the previous owner's release). Read it now rather than wait for
          // the watch.
          auto g = co_await api_->get_node(node);
          if (g) {
            apply_node(*g, false);
          }
          continue;
        }
        log::warning("node lock patch failed", {{"node", node}, {"error", r.error().to_string()}});
        break;
      }
      case LockAction::lookup_owner:
      case LockAction::contention:
        break;
    }
    const auto now = options_.clock.steady();
    if (now >= deadline) {
      co_return false;
    }
    auto wait = duration_cast<milliseconds>(deadline - now);
    wait = std::min(wait, milliseconds(2000));  // re-judge now and then even without node events
    if (d.action == LockAction::contention && d.expires_in > milliseconds(0)) {
      wait = std::min(wait, d.expires_in + milliseconds(10));
    }
    co_await wait_node_change(node, wait);
  }
  co_return false;
}

asio::awaitable<void> SchedulingLoop::release_lock(std::string node, std::string ns, std::string pod, std::string why) {
  for (int attempt = 0; attempt < 4 && !stopped_; ++attempt) {
    auto mit = nodes_.find(node);
    if (mit == nodes_.end() || !lock_held_by(mit->second.lock, ns, pod)) {
      co_return;
    }
    auto r = co_await api_->patch_node(node, node_lock_patch(mit->second.resource_version, std::nullopt));
    if (r) {
      apply_node(*r, false);
      ++stats_.locks_released;
      Metrics::get().lock_ops.with({"released_bind_failed"}).inc();
      log::info("released node lock", {{"node", node}, {"pod", ns + "/" + pod}, {"reason", why}}, 1);
      co_return;
    }
    if (r.error().is_not_found()) {
      co_return;
    }
    auto g = co_await api_->get_node(node);
    if (g) {
      apply_node(*g, false);
    }
  }
}

void SchedulingLoop::check_node_lock(const std::string& node) {
  if (!active_ || !synced_ || stopped_ || janitor_busy_.count(node)) {
    return;
  }
  auto mit = nodes_.find(node);
  if (mit == nodes_.end() || !mit->second.lock) {
    return;
  }
  janitor_busy_.insert(node);
  auto task = [](std::shared_ptr<SchedulingLoop> self, std::string n) -> asio::awaitable<void> {
    auto nit = self->nodes_.find(n);
    if (nit != self->nodes_.end() && nit->second.lock) {
      const std::string value = *nit->second.lock;
      const auto timeout = self->options_.scheduler.node_lock_timeout;
      // An empty pod name never matches a holder: this asks "could anyone take it?".
      LockDecision d = decide_node_lock(n, value, "", "", self->options_.clock.wall(), timeout);
      if (d.action == LockAction::lookup_owner) {
        auto owner = co_await self->owner_state(d.holder_ns, d.holder_pod, n);
        d = decide_node_lock(n, value, "", "", self->options_.clock.wall(), timeout, owner);
      }
      if (d.action == LockAction::take_expired || d.action == LockAction::take_owner_gone) {
        for (int attempt = 0; attempt < 3 && !self->stopped_ && self->active_; ++attempt) {
          nit = self->nodes_.find(n);
          if (nit == self->nodes_.end() || nit->second.lock != value) {
            break;  // changed meanwhile: the next event judges again
          }
          auto r = co_await self->api_->patch_node(n, node_lock_patch(nit->second.resource_version, std::nullopt));
          if (r) {
            self->apply_node(*r, false);
            ++self->stats_.locks_released;
            Metrics::get()
                .lock_ops.with({d.action == LockAction::take_expired ? "released_expired" : "released_owner_gone"})
                .inc();
            log::info("released stale node lock", {{"node", n}, {"reason", d.reason}});
            break;
          }
          if (r.error().is_not_found()) {
            break;
          }
          auto g = co_await self->api_->get_node(n);
          if (g) {
            self->apply_node(*g, false);
          }
        }
      }
    }
    self->janitor_busy_.erase(n);
  };
  asio::co_spawn(executor_, task(shared_from_this(), node), asio::detached);
}

asio::awaitable<void> SchedulingLoop::wait_node_change(const std::string& node, milliseconds max_wait) {
  auto timer = std::make_shared<asio::steady_timer>(executor_);
  timer->expires_after(max_wait);
  node_waiters_[node].push_back(timer);
  co_await timer->async_wait(kAwait);
  auto it = node_waiters_.find(node);
  if (it != node_waiters_.end()) {
    auto& v = it->second;
    v.erase(std::remove(v.begin(), v.end(), timer), v.end());
    if (v.empty()) {
      node_waiters_.erase(it);
    }
  }
}

void SchedulingLoop::notify_node(const std::string& node) {
  auto it = node_waiters_.find(node);
  if (it == node_waiters_.end()) {
    return;
  }
  auto waiters = std::move(it->second);
  node_waiters_.erase(it);
  for (auto& t : waiters) {
    t->cancel();
  }
}

// ---- reporting ----

bool SchedulingLoop::side_effect_slot() {
  if (side_effects_ >= options_.max_side_effects_in_flight) {
    ++stats_.events_dropped;
    Metrics::get().events_dropped.with({}).inc();
    return false;
  }
  return true;
}

void SchedulingLoop::report_unschedulable(const PodKey& key, const boost::json::object& pod, const std::string& message,
                                          const std::string& hami_note) {
  if (!active_ || stopped_) {
    return;
  }
  const auto now = options_.clock.steady();
  auto& rep = reported_[key];
  if (rep.at != SteadyTime{} && rep.message == message && now - rep.at < options_.event_interval) {
    return;
  }
  rep.message = message;
  rep.at = now;
  if (!condition_matches(pod, message) && side_effect_slot()) {
    ++side_effects_;
    kube::PodCondition c;
    c.type = "PodScheduled";
    c.status = "False";
    c.reason = "Unschedulable";
    c.message = message;
    c.last_transition_time = options_.clock.wall();
    auto task = [](std::shared_ptr<SchedulingLoop> self, PodKey k, kube::PodCondition cond) -> asio::awaitable<void> {
      auto r = co_await self->api_->patch_condition(k.ns, k.name, std::move(cond));
      if (!r && !r.error().is_not_found()) {
        log::warning("PodScheduled condition patch failed", {{"pod", k.str()}, {"error", r.error().to_string()}});
      }
      --self->side_effects_;
    };
    asio::co_spawn(executor_, task(shared_from_this(), key, std::move(c)), asio::detached);
  }
  emit_event(pod, "FailedScheduling", "Warning", message);
  if (!hami_note.empty()) {
    emit_event(pod, "FilteringFailed", "Warning", hami_note);
  }
}

void SchedulingLoop::report_ignored_annotations(const PodKey& key, const boost::json::object& pod,
                                                const std::vector<std::string>& lines) {
  std::string message;
  for (const auto& l : lines) {
    message += (message.empty() ? "" : "; ") + l;
  }
  // Once per pod and distinct message: the pod may be retried many times while it waits.
  auto [it, inserted] = ignored_reported_.try_emplace(key, message);
  if (!inserted && it->second == message) {
    return;
  }
  it->second = message;
  log::warning("ignoring annotations the pod author cannot be trusted to write",
               {{"pod", key.str()}, {"annotations", message}});
  if (active_ && !stopped_) {
    emit_event(pod, "AnnotationIgnored", "Warning", message);
  }
}

void SchedulingLoop::emit_event(const boost::json::object& pod, std::string reason, std::string type,
                                std::string note) {
  if (!side_effect_slot()) {
    return;
  }
  ++side_effects_;
  kube::EventRecord e;
  e.namespace_ = kube::namespace_of(pod);
  e.event_time = options_.clock.wall();
  e.reporting_instance = options_.identity;
  e.action = reason == "Scheduled" ? "Binding" : "Scheduling";
  e.reason = std::move(reason);
  e.type = std::move(type);
  e.note = std::move(note);
  e.regarding.namespace_ = e.namespace_;
  e.regarding.name = kube::name_of(pod);
  e.regarding.uid = kube::uid_of(pod);
  e.regarding.resource_version = kube::resource_version_of(pod);
  auto task = [](std::shared_ptr<SchedulingLoop> self, kube::EventRecord ev) -> asio::awaitable<void> {
    auto r = co_await self->api_->create_event(std::move(ev));
    if (!r) {
      log::info("event not recorded", {{"error", r.error().to_string()}}, 2);
    }
    --self->side_effects_;
  };
  asio::co_spawn(executor_, task(shared_from_this(), std::move(e)), asio::detached);
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
  for (auto it = reported_.begin(); it != reported_.end();) {
    it = pending_.count(it->first) ? std::next(it) : reported_.erase(it);
  }
  for (auto it = ignored_reported_.begin(); it != ignored_reported_.end();) {
    it = pending_.count(it->first) ? std::next(it) : ignored_reported_.erase(it);
  }
  for (auto it = annotated_by_us_.begin(); it != annotated_by_us_.end();) {
    it = pending_.count(*it) || binders_.count(*it) ? std::next(it) : annotated_by_us_.erase(it);
  }
  for (auto it = conflict_retries_.begin(); it != conflict_retries_.end();) {
    it = pending_.count(it->first) ? std::next(it) : conflict_retries_.erase(it);
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
  for (const auto& node : std::vector<std::string>(locked_nodes_.begin(), locked_nodes_.end())) {
    check_node_lock(node);
  }
  update_gauges();
}

void SchedulingLoop::update_gauges() {
  auto& m = Metrics::get();
  m.pending.with({"active"}).set(static_cast<double>(queue_.active_size()));
  m.pending.with({"backoff"}).set(static_cast<double>(queue_.waiting_size()));
  m.pending.with({"in_flight"}).set(static_cast<double>(queue_.in_flight_size()));
  m.binds_in_flight.with({}).set(static_cast<double>(binders_.size()));
  std::vector<CardRow> rows;
  snapshot_.for_each_node([&](const NodeState& n) {
    for (const auto& c : n.cards) {
      if (!c.visible()) {
        continue;
      }
      rows.push_back(CardRow{n.name, c.info.id, c.info.type, static_cast<double>(c.used_mem_mib) * 1048576.0,
                             static_cast<double>(c.info.devmem) * 1048576.0,
                             c.info.devcore > 0 ? static_cast<double>(c.used_cores) / c.info.devcore : 0.0,
                             static_cast<double>(c.used_slots), static_cast<double>(c.info.count)});
    }
  });
  std::lock_guard lock(m.cards_mutex);
  m.cards = std::move(rows);
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
