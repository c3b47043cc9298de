// The loop's status publisher (scheduler/status_publisher.h) on a real executor: it publishes at once and then at
// its bounded rate, and readers on other threads never wait for the loop, however long the loop is busy.
#include "scheduler/status_publisher.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <thread>

using namespace gpuslice;
using namespace gpuslice::scheduler;
using namespace std::chrono_literals;
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

/// An io_context on its own thread, as the scheduler's (SchedulerProcess).
struct LoopThread {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(io);
  std::thread thread{[this] { io.run(); }};
  ~LoopThread() {
    guard.reset();
    io.stop();
    thread.join();
  }
  template <class F>
  void on_loop(F f) {  // runs f on the loop and waits for it
    std::promise<void> done;
    asio::post(io, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }
};

status::StatusView view_named(const std::string& identity) {
  status::StatusView v;
  v.state.identity = identity;
  return v;
}

template <class Pred>
bool wait_until(Pred pred, std::chrono::milliseconds limit) {
  const auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return pred();
}

}  // namespace

TEST_CASE("status publisher: a view at once, then one per period, each with its generation and build time") {
  LoopThread loop;
  std::atomic<int> builds{0};
  auto pub = std::make_shared<StatusPublisher>(
      loop.io.get_executor(), [&] { return view_named("build-" + std::to_string(++builds)); },
      status::PublishPolicy{20ms, 100});
  auto board = pub->board();
  CHECK(board->latest() == nullptr);
  asio::co_spawn(loop.io, pub->run(), asio::detached);
  REQUIRE(wait_until([&] { return board->latest() != nullptr && board->latest()->generation >= 3; }, 5s));
  auto p = board->latest();
  CHECK(p->view.state.identity == "build-" + std::to_string(p->generation));
  loop.on_loop([&] { pub->stop(); });
  const uint64_t last = board->latest()->generation;
  std::this_thread::sleep_for(100ms);
  CHECK(board->latest()->generation == last);  // stopped
  CHECK(board->latest() != nullptr);           // the board keeps its last view
}

TEST_CASE("status publisher: while the loop is busy for 600 ms, readers get the last view at once") {
  LoopThread loop;
  auto pub = std::make_shared<StatusPublisher>(
      loop.io.get_executor(), [] { return view_named("v"); }, status::PublishPolicy{10ms, 100});
  auto board = pub->board();
  asio::co_spawn(loop.io, pub->run(), asio::detached);
  REQUIRE(wait_until([&] { return board->latest() != nullptr; }, 5s));
  // The loop is stuck in one long turn (a huge relist, a slow build): nothing on its executor runs.
  std::atomic<bool> busy{false};
  asio::post(loop.io, [&] {
    busy = true;
    std::this_thread::sleep_for(600ms);
    busy = false;
  });
  REQUIRE(wait_until([&] { return busy.load(); }, 5s));
  const uint64_t during = board->latest()->generation;
  auto slowest = Clock::duration::zero();
  int reads = 0;
  while (busy.load()) {
    const auto t0 = Clock::now();
    auto p = board->latest();
    slowest = std::max(slowest, Clock::now() - t0);
    REQUIRE(p != nullptr);
    CHECK(p->generation == during);  // the loop published nothing meanwhile: the same, older view
    ++reads;
    std::this_thread::sleep_for(1ms);
  }
  CHECK(reads > 50);
  CHECK(slowest < 50ms);  // never the loop's 600 ms
  // Once the loop is free again it catches up.
  REQUIRE(wait_until([&] { return board->latest()->generation > during; }, 5s));
  loop.on_loop([&] { pub->stop(); });
}

TEST_CASE("status publisher: a slow build is followed by a longer pause (the loop share bound)") {
  LoopThread loop;
  // The injected clock makes every build take 40 ms; at 10 % the next view is due 400 ms later.
  std::atomic<int64_t> fake_ms{0};
  auto steady = [&] { return status::SteadyTime{} + std::chrono::milliseconds(fake_ms.fetch_add(20)); };
  std::atomic<int> builds{0};
  auto pub = std::make_shared<StatusPublisher>(
      loop.io.get_executor(),
      [&] {
        ++builds;
        fake_ms += 20;  // build: the clock is read once before (t) and once after (t + 20 + 20)
        return view_named("slow");
      },
      status::PublishPolicy{1ms, 10}, steady);
  auto board = pub->board();
  const auto start = Clock::now();
  asio::co_spawn(loop.io, pub->run(), asio::detached);
  REQUIRE(wait_until([&] { return board->latest() != nullptr; }, 5s));
  CHECK(board->latest()->build_time == 40ms);
  std::this_thread::sleep_for(1000ms - (Clock::now() - start));
  loop.on_loop([&] { pub->stop(); });
  // 0, 400 and 800 ms: three builds in the first second (not the ~1000 a 1 ms period alone would allow).
  CHECK(builds.load() >= 2);
  CHECK(builds.load() <= 4);
}

TEST_CASE("status publisher: the heap is trimmed after a view is freed, and the trim counts with the build") {
  asio::io_context io;
  // A clock that advances 1 ms per read: the build takes 1 ms (t0, t1), the trim 1 ms (t2, t3).
  auto now = std::make_shared<Clock::time_point>();
  auto steady = [now] { return *now += 1ms; };
  auto pub = std::make_shared<StatusPublisher>(
      io.get_executor(), [] { return view_named("v"); }, status::PublishPolicy{1000ms, 5}, steady);
  pub->publish_now();
  CHECK(pub->last_trim() == 0us);  // the first view freed nothing
  pub->publish_now();
#if defined(__GLIBC__)
  CHECK(pub->last_trim() == 1000us);
#endif
  CHECK(pub->board()->latest()->build_time == 1000us);  // the view's own build time, without the trim
  auto held = pub->board()->latest();
  pub->publish_now();
  CHECK(pub->last_trim() == 0us);  // a reader held the previous view: it frees it, nothing to trim here
  held.reset();

  auto off = std::make_shared<StatusPublisher>(
      io.get_executor(), [] { return view_named("v"); }, status::PublishPolicy{1000ms, 5, false}, steady);
  off->publish_now();
  off->publish_now();
  CHECK(off->last_trim() == 0us);
}
