#include "scheduler/status_board.h"

#include "common/metrics.h"

#include <algorithm>
#include <cstdio>

namespace gpuslice::scheduler::status {

std::chrono::milliseconds next_publish_delay(std::chrono::microseconds build_time, const PublishPolicy& policy) {
  const int share = std::clamp(policy.loop_share_percent, 1, 100);
  // build x 100 / share, rounded up to whole milliseconds.
  const auto scaled = std::chrono::ceil<std::chrono::milliseconds>(build_time * 100 / share);
  return std::max(policy.min_period, scaled);
}

bool StatusBoard::publish(std::shared_ptr<const Published> view) {
  std::shared_ptr<const Published> old;
  {
    std::lock_guard lock(mutex_);
    old = std::move(current_);
    current_ = std::move(view);
  }
  // `old` (possibly the last reference to a large view) is freed here, outside the lock. Once it is out of the
  // board no reader can take another reference to it, so a count of 1 means this is the last.
  const bool last = old != nullptr && old.use_count() == 1;
  old.reset();
  return last;
}

std::shared_ptr<const Published> StatusBoard::latest() const {
  std::lock_guard lock(mutex_);
  return current_;
}

double age_seconds(const Published& p, SteadyTime now) {
  return now > p.at ? std::chrono::duration<double>(now - p.at).count() : 0.0;
}

namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

Page board_response(bool json, std::string_view query, const Published* p, SteadyTime now, std::string_view why) {
  Page page = status_response(json, query, p != nullptr ? &p->view : nullptr, why);
  if (p == nullptr || page.status != 200) {
    return page;
  }
  // render_json's document is one JSON object ("{\"state\":..."); the view's age goes in front of its members.
  // For the page, the same document is embedded once, after the asset's placeholder: the first '{' of
  // "\"state\":" marks it. Both are plain insertions (no re-serialisation of a document of up to a few MB).
  const std::string member = "\"view\":{\"generation\":" + std::to_string(p->generation) +
                             ",\"ageSeconds\":" + fixed(age_seconds(*p, now), 3) + ",\"buildMs\":" +
                             fixed(std::chrono::duration<double, std::milli>(p->build_time).count(), 3) + "},";
  const size_t at = page.body.find("{\"state\":");
  if (at != std::string::npos) {
    page.body.insert(at + 1, member);
  }
  return page;
}

std::string render_board_metrics(const Published* p, SteadyTime now) {
  if (p == nullptr) {
    return {};
  }
  std::string out;
  out +=
      "# HELP gpuslice_scheduler_status_view_age_seconds Age of the status view /metrics and /status.json serve "
      "(the loop publishes one at a bounded rate).\n# TYPE gpuslice_scheduler_status_view_age_seconds gauge\n";
  out += "gpuslice_scheduler_status_view_age_seconds " + metrics::format_value(age_seconds(*p, now)) + "\n";
  out +=
      "# HELP gpuslice_scheduler_status_view_build_seconds What building the last status view cost the loop.\n"
      "# TYPE gpuslice_scheduler_status_view_build_seconds gauge\n";
  out += "gpuslice_scheduler_status_view_build_seconds " +
         metrics::format_value(std::chrono::duration<double>(p->build_time).count()) + "\n";
  out +=
      "# HELP gpuslice_scheduler_status_view_generation Status views published since start.\n"
      "# TYPE gpuslice_scheduler_status_view_generation gauge\n";
  out += "gpuslice_scheduler_status_view_generation " + std::to_string(p->generation) + "\n";
  return out;
}

}  // namespace gpuslice::scheduler::status
