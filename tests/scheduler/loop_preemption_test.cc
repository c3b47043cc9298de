// The loop's side of preemption (scheduler/loop_preemption.cc) against the in-memory API (loop_fake_api.h, whose
// graceful delete leaves a bound pod terminating until its "kubelet" finishes it): nominatedNodeName, then
// DisruptionTarget and a graceful delete per victim, Preempted Events; nominated capacity held against pods of
// equal priority while the victims terminate; the preemptor binds on its node when they are gone; a restart
// mid-preemption evicts nothing more; the switch off and preemptionPolicy Never leave the pod Pending.
#include "scheduler/loop.h"

#include "loop_fake_api.h"
#include "scheduler/loop_metrics.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>

using namespace gpuslice;
using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
namespace json = boost::json;
namespace asio = boost::asio;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

json::object gpu_node(const std::string& name, const std::string& uuid) {
  std::string reg =
      R"([{"id":")" + uuid +
      R"(","count":10,"devmem":81920,"devcore":100,"type":"NVIDIA A100-SXM4-80GB","mode":"hami-core","health":true}])";
  return json::object{
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata", json::object{{"name", name},
                                {"labels", json::object{{"kubernetes.io/hostname", name}}},
                                {"annotations", json::object{{"hami.io/node-nvidia-register", reg}}}}},
      {"spec", json::object{}},
      {"status",
       json::object{{"allocatable",
                     json::object{{"cpu", "32"}, {"memory", "256Gi"}, {"pods", "110"}, {"nvidia.com/gpu", "10"}}}}}};
}

json::object gpu_pod(const std::string& name, int mem, int priority) {
  json::object limits{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", std::to_string(mem)}};
  return json::object{
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", json::object{{"name", name}, {"namespace", "default"}}},
      {"spec",
       json::object{{"schedulerName", "gpuslice-scheduler"},
                    {"priority", priority},
                    {"containers",
                     json::array{json::object{
                         {"name", "cuda"}, {"image", "pause"}, {"resources", json::object{{"limits", limits}}}}}}}},
      {"status", json::object{{"phase", "Pending"}}}};
}

/// The pod, restricted to one node (nodeSelector on kubernetes.io/hostname).
json::object pinned(json::object pod, const std::string& node) {
  pod["spec"].as_object()["nodeSelector"] = json::object{{"kubernetes.io/hostname", node}};
  return pod;
}

/// The preemption series of the process-wide registry (scheduler/loop_metrics.h), read before and after a case:
/// every test case runs in the same process, so the cases assert differences.
struct PreemptionSeries {
  double attempts = 0;
  uint64_t victim_observations = 0;
  double victims = 0;
  double in_flight = 0;
  static PreemptionSeries now() {
    auto& m = LoopMetrics::get();
    PreemptionSeries s;
    s.attempts = m.preemption_attempts.with({}).value();
    std::vector<uint64_t> cumulative;
    m.preemption_victims.with({}).snapshot(cumulative, s.victim_observations, s.victims);
    s.in_flight = m.preemptions_in_flight.with({}).value();
    return s;
  }
};

struct Harness {
  asio::io_context io;
  std::shared_ptr<FakeApi> api = std::make_shared<FakeApi>(io.get_executor());
  std::shared_ptr<SchedulingLoop> loop;
  LoopOptions options;

  explicit Harness(bool preemption = true) {
    options.scheduler.node_lock = "off";
    options.scheduler.max_backoff = 1000ms;
    options.scheduler.preemption.enabled = preemption;
    options.identity = "test";
    options.event_interval = 1ms;
    options.clock.wall = [] { return WallTime(std::chrono::seconds(1796024904)); };
    make_loop();
  }
  void make_loop() {
    loop = std::make_shared<SchedulingLoop>(io.get_executor(), options, api);
    std::weak_ptr<SchedulingLoop> weak = loop;
    api->subscribe_pods([weak](const kube::ReflectorEvent& e) {
      if (auto l = weak.lock()) {
        l->on_pod_event(e);
      }
    });
    api->subscribe_nodes([weak](const kube::ReflectorEvent& e) {
      if (auto l = weak.lock()) {
        l->on_node_event(e);
      }
    });
  }
  void start() {
    api->relist();
    kube::ReflectorEvent q;
    q.type = kube::ReflectorEventType::relisted;
    std::vector<json::object> none;
    q.items = &none;
    loop->on_quota_event(q);
    loop->set_synced(true);
    loop->set_active(true);
    asio::co_spawn(io, loop->run(), asio::detached);
  }
  /// A crash: the loop stops and a new one starts from the API's state (nothing carried over).
  void restart() {
    loop->stop();
    io.run_for(50ms);
    io.restart();
    make_loop();
    start();
  }
  bool run_until(const std::function<bool()>& done, std::chrono::seconds cap = 20s) {
    return testing::run_until(io, done, cap);
  }
  void settle(std::chrono::milliseconds d = 1500ms) {
    const auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) {
      io.run_for(5ms);
      io.restart();
    }
  }
  void finish() {
    loop->stop();
    io.run_for(50ms);
  }
  std::string node_of(const std::string& key) {
    auto it = api->pods.find(key);
    return it == api->pods.end() ? std::string() : string_at_pointer(it->second, "/spec/nodeName");
  }
  std::string nominated(const std::string& key) {
    auto it = api->pods.find(key);
    return it == api->pods.end() ? std::string() : string_at_pointer(it->second, "/status/nominatedNodeName");
  }
  std::string last_condition_message(const std::string& key) {
    std::string m;
    for (const auto& [k, c] : api->conditions) {
      if (k == key && c.type == "PodScheduled") {
        m = c.message;
      }
    }
    return m;
  }
  /// A card full of four 20000 MiB pods of priority 10, bound by the loop.
  void fill_card() {
    api->put_node(gpu_node("gpu-0", "GPU-0"));
    for (int i = 0; i < 4; ++i) {
      api->put_pod(gpu_pod("low-" + std::to_string(i), 20000, 10));
    }
    start();
    REQUIRE(run_until([&] { return api->binds == 4; }));
  }
};

}  // namespace

TEST_CASE("loop preemption: two victims on one card, nominated capacity held, the preemptor binds there",
          "[loop][preemption]") {
  Harness h;
  h.fill_card();
  const PreemptionSeries before = PreemptionSeries::now();
  h.api->put_pod(gpu_pod("hi", 40000, 100));
  REQUIRE(h.run_until([&] { return h.api->removed.size() == 2; }));
  h.settle(300ms);
  {
    // One preemption of two victims (kube-scheduler's scheduler_preemption_victims observes 2 once), one
    // nomination in flight, and at least the attempt that preempted.
    const PreemptionSeries during = PreemptionSeries::now();
    CHECK(during.victim_observations - before.victim_observations == 1);
    CHECK(during.victims - before.victims == 2);
    CHECK(during.in_flight == 1);
    CHECK(during.attempts - before.attempts >= 1);
  }
  // Exactly two, the least important (equal priority and no start time: name order decides).
  std::vector<std::string> removed = h.api->removed;
  std::sort(removed.begin(), removed.end());
  CHECK(removed == std::vector<std::string>{"default/low-2", "default/low-3"});
  CHECK(h.nominated("default/hi") == "gpu-0");
  CHECK(h.loop->nomination_of(PodKey{"default", "hi"}) == "gpu-0");
  CHECK(h.loop->stats().preemptions == 1);
  CHECK(h.loop->stats().victims == 2);
  size_t disruption = 0;
  for (const auto& [k, c] : h.api->conditions) {
    if (c.type == "DisruptionTarget") {
      ++disruption;
      CHECK((k == "default/low-2" || k == "default/low-3"));
      CHECK(c.status == "True");
      CHECK(c.reason == "PreemptionByScheduler");
    }
  }
  CHECK(disruption == 2);
  size_t preempted_events = 0;
  for (const auto& e : h.api->events) {
    if (e.reason == "Preempted") {
      ++preempted_events;
      CHECK(e.note == "Preempted by pod default/hi on node gpu-0");
      CHECK(e.action == "Preempting");
    }
  }
  CHECK(preempted_events == 2);
  CHECK_THAT(h.last_condition_message("default/hi"),
             Contains("preemption: preempting 2 pods on node gpu-0 (default/low-2, default/low-3)"));

  // While the victims terminate, a pod of lower priority cannot take what they free for the preemptor.
  h.api->put_pod(gpu_pod("steal", 20000, 5));
  h.api->delete_pod("default/low-2");  // its kubelet finished: 21920 MiB free, but nominated to "hi"
  h.settle();
  CHECK(h.node_of("default/steal").empty());
  CHECK(h.node_of("default/hi").empty());
  CHECK(h.api->removed.size() == 2);  // waiting, not preempting again (a terminating victim on its node)
  h.api->delete_pod("default/low-3");
  REQUIRE(h.run_until([&] { return h.node_of("default/hi") == "gpu-0"; }));
  h.settle(300ms);
  CHECK(h.node_of("default/steal").empty());  // priority 5 vs 10: no victims for it either
  CHECK(h.api->removed.size() == 2);
  CHECK(h.loop->preemptions_in_flight() == 0);
  const PreemptionSeries after = PreemptionSeries::now();
  CHECK(after.in_flight == 0);                                         // the nomination ended with the bind
  CHECK(after.victim_observations - before.victim_observations == 1);  // waiting never preempted again
  // hi's attempts (the preempting one, then each wait) and steal's (eligible, no victims): more than one.
  CHECK(after.attempts - before.attempts >= 2);
  h.finish();
}

TEST_CASE("loop preemption: a restart mid-preemption neither loses the preemptor nor evicts more",
          "[loop][preemption][restart]") {
  Harness h;
  h.fill_card();
  h.api->put_pod(gpu_pod("hi", 40000, 100));
  REQUIRE(h.run_until([&] { return h.api->removed.size() == 2; }));
  h.settle(300ms);
  const PreemptionSeries before_restart = PreemptionSeries::now();
  h.restart();
  h.settle();
  CHECK(h.api->removed.size() == 2);  // the new loop reads nominatedNodeName and the terminating victims: waits
  CHECK(PreemptionSeries::now().in_flight == 1);  // the nomination it read back is in flight again
  CHECK(PreemptionSeries::now().victim_observations == before_restart.victim_observations);
  CHECK(h.loop->nomination_of(PodKey{"default", "hi"}) == "gpu-0");
  CHECK(h.loop->stats().preemptions == 0);  // the restarted loop only holds the nomination it read back
  // First kube-scheduler's rule (terminating victims on the nominated node), then, once held, its own wait.
  const std::string msg = h.last_condition_message("default/hi");
  CHECK((msg.find("not eligible due to a terminating pod on the nominated node.") != std::string::npos ||
         msg.find("preemption: nominated to node gpu-0, waiting for 2 victims to terminate.") != std::string::npos));
  h.api->put_pod(gpu_pod("steal", 20000, 5));
  h.api->delete_pod("default/low-2");
  h.settle();
  CHECK(h.node_of("default/steal").empty());  // held again by the restarted loop
  h.api->delete_pod("default/low-3");
  REQUIRE(h.run_until([&] { return h.node_of("default/hi") == "gpu-0"; }));
  CHECK(h.api->removed.size() == 2);
  h.finish();
}

TEST_CASE("loop preemption: equal priority, preemptionPolicy Never and the switch off never preempt",
          "[loop][preemption]") {
  SECTION("equal priority") {
    Harness h;
    h.fill_card();
    h.api->put_pod(gpu_pod("same", 40000, 10));
    REQUIRE(h.run_until([&] { return !h.last_condition_message("default/same").empty(); }));
    h.settle(300ms);
    CHECK(h.api->removed.empty());
    CHECK_THAT(h.last_condition_message("default/same"),
               Contains("preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."));
    h.finish();
  }
  SECTION("preemptionPolicy Never") {
    Harness h;
    h.fill_card();
    const PreemptionSeries before = PreemptionSeries::now();
    json::object p = gpu_pod("never", 40000, 100);
    p["spec"].as_object()["preemptionPolicy"] = "Never";
    h.api->put_pod(p);
    REQUIRE(h.run_until([&] { return !h.last_condition_message("default/never").empty(); }));
    h.settle(300ms);
    CHECK(h.api->removed.empty());
    // An attempt all the same (kube-scheduler counts every PostFilter run), and no victims observed.
    CHECK(PreemptionSeries::now().attempts - before.attempts >= 1);
    CHECK(PreemptionSeries::now().victim_observations == before.victim_observations);
    CHECK(h.nominated("default/never").empty());
    CHECK_THAT(h.last_condition_message("default/never"),
               Contains("preemption: not eligible due to preemptionPolicy=Never."));
    h.finish();
  }
  SECTION("scheduler.preemption.enabled: false") {
    Harness h(false);
    h.fill_card();
    const PreemptionSeries before = PreemptionSeries::now();
    h.api->put_pod(gpu_pod("hi", 40000, 100));
    REQUIRE(h.run_until([&] { return !h.last_condition_message("default/hi").empty(); }));
    h.settle(300ms);
    CHECK(h.api->removed.empty());
    CHECK(PreemptionSeries::now().attempts == before.attempts);  // no PostFilter: no attempt
    CHECK_THAT(h.last_condition_message("default/hi"), !Contains("preemption"));
    h.finish();
  }
}

TEST_CASE("loop preemption: a higher-priority newcomer takes a nominated pod's capacity; the nominee preempts again",
          "[loop][preemption]") {
  Harness h;
  h.fill_card();
  h.api->put_pod(gpu_pod("mid", 40000, 50));
  REQUIRE(h.run_until([&] { return h.api->removed.size() == 2; }));
  h.settle(300ms);
  // A more important pod arrives while mid's victims terminate: decided with mid's nomination hidden, it is
  // nominated onto the same two terminating victims and deletes nothing more.
  h.api->put_pod(gpu_pod("top", 40000, 1000));
  REQUIRE(h.run_until([&] { return h.nominated("default/top") == "gpu-0"; }));
  h.settle(300ms);
  CHECK(h.api->removed.size() == 2);
  h.api->delete_pod("default/low-2");
  h.api->delete_pod("default/low-3");
  REQUIRE(h.run_until([&] { return h.node_of("default/top") == "gpu-0"; }));
  // mid's nomination became invalid (its victims are gone and top holds the room): it preempts the other two.
  REQUIRE(h.run_until([&] { return h.api->removed.size() == 4; }));
  std::vector<std::string> removed(h.api->removed.begin() + 2, h.api->removed.end());
  std::sort(removed.begin(), removed.end());
  CHECK(removed == std::vector<std::string>{"default/low-0", "default/low-1"});
  h.api->delete_pod("default/low-0");
  h.api->delete_pod("default/low-1");
  REQUIRE(h.run_until([&] { return h.node_of("default/mid") == "gpu-0"; }));
  h.settle(300ms);
  CHECK(h.api->removed.size() == 4);
  h.finish();
}

TEST_CASE("loop preemption: victims without a grace period vanish at once; the preemptor is nominated once",
          "[loop][preemption]") {
  Harness h;
  h.api->zero_grace = true;
  h.fill_card();
  h.api->put_pod(gpu_pod("hi", 40000, 100));
  REQUIRE(h.run_until([&] { return h.node_of("default/hi") == "gpu-0"; }));
  h.settle(300ms);
  // The first victim's DELETED event re-queues the pod before the second is deleted: it waits for the victim it
  // chose rather than preempting a second time.
  CHECK(h.loop->stats().preemptions == 1);
  CHECK(h.api->removed.size() == 2);
  size_t nominated = 0;
  for (const auto& e : h.api->events) {
    nominated += e.reason == "Nominated" ? 1 : 0;
  }
  CHECK(nominated == 1);
  h.finish();
}

TEST_CASE("loop preemption: at most maxInFlight nominations; the next preemptor waits for one, evicting nothing",
          "[loop][preemption][cap]") {
  // The steady clock stands still unless the test moves it: backoffs end only when it does, so the waiting
  // preemptor is retried after the first bind only if completing a nomination re-queues it.
  SteadyTime steady = std::chrono::steady_clock::now();
  Harness h;
  h.options.scheduler.preemption.max_in_flight = 2;
  h.options.clock.steady = [&steady] { return steady; };
  h.make_loop();
  // Three one-card nodes, each card full of four 20000 MiB pods of priority 10.
  for (int n = 0; n < 3; ++n) {
    const std::string node = "gpu-" + std::to_string(n);
    h.api->put_node(gpu_node(node, "GPU-" + std::to_string(n)));
    for (int i = 0; i < 4; ++i) {
      h.api->put_pod(pinned(gpu_pod("low-" + std::to_string(n) + "-" + std::to_string(i), 20000, 10), node));
    }
  }
  h.start();
  REQUIRE(h.run_until([&] { return h.api->binds == 12; }));
  const PreemptionSeries before = PreemptionSeries::now();
  // Three preemptors of priority 100, each restricted to its own node, each needing two victims there. hi-0 is
  // queued last, so hi-1 and hi-2 take the two places; hi-0 also sorts first among pods whose backoffs end
  // together, so it is decided before hi-1 when hi-1's victims go (below) and is parked again, capped.
  for (int n : {1, 2, 0}) {
    h.api->put_pod(pinned(gpu_pod("hi-" + std::to_string(n), 40000, 100), "gpu-" + std::to_string(n)));
  }
  REQUIRE(h.run_until([&] { return h.api->removed.size() == 4; }));
  // Let every backoff end three times over: the third preemptor is retried, and waits each time.
  for (int round = 0; round < 3; ++round) {
    steady += 15s;
    h.settle(1200ms);
  }
  std::vector<std::string> nominated, waiting;
  for (int n = 0; n < 3; ++n) {
    const std::string key = "default/hi-" + std::to_string(n);
    (h.nominated(key).empty() ? waiting : nominated).push_back(std::to_string(n));
    if (!h.nominated(key).empty()) {
      CHECK(h.nominated(key) == "gpu-" + std::to_string(n));
    }
  }
  REQUIRE(nominated.size() == 2);
  REQUIRE(waiting.size() == 1);
  const std::string a = nominated[0], b = nominated[1], c = waiting[0];
  CHECK(c == "0");  // the first two queued nominate
  CHECK(h.loop->preemptions_in_flight() == 2);
  CHECK(h.loop->nomination_of(PodKey{"default", "hi-" + c}).empty());
  CHECK(h.loop->stats().preemptions == 2);
  CHECK(h.loop->queue().attempts(PodKey{"default", "hi-" + c}) >= 3);  // retried, not forgotten
  CHECK_THAT(h.last_condition_message("default/hi-" + c),
             Contains("preemption: 2 preemptions in flight (scheduler.preemption.maxInFlight 2); retried when one "
                      "completes."));
  // Only the victims of the two nominated preemptors were evicted; nothing on the waiting one's node.
  std::vector<std::string> removed = h.api->removed;
  std::sort(removed.begin(), removed.end());
  std::vector<std::string> expected{"default/low-" + a + "-2", "default/low-" + a + "-3", "default/low-" + b + "-2",
                                    "default/low-" + b + "-3"};
  std::sort(expected.begin(), expected.end());
  CHECK(removed == expected);
  {
    const PreemptionSeries capped = PreemptionSeries::now();
    CHECK(capped.in_flight == 2);
    CHECK(capped.victim_observations - before.victim_observations == 2);
    CHECK(capped.victims - before.victims == 4);
    CHECK(capped.attempts - before.attempts >= 5);  // two that nominated, three or more capped waits at least
  }

  // One nomination completes: a's victims are gone, hi-a binds there. Their deletion retries every pending pod,
  // hi-c first (still capped: hi-a is not bound yet); the clock does not move, so only the completion of hi-a's
  // nomination can retry hi-c again and start its preemption.
  h.api->delete_pod("default/low-" + a + "-2");
  h.api->delete_pod("default/low-" + a + "-3");
  REQUIRE(h.run_until([&] { return h.node_of("default/hi-" + a) == "gpu-" + a; }));
  REQUIRE(h.run_until([&] { return h.nominated("default/hi-" + c) == "gpu-" + c && h.api->removed.size() == 6; }));
  h.settle(300ms);
  CHECK(h.api->removed.size() == 6);
  std::vector<std::string> more(h.api->removed.begin() + 4, h.api->removed.end());
  std::sort(more.begin(), more.end());
  CHECK(more == std::vector<std::string>{"default/low-" + c + "-2", "default/low-" + c + "-3"});
  CHECK(h.node_of("default/hi-" + b).empty());  // still waiting for its own victims
  CHECK(h.loop->preemptions_in_flight() == 2);
  CHECK(PreemptionSeries::now().in_flight == 2);

  // The other two complete; nothing else is ever evicted.
  for (const std::string& n : {b, c}) {
    h.api->delete_pod("default/low-" + n + "-2");
    h.api->delete_pod("default/low-" + n + "-3");
  }
  REQUIRE(h.run_until(
      [&] { return h.node_of("default/hi-" + b) == "gpu-" + b && h.node_of("default/hi-" + c) == "gpu-" + c; }));
  h.settle(300ms);
  CHECK(h.api->removed.size() == 6);
  CHECK(h.loop->preemptions_in_flight() == 0);
  const PreemptionSeries after = PreemptionSeries::now();
  CHECK(after.in_flight == 0);
  CHECK(after.victim_observations - before.victim_observations == 3);
  CHECK(after.victims - before.victims == 6);
  h.finish();
}
