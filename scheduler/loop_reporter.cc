#include "scheduler/loop_reporter.h"

#include "common/json_access.h"
#include "common/log.h"
#include "scheduler/loop_metrics.h"

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
    ++dropped_;
    LoopMetrics::get().events_dropped.with({}).inc();
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
  if (!condition_matches(pod, reason, message) && take_slot()) {
    kube::PodCondition c;
    c.type = "PodScheduled";
    c.status = "False";
    c.reason = reason;
    c.message = message;
    c.last_transition_time = options_.clock.wall();
    spawn_(patch_condition(key, std::move(c)));
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
  spawn_(create_event(std::move(e)));
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
  for (auto it = ignored_reported_.begin(); it != ignored_reported_.end();) {
    it = keep(it->first) ? std::next(it) : ignored_reported_.erase(it);
  }
}

boost::asio::awaitable<void> LoopReporter::patch_condition(PodKey key, kube::PodCondition condition) {
  auto r = co_await api_->patch_condition(key.ns, key.name, std::move(condition));
  if (!r && !r.error().is_not_found()) {
    log::warning("PodScheduled condition patch failed", {{"pod", key.str()}, {"error", r.error().to_string()}});
  }
  --in_flight_;
}

boost::asio::awaitable<void> LoopReporter::create_event(kube::EventRecord event) {
  auto r = co_await api_->create_event(std::move(event));
  if (!r) {
    log::info("event not recorded", {{"error", r.error().to_string()}}, 2);
  }
  --in_flight_;
}

}  // namespace gpuslice::scheduler
