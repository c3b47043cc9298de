#include "scheduler/status_publisher.h"

#include "common/log.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

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
  board_->publish(std::move(p));
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
