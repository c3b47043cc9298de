// SchedulingLoop::status_view: the loop's side of the status page. It only gathers the pending pods (their request
// and last unschedulable message) and hands the snapshot to the pure status::build_view (scheduler/status_view.h);
// it runs on the loop's executor like every other member.
#include "common/json_access.h"
#include "common/rfc3339.h"
#include "scheduler/loop.h"
#include "scheduler/pod_info.h"

#include <boost/json/parse.hpp>

namespace gpuslice::scheduler {

namespace {

namespace json = boost::json;

/// The message of a PodScheduled=False condition (what another replica or an earlier run reported), "" if none.
std::string condition_message(const json::object& pod) {
  const json::object* status = object_at(pod, "status");
  const json::array* conds = status ? array_at(*status, "conditions") : nullptr;
  for (const json::value& c : conds ? *conds : json::array{}) {
    if (c.is_object() && string_view_at(c.get_object(), "type") == "PodScheduled" &&
        string_view_at(c.get_object(), "status") == "False") {
      return string_at(c.get_object(), "message");
    }
  }
  return {};
}

int64_t creation_unix(const json::object& pod) {
  const json::object* meta = object_at(pod, "metadata");
  if (meta == nullptr) {
    return 0;
  }
  auto t = parse_rfc3339(string_view_at(*meta, "creationTimestamp"));
  return t ? std::chrono::duration_cast<std::chrono::seconds>(t->time_since_epoch()).count() : 0;
}

}  // namespace

boost::json::object SchedulingLoop::PendingPod::object(PodTextCodec& codec) const {
  const std::optional<std::string> text = codec.unpack(packed);
  if (!text) {
    return {};  // cannot happen: `packed` is what the codec packed
  }
  boost::system::error_code ec;
  json::value v = json::parse(*text, ec);
  if (ec || !v.is_object()) {
    return {};  // cannot happen: the text is what boost::json::serialize wrote
  }
  return std::move(v.as_object());
}

void SchedulingLoop::note_pending(PendingPod& p, const json::object& pod) const {
  auto info = parse_pod(pod, options_.devices);
  p.parsed = static_cast<bool>(info);
  p.gpu_pod = info && info->gpu.any();
  p.gpu = p.gpu_pod ? std::move(info->gpu) : PodGpuRequest{};
  p.message = condition_message(pod);
  if (!info && p.message.empty()) {
    p.message = info.message();
  }
  p.since_unix = creation_unix(pod);
}

status::StatusView SchedulingLoop::status_view(status::SchedulerState state) const {
  state.synced = synced_;
  state.queue_active = queue_.active_size();
  state.queue_backoff = queue_.waiting_size();
  state.queue_in_flight = queue_.in_flight_size();
  state.binds_in_flight = binders_.size();
  state.now_unix = std::chrono::duration_cast<std::chrono::seconds>(options_.clock.wall().time_since_epoch()).count();
  std::vector<status::PendingInput> pending;
  pending.reserve(pending_.size());
  for (const auto& [key, p] : pending_) {
    if (binders_.count(key) != 0) {
      continue;  // being bound: its slice shows on the card (assumed)
    }
    if (p.parsed && !p.gpu_pod) {
      continue;
    }
    status::PendingInput in;
    in.ns = key.ns;
    in.name = key.name;
    in.gpu = p.gpu;
    const std::string* reported = reporter_.last_message(key);
    in.message = reported != nullptr ? *reported : p.message;
    in.since_unix = p.since_unix;
    pending.push_back(std::move(in));
  }
  return status::build_view(snapshot_, pending, state);
}

}  // namespace gpuslice::scheduler
