// The loop's reporting (scheduler/loop_reporter.h) against the in-memory API (loop_fake_api.h): the condition
// and Events of an unschedulable pod, the per-pod rate limit, no condition patch when it already says the
// message, the in-flight cap, the queue behind it with dropped reports counted, and the Scheduled event's fields.
#include "scheduler/loop_reporter.h"

#include "common/rfc3339.h"

#include "loop_fake_api.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

using namespace gpuslice::scheduler;
using gpuslice::WallTime;
using gpuslice::scheduler::testing::FakeApi;
namespace json = boost::json;
namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

struct Harness {
  std::unique_ptr<LoopReporter> reporter;  // destroyed last: queued tasks touch it
  asio::io_context io;
  std::shared_ptr<FakeApi> api = std::make_shared<FakeApi>(io.get_executor());
  SteadyTime steady_now{std::chrono::seconds(1000)};
  WallTime wall_now{std::chrono::seconds(1796024904)};

  explicit Harness(std::size_t max_in_flight = 32, std::size_t max_queued = 1000) {
    LoopReporterOptions o;
    o.identity = "test";
    o.max_in_flight = max_in_flight;
    o.max_queued = max_queued;
    o.interval = 30s;
    o.clock.steady = [this] { return steady_now; };
    o.clock.wall = [this] { return wall_now; };
    reporter = std::make_unique<LoopReporter>(
        o, api, [this](asio::awaitable<void> task) { asio::co_spawn(io, std::move(task), asio::detached); });
  }

  json::object pod(const std::string& name) {
    json::object p{{"metadata", json::object{{"name", name}, {"namespace", "default"}}},
                   {"spec", json::object{}},
                   {"status", json::object{{"phase", "Pending"}}}};
    api->put_pod(p);
    settle();
    return api->pods.at("default/" + name);
  }

  void settle() {
    for (int i = 0; i < 5; ++i) {
      io.run_for(2ms);
      io.restart();
    }
  }

  ~Harness() { settle(); }
};

}  // namespace

TEST_CASE("reporter: an unschedulable pod gets the condition, FailedScheduling and FilteringFailed",
          "[loop_reporter]") {
  Harness h;
  auto p = h.pod("p");
  h.reporter->unschedulable(PodKey{"default", "p"}, p, "0/1 nodes are available: 1 CardInsufficientMemory.",
                            "no available node, 1 nodes do not meet: 1 nodes CardInsufficientMemory(gpu-0)");
  CHECK(h.reporter->in_flight() == 3);
  h.settle();
  CHECK(h.reporter->in_flight() == 0);
  REQUIRE(h.api->conditions.size() == 1);
  const auto& [key, c] = h.api->conditions[0];
  CHECK(key == "default/p");
  CHECK(c.type == "PodScheduled");
  CHECK(c.status == "False");
  CHECK(c.reason == "Unschedulable");
  CHECK(c.message == "0/1 nodes are available: 1 CardInsufficientMemory.");
  CHECK(c.last_transition_time == h.wall_now);
  REQUIRE(h.api->events.size() == 2);
  CHECK(h.api->events[0].reason == "FailedScheduling");
  CHECK(h.api->events[0].type == "Warning");
  CHECK(h.api->events[0].action == "Scheduling");
  CHECK(h.api->events[0].note == "0/1 nodes are available: 1 CardInsufficientMemory.");
  CHECK(h.api->events[0].reporting_instance == "test");
  CHECK(h.api->events[0].regarding.name == "p");
  CHECK(h.api->events[0].regarding.uid == "uid-default/p");
  CHECK(h.api->events[1].reason == "FilteringFailed");
  CHECK(h.api->events[1].note == "no available node, 1 nodes do not meet: 1 nodes CardInsufficientMemory(gpu-0)");

  // Without a HAMi note (a CPU-only pod, or a pod that does not parse): no FilteringFailed.
  auto q = h.pod("q");
  h.reporter->unschedulable(PodKey{"default", "q"}, q, "pod default/q: bad request", "");
  h.settle();
  CHECK(h.api->events.size() == 3);
}

TEST_CASE("reporter: the same message is reported once per interval; a new message at once", "[loop_reporter]") {
  Harness h;
  auto p = h.pod("p");
  const PodKey key{"default", "p"};
  h.reporter->unschedulable(key, p, "m1", "");
  h.settle();
  h.steady_now += 10s;
  h.reporter->unschedulable(key, h.api->pods.at("default/p"), "m1", "");
  h.settle();
  CHECK(h.api->events.size() == 1);
  CHECK(h.api->conditions.size() == 1);

  h.reporter->unschedulable(key, h.api->pods.at("default/p"), "m2", "");
  h.settle();
  CHECK(h.api->events.size() == 2);
  CHECK(h.api->conditions.size() == 2);

  // Past the interval the same message is reported again, but the condition already says it: no patch. The
  // Event is isomorphic to the one created 31 s ago: its series counts the occurrence (client-go's events
  // broadcaster) instead of a new Event.
  h.steady_now += 31s;
  h.reporter->unschedulable(key, h.api->pods.at("default/p"), "m2", "");
  h.settle();
  CHECK(h.api->events.size() == 2);
  CHECK(h.api->conditions.size() == 2);
  const std::string series_event = "default/" + h.api->events.back().name;
  REQUIRE(h.api->event_patches.count(series_event) == 1);
  auto patch = json::parse(h.api->event_patches.at(series_event)).as_object();
  CHECK(patch.at("series").at("count") == 2);
  CHECK(patch.at("series").at("lastObservedTime") == "2026-11-30T07:48:24.000000Z");
  CHECK(h.reporter->series_updates() == 1);

  // Forgotten (bound, deleted): the next report is not rate-limited; still in the series window.
  h.reporter->forget(key);
  h.reporter->unschedulable(key, h.api->pods.at("default/p"), "m2", "");
  h.settle();
  CHECK(json::parse(h.api->event_patches.at(series_event)).at("series").at("count") == 3);
  // Past the series window: a new Event.
  h.steady_now += 7min;
  h.reporter->unschedulable(key, h.api->pods.at("default/p"), "m2", "");
  h.settle();
  CHECK(h.api->events.size() == 3);
}

TEST_CASE("reporter: a series whose Event is gone starts a new Event", "[loop_reporter]") {
  Harness h;
  auto p = h.pod("p");
  const PodKey key{"default", "p"};
  h.reporter->event(p, "FailedScheduling", "Warning", "n");
  h.settle();
  REQUIRE(h.api->events.size() == 1);
  h.api->events.clear();  // expired by the API server (event TTL)
  h.steady_now += 1s;
  h.reporter->event(p, "FailedScheduling", "Warning", "n");  // patch answers NotFound: the series is forgotten
  h.settle();
  h.reporter->event(p, "FailedScheduling", "Warning", "n");
  h.settle();
  CHECK(h.api->events.size() == 1);
}

TEST_CASE("reporter: a Scheduled event is never kept for a series: each one is its own Event", "[loop_reporter]") {
  Harness h;
  auto p = h.pod("p");
  h.reporter->event(p, "Scheduled", "Normal", "Successfully assigned default/p to gpu-0");
  h.settle();
  h.steady_now += 1s;
  h.reporter->event(p, "Scheduled", "Normal", "Successfully assigned default/p to gpu-0");
  h.settle();
  CHECK(h.api->events.size() == 2);
  CHECK(h.api->event_patches.empty());
  CHECK(h.reporter->series_updates() == 0);
}

TEST_CASE(
    "reporter: a failed bind says SchedulerError, as kube-scheduler does; a condition of another reason is "
    "patched",
    "[loop_reporter]") {
  Harness h;
  auto p = h.pod("p");
  const PodKey key{"default", "p"};
  h.reporter->unschedulable(key, p, "binding rejected: 500 InternalError: x", "");
  h.settle();
  REQUIRE(h.api->conditions.size() == 1);
  // Same message, another reason: the condition does not say it yet, so it is written (the Event is
  // rate-limited with the unschedulable one only once the interval passes).
  h.steady_now += 31s;
  h.reporter->scheduler_error(key, h.api->pods.at("default/p"), "binding rejected: 500 InternalError: x");
  h.settle();
  REQUIRE(h.api->conditions.size() == 2);
  CHECK(h.api->conditions[1].second.reason == "SchedulerError");
  CHECK(h.api->conditions[1].second.status == "False");
  CHECK(h.api->conditions[1].second.message == "binding rejected: 500 InternalError: x");
  CHECK(h.api->events.back().reason == "FailedScheduling");
  CHECK(h.api->events.back().note == "binding rejected: 500 InternalError: x");
  // Said already: not patched again.
  h.steady_now += 31s;
  h.reporter->scheduler_error(key, h.api->pods.at("default/p"), "binding rejected: 500 InternalError: x");
  h.settle();
  CHECK(h.api->conditions.size() == 2);
}

TEST_CASE("reporter: retain keeps only the records asked for", "[loop_reporter]") {
  Harness h;
  auto a = h.pod("a");
  auto b = h.pod("b");
  h.reporter->unschedulable(PodKey{"default", "a"}, a, "m", "");
  h.reporter->unschedulable(PodKey{"default", "b"}, b, "m", "");
  h.settle();
  h.reporter->retain([](const PodKey& k) { return k.name == "a"; });
  h.reporter->unschedulable(PodKey{"default", "a"}, a, "m", "");  // still rate-limited
  h.reporter->unschedulable(PodKey{"default", "b"}, b, "m", "");  // forgotten: reported again
  h.settle();
  // b's report is a second occurrence of its Event (a series update), a's was rate-limited.
  REQUIRE(h.api->events.size() == 2);
  CHECK(h.reporter->series_updates() == 1);
  const auto& eb = h.api->events[0].regarding.name == "b" ? h.api->events[0] : h.api->events[1];
  CHECK(h.api->event_patches.count("default/" + eb.name) == 1);
}

TEST_CASE("reporter: beyond max_in_flight Events queue in order; beyond max_queued they are dropped and counted",
          "[loop_reporter]") {
  Harness h(2, 1);
  auto p = h.pod("p");
  h.reporter->unschedulable(PodKey{"default", "p"}, p, "m", "note");  // condition + FailedScheduling; one queued
  CHECK(h.reporter->in_flight() == 2);
  CHECK(h.reporter->queued() == 1);
  CHECK(h.reporter->dropped() == 0);
  h.reporter->event(p, "Scheduled", "Normal", "Successfully assigned default/p to gpu-0");  // the queue is full
  CHECK(h.reporter->queued() == 1);
  CHECK(h.reporter->dropped() == 1);
  h.settle();
  CHECK(h.reporter->in_flight() == 0);
  CHECK(h.reporter->queued() == 0);
  CHECK(h.api->conditions.size() == 1);
  REQUIRE(h.api->events.size() == 2);  // the queued one was written when a slot freed
  CHECK(((h.api->events[0].reason == "FailedScheduling" && h.api->events[1].reason == "FilteringFailed") ||
         (h.api->events[0].reason == "FilteringFailed" && h.api->events[1].reason == "FailedScheduling")));

  // Slots free again once the writes finish.
  h.reporter->event(p, "Scheduled", "Normal", "Successfully assigned default/p to gpu-0");
  h.settle();
  REQUIRE(h.api->events.size() == 3);
  CHECK(h.api->events[2].reason == "Scheduled");
  CHECK(h.api->events[2].action == "Binding");
  CHECK(h.api->events[2].type == "Normal");
  CHECK(h.api->events[2].event_time == h.wall_now);
  CHECK(h.reporter->dropped() == 1);
}

TEST_CASE("reporter: a burst of Scheduled events far beyond max_in_flight is written whole, in order",
          "[loop_reporter]") {
  Harness h(4);
  std::vector<json::object> pods;
  for (int i = 0; i < 50; ++i) {
    pods.push_back(h.pod("p" + std::to_string(i)));
  }
  for (const auto& p : pods) {
    h.reporter->event(p, "Scheduled", "Normal", "Successfully assigned");
  }
  CHECK(h.reporter->in_flight() == 4);
  CHECK(h.reporter->queued() == 46);
  for (int i = 0; i < 20 && h.api->events.size() < 50; ++i) {
    h.settle();
  }
  CHECK(h.reporter->dropped() == 0);
  CHECK(h.reporter->queued() == 0);
  REQUIRE(h.api->events.size() == 50);
  std::set<std::string> names;
  for (const auto& e : h.api->events) {
    names.insert(e.regarding.name);
  }
  CHECK(names.size() == 50);
}

TEST_CASE("reporter: a PodScheduled condition that finds no slot is owed, never dropped, and takes the next slot",
          "[loop_reporter]") {
  Harness h(1, 0);  // no queue: Events beyond the slot are shed
  auto p = h.pod("p");
  h.reporter->event(p, "Scheduled", "Normal", "x");  // takes the only slot
  h.reporter->unschedulable(PodKey{"default", "p"}, p, "0/1 nodes are available: 1 CardTimeSlicingExhausted.", "");
  CHECK(h.reporter->owed() == 1);
  CHECK(h.reporter->dropped() == 1);  // the FailedScheduling Event is news and may be shed; the condition is not
  h.settle();
  // The Event's slot went to the owed condition when it finished, without waiting for the sweep.
  REQUIRE(h.api->conditions.size() == 1);
  CHECK(h.api->conditions[0].second.message == "0/1 nodes are available: 1 CardTimeSlicingExhausted.");
  CHECK(h.reporter->owed() == 0);
  h.reporter->flush_owed();  // nothing left to write
  h.settle();
  CHECK(h.api->conditions.size() == 1);
  CHECK(h.reporter->dropped() == 1);
}

TEST_CASE("reporter: owed conditions go before queued Events when a slot frees", "[loop_reporter]") {
  Harness h(1);
  auto p = h.pod("p");
  auto q = h.pod("q");
  h.reporter->event(p, "Scheduled", "Normal", "x");               // the slot
  h.reporter->event(p, "Other", "Normal", "y");                   // queued
  h.reporter->unschedulable(PodKey{"default", "q"}, q, "m", "");  // condition owed, FailedScheduling queued
  CHECK(h.reporter->owed() == 1);
  CHECK(h.reporter->queued() == 2);
  h.settle();
  REQUIRE(h.api->conditions.size() == 1);
  CHECK(h.api->events.size() == 3);
  CHECK(h.reporter->dropped() == 0);
  // The first write to finish handed its slot to the condition, then the queue went in order.
  std::vector<std::string> order;
  for (const auto& c : h.api->calls) {
    if (c.rfind("create_event ", 0) == 0 || c.rfind("patch_condition ", 0) == 0) {
      order.push_back(c);
    }
  }
  CHECK(order == std::vector<std::string>{"create_event Scheduled", "patch_condition default/q", "create_event Other",
                                          "create_event FailedScheduling"});
}

TEST_CASE("reporter: a condition whose write fails is owed until it lands; the newest message wins",
          "[loop_reporter]") {
  Harness h;
  auto p = h.pod("p");
  int refused = 0;
  h.api->fault = [&](const std::string& call) -> std::optional<gpuslice::kube::ApiError> {
    if (call == "patch_condition default/p" && refused < 2) {
      ++refused;
      return gpuslice::kube::ApiError{503, "ServiceUnavailable",
                                      "the server is currently unable to handle the request"};
    }
    return std::nullopt;
  };
  const PodKey key{"default", "p"};
  h.reporter->unschedulable(key, p, "first", "");
  h.settle();
  CHECK(h.api->conditions.empty());
  CHECK(h.reporter->owed() == 1);
  // A newer message while the first is owed: the newer is what gets written.
  h.steady_now += 31s;
  h.reporter->unschedulable(key, p, "second", "");  // its write fails too (the second refusal)
  h.settle();
  CHECK(h.reporter->owed() == 1);
  h.reporter->flush_owed();
  h.settle();
  REQUIRE(h.api->conditions.size() == 1);
  CHECK(h.api->conditions[0].second.message == "second");
  CHECK(h.reporter->owed() == 0);
  CHECK(refused == 2);

  // Owed conditions of pods that are no longer pending are forgotten.
  h.api->fault = [](const std::string& call) -> std::optional<gpuslice::kube::ApiError> {
    if (call.rfind("patch_condition ", 0) == 0) {
      return gpuslice::kube::ApiError{0, "Transport", "not sent"};
    }
    return std::nullopt;
  };
  h.steady_now += 31s;
  h.reporter->unschedulable(key, p, "third", "");
  h.settle();
  CHECK(h.reporter->owed() == 1);
  h.reporter->retain([](const PodKey&) { return false; });
  CHECK(h.reporter->owed() == 0);
}
