#pragma once
// Drives a LeaderElector against the API server: every retry period GET the Lease, create or update it as the
// elector plans (409 = lost the race), and report leadership changes. A watchdog flips leadership off at the
// renew deadline even while a request hangs, so the loop stops writing before any other replica may take over.
// On stop() a leader gives the lease up (holder cleared) so a successor need not wait for expiry.

#include "kube/client.h"
#include "scheduler/leader.h"
#include "scheduler/loop.h"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <functional>
#include <memory>

namespace gpuslice::scheduler {

class LeaderRunner : public std::enable_shared_from_this<LeaderRunner> {
 public:
  /// `on_change(true|false)` runs on the client's executor whenever leadership starts or ends.
  LeaderRunner(std::shared_ptr<kube::Client> client, LeaderElector elector, LoopClock clock,
               std::function<void(bool)> on_change);

  /// Runs until stop(); co_spawn on the client's executor. Returns after releasing the lease (if held).
  boost::asio::awaitable<void> run();
  void stop();  ///< call on the executor
  bool leading() const { return leading_.load(); }
  const LeaderElector& elector() const { return elector_; }

 private:
  boost::asio::awaitable<void> watchdog();
  void set_leading(bool leading);

  std::shared_ptr<kube::Client> client_;
  LeaderElector elector_;
  LoopClock clock_;
  std::function<void(bool)> on_change_;
  boost::asio::steady_timer timer_;
  boost::asio::steady_timer watchdog_timer_;
  bool stopped_ = false;
  bool reported_ = false;
  std::atomic<bool> leading_{false};
};

}  // namespace gpuslice::scheduler
