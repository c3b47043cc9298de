#include "scheduler/loop_queue.h"

#include <catch2/catch.hpp>

using namespace gpuslice::scheduler;
using namespace std::chrono_literals;

namespace {
const SteadyTime t0{std::chrono::seconds(1000)};
PodKey k(const char* name) {
  return {"ns", name};
}
QueueOptions opts(std::size_t cap = 100) {
  QueueOptions o;
  o.capacity = cap;
  o.initial_backoff = 1s;
  o.max_backoff = 10s;
  return o;
}
}  // namespace

TEST_CASE("active pods come out FIFO") {
  PendingQueue q(opts());
  CHECK(q.add(k("a"), t0) == PendingQueue::AddResult::added);
  CHECK(q.add(k("b"), t0) == PendingQueue::AddResult::added);
  CHECK(q.add(k("a"), t0) == PendingQueue::AddResult::already_queued);
  CHECK(q.size() == 2);
  CHECK(q.pop(t0) == k("a"));
  CHECK(q.pop(t0) == k("b"));
  CHECK_FALSE(q.pop(t0).has_value());
  CHECK(q.in_flight_size() == 2);
  CHECK(q.add(k("a"), t0) == PendingQueue::AddResult::in_flight);
}

TEST_CASE("backoff doubles and is capped") {
  PendingQueue q(opts());
  CHECK(q.backoff_for(1) == 1s);
  CHECK(q.backoff_for(2) == 2s);
  CHECK(q.backoff_for(3) == 4s);
  CHECK(q.backoff_for(4) == 8s);
  CHECK(q.backoff_for(5) == 10s);
  CHECK(q.backoff_for(50) == 10s);

  q.add(k("a"), t0);
  SteadyTime now = t0;
  std::chrono::milliseconds expected[] = {1s, 2s, 4s, 8s, 10s, 10s};
  for (auto want : expected) {
    REQUIRE(q.pop(now) == k("a"));
    q.done_unschedulable(k("a"), now);
    CHECK(q.next_ready(now) == now + want);
    CHECK_FALSE(q.pop(now + want - 1ms).has_value());
    now += want;
  }
  CHECK(q.attempts(k("a")) == 6);
}

TEST_CASE("a cluster event moves parked pods to active at once") {
  PendingQueue q(opts());
  q.add(k("a"), t0);
  q.add(k("b"), t0);
  q.pop(t0);
  q.pop(t0);
  q.done_unschedulable(k("a"), t0);
  q.done_error(k("b"), t0);
  CHECK_FALSE(q.pop(t0 + 10ms).has_value());
  CHECK(q.move_all_to_active(t0 + 10ms) == 2);
  CHECK(q.pop(t0 + 10ms).has_value());
  CHECK(q.pop(t0 + 10ms).has_value());
}

TEST_CASE("an event during the attempt makes an unschedulable result retry at once") {
  PendingQueue q(opts());
  q.add(k("a"), t0);
  REQUIRE(q.pop(t0) == k("a"));
  q.move_all_to_active(t0);  // e.g. a sharing pod was deleted while we decided
  q.done_unschedulable(k("a"), t0);
  CHECK(q.pop(t0) == k("a"));
  // Without an event it backs off.
  q.done_unschedulable(k("a"), t0);
  CHECK_FALSE(q.pop(t0).has_value());
}

TEST_CASE("errors always back off, even after an event") {
  PendingQueue q(opts());
  q.add(k("a"), t0);
  q.pop(t0);
  q.move_all_to_active(t0);
  q.done_error(k("a"), t0);
  CHECK_FALSE(q.pop(t0).has_value());
  CHECK(q.pop(t0 + 1s) == k("a"));
}

TEST_CASE("the pod's own change moves it out of backoff") {
  PendingQueue q(opts());
  q.add(k("a"), t0);
  q.pop(t0);
  q.done_unschedulable(k("a"), t0);
  CHECK(q.add(k("a"), t0, false) == PendingQueue::AddResult::already_queued);
  CHECK_FALSE(q.pop(t0).has_value());
  q.add(k("a"), t0, true);
  CHECK(q.pop(t0) == k("a"));
}

TEST_CASE("done and forget drop the pod, forget of an in-flight pod waits for its return") {
  PendingQueue q(opts());
  q.add(k("a"), t0);
  q.add(k("b"), t0);
  q.forget(k("b"));
  CHECK(q.size() == 1);
  q.pop(t0);
  q.forget(k("a"));
  CHECK(q.contains(k("a")));
  q.done_unschedulable(k("a"), t0);
  CHECK_FALSE(q.contains(k("a")));
  CHECK(q.size() == 0);

  q.add(k("c"), t0);
  q.pop(t0);
  q.done(k("c"));
  CHECK(q.size() == 0);
  CHECK(q.attempts(k("c")) == 0);
  CHECK_FALSE(q.next_ready(t0).has_value());
}

TEST_CASE("capacity bounds the queue") {
  PendingQueue q(opts(2));
  CHECK(q.add(k("a"), t0) == PendingQueue::AddResult::added);
  CHECK(q.add(k("b"), t0) == PendingQueue::AddResult::added);
  CHECK(q.add(k("c"), t0) == PendingQueue::AddResult::full);
  q.pop(t0);
  q.done(k("a"));
  CHECK(q.add(k("c"), t0) == PendingQueue::AddResult::added);
}

TEST_CASE("expired waiting pods are served in deadline order after active ones") {
  PendingQueue q(opts());
  q.add(k("slow"), t0);
  q.add(k("fast"), t0);
  q.pop(t0);  // slow
  q.pop(t0);  // fast
  q.done_unschedulable(k("slow"), t0);
  q.pop(t0 + 1s);                            // slow again, attempt 2
  q.done_unschedulable(k("slow"), t0 + 1s);  // ready at t0+3s
  q.done_unschedulable(k("fast"), t0);       // ready at t0+1s
  q.add(k("new"), t0 + 5s);
  CHECK(q.pop(t0 + 5s) == k("new"));
  CHECK(q.pop(t0 + 5s) == k("fast"));
  CHECK(q.pop(t0 + 5s) == k("slow"));
}
