#include "scheduler/status_publisher.h"

#include "common/log.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace gpuslice::scheduler {

namespace asio = boost::asio;

StatusPublisher::StatusPublisher(asio::any_io_executor executor, Build build, status::PublishPolicy policy,
                                 std::function<status::SteadyTime()> steady)
    : build_(std::move(build)), policy_(policy), steady_(std::move(steady)), timer_(executor) {}

void StatusPublisher::publish_now() {
  const status::SteadyTime t0 = steady_();
  auto p = std::make_shared<status::Published>();
  try {
    p->view = build_();
  } catch (const std::exception& e) {
    // Keep the last good view; its growing age tells the readers.
    log::error("status view: building failed", {{"error", std::string(e.what())}});
    return;
  }
  const status::SteadyTime t1 = steady_();
  p->generation = ++generation_;
  p->at = t1;
  p->build_time = std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0);
  last_build_ = p->build_time;
  last_trim_ = {};
  if (!board_->publish(std::move(p)) || !policy_.trim_freed_heap) {
    return;
  }
  // The previous view was freed just now: ~0.5 KB per bound and ~0.6 KB per pending pod, ~20 MB at 5,000 nodes
  // and 40,000 pods, in the arena of this thread, where glibc keeps it as RSS. Hand its whole free pages back.
  // Cost: malloc_trim walks the heap, ~13-24 ms a publication at that scale on a loaded 2-core machine, beside a
  // build of 58-93 ms (bench/RESULTS.md, 2026-12-06 session 18). Where it runs: in the publisher, never inside a
  // decision or a bind, and its time is added to the build's, so next_publish_delay() keeps the two together
  // within PublishPolicy::loop_share_percent of the loop's time. It is not off the loop's thread, though: the
  // publisher is a task on the loop's executor, so the loop waits while it runs (and a trim on another thread
  // would hold this thread's arena lock about as long, so it would not spare the loop either).
#if defined(__GLIBC__)
  const status::SteadyTime t2 = steady_();
  malloc_trim(0);
  last_trim_ = std::chrono::duration_cast<std::chrono::microseconds>(steady_() - t2);
  last_build_ += last_trim_;
#endif
}

asio::awaitable<void> StatusPublisher::run() {
  auto self = shared_from_this();
  while (!stopped_) {
    publish_now();
    timer_.expires_after(status::next_publish_delay(last_build_, policy_));
    co_await timer_.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

void StatusPublisher::stop() {
  stopped_ = true;
  timer_.cancel();
}

}  // namespace gpuslice::scheduler
