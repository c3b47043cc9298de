#pragma once
// Where the scheduling loop leaves its status view for the HTTP side (/status, /status.json, /metrics), so that
// a scrape never waits on the loop and never delays it. The loop's publisher (scheduler/status_publisher.h)
// builds a view on the loop's executor at a bounded rate and publishes it here as one immutable object; readers
// take the last one. The mutex is held only to copy or swap a shared_ptr, never while a view is built or
// rendered. No clock: callers pass the times in.
//
//   board.publish(std::make_shared<const status::Published>(status::Published{view, generation, ...}));
//   auto p = board.latest();             // any thread; null until the first publication
//   Page page = status::board_response(true, query, p.get(), now, "no view yet");

#include "common/pages.h"
#include "scheduler/status_view.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace gpuslice::scheduler::status {

using SteadyTime = std::chrono::steady_clock::time_point;

/// One published view and how it was made. Immutable once published.
struct Published {
  StatusView view;
  uint64_t generation = 0;                 ///< 1 for the first view, +1 per publication
  SteadyTime at{};                         ///< when it was published (steady clock)
  std::chrono::microseconds build_time{};  ///< what building it cost the loop
};

/// How often the loop publishes. The delay after a view is the larger of `min_period` and the build time x
/// 100 / `loop_share_percent`, so building views takes at most that share of the loop's time however large the
/// fleet (a view that took 250 ms to build is followed by the next one 5 s later, at the default 5 %).
struct PublishPolicy {
  std::chrono::milliseconds min_period{1000};
  int loop_share_percent = 5;  ///< 1..100
  /// After a publication that freed the previous view, return the freed heap pages to the system (glibc's
  /// malloc_trim; scheduler/status_publisher.cc). Its time counts in the loop share like the build's.
  bool trim_freed_heap = true;
};

/// The delay before the next publication (see PublishPolicy). Pure.
std::chrono::milliseconds next_publish_delay(std::chrono::microseconds build_time, const PublishPolicy& policy);

class StatusBoard {
 public:
  /// Replaces the current view (the loop's publisher; any thread). True when the previous view was freed here
  /// (no reader held it; one a reader holds is freed by the reader's thread when it lets go).
  bool publish(std::shared_ptr<const Published> view);
  /// The last published view, null before the first. Never waits for anything but the pointer copy.
  std::shared_ptr<const Published> latest() const;

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const Published> current_;
};

/// Age of a published view at `now`, in seconds (0 if `now` is earlier).
double age_seconds(const Published& p, SteadyTime now);

/// status_response (status_view.h) over a published view, with the view's age in the JSON (and so in the page's
/// data): a top-level "view": {"generation", "ageSeconds", "buildMs"}. A null `p` is a 503 carrying `why`.
Page board_response(bool json, std::string_view query, const Published* p, SteadyTime now, std::string_view why);

/// render_hami_metrics (status_view.h) appended straight into `out` (the /metrics body): each label value escaped
/// once per card or container, one buffer reserved up front, no intermediate text per series.
void append_hami_metrics(std::string& out, const StatusView& view, bool legacy);

/// Prometheus text for the board itself: gpuslice_scheduler_status_view_age_seconds, _build_seconds and
/// _generation (nothing before the first view).
std::string render_board_metrics(const Published* p, SteadyTime now);

}  // namespace gpuslice::scheduler::status
