#include "scheduler/loop_reporter.h"

#include "common/json_access.h"
#include "common/log.h"
#include "scheduler/loop_metrics.h"

#include <boost/json/serialize.hpp>

#include <optional>

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

bool LoopReporter::take_slot() {
  if (in_flight_ >= options_.max_in_flight) {
    return false;
  }
  ++in_flight_;
  return true;
}

bool LoopReporter::shed_if_full() {
  if (in_flight_ < options_.max_in_flight || queued_.size() < options_.max_queued) {
    return false;
  }
  ++dropped_;
  LoopMetrics::get().events_dropped.with({}).inc();
  return true;
}

void LoopReporter::submit(Write write) {
  if (take_slot()) {
    spawn_(write());
  } else {
    queued_.push_back(std::move(write));  // room checked by shed_if_full()
  }
}

void LoopReporter::release_slot(bool then_owed) {
  --in_flight_;
  // A write may complete inside spawn_ (a dispatched coroutine whose request fails at once): the outer call's loop
  // fills the slot, so a long queue never nests one call per write on the stack.
  if (pumping_) {
    return;
  }
  pumping_ = true;
  for (;;) {
    if (then_owed) {
      flush_owed(/*failed_too=*/false);
    }
    if (queued_.empty() || !take_slot()) {
      break;
    }
    Write next = std::move(queued_.front());
    queued_.pop_front();
    spawn_(next());
  }
  pumping_ = false;
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
    if (take_slot()) {
      owed_.erase(key);
      spawn_(patch_condition(key, std::move(c)));
    } else {
      owed_[key] = Owed{std::move(c), false};  // written when a slot frees, or by the sweep
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
  // A pod is bound once: its Scheduled event never recurs, so it is not kept for a series (40,000 binds would keep
  // 40,000 entries for the 6-minute window).
  const bool once = reason == "Scheduled";
  const std::string series_key = once ? std::string()
                                      : kube::namespace_of(pod) + "/" + kube::name_of(pod) + "\n" + reason + "\n" +
                                            kube::truncate_utf8(note, 1024);
  if (shed_if_full()) {  // before the series is touched: a shed Event must not become one that later ones update
    return;
  }
  if (auto it = once ? series_.end() : series_.find(series_key);
      it != series_.end() && now - it->second.last < options_.series_window) {
    // Isomorphic to an Event of ours still in its window: one more occurrence of that Event's series.
    auto& s = it->second;
    ++s.count;
    s.last = now;
    ++series_updates_;
    boost::json::object series{{"count", s.count},
                               {"lastObservedTime", kube::format_micro_time(options_.clock.wall())}};
    submit([this, series_key, ns = s.ns, name = s.name,
            patch = boost::json::serialize(boost::json::object{{"series", std::move(series)}})] {
      return patch_series(series_key, ns, name, patch);
    });
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
  if (!once) {
    series_[series_key] = Series{e.namespace_.empty() ? std::string("default") : e.namespace_, e.name, 1, now};
  }
  submit([this, e = std::move(e), series_key] { return create_event(e, series_key); });
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
    owed_.try_emplace(key, Owed{std::move(condition), true});  // a newer message owed meanwhile wins
    release_slot(/*then_owed=*/false);                         // retried by the loop's sweep, not at once
    co_return;
  }
  release_slot();
}

void LoopReporter::flush_owed(bool failed_too) {
  // Walks by key, not by iterator: a write that completes inside spawn_ may add to or erase from owed_.
  std::optional<PodKey> last;
  while (in_flight_ < options_.max_in_flight) {
    auto it = last ? owed_.upper_bound(*last) : owed_.begin();
    while (it != owed_.end() && it->second.failed && !failed_too) {
      ++it;
    }
    if (it == owed_.end()) {
      return;
    }
    last = it->first;
    kube::PodCondition c = std::move(it->second.condition);
    owed_.erase(it);
    (void)take_slot();
    spawn_(patch_condition(*last, std::move(c)));
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
  release_slot();
}

boost::asio::awaitable<void> LoopReporter::create_event(kube::EventRecord event, std::string series_key) {
  const std::string name = event.name;
  auto r = co_await api_->create_event(std::move(event));
  if (!r) {
    if (auto it = series_key.empty() ? series_.end() : series_.find(series_key);
        it != series_.end() && it->second.name == name) {
      series_.erase(it);  // nothing to add occurrences to
    }
    log::info("event not recorded", {{"error", r.error().to_string()}}, 2);
  }
  release_slot();
}

}  // namespace gpuslice::scheduler
