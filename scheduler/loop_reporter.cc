#include "scheduler/loop_reporter.h"

#include "common/json_access.h"
#include "common/log.h"
#include "scheduler/loop_metrics.h"

#include <boost/json/serialize.hpp>

namespace gpuslice::scheduler {
namespace {

// True when the pod's PodScheduled condition already says exactly this: no need to patch it again.
bool condition_matches(const boost::json::object& pod, std::string_view reason, std::string_view message) {
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
    if (string_at_pointer(o, "/type") == "PodScheduled") {
      return string_at_pointer(o, "/status") == "False" && string_at_pointer(o, "/reason") == reason &&
             string_at_pointer(o, "/message") == message;
    }
  }
  return false;
}

}  // namespace

LoopReporter::LoopReporter(LoopReporterOptions options, std::shared_ptr<LoopApi> api, Spawn spawn)
    : options_(std::move(options)), api_(std::move(api)), spawn_(std::move(spawn)) {}

bool LoopReporter::take_slot(bool count_drop) {
  if (in_flight_ >= options_.max_in_flight) {
    if (count_drop) {
      ++dropped_;
      LoopMetrics::get().events_dropped.with({}).inc();
    }
    return false;
  }
  ++in_flight_;
  return true;
}

bool LoopReporter::failed(const PodKey& key, const boost::json::object& pod, const std::string& reason,
                          const std::string& message) {
  const auto now = options_.clock.steady();
  auto& rep = reported_[key];
  if (rep.at != SteadyTime{} && rep.message == message && now - rep.at < options_.interval) {
    return false;
  }
  rep.message = message;
  rep.at = now;
  if (condition_matches(pod, reason, message)) {
    owed_.erase(key);
  } else {
    kube::PodCondition c;
    c.type = "PodScheduled";
    c.status = "False";
    c.reason = reason;
    c.message = message;
    c.last_transition_time = options_.clock.wall();
    if (take_slot(/*count_drop=*/false)) {
      owed_.erase(key);
      spawn_(patch_condition(key, std::move(c)));
    } else {
      owed_[key] = std::move(c);  // written by flush_owed() once a slot frees
    }
  }
  event(pod, "FailedScheduling", "Warning", message);
  return true;
}

void LoopReporter::unschedulable(const PodKey& key, const boost::json::object& pod, const std::string& message,
                                 const std::string& hami_note) {
  if (failed(key, pod, "Unschedulable", message) && !hami_note.empty()) {
    event(pod, "FilteringFailed", "Warning", hami_note);
  }
}

void LoopReporter::scheduler_error(const PodKey& key, const boost::json::object& pod, const std::string& message) {
  (void)failed(key, pod, "SchedulerError", message);
}

void LoopReporter::event(const boost::json::object& pod, std::string reason, std::string type, std::string note) {
  const auto now = options_.clock.steady();
  const std::string series_key =
      kube::namespace_of(pod) + "/" + kube::name_of(pod) + "\n" + reason + "\n" + kube::truncate_utf8(note, 1024);
  if (auto it = series_.find(series_key); it != series_.end() && now - it->second.last < options_.series_window) {
    // Isomorphic to an Event of ours still in its window: one more occurrence of that Event's series.
    if (!take_slot()) {
      return;
    }
    auto& s = it->second;
    ++s.count;
    s.last = now;
    ++series_updates_;
    boost::json::object series{{"count", s.count},
                               {"lastObservedTime", kube::format_micro_time(options_.clock.wall())}};
    spawn_(patch_series(series_key, s.ns, s.name,
                        boost::json::serialize(boost::json::object{{"series", std::move(series)}})));
    return;
  }
  if (!take_slot()) {
    return;
  }
  kube::EventRecord e;
  e.namespace_ = kube::namespace_of(pod);
  e.event_time = options_.clock.wall();
  e.reporting_instance = options_.identity;
  e.action = reason == "Scheduled" ? "Binding" : reason == "Preempted" ? "Preempting" : "Scheduling";
  e.reason = std::move(reason);
  e.type = std::move(type);
  e.note = std::move(note);
  e.regarding.namespace_ = e.namespace_;
  e.regarding.name = kube::name_of(pod);
  e.regarding.uid = kube::uid_of(pod);
  e.regarding.resource_version = kube::resource_version_of(pod);
  // Named here (client-go's "<regarding>.<hex nanos>") so a later occurrence can update its series.
  e.name = string_at_pointer(kube::make_event(e), "/metadata/name");
  series_[series_key] = Series{e.namespace_.empty() ? std::string("default") : e.namespace_, e.name, 1, now};
  spawn_(create_event(std::move(e), series_key));
}

void LoopReporter::ignored_annotations(const PodKey& key, const boost::json::object& pod,
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
  event(pod, "AnnotationIgnored", "Warning", message);
}

void LoopReporter::retain(const std::function<bool(const PodKey&)>& keep) {
  for (auto it = reported_.begin(); it != reported_.end();) {
    it = keep(it->first) ? std::next(it) : reported_.erase(it);
  }
  for (auto it = owed_.begin(); it != owed_.end();) {
    it = keep(it->first) ? std::next(it) : owed_.erase(it);
  }
  for (auto it = ignored_reported_.begin(); it != ignored_reported_.end();) {
    it = keep(it->first) ? std::next(it) : ignored_reported_.erase(it);
  }
  // Series outlive the pod's pending state only within their window.
  const auto now = options_.clock.steady();
  for (auto it = series_.begin(); it != series_.end();) {
    it = now - it->second.last >= options_.series_window ? series_.erase(it) : std::next(it);
  }
}

boost::asio::awaitable<void> LoopReporter::patch_condition(PodKey key, kube::PodCondition condition) {
  auto r = co_await api_->patch_condition(key.ns, key.name, condition);
  if (!r && !r.error().is_not_found()) {
    log::warning("PodScheduled condition patch failed; owed until it lands",
                 {{"pod", key.str()}, {"error", r.error().to_string()}});
    owed_.try_emplace(key, std::move(condition));  // a newer message owed meanwhile wins
  }
  --in_flight_;
}

void LoopReporter::flush_owed() {
  while (!owed_.empty() && take_slot(/*count_drop=*/false)) {
    auto it = owed_.begin();
    PodKey key = it->first;
    kube::PodCondition c = std::move(it->second);
    owed_.erase(it);
    spawn_(patch_condition(std::move(key), std::move(c)));
  }
}

boost::asio::awaitable<void> LoopReporter::patch_series(std::string key, std::string ns, std::string name,
                                                        std::string patch) {
  auto r = co_await api_->patch_event(ns, name, std::move(patch));
  if (!r) {
    // The Event expired or was never created: the next occurrence creates a new one.
    if (auto it = series_.find(key); it != series_.end() && it->second.name == name) {
      series_.erase(it);
    }
    log::info("event series not updated", {{"event", ns + "/" + name}, {"error", r.error().to_string()}}, 2);
  }
  --in_flight_;
}

boost::asio::awaitable<void> LoopReporter::create_event(kube::EventRecord event, std::string series_key) {
  const std::string name = event.name;
  auto r = co_await api_->create_event(std::move(event));
  if (!r) {
    if (auto it = series_.find(series_key); it != series_.end() && it->second.name == name) {
      series_.erase(it);  // nothing to add occurrences to
    }
    log::info("event not recorded", {{"error", r.error().to_string()}}, 2);
  }
  --in_flight_;
}

}  // namespace gpuslice::scheduler
