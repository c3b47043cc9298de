// The loop's side of preemption (scheduler/loop_preemption.cc) against the in-memory API (loop_fake_api.h, whose
// graceful delete leaves a bound pod terminating until its "kubelet" finishes it): nominatedNodeName, then
// DisruptionTarget and a graceful delete per victim, Preempted Events; nominated capacity held against pods of
// equal priority while the victims terminate; the preemptor binds on its node when they are gone; a restart
// mid-preemption evicts nothing more; the switch off and preemptionPolicy Never leave the pod Pending.
#include "scheduler/loop.h"

#include "loop_fake_api.h"

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
  h.api->put_pod(gpu_pod("hi", 40000, 100));
  REQUIRE(h.run_until([&] { return h.api->removed.size() == 2; }));
  h.settle(300ms);
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
  h.finish();
}

TEST_CASE("loop preemption: a restart mid-preemption neither loses the preemptor nor evicts more",
          "[loop][preemption][restart]") {
  Harness h;
  h.fill_card();
  h.api->put_pod(gpu_pod("hi", 40000, 100));
  REQUIRE(h.run_until([&] { return h.api->removed.size() == 2; }));
  h.settle(300ms);
  h.restart();
  h.settle();
  CHECK(h.api->removed.size() == 2);  // the new loop reads nominatedNodeName and the terminating victims: waits
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
    json::object p = gpu_pod("never", 40000, 100);
    p["spec"].as_object()["preemptionPolicy"] = "Never";
    h.api->put_pod(p);
    REQUIRE(h.run_until([&] { return !h.last_condition_message("default/never").empty(); }));
    h.settle(300ms);
    CHECK(h.api->removed.empty());
    CHECK(h.nominated("default/never").empty());
    CHECK_THAT(h.last_condition_message("default/never"),
               Contains("preemption: not eligible due to preemptionPolicy=Never."));
    h.finish();
  }
  SECTION("scheduler.preemption.enabled: false") {
    Harness h(false);
    h.fill_card();
    h.api->put_pod(gpu_pod("hi", 40000, 100));
    REQUIRE(h.run_until([&] { return !h.last_condition_message("default/hi").empty(); }));
    h.settle(300ms);
    CHECK(h.api->removed.empty());
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
