#include "scheduler/leader_runner.h"

#include "common/log.h"
#include "common/metrics.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace gpuslice::scheduler {
namespace {

namespace asio = boost::asio;
constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);

metrics::Gauge& leader_gauge() {
  static metrics::Gauge& g =
      metrics::default_registry()
          .gauge("gpuslice_scheduler_leader", "1 while this replica holds the scheduler lease.", {})
          .with({});
  return g;
}

}  // namespace

LeaderRunner::LeaderRunner(std::shared_ptr<kube::Client> client, LeaderElector elector, LoopClock clock,
                           std::function<void(bool)> on_change)
    : client_(std::move(client)),
      elector_(std::move(elector)),
      clock_(std::move(clock)),
      on_change_(std::move(on_change)),
      timer_(client_->get_executor()),
      watchdog_timer_(client_->get_executor()) {}

void LeaderRunner::stop() {
  stopped_ = true;
  timer_.cancel();
  watchdog_timer_.cancel();
}

void LeaderRunner::set_leading(bool leading) {
  leading_.store(leading);
  leader_gauge().set(leading ? 1 : 0);
  if (leading != reported_) {
    reported_ = leading;
    log::info(leading ? "became leader" : "stopped leading",
              {{"identity", elector_.identity()}, {"holder", elector_.observed_holder()}});
    if (on_change_) {
      on_change_(leading);
    }
  }
}

asio::awaitable<void> LeaderRunner::watchdog() {
  auto self = shared_from_this();
  while (!stopped_) {
    watchdog_timer_.expires_after(std::chrono::milliseconds(250));
    co_await watchdog_timer_.async_wait(kAwait);
    if (stopped_) {
      break;
    }
    if (reported_ && !elector_.is_leader(clock_.steady())) {
      log::warning("lease renewal missed the renew deadline", {{"identity", elector_.identity()}});
      set_leading(false);
    }
  }
}

asio::awaitable<void> LeaderRunner::run() {
  auto self = shared_from_this();
  asio::co_spawn(client_->get_executor(), watchdog(), asio::detached);
  const std::string ns = elector_.lease_namespace();
  const std::string name = elector_.lease_name();
  while (!stopped_) {
    const auto attempt_start = std::chrono::steady_clock::now();
    auto got = co_await client_->get_lease(ns, name);
    if (stopped_) {
      break;
    }
    LeaderElector::Plan plan;
    bool observed = false;
    if (got) {
      plan = elector_.observe(*got, clock_.steady(), clock_.wall());
      observed = true;
    } else if (got.error().is_not_found()) {
      plan = elector_.observe(std::nullopt, clock_.steady(), clock_.wall());
      observed = true;
    } else {
      elector_.on_get_error(clock_.steady());
      log::warning("lease read failed", {{"lease", ns + "/" + name}, {"error", got.error().to_string()}});
    }
    if (observed && plan.op != LeaderElector::Op::none) {
      // Two statements, not `cond ? co_await a : co_await b`: g++-12 destroys the wrong temporary there.
      kube::ApiResult<kube::Lease> written = kube::ApiError{};
      if (plan.op == LeaderElector::Op::create) {
        written = co_await client_->create_lease(plan.desired);
      } else {
        written = co_await client_->update_lease(plan.desired);
      }
      if (written) {
        elector_.on_write(LeaderElector::WriteResult::ok, *written, clock_.steady());
      } else if (written.error().is_conflict()) {
        elector_.on_write(LeaderElector::WriteResult::conflict, std::nullopt, clock_.steady());
        log::info("lease write lost a race", {{"lease", ns + "/" + name}, {"reason", plan.reason}}, 2);
      } else {
        elector_.on_write(LeaderElector::WriteResult::error, std::nullopt, clock_.steady());
        log::warning("lease write failed", {{"lease", ns + "/" + name}, {"error", written.error().to_string()}});
      }
    } else if (observed) {
      log::info("lease not acquired", {{"lease", ns + "/" + name}, {"reason", plan.reason}}, 4);
    }
    set_leading(elector_.is_leader(clock_.steady()));
    if (stopped_) {
      break;
    }
    // Next attempt retry_period after this one started (a slow request eats into the wait, as in client-go).
    timer_.expires_at(attempt_start + elector_.retry_period());
    co_await timer_.async_wait(kAwait);
  }
  if (auto release = elector_.release(clock_.wall())) {
    auto r = co_await client_->update_lease(*release);
    if (!r) {
      log::warning("lease release failed", {{"lease", ns + "/" + name}, {"error", r.error().to_string()}});
    } else {
      log::info("lease released", {{"lease", ns + "/" + name}});
    }
  }
  set_leading(false);
}

}  // namespace gpuslice::scheduler
