#pragma once
// The loop's side of the status board (scheduler/status_board.h): a task on the loop's executor that builds the
// status view and publishes it, first at once and then after next_publish_delay() (at most once a second, and
// never more than PublishPolicy::loop_share_percent of the loop's time however large the fleet; slower while
// nobody reads). Readers (/status, /status.json, /metrics on HTTP threads) only ever take the board's last view:
// they never post to the loop and never wait for it, so a scrape cannot stall scheduling and a busy loop cannot
// stall a scrape (its views just get older, and say so).
//
//   auto pub = std::make_shared<StatusPublisher>(executor, [loop] { return loop->status_view(state); });
//   co_spawn(executor, pub->run(), detached);
//   auto board = pub->board();    // shared with the HTTP side; outlives the publisher
//   pub->stop();                  // on the executor

#include "scheduler/status_board.h"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <memory>

namespace gpuslice::scheduler {

class StatusPublisher : public std::enable_shared_from_this<StatusPublisher> {
 public:
  using Build = std::function<status::StatusView()>;
  /// `build` runs on `executor` (the loop's), once per publication. `steady` is the clock the build time and
  /// the publication time are read from.
  StatusPublisher(
      boost::asio::any_io_executor executor, Build build, status::PublishPolicy policy = {},
      std::function<status::SteadyTime()> steady = [] { return std::chrono::steady_clock::now(); });

  /// Publishes until stop(); co_spawn on the executor.
  boost::asio::awaitable<void> run();
  /// Ends run() at its next wake-up (call on the executor). The board keeps the last view.
  void stop();
  /// Builds and publishes one view now (on the executor; run() calls it).
  void publish_now();

  std::shared_ptr<const status::StatusBoard> board() const { return board_; }
  const status::PublishPolicy& policy() const { return policy_; }
  /// What returning the freed heap took after the last publication (0 when it did not run).
  std::chrono::microseconds last_trim() const { return last_trim_; }

 private:
  Build build_;
  status::PublishPolicy policy_;
  std::function<status::SteadyTime()> steady_;
  std::shared_ptr<status::StatusBoard> board_ = std::make_shared<status::StatusBoard>();
  boost::asio::steady_timer timer_;
  uint64_t generation_ = 0;
  std::chrono::microseconds last_build_{};  ///< the build and the trim after it: what the loop share bounds
  std::chrono::microseconds last_trim_{};
  bool stopped_ = false;
};

}  // namespace gpuslice::scheduler
