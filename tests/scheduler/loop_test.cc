// The scheduling loop against an in-memory API (loop_fake_api.h): decisions carried out by one Binding carrying
// the allocation (after the node lock when on); no fit reported; freed capacity reused on the deletion event;
// stale and abandoned locks released; restart from API state without double booking; a lost Binding answer and
// a pod bound meanwhile read back; nothing written while inactive.
// The mock device agent runs on the same fake so the HAMi lock protocol completes.
#include "scheduler/loop.h"
#include "scheduler/mock_agent.h"

#include "loop_fake_api.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>

using namespace gpuslice;
using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
namespace json = boost::json;
namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

json::object make_node(const std::string& name, const std::string& uuid, int mem = 81920) {
  std::string reg = R"([{"id":")" + uuid + R"(","count":10,"devmem":)" + std::to_string(mem) +
                    R"(,"devcore":100,"type":"NVIDIA A100-SXM4-80GB","mode":"hami-core","health":true}])";
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

json::object make_pod(const std::string& name, int mem, int cores, const std::string& sched = "gpuslice-scheduler") {
  json::object limits{{"nvidia.com/gpu", "1"},
                      {"nvidia.com/gpumem", std::to_string(mem)},
                      {"nvidia.com/gpucores", std::to_string(cores)}};
  return json::object{
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", json::object{{"name", name}, {"namespace", "default"}}},
      {"spec",
       json::object{{"schedulerName", sched},
                    {"containers",
                     json::array{json::object{
                         {"name", "cuda"}, {"image", "pause"}, {"resources", json::object{{"limits", limits}}}}}}}},
      {"status", json::object{{"phase", "Pending"}}}};
}

std::string ann(const json::object& o, const std::string& key) {
  const auto* a = o.at("metadata").as_object().if_contains("annotations");
  if (a == nullptr) {
    return {};
  }
  const auto* v = a->as_object().if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
}

/// The side path as a seam of its own: forwards to the same fake API server and records which calls took it.
class RecordingApi final : public LoopApi {
 public:
  explicit RecordingApi(std::shared_ptr<FakeApi> api) : api_(std::move(api)) {}
  std::vector<std::string> calls;

  Task<kube::ApiResult<Object>> patch_pod(std::string ns, std::string name, std::string patch) override {
    calls.push_back("patch_pod " + ns + "/" + name);
    co_return co_await api_->patch_pod(std::move(ns), std::move(name), std::move(patch));
  }
  Task<kube::ApiResult<Object>> patch_claim(std::string ns, std::string name, std::string patch) override {
    calls.push_back("patch_claim");
    co_return co_await api_->patch_claim(std::move(ns), std::move(name), std::move(patch));
  }
  Task<kube::ApiResult<Object>> patch_volume(std::string name, std::string patch) override {
    calls.push_back("patch_volume " + name);
    co_return co_await api_->patch_volume(std::move(name), std::move(patch));
  }
  Task<kube::ApiResult<Object>> patch_node(std::string name, std::string patch) override {
    calls.push_back("patch_node " + name);
    co_return co_await api_->patch_node(std::move(name), std::move(patch));
  }
  Task<kube::ApiResult<Object>> json_patch_node(std::string name, std::string patch) override {
    calls.push_back("json_patch_node " + name);
    co_return co_await api_->json_patch_node(std::move(name), std::move(patch));
  }
  Task<kube::ApiResult<Object>> get_pod(std::string ns, std::string name) override {
    calls.push_back("get_pod");
    co_return co_await api_->get_pod(std::move(ns), std::move(name));
  }
  Task<kube::ApiResult<Object>> get_node(std::string name) override {
    calls.push_back("get_node");
    co_return co_await api_->get_node(std::move(name));
  }
  Task<kube::ApiStatus> bind(std::string ns, std::string name, std::string node, std::string uid,
                             kube::BindingMetadata metadata) override {
    calls.push_back("bind");
    co_return co_await api_->bind(std::move(ns), std::move(name), std::move(node), std::move(uid), std::move(metadata));
  }
  Task<kube::ApiResult<Object>> patch_condition(std::string ns, std::string name,
                                                kube::PodCondition condition) override {
    calls.push_back("patch_condition " + ns + "/" + name);
    co_return co_await api_->patch_condition(std::move(ns), std::move(name), std::move(condition));
  }
  Task<kube::ApiResult<Object>> create_event(kube::EventRecord event) override {
    calls.push_back("create_event " + event.reason);
    co_return co_await api_->create_event(std::move(event));
  }
  Task<kube::ApiResult<Object>> patch_event(std::string ns, std::string name, std::string patch) override {
    calls.push_back("patch_event");
    co_return co_await api_->patch_event(std::move(ns), std::move(name), std::move(patch));
  }
  Task<kube::ApiResult<Object>> patch_pod_status(std::string ns, std::string name, std::string patch) override {
    calls.push_back("patch_pod_status");
    co_return co_await api_->patch_pod_status(std::move(ns), std::move(name), std::move(patch));
  }
  Task<kube::ApiStatus> remove_pod(std::string ns, std::string name, std::string uid) override {
    calls.push_back("remove_pod");
    co_return co_await api_->remove_pod(std::move(ns), std::move(name), std::move(uid));
  }

 private:
  std::shared_ptr<FakeApi> api_;
};

struct Harness {
  asio::io_context io;
  std::shared_ptr<FakeApi> api = std::make_shared<FakeApi>(io.get_executor());
  std::shared_ptr<RecordingApi> side;  // set when the harness is built with a side path
  std::shared_ptr<SchedulingLoop> loop;
  std::shared_ptr<MockDeviceAgent> agent;
  WallTime wall_now{std::chrono::seconds(1796024904)};

  explicit Harness(const std::string& node_lock = "hami", bool with_agent = true,
                   std::chrono::milliseconds volume_bind_timeout = 600000ms, bool side_path = false) {
    LoopOptions o;
    o.volume_bind_timeout = volume_bind_timeout;
    o.scheduler.node_lock = node_lock;
    o.scheduler.max_backoff = 2000ms;
    o.identity = "test";
    o.lock_wait = 5000ms;
    // Wall time is injected (annotations and locks); steady time stays real because Asio timers use it.
    o.clock.wall = [this] { return wall_now; };
    if (side_path) {
      side = std::make_shared<RecordingApi>(api);
    }
    loop = std::make_shared<SchedulingLoop>(io.get_executor(), o, api, side);
    api->subscribe_pods([this](const kube::ReflectorEvent& e) { loop->on_pod_event(e); });
    api->subscribe_nodes([this](const kube::ReflectorEvent& e) { loop->on_node_event(e); });
    api->subscribe_volumes(
        [this](const kube::ReflectorEvent& e) { loop->on_cluster_object_event(ClusterObjectKind::volume, e); });
    if (with_agent) {
      agent = std::make_shared<MockDeviceAgent>(io.get_executor(), api);
      api->subscribe_nodes([this](const kube::ReflectorEvent& e) { agent->on_node_event(e); });
      api->subscribe_pods([this](const kube::ReflectorEvent& e) { agent->on_pod_event(e); });
    }
  }

  void start(bool active = true) {
    api->relist();
    kube::ReflectorEvent q;
    q.type = kube::ReflectorEventType::relisted;
    std::vector<json::object> none;
    q.items = &none;
    loop->on_quota_event(q);
    loop->set_synced(true);
    loop->set_active(active);
    asio::co_spawn(io, loop->run(), asio::detached);
  }

  bool run_until(const std::function<bool()>& done, std::chrono::seconds cap = 20s) {
    return testing::run_until(io, done, cap);
  }

  void finish() {
    loop->stop();
    io.run_for(50ms);
  }

  std::string node_of(const std::string& key) {
    auto it = api->pods.find(key);
    return it == api->pods.end() ? std::string() : string_at_pointer(it->second, "/spec/nodeName");
  }
  bool quiet() { return loop->binds_in_flight() == 0 && (!agent || agent->in_flight() == 0); }
};

// Sum of cores and memory per card over the API's pods (from -allocated, the durable record), pods not finished.
std::map<std::string, std::pair<int64_t, int64_t>> card_usage(const FakeApi& api) {
  std::map<std::string, std::pair<int64_t, int64_t>> out;
  for (const auto& [key, pod] : api.pods) {
    const std::string alloc = ann(pod, "hami.io/vgpu-devices-allocated");
    if (alloc.empty()) {
      continue;
    }
    auto devs = decode_pod_devices(alloc);
    REQUIRE(devs.ok());
    for (const auto& slot : *devs) {
      for (const auto& d : slot) {
        out[d.uuid].first += d.mem_mib;
        out[d.uuid].second += d.cores;
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("loop: seed scenario binds three sharing pods and reports the fourth", "[loop]") {
  Harness h;
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  for (int i = 1; i <= 4; ++i) {
    h.api->put_pod(make_pod("share-" + std::to_string(i), 20000, 30));
  }
  h.io.run_for(5ms);
  h.io.restart();
  h.start();
  // Done when the agent has finished every bound pod (it sees each one on a watch event a moment after the bind,
  // so "no bind and no Allocate in flight" alone can be true before it starts).
  auto allocated = [&] {
    int success = 0;
    for (const auto& [key, pod] : h.api->pods) {
      success += !h.node_of(key).empty() && ann(pod, "hami.io/bind-phase") == "success";
    }
    return success == 3;
  };
  REQUIRE(h.run_until([&] { return h.api->binds == 3 && !h.api->conditions.empty() && allocated() && h.quiet(); }));

  int bound = 0;
  for (int i = 1; i <= 4; ++i) {
    const std::string key = "default/share-" + std::to_string(i);
    const auto& pod = h.api->pods.at(key);
    if (!h.node_of(key).empty()) {
      ++bound;
      CHECK(h.node_of(key) == "gpu-0");
      CHECK(ann(pod, "hami.io/vgpu-node") == "gpu-0");
      CHECK(ann(pod, "hami.io/vgpu-devices-allocated") == "GPU-a,NVIDIA,20000,30:;");
      CHECK(ann(pod, "hami.io/vgpu-time") == "1796024904");
      CHECK(ann(pod, "hami.io/bind-time") == "1796024904");
      CHECK(pod.at("metadata").at("labels").at("hami.io/vgpu-node") == "gpu-0");
      // The agent completed Allocate: entries consumed, success.
      CHECK(ann(pod, "hami.io/vgpu-devices-to-allocate") == ";");
      CHECK(ann(pod, "hami.io/bind-phase") == "success");
    }
  }
  CHECK(bound == 3);
  auto usage = card_usage(*h.api);
  CHECK(usage["GPU-a"].second <= 100);
  // The unbound one says why, HAMi's way.
  bool found = false;
  for (const auto& [key, c] : h.api->conditions) {
    if (h.node_of(key).empty()) {
      found = true;
      CHECK(c.type == "PodScheduled");
      CHECK(c.status == "False");
      CHECK(c.reason == "Unschedulable");
      CHECK(c.message ==
            "0/1 nodes are available: 1 CardInsufficientCore (asks 30% of a card's cores, largest free 10%). "
            "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.");
    }
  }
  CHECK(found);
  REQUIRE(h.run_until([&] {
    int failed = 0, filtering = 0, scheduled = 0;
    for (const auto& e : h.api->events) {
      failed += e.reason == "FailedScheduling";
      filtering += e.reason == "FilteringFailed";
      scheduled += e.reason == "Scheduled";
    }
    return failed >= 1 && filtering >= 1 && scheduled == 3;
  }));
  // Locks were taken for each bind and all released by the agent.
  CHECK(h.loop->stats().locks_taken == 3);
  CHECK(ann(h.api->nodes.at("gpu-0"), "hami.io/mutex.lock").empty());
  h.finish();
}

TEST_CASE("loop: a paged relist forgets pods and nodes no page had, only once its last page is in", "[loop]") {
  Harness h;
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  h.api->put_node(make_node("gpu-1", "GPU-b"));
  for (const char* name : {"a", "b", "c"}) {
    json::object pod = make_pod(name, 1000, 10);
    pod["spec"].as_object()["nodeName"] = "gpu-0";
    h.api->put_pod(pod);
  }
  h.api->relist_page_size = 1;
  h.start();
  REQUIRE(h.loop->snapshot().pod_count() == 3);
  REQUIRE(h.loop->snapshot().node_count() == 2);
  // While the loop was not watching, b and gpu-1 were deleted. The next list comes in pages: [c], then [a].
  auto page = [&](std::vector<json::object> items, bool begins, bool complete, bool pods) {
    kube::ReflectorEvent e;
    e.type = kube::ReflectorEventType::relisted;
    e.items = &items;
    e.relist_begins = begins;
    e.relist_complete = complete;
    pods ? h.loop->on_pod_event(e) : h.loop->on_node_event(e);
  };
  page({h.api->pods.at("default/c")}, true, false, true);
  CHECK(h.loop->snapshot().find_pod("default", "b") != nullptr);  // not on this page, but the list is not over
  page({h.api->pods.at("default/a")}, false, true, true);
  CHECK(h.loop->snapshot().find_pod("default", "b") == nullptr);
  CHECK(h.loop->snapshot().find_pod("default", "a") != nullptr);
  CHECK(h.loop->snapshot().find_pod("default", "c") != nullptr);
  page({h.api->nodes.at("gpu-0")}, true, false, false);
  CHECK(h.loop->snapshot().node_count() == 2);
  page({}, false, true, false);
  CHECK(h.loop->snapshot().node_count() == 1);
  h.finish();
}

TEST_CASE("loop: deleting a sharing pod gets the pending one bound (event-driven requeue)", "[loop]") {
  Harness h;
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  for (int i = 1; i <= 4; ++i) {
    h.api->put_pod(make_pod("share-" + std::to_string(i), 20000, 30));
  }
  h.start();
  REQUIRE(h.run_until([&] { return h.api->binds == 3 && h.quiet(); }));
  std::string pending;
  std::string victim;
  for (int i = 1; i <= 4; ++i) {
    const std::string key = "default/share-" + std::to_string(i);
    (h.node_of(key).empty() ? pending : victim) = key;
  }
  REQUIRE(!pending.empty());
  // Let it back off to its cap first: the deletion must not wait for the backoff.
  h.run_until([&] { return h.loop->queue().attempts({"default", pending.substr(8)}) >= 3; });
  h.api->delete_pod(victim);
  REQUIRE(h.run_until([&] { return !h.node_of(pending).empty() && h.quiet(); }));
  CHECK(h.node_of(pending) == "gpu-0");
  CHECK(card_usage(*h.api)["GPU-a"].second <= 100);
  h.finish();
}

TEST_CASE("loop: a lock owned by a deleted pod is released and the node used", "[loop][node_lock]") {
  Harness h("hami", /*with_agent=*/false);
  auto node = make_node("gpu-0", "GPU-a");
  node["metadata"].as_object()["annotations"].as_object()["hami.io/mutex.lock"] =
      format_node_lock(h.wall_now - 30s, "default", "ghost");
  h.api->put_node(node);
  h.api->put_pod(make_pod("p", 1000, 10));
  h.start();
  REQUIRE(h.run_until([&] { return !h.node_of("default/p").empty(); }));
  // The ghost was looked up (not in the cache) and found gone; the lock now names p (no agent runs here).
  CHECK(std::find(h.api->calls.begin(), h.api->calls.end(), "get_pod default/ghost") != h.api->calls.end());
  CHECK(ann(h.api->nodes.at("gpu-0"), "hami.io/mutex.lock") == format_node_lock(h.wall_now, "default", "p"));
  h.finish();
}

TEST_CASE("loop: a live lock holder makes the binder wait until the lock is released", "[loop][node_lock]") {
  Harness h("hami", /*with_agent=*/false);
  auto node = make_node("gpu-0", "GPU-a");
  node["metadata"].as_object()["annotations"].as_object()["hami.io/mutex.lock"] =
      format_node_lock(h.wall_now - 10s, "default", "holder");
  h.api->put_node(node);
  // The holder is bound to the node and waiting for Allocate: a live owner.
  auto holder = make_pod("holder", 1000, 10);
  holder["spec"].as_object()["nodeName"] = "gpu-0";
  holder["metadata"].as_object()["annotations"] =
      json::object{{"hami.io/vgpu-node", "gpu-0"},
                   {"hami.io/bind-phase", "allocating"},
                   {"hami.io/vgpu-devices-allocated", "GPU-a,NVIDIA,1000,10:;"},
                   {"hami.io/vgpu-devices-to-allocate", "GPU-a,NVIDIA,1000,10:;"}};
  h.api->put_pod(holder);
  h.api->put_pod(make_pod("p", 1000, 10));
  h.start();
  // p is decided for gpu-0 and waits for the lock, with nothing written on it yet: its allocation travels in
  // the Binding.
  REQUIRE(h.run_until([&] { return h.loop->binds_in_flight() == 1; }));
  h.io.run_for(200ms);
  h.io.restart();
  CHECK(h.node_of("default/p").empty());
  CHECK(h.api->binds == 0);
  CHECK(ann(h.api->pods.at("default/p"), "hami.io/vgpu-node").empty());
  // The device plugin finishes the holder and releases the lock: p binds.
  auto n = h.api->nodes.at("gpu-0");
  n["metadata"].as_object()["annotations"].as_object().erase("hami.io/mutex.lock");
  h.api->put_node(n);
  REQUIRE(h.run_until([&] { return !h.node_of("default/p").empty(); }));
  CHECK(card_usage(*h.api)["GPU-a"].second == 20);
  h.finish();
}

TEST_CASE("loop: an expired lock is overwritten", "[loop][node_lock]") {
  Harness h("hami", false);
  auto node = make_node("gpu-0", "GPU-a");
  node["metadata"].as_object()["annotations"].as_object()["hami.io/mutex.lock"] =
      format_node_lock(h.wall_now - 6min, "default", "holder");
  h.api->put_node(node);
  auto holder = make_pod("holder", 1000, 10);
  holder["spec"].as_object()["nodeName"] = "gpu-0";
  holder["metadata"].as_object()["annotations"] =
      json::object{{"hami.io/vgpu-node", "gpu-0"}, {"hami.io/bind-phase", "allocating"}};
  h.api->put_pod(holder);
  h.api->put_pod(make_pod("p", 1000, 10));
  h.start();
  REQUIRE(h.run_until([&] { return !h.node_of("default/p").empty(); }));
  h.finish();
}

TEST_CASE("loop: restart from API state - an annotated unbound pod is redone, nothing double-booked", "[loop]") {
  Harness h;
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  // An older gpuslice (which patched the allocation before binding) annotated `a` (70 % on the card), took the
  // lock and died before binding. Its annotations are removed before `a` is bound, by a Binding of its own.
  auto a = make_pod("a", 20000, 70);
  a["metadata"].as_object()["annotations"] =
      json::object{{"hami.io/vgpu-node", "gpu-0"},
                   {"hami.io/bind-phase", "allocating"},
                   {"hami.io/vgpu-time", "1796024800"},
                   {"hami.io/vgpu-devices-allocated", "GPU-a,NVIDIA,20000,70:;"},
                   {"hami.io/vgpu-devices-to-allocate", "GPU-a,NVIDIA,20000,70:;"}};
  h.api->put_pod(a);
  auto n = h.api->nodes.at("gpu-0");
  n["metadata"].as_object()["annotations"].as_object()["hami.io/mutex.lock"] =
      format_node_lock(h.wall_now - 20s, "default", "a");
  h.api->put_node(n);
  // Meanwhile two 30 % pods arrived: only one can fit next to `a`.
  h.api->put_pod(make_pod("b", 1000, 30));
  h.api->put_pod(make_pod("c", 1000, 30));
  h.start();
  REQUIRE(h.run_until([&] { return !h.node_of("default/a").empty() && h.api->binds == 2 && h.quiet(); }));
  h.io.run_for(200ms);
  h.io.restart();
  CHECK(h.api->binds == 2);
  auto usage = card_usage(*h.api);
  CHECK(usage["GPU-a"].second == 100);
  const bool b_bound = !h.node_of("default/b").empty();
  const bool c_bound = !h.node_of("default/c").empty();
  CHECK(b_bound != c_bound);
  h.finish();
}

TEST_CASE("loop: a pending pod carrying an allocation nobody trusted wrote loses it when it no longer fits", "[loop]") {
  // No device agent: `full` was admitted long before (an agent seeing it now would find no lock for it and
  // reject it as kubelet would, freeing the card this test keeps full).
  Harness h("hami", /*with_agent=*/false);
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  // The card is full (a bound pod of another scheduler holds all its cores) ...
  auto full = make_pod("full", 1000, 100, "other-scheduler");
  full["spec"].as_object()["nodeName"] = "gpu-0";
  full["metadata"].as_object()["annotations"] =
      json::object{{"hami.io/vgpu-node", "gpu-0"},
                   {"hami.io/bind-phase", "success"},
                   {"hami.io/vgpu-devices-allocated", "GPU-a,NVIDIA,1000,100:;"}};
  h.api->put_pod(full);
  // ... and `late` carries an allocation, never bound (written by its author, or by an older gpuslice that patched
  // before binding).
  auto late = make_pod("late", 20000, 30);
  late["metadata"].as_object()["annotations"] =
      json::object{{"hami.io/vgpu-node", "gpu-0"},
                   {"hami.io/bind-phase", "allocating"},
                   {"hami.io/bind-time", "1796024800"},
                   {"hami.io/vgpu-devices-allocated", "GPU-a,NVIDIA,20000,30:;"},
                   {"hami.io/vgpu-devices-to-allocate", "GPU-a,NVIDIA,20000,30:;"}};
  h.api->put_pod(late);
  h.start();
  REQUIRE(h.run_until([&] { return ann(h.api->pods.at("default/late"), "hami.io/vgpu-devices-allocated").empty(); }));
  const auto& p = h.api->pods.at("default/late");
  for (std::string_view k : kSchedulerOwnedAnnotations) {
    CHECK(ann(p, std::string(k)).empty());
  }
  CHECK(h.node_of("default/late").empty());
  CHECK(h.api->binds == 0);
  h.finish();
}

TEST_CASE("loop: one write per pod without the node lock - the Binding carries the allocation", "[loop]") {
  Harness h("off", false);
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  h.api->put_pod(make_pod("p", 1000, 10));
  h.start();
  REQUIRE(h.run_until([&] { return !h.node_of("default/p").empty(); }));
  // Nothing but the Binding touched the pod or a node (Events are not pod writes).
  CHECK(std::count(h.api->calls.begin(), h.api->calls.end(), "bind default/p") == 1);
  CHECK(std::none_of(h.api->calls.begin(), h.api->calls.end(), [](const std::string& c) {
    return c.rfind("patch_pod", 0) == 0 || c.find("patch_node") != std::string::npos;
  }));
  REQUIRE(h.api->binding_metadata.size() == 1);
  const auto& sent = h.api->binding_metadata[0];
  CHECK(sent.annotations.at("hami.io/vgpu-devices-to-allocate") == "GPU-a,NVIDIA,1000,10:;");
  CHECK(sent.annotations.at("hami.io/bind-phase") == "allocating");
  CHECK(sent.labels.at("hami.io/vgpu-node") == "gpu-0");
  const auto& pod = h.api->pods.at("default/p");
  CHECK(ann(pod, "hami.io/vgpu-devices-allocated") == "GPU-a,NVIDIA,1000,10:;");
  CHECK(pod.at("metadata").at("labels").at("hami.io/vgpu-node") == "gpu-0");
  h.finish();
}

TEST_CASE("loop: Events, conditions and labels take the side path; the bind path never waits for them", "[loop]") {
  Harness h("hami", true, 600000ms, /*side_path=*/true);
  h.api->copy_binding_labels = false;
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  for (int i = 1; i <= 4; ++i) {
    h.api->put_pod(make_pod("share-" + std::to_string(i), 20000, 30));
  }
  h.start();
  REQUIRE(h.run_until([&] {
    int scheduled = 0, labels = 0;
    for (const auto& c : h.side->calls) {
      scheduled += c == "create_event Scheduled";
      labels += c.rfind("patch_pod default/share-", 0) == 0;
    }
    return h.api->binds == 3 && scheduled == 3 && labels == 3 && h.quiet();
  }));
  for (const auto& c : h.side->calls) {
    INFO(c);
    CHECK((c.rfind("create_event ", 0) == 0 || c.rfind("patch_condition ", 0) == 0 ||
           c.rfind("patch_pod default/share-", 0) == 0));
  }
  CHECK(std::count(h.side->calls.begin(), h.side->calls.end(), "create_event FailedScheduling") >= 1);
  CHECK(std::count_if(h.side->calls.begin(), h.side->calls.end(),
                      [](const std::string& c) { return c.rfind("patch_condition ", 0) == 0; }) == 1);
  h.finish();
}

TEST_CASE("loop: an API server that does not copy a Binding's labels gets the vgpu-node label by a later patch",
          "[loop]") {
  Harness h("off", false);
  h.api->copy_binding_labels = false;
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  h.api->put_pod(make_pod("p", 1000, 10));
  h.start();
  REQUIRE(h.run_until([&] {
    const auto& pod = h.api->pods.at("default/p");
    const auto* labels = pod.at("metadata").as_object().if_contains("labels");
    return labels != nullptr && labels->as_object().contains("hami.io/vgpu-node");
  }));
  CHECK(h.api->pods.at("default/p").at("metadata").at("labels").at("hami.io/vgpu-node") == "gpu-0");
  CHECK(std::count(h.api->calls.begin(), h.api->calls.end(), "patch_pod default/p") == 1);
  h.finish();
}

TEST_CASE("loop: a 409 on removing forged annotations is re-decided and bound", "[loop]") {
  Harness h("off", false);
  int conflicts = 0;
  h.api->fault = [&](const std::string& call) -> std::optional<kube::ApiError> {
    if (call == "patch_pod default/p" && conflicts < 2) {
      ++conflicts;
      return kube::ApiError{409, "Conflict", "the object has been modified"};
    }
    return std::nullopt;
  };
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  auto p = make_pod("p", 1000, 10);
  p["metadata"].as_object()["annotations"] = json::object{{"hami.io/vgpu-mig-allocations", "forged"}};
  h.api->put_pod(p);
  h.start();
  REQUIRE(h.run_until([&] { return !h.node_of("default/p").empty(); }));
  CHECK(conflicts == 2);
  CHECK(h.loop->stats().conflicts == 2);
  CHECK(ann(h.api->pods.at("default/p"), "hami.io/vgpu-mig-allocations").empty());
  // With node lock off, the node is never patched.
  CHECK(std::none_of(h.api->calls.begin(), h.api->calls.end(),
                     [](const std::string& c) { return c.find("patch_node") != std::string::npos; }));
  h.finish();
}

TEST_CASE("loop: a Binding applied whose answer was lost counts as bound (the pod says so)", "[loop][node_lock]") {
  Harness h("hami", false);
  h.api->lose_answer = [](const std::string& call) { return call == "bind default/p"; };
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  h.api->put_pod(make_pod("p", 1000, 10));
  h.start();
  REQUIRE(h.run_until([&] { return h.loop->stats().scheduled == 1 && h.quiet(); }));
  CHECK(h.api->binds == 1);
  CHECK(h.loop->stats().errors == 0);
  // The lock stays for the device plugin (no agent runs here): releasing it would fail the pod's Allocate.
  CHECK(ann(h.api->nodes.at("gpu-0"), "hami.io/mutex.lock") == format_node_lock(h.wall_now, "default", "p"));
  CHECK(std::find(h.api->calls.begin(), h.api->calls.end(), "get_pod default/p") != h.api->calls.end());
  h.finish();
}

TEST_CASE("loop: a pod bound meanwhile by an earlier incarnation is counted where it is, not where we chose",
          "[loop]") {
  Harness h("off", false);
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  h.api->put_node(make_node("gpu-1", "GPU-b"));
  h.api->put_pod(make_pod("p", 1000, 10));
  std::string chosen;
  h.api->fault = [&](const std::string& call) -> std::optional<kube::ApiError> {
    if (call == "bind default/p" && chosen.empty()) {
      // Just before our Binding lands, the pod turns out bound (with its own allocation) by someone else.
      chosen = h.loop->snapshot().find_pod("default", "p")->gpu_node;
      const std::string other = chosen == "gpu-0" ? "gpu-1" : "gpu-0";
      const std::string uuid = other == "gpu-0" ? "GPU-a" : "GPU-b";
      auto pod = h.api->pods.at("default/p");
      pod["spec"].as_object()["nodeName"] = other;
      pod["metadata"].as_object()["annotations"] =
          json::object{{"hami.io/vgpu-node", other},
                       {"hami.io/bind-phase", "allocating"},
                       {"hami.io/vgpu-devices-allocated", uuid + ",NVIDIA,1000,10:;"},
                       {"hami.io/vgpu-devices-to-allocate", uuid + ",NVIDIA,1000,10:;"}};
      h.api->put_pod(pod);
    }
    return std::nullopt;
  };
  h.start();
  REQUIRE(h.run_until([&] { return !chosen.empty() && h.quiet(); }));
  h.io.run_for(100ms);
  h.io.restart();
  const std::string other = chosen == "gpu-0" ? "gpu-1" : "gpu-0";
  CHECK(h.node_of("default/p") == other);
  const PodRecord* rec = h.loop->snapshot().find_pod("default", "p");
  REQUIRE(rec != nullptr);
  CHECK(rec->gpu_node == other);
  CHECK_FALSE(rec->assumed);
  CHECK(h.api->binds == 0);
  h.finish();
}

TEST_CASE("loop: a failed bind releases the lock and drops the assumption", "[loop][node_lock]") {
  Harness h("hami", false);
  int failures = 0;
  h.api->fault = [&](const std::string& call) -> std::optional<kube::ApiError> {
    if (call == "bind default/p" && failures < 1) {
      ++failures;
      return kube::ApiError{500, "InternalError", "etcd hiccup"};
    }
    return std::nullopt;
  };
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  h.api->put_pod(make_pod("p", 1000, 10));
  h.start();
  REQUIRE(h.run_until([&] { return h.loop->stats().errors == 1 && h.loop->stats().locks_released == 1; }));
  CHECK(ann(h.api->nodes.at("gpu-0"), "hami.io/mutex.lock").empty());
  CHECK(h.loop->stats().locks_released == 1);
  // Nothing was left on the pod, and it says why it is not bound, as kube-scheduler does.
  CHECK(ann(h.api->pods.at("default/p"), "hami.io/vgpu-node").empty());
  REQUIRE(h.run_until([&] { return !h.api->conditions.empty(); }));
  CHECK(h.api->conditions.back().second.reason == "SchedulerError");
  CHECK(h.api->conditions.back().second.message == "binding rejected: 500 InternalError: etcd hiccup");
  // Retried after its backoff and bound.
  REQUIRE(h.run_until([&] { return !h.node_of("default/p").empty(); }));
  h.finish();
}

TEST_CASE("loop: an inactive (non-leader) loop writes nothing, activation schedules", "[loop][leader]") {
  Harness h;
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  h.api->put_pod(make_pod("p", 1000, 10));
  h.start(/*active=*/false);
  h.io.run_for(300ms);
  h.io.restart();
  CHECK(h.api->binds == 0);
  CHECK(std::none_of(h.api->calls.begin(), h.api->calls.end(),
                     [](const std::string& c) { return c.rfind("patch", 0) == 0 || c.rfind("bind", 0) == 0; }));
  h.loop->set_active(true);
  REQUIRE(h.run_until([&] { return !h.node_of("default/p").empty(); }));
  h.finish();
}

TEST_CASE("loop: pods of other schedulers and bound pods are not scheduled but are counted", "[loop]") {
  Harness h("off", false);
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  auto other = make_pod("other", 1000, 10, "default-scheduler");
  h.api->put_pod(other);
  auto bound = make_pod("bound", 70000, 60, "someone");
  bound["spec"].as_object()["nodeName"] = "gpu-0";
  bound["metadata"].as_object()["annotations"] =
      json::object{{"hami.io/vgpu-node", "gpu-0"}, {"hami.io/vgpu-devices-allocated", "GPU-a,NVIDIA,70000,60:;"}};
  h.api->put_pod(bound);
  h.api->put_pod(make_pod("big", 20000, 10));  // 70000 + 20000 > 81920: must not fit
  h.start();
  REQUIRE(h.run_until([&] { return !h.api->conditions.empty(); }));
  CHECK(h.api->binds == 0);
  CHECK(h.api->conditions.back().second.message ==
        "0/1 nodes are available: 1 CardInsufficientMemory (asks 20000 MiB per card, largest free 11920 MiB). "
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.");
  CHECK(h.node_of("default/other").empty());
  h.finish();
}

TEST_CASE("loop: a lock held by an unbound owner (HAMi's scheduler mid-bind) is not taken over", "[loop][node_lock]") {
  Harness h("hami", /*with_agent=*/false);
  auto node = make_node("gpu-0", "GPU-a");
  node["metadata"].as_object()["annotations"].as_object()["hami.io/mutex.lock"] =
      format_node_lock(h.wall_now - 10s, "default", "hami-pod");
  h.api->put_node(node);
  // HAMi's scheduler locks first and writes bind-phase afterwards: its owner has none yet (or an old one).
  auto owner = make_pod("hami-pod", 1000, 10, "hami-scheduler");
  owner["metadata"].as_object()["annotations"] = json::object{{"hami.io/bind-phase", "failed"}};
  h.api->put_pod(owner);
  h.api->put_pod(make_pod("p", 1000, 10));
  h.start();
  REQUIRE(h.run_until([&] { return h.loop->binds_in_flight() == 1; }));
  h.io.run_for(200ms);
  h.io.restart();
  CHECK(h.node_of("default/p").empty());
  CHECK(ann(h.api->nodes.at("gpu-0"), "hami.io/mutex.lock") ==
        format_node_lock(h.wall_now - 10s, "default", "hami-pod"));
  // Once the owner is bound and its allocation over, the lock is provably useless and p proceeds.
  owner = h.api->pods.at("default/hami-pod");
  owner["spec"].as_object()["nodeName"] = "gpu-0";
  owner["metadata"].as_object()["annotations"].as_object()["hami.io/bind-phase"] = "success";
  h.api->put_pod(owner);
  REQUIRE(h.run_until([&] { return !h.node_of("default/p").empty(); }));
  h.finish();
}

TEST_CASE("loop: a lock left by an unbound pod of ours is taken over once past the abandon grace",
          "[loop][node_lock]") {
  Harness h("hami", /*with_agent=*/false);
  auto node = make_node("gpu-0", "GPU-a");
  node["metadata"].as_object()["annotations"].as_object()["hami.io/mutex.lock"] =
      format_node_lock(h.wall_now - 10s, "default", "stuck");
  h.api->put_node(node);
  // `stuck` is ours, unbound and fits nowhere now (a bind of it that took the lock ended without binding).
  h.api->put_pod(make_pod("stuck", 90000, 10));
  h.api->put_pod(make_pod("p", 1000, 10));
  h.start();
  REQUIRE(h.run_until([&] { return h.loop->binds_in_flight() == 1; }));
  h.io.run_for(300ms);
  h.io.restart();
  CHECK(h.node_of("default/p").empty());  // within the grace: a previous leader's Binding might still land
  h.wall_now += 51s;                      // the lock is now 61 s old, past kAbandonedLockGrace (60 s)
  REQUIRE(h.run_until([&] { return !h.node_of("default/p").empty(); }));
  CHECK(ann(h.api->nodes.at("gpu-0"), "hami.io/mutex.lock") == format_node_lock(h.wall_now, "default", "p"));
  h.finish();
}

TEST_CASE("loop: a pod whose only GPU container is an init container takes the lock", "[loop][node_lock]") {
  Harness h("hami", /*with_agent=*/false);
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  auto p = make_pod("init-only", 1000, 10);
  auto& spec = p["spec"].as_object();
  spec["initContainers"] = spec["containers"];
  spec["initContainers"].as_array()[0].as_object()["name"] = "warmup";
  spec["containers"] = json::array{json::object{{"name", "app"}, {"image", "pause"}}};
  h.api->put_pod(p);
  h.start();
  REQUIRE(h.run_until([&] { return !h.node_of("default/init-only").empty(); }));
  CHECK(ann(h.api->nodes.at("gpu-0"), "hami.io/mutex.lock") == format_node_lock(h.wall_now, "default", "init-only"));
  CHECK(ann(h.api->pods.at("default/init-only"), "hami.io/vgpu-devices-to-allocate") == "GPU-a,NVIDIA,1000,10:;;");
  h.finish();
}

TEST_CASE("loop: memory without an nvidia.com/gpu limit stays Pending, naming the container and the fix", "[loop]") {
  Harness h;
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  auto p = make_pod("no-count", 1000, 10);
  p["spec"].as_object()["containers"].as_array()[0].as_object()["resources"].as_object()["limits"].as_object().erase(
      "nvidia.com/gpu");
  h.api->put_pod(p);
  h.start();
  auto condition = [&] {
    const auto* c = h.api->pods.at("default/no-count").at("status").as_object().if_contains("conditions");
    return c != nullptr && !c->as_array().empty() ? string_at_pointer(c->as_array()[0].as_object(), "/message")
                                                  : std::string();
  };
  REQUIRE(h.run_until([&] { return !condition().empty(); }));
  CHECK_THAT(condition(), Catch::Contains("container \"cuda\""));
  CHECK_THAT(condition(), Catch::Contains("add resources.limits.nvidia.com/gpu"));
  CHECK(h.node_of("default/no-count").empty());
  CHECK(ann(h.api->pods.at("default/no-count"), "hami.io/vgpu-devices-to-allocate").empty());
  h.finish();
}

TEST_CASE("loop: forged annotations both ways change nothing, and are reported", "[loop][forged]") {
  Harness h;
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  // A CPU-only pod claiming two GPUs and carrying a forged allocation: bound without the lock, forged keys gone.
  auto cpu = make_pod("cpu", 1000, 10);
  cpu["spec"].as_object()["containers"].as_array()[0].as_object().erase("resources");
  cpu["metadata"].as_object()["annotations"] = json::object{
      {"gpuslice.io/gpu-request", R"({"containers":[{"name":"cuda","init":false,"gpus":2,"memMiB":5000,"cores":10}]})"},
      {"hami.io/vgpu-node", "gpu-0"},
      {"hami.io/bind-phase", "allocating"},
      {"hami.io/bind-time", "1"},
      {"hami.io/vgpu-devices-allocated", "GPU-a,NVIDIA,81920,100:;"},
      {"hami.io/vgpu-devices-to-allocate", "GPU-a,NVIDIA,81920,100:;"}};
  h.api->put_pod(cpu);
  // A GPU pod claiming none: it still gets its own entry (and the lock, released by the emulated plugin).
  auto gpu = make_pod("gpu", 2000, 20);
  gpu["metadata"].as_object()["annotations"] =
      json::object{{"gpuslice.io/gpu-request", R"({"containers":[{"name":"cuda","init":false,"gpus":0}]})"}};
  h.api->put_pod(gpu);
  h.start();
  REQUIRE(h.run_until([&] {
    return !h.node_of("default/cpu").empty() && ann(h.api->pods.at("default/gpu"), "hami.io/bind-phase") == "success";
  }));
  const auto& c = h.api->pods.at("default/cpu");
  for (const char* k : {"hami.io/vgpu-node", "hami.io/bind-phase", "hami.io/bind-time",
                        "hami.io/vgpu-devices-allocated", "hami.io/vgpu-devices-to-allocate"}) {
    CHECK(ann(c, k).empty());
  }
  // The forged 81920 MiB did not count: the GPU pod fit beside it, with its own slice.
  CHECK(ann(h.api->pods.at("default/gpu"), "hami.io/vgpu-devices-allocated") == "GPU-a,NVIDIA,2000,20:;");
  auto record = json::parse(ann(h.api->pods.at("default/gpu"), std::string(kDevicePluginRecordAnnotation)));
  CHECK(record.at("result") == "admitted");
  CHECK(record.at("containers").at(0).at("env").at("CUDA_DEVICE_MEMORY_LIMIT_0") == "2000m");
  REQUIRE(h.run_until([&] { return ann(h.api->nodes.at("gpu-0"), "hami.io/mutex.lock").empty(); }));
  // Both pods got an AnnotationIgnored Warning; the CPU pod's names the forged allocation keys too.
  std::map<std::string, std::string> ignored;
  for (const auto& e : h.api->events) {
    if (e.reason == "AnnotationIgnored") {
      ignored[e.regarding.name] = e.note;
    }
  }
  CHECK_THAT(ignored["cpu"], Catch::Contains("gpuslice.io/gpu-request disagrees"));
  CHECK_THAT(ignored["cpu"], Catch::Contains("hami.io/vgpu-node, hami.io/vgpu-devices-to-allocate"));
  CHECK_THAT(ignored["gpu"], Catch::Contains("gpuslice.io/gpu-request disagrees"));
  h.finish();
}

TEST_CASE("loop: a pod's claim arriving on the PVC/PV watches gets it bound; namespace labels feed selectors",
          "[loop][objects]") {
  Harness h;
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  h.api->put_node(make_node("gpu-1", "GPU-b"));
  json::object pod = make_pod("with-claim", 1000, 10);
  pod["spec"].as_object()["volumes"] =
      json::array{json::object{{"name", "data"}, {"persistentVolumeClaim", json::object{{"claimName", "data"}}}}};
  h.api->put_pod(pod);
  h.start();
  auto relist = [&](ClusterObjectKind kind, std::vector<json::object> items) {
    kube::ReflectorEvent e;
    e.type = kube::ReflectorEventType::relisted;
    e.items = &items;
    h.loop->on_cluster_object_event(kind, e);
  };
  for (ClusterObjectKind k : {ClusterObjectKind::namespace_labels, ClusterObjectKind::claim, ClusterObjectKind::volume,
                              ClusterObjectKind::storage_class, ClusterObjectKind::csi_node}) {
    relist(k, {});
  }
  auto message_of = [&](const std::string& key) {
    std::string m;
    for (const auto& [k, c] : h.api->conditions) {
      if (k == key) {
        m = c.message;
      }
    }
    return m;
  };
  REQUIRE(h.run_until([&] { return !message_of("default/with-claim").empty(); }));
  CHECK(message_of("default/with-claim") ==
        "0/2 nodes are available: persistentvolumeclaim \"data\" not found. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.");
  CHECK(h.node_of("default/with-claim").empty());

  // The claim and its local PV (node affinity: gpu-1 only) arrive: the pod is re-queued and bound there.
  json::object pv = json::parse(R"({"metadata":{"name":"pv-1"},"spec":{"capacity":{"storage":"1Gi"},
      "accessModes":["ReadWriteOnce"],"claimRef":{"namespace":"default","name":"data"},
      "local":{"path":"/data"},"nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[
      {"key":"kubernetes.io/hostname","operator":"In","values":["gpu-1"]}]}]}}},"status":{"phase":"Bound"}})")
                        .as_object();
  json::object pvc = json::parse(R"({"metadata":{"name":"data","namespace":"default"},"spec":{
      "accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}},"volumeName":"pv-1"},
      "status":{"phase":"Bound"}})")
                         .as_object();
  relist(ClusterObjectKind::volume, {pv});
  relist(ClusterObjectKind::claim, {pvc});
  REQUIRE(h.run_until([&] { return !h.node_of("default/with-claim").empty() && h.quiet(); }));
  CHECK(h.node_of("default/with-claim") == "gpu-1");
  CHECK(h.loop->snapshot().objects().find_claim("default", "data") != nullptr);

  // A relist without the claim drops it from the store (no stale object for the next pod).
  relist(ClusterObjectKind::claim, {});
  CHECK(h.loop->snapshot().objects().find_claim("default", "data") == nullptr);
  kube::ReflectorEvent added;
  added.type = kube::ReflectorEventType::added;
  json::object ns = json::parse(R"({"metadata":{"name":"team-a","labels":{"tier":"gold"}}})").as_object();
  added.object = &ns;
  h.loop->on_cluster_object_event(ClusterObjectKind::namespace_labels, added);
  const Labels* labels = h.loop->snapshot().objects().namespace_labels("team-a");
  REQUIRE(labels != nullptr);
  CHECK(labels->at("tier") == "gold");
  kube::ReflectorEvent deleted;
  deleted.type = kube::ReflectorEventType::deleted;
  deleted.object = &ns;
  h.loop->on_cluster_object_event(ClusterObjectKind::namespace_labels, deleted);
  CHECK(h.loop->snapshot().objects().namespace_labels("team-a") == nullptr);
  h.finish();
}

TEST_CASE("loop: Service, ReplicationController, ReplicaSet and StatefulSet watches feed default spreading's store",
          "[loop][objects]") {
  Harness h;
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  h.start();
  const SpreadSources& src = h.loop->snapshot().objects().spread_sources();
  auto deliver = [&](ClusterObjectKind kind, kube::ReflectorEventType type, const json::object& o) {
    kube::ReflectorEvent e;
    e.type = type;
    e.object = &o;
    h.loop->on_cluster_object_event(kind, e);
  };
  json::object svc =
      json::parse(R"({"metadata":{"name":"web","namespace":"shop"},"spec":{"selector":{"app":"web"}}})").as_object();
  json::object rs = json::parse(R"({"metadata":{"name":"web-1","namespace":"shop"},"spec":{"selector":{
      "matchLabels":{"app":"web","pod-template-hash":"1"}}}})")
                        .as_object();
  json::object rc =
      json::parse(R"({"metadata":{"name":"old","namespace":"shop"},"spec":{"selector":{"gen":"1"}}})").as_object();
  json::object ss =
      json::parse(R"({"metadata":{"name":"db","namespace":"shop"},"spec":{"selector":{"matchLabels":{"app":"db"}}}})")
          .as_object();
  deliver(ClusterObjectKind::service, kube::ReflectorEventType::added, svc);
  deliver(ClusterObjectKind::replica_set, kube::ReflectorEventType::added, rs);
  deliver(ClusterObjectKind::replication_controller, kube::ReflectorEventType::added, rc);
  deliver(ClusterObjectKind::stateful_set, kube::ReflectorEventType::added, ss);
  CHECK(src.size() == 4);
  auto pod = parse_pod_facts(json::parse(R"({"metadata":{"name":"p","namespace":"shop","labels":{"app":"web"},
      "ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","uid":"u","controller":true}]}})")
                                 .as_object());
  REQUIRE(pod.ok());
  CHECK(src.default_selector("shop", **pod).requirements.size() == 3);  // app (Service), app + hash (ReplicaSet)
  // Deletions by key; a relist drops what the API no longer lists.
  deliver(ClusterObjectKind::replica_set, kube::ReflectorEventType::deleted, rs);
  CHECK(src.default_selector("shop", **pod).requirements.size() == 1);
  std::vector<json::object> none;
  kube::ReflectorEvent relist;
  relist.type = kube::ReflectorEventType::relisted;
  relist.items = &none;
  h.loop->on_cluster_object_event(ClusterObjectKind::service, relist);
  CHECK(src.default_selector("shop", **pod).requirements.empty());
  CHECK(src.size() == 2);
  // A malformed object is dropped (logged), never half-stored.
  json::object bad =
      json::parse(R"({"metadata":{"name":"db","namespace":"shop"},"spec":{"selector":{"matchExpressions":[
      {"key":"app","operator":"Maybe"}]}}})")
          .as_object();
  deliver(ClusterObjectKind::stateful_set, kube::ReflectorEventType::modified, bad);
  CHECK(src.size() == 1);
  h.finish();
}

namespace {
void deliver_objects(Harness& h, ClusterObjectKind kind, std::vector<json::object> items) {
  kube::ReflectorEvent e;
  e.type = kube::ReflectorEventType::relisted;
  e.items = &items;
  h.loop->on_cluster_object_event(kind, e);
}
json::object wffc_pod(const std::string& name, const std::string& claim) {
  json::object pod = make_pod(name, 1000, 10);
  pod["spec"].as_object()["volumes"] =
      json::array{json::object{{"name", "data"}, {"persistentVolumeClaim", json::object{{"claimName", claim}}}}};
  return pod;
}
const char* kWffcClass = R"({"metadata":{"name":"local-wffc"},"provisioner":"example.com/local",
    "volumeBindingMode":"WaitForFirstConsumer","allowedTopologies":[{"matchLabelExpressions":[
    {"key":"kubernetes.io/hostname","values":["gpu-1"]}]}]})";
const char* kWffcClaim = R"({"metadata":{"name":"scratch","namespace":"default"},"spec":{
    "storageClassName":"local-wffc","accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}})";
}  // namespace

TEST_CASE("loop: WaitForFirstConsumer - selected-node written, pod bound once the provisioner binds the claim",
          "[loop][objects]") {
  Harness h;
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  h.api->put_node(make_node("gpu-1", "GPU-b"));
  h.api->put_pod(wffc_pod("notebook", "scratch"));
  h.start();
  deliver_objects(h, ClusterObjectKind::storage_class, {json::parse(kWffcClass).as_object()});
  deliver_objects(h, ClusterObjectKind::claim, {json::parse(kWffcClaim).as_object()});
  // The class allows gpu-1 only: the claim is asked for there, and the pod waits (not bound yet).
  REQUIRE(h.run_until([&] { return !h.api->claim_patches.empty(); }));
  CHECK(h.api->claim_patches[0].first == "default/scratch");
  CHECK(h.api->claim_patches[0].second ==
        R"({"metadata":{"annotations":{"volume.kubernetes.io/selected-node":"gpu-1"}}})");
  h.run_until([] { return false; }, 1s);
  CHECK(h.node_of("default/notebook").empty());
  CHECK(h.loop->binds_in_flight() == 1);
  // The provisioner creates the volume and the claim binds: the pod is bound to the selected node.
  json::object bound = json::parse(kWffcClaim).as_object();
  bound["spec"].as_object()["volumeName"] = "pvc-123";
  bound["metadata"].as_object()["annotations"] = json::object{{"volume.kubernetes.io/selected-node", "gpu-1"}};
  deliver_objects(h, ClusterObjectKind::volume,
                  {json::parse(R"({"metadata":{"name":"pvc-123"},"spec":{"storageClassName":"local-wffc",
                      "claimRef":{"namespace":"default","name":"scratch"},"nodeAffinity":{"required":{
                      "nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"In",
                      "values":["gpu-1"]}]}]}}}})")
                       .as_object()});
  deliver_objects(h, ClusterObjectKind::claim, {bound});
  REQUIRE(h.run_until([&] { return !h.node_of("default/notebook").empty() && h.quiet(); }));
  CHECK(h.node_of("default/notebook") == "gpu-1");
  CHECK(h.api->claim_patches.size() == 1);
  h.finish();
}

TEST_CASE("loop: WaitForFirstConsumer - a claim never bound gives up after the timeout and re-decides",
          "[loop][objects]") {
  Harness h("hami", true, 300ms);
  h.api->put_node(make_node("gpu-1", "GPU-b"));
  h.api->put_pod(wffc_pod("notebook", "scratch"));
  h.start();
  deliver_objects(h, ClusterObjectKind::storage_class, {json::parse(kWffcClass).as_object()});
  deliver_objects(h, ClusterObjectKind::claim, {json::parse(kWffcClaim).as_object()});
  auto failed_event = [&] {
    for (const auto& e : h.api->events) {
      if (e.reason == "BindingFailed" && e.note.find("persistentvolumeclaim default/scratch not bound within 300ms "
                                                     "after selecting node gpu-1") != std::string::npos) {
        return true;
      }
    }
    return false;
  };
  REQUIRE(h.run_until(failed_event));
  CHECK(h.node_of("default/notebook").empty());
  // Not bound, no lock left, and the next attempt asks again.
  REQUIRE(h.run_until([&] { return h.api->claim_patches.size() >= 2; }));
  CHECK(h.node_of("default/notebook").empty());
  CHECK(ann(h.api->nodes.at("gpu-1"), "hami.io/mutex.lock").empty());
  h.finish();
}

namespace {
const char* kStaticClass = R"({"metadata":{"name":"local-static"},"provisioner":"kubernetes.io/no-provisioner",
    "volumeBindingMode":"WaitForFirstConsumer"})";
const char* kStaticClaim = R"({"metadata":{"name":"data","namespace":"default","uid":"uid-claim-data",
    "resourceVersion":"77"},"spec":{"storageClassName":"local-static","accessModes":["ReadWriteOnce"],
    "resources":{"requests":{"storage":"1Gi"}}}})";
json::object local_pv(const std::string& name, const std::string& node, const std::string& size) {
  return json::parse(R"({"metadata":{"name":")" + name + R"("},"spec":{"storageClassName":"local-static",
      "capacity":{"storage":")" +
                     size + R"("},"accessModes":["ReadWriteOnce"],"local":{"path":"/mnt/d"},
      "nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname",
      "operator":"In","values":[")" +
                     node + R"("]}]}]}}},"status":{"phase":"Available"}})")
      .as_object();
}
/// The PV controller's part once a claimRef names the claim: the claim bound to the PV, bind-completed.
json::object bound_claim(const std::string& volume) {
  json::object c = json::parse(kStaticClaim).as_object();
  c["spec"].as_object()["volumeName"] = volume;
  c["metadata"].as_object()["annotations"] = json::object{{"pv.kubernetes.io/bind-completed", "yes"}};
  return c;
}
}  // namespace

TEST_CASE(
    "loop: a pre-provisioned PV - claimRef written with the PV's resourceVersion, pod bound once the PV "
    "controller binds the claim",
    "[loop][objects]") {
  Harness h;
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  h.api->put_node(make_node("gpu-1", "GPU-b"));
  h.api->put_volume(local_pv("local-1", "gpu-1", "2Gi"));
  const std::string pv_rv = kube::resource_version_of(h.api->volumes.at("local-1"));
  h.api->put_pod(wffc_pod("notebook", "data"));
  h.start();
  deliver_objects(h, ClusterObjectKind::storage_class, {json::parse(kStaticClass).as_object()});
  deliver_objects(h, ClusterObjectKind::claim, {json::parse(kStaticClaim).as_object()});
  REQUIRE(h.run_until([&] { return !h.api->volume_patches.empty(); }));
  CHECK(h.api->volume_patches[0] ==
        R"({"metadata":{"resourceVersion":")" + pv_rv +
            R"(","annotations":{"pv.kubernetes.io/bound-by-controller":"yes"}},"spec":{"claimRef":{)"
            R"("kind":"PersistentVolumeClaim","namespace":"default","name":"data","uid":"uid-claim-data",)"
            R"("apiVersion":"v1","resourceVersion":"77"}}})");
  const json::object& written = h.api->volumes.at("local-1");
  CHECK(string_at_pointer(written, "/spec/claimRef/uid") == "uid-claim-data");
  CHECK(ann(written, "pv.kubernetes.io/bound-by-controller") == "yes");
  CHECK(h.api->claim_patches.empty());  // no selected-node: nothing to provision
  // Waiting for the PV controller: not bound, and the claim not bound by its own volumeName alone.
  h.run_until([] { return false; }, 1s);
  CHECK(h.node_of("default/notebook").empty());
  CHECK(h.loop->binds_in_flight() == 1);
  json::object half = json::parse(kStaticClaim).as_object();
  half["spec"].as_object()["volumeName"] = "local-1";
  deliver_objects(h, ClusterObjectKind::claim, {half});
  h.run_until([] { return false; }, 1s);
  CHECK(h.node_of("default/notebook").empty());
  deliver_objects(h, ClusterObjectKind::claim, {bound_claim("local-1")});
  REQUIRE(h.run_until([&] { return !h.node_of("default/notebook").empty() && h.quiet(); }));
  CHECK(h.node_of("default/notebook") == "gpu-1");
  CHECK(h.api->volume_patches.size() == 1);
  h.finish();
}

TEST_CASE(
    "loop: a pre-provisioned PV changed before the claimRef write answers 409, and the pod is decided again "
    "onto the other PV",
    "[loop][objects]") {
  Harness h;
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  h.api->put_node(make_node("gpu-1", "GPU-b"));
  h.api->put_volume(local_pv("local-0", "gpu-0", "2Gi"));
  h.api->put_volume(local_pv("local-1", "gpu-1", "2Gi"));
  h.api->put_pod(wffc_pod("notebook", "data"));
  // The first claimRef write races a rival binder: its write lands first (and its watch event follows), so ours
  // carries a stale resourceVersion and the fake API server answers 409 as kube-apiserver does.
  std::string raced;
  h.api->fault = [&](const std::string& call) -> std::optional<kube::ApiError> {
    if (raced.empty() && call.rfind("patch_volume ", 0) == 0) {
      raced = call.substr(std::string("patch_volume ").size());
      json::object pv = h.api->volumes.at(raced);
      pv["spec"].as_object()["claimRef"] = json::object{{"namespace", "default"}, {"name", "rival"}, {"uid", "r"}};
      h.api->put_volume(pv);
    }
    return std::nullopt;
  };
  h.start();
  deliver_objects(h, ClusterObjectKind::storage_class, {json::parse(kStaticClass).as_object()});
  deliver_objects(h, ClusterObjectKind::claim, {json::parse(kStaticClaim).as_object()});
  auto conflict_event = [&] {
    for (const auto& e : h.api->events) {
      if (e.reason == "BindingFailed" && e.note.find("binding persistentvolume " + raced) != std::string::npos &&
          e.note.find("409") != std::string::npos) {
        return true;
      }
    }
    return false;
  };
  REQUIRE(h.run_until(conflict_event));
  CHECK(string_at_pointer(h.api->volumes.at(raced), "/spec/claimRef/name") == "rival");
  const std::string other = raced == "local-0" ? "local-1" : "local-0";
  const std::string other_node = raced == "local-0" ? "gpu-1" : "gpu-0";
  // Decided again after the backoff: the rival's PV is claimed now, the other one is written.
  REQUIRE(h.run_until([&] { return h.api->volume_patches.size() >= 2; }));
  CHECK(string_at_pointer(h.api->volumes.at(other), "/spec/claimRef/name") == "data");
  CHECK(h.node_of("default/notebook").empty());
  deliver_objects(h, ClusterObjectKind::claim, {bound_claim(other)});
  REQUIRE(h.run_until([&] { return !h.node_of("default/notebook").empty() && h.quiet(); }));
  CHECK(h.node_of("default/notebook") == other_node);
  CHECK(h.api->volume_patches.size() == 2);
  h.finish();
}

TEST_CASE("loop: a pre-provisioned PV whose claimRef is reset while waiting fails the bind (checkBindings)",
          "[loop][objects]") {
  Harness h;
  h.api->put_node(make_node("gpu-1", "GPU-b"));
  h.api->put_volume(local_pv("local-1", "gpu-1", "2Gi"));
  h.api->put_pod(wffc_pod("notebook", "data"));
  h.start();
  deliver_objects(h, ClusterObjectKind::storage_class, {json::parse(kStaticClass).as_object()});
  deliver_objects(h, ClusterObjectKind::claim, {json::parse(kStaticClaim).as_object()});
  REQUIRE(h.run_until([&] { return !h.api->volume_patches.empty(); }));
  h.run_until([] { return false; }, 1s);
  // The PV controller unbinds the volume (unbindVolume drops the claimRef): the waiting bind gives up at once.
  json::object pv = h.api->volumes.at("local-1");
  pv["spec"].as_object().erase("claimRef");
  h.api->put_volume(pv);
  auto reset_event = [&] {
    for (const auto& e : h.api->events) {
      if (e.reason == "BindingFailed" &&
          e.note.find("persistentvolume local-1: spec.claimRef was reset while binding persistentvolumeclaim "
                      "default/data") != std::string::npos) {
        return true;
      }
    }
    return false;
  };
  REQUIRE(h.run_until(reset_event, 5s));
  CHECK(h.node_of("default/notebook").empty());
  h.finish();
}

TEST_CASE("loop: a pre-provisioned PV chosen for one pod is not given to the next before its claimRef shows",
          "[loop][objects]") {
  Harness h;
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  h.api->put_volume(local_pv("only", "gpu-0", "2Gi"));
  h.api->put_pod(wffc_pod("first", "data"));
  h.api->put_pod(wffc_pod("second", "more"));
  h.start();
  auto message_of = [&](const std::string& key) {
    std::string m;
    for (const auto& [k, c] : h.api->conditions) {
      if (k == key) {
        m = c.message;
      }
    }
    return m;
  };
  // Both pods wait for their claims ("not found"); the claims arrive together, so both pods are decided one after
  // the other before any PreBind runs and before the PV's claimRef can show: only the assumption keeps the
  // second off the PV the first took.
  REQUIRE(h.run_until([&] { return !message_of("default/first").empty() && !message_of("default/second").empty(); }));
  deliver_objects(h, ClusterObjectKind::storage_class, {json::parse(kStaticClass).as_object()});
  json::object more = json::parse(kStaticClaim).as_object();
  more["metadata"].as_object()["name"] = "more";
  more["metadata"].as_object()["uid"] = "uid-claim-more";
  deliver_objects(h, ClusterObjectKind::claim, {json::parse(kStaticClaim).as_object(), more});
  REQUIRE(h.run_until([&] { return !h.api->volume_patches.empty(); }));
  h.run_until([] { return false; }, 1s);
  CHECK(h.api->volume_patches.size() == 1);
  const std::string winner = string_at_pointer(h.api->volumes.at("only"), "/spec/claimRef/name");
  REQUIRE((winner == "data" || winner == "more"));
  const std::string loser_pod = winner == "data" ? "default/second" : "default/first";
  CHECK(message_of(loser_pod).rfind(
            "0/1 nodes are available: 1 node(s) didn't find available persistent volumes to bind.", 0) == 0);
  json::object bound = bound_claim("only");
  bound["metadata"].as_object()["name"] = winner;
  bound["metadata"].as_object()["uid"] = winner == "data" ? "uid-claim-data" : "uid-claim-more";
  deliver_objects(h, ClusterObjectKind::claim,
                  {bound, winner == "data" ? more : json::parse(kStaticClaim).as_object()});
  const std::string winner_pod = winner == "data" ? "default/first" : "default/second";
  REQUIRE(h.run_until([&] { return !h.node_of(winner_pod).empty() && h.quiet(); }));
  CHECK(h.node_of(winner_pod) == "gpu-0");
  CHECK(h.node_of(loser_pod).empty());
  h.finish();
}

TEST_CASE("loop: a gated pod is never decided and gets no Events; decided at once when the last gate goes", "[loop]") {
  Harness h;
  h.api->put_node(make_node("gpu-0", "GPU-a"));
  json::object pod = make_pod("gated", 1000, 10);
  pod["spec"].as_object()["schedulingGates"] =
      json::array{json::object{{"name", "example.com/quota"}}, json::object{{"name", "example.com/data"}}};
  h.api->put_pod(pod);
  h.start();
  h.run_until([] { return false; }, 1s);
  CHECK(h.node_of("default/gated").empty());
  CHECK(h.api->conditions.empty());
  CHECK(h.api->events.empty());
  CHECK(h.api->binds == 0);
  // One gate removed: still gated.
  pod["spec"].as_object()["schedulingGates"] = json::array{json::object{{"name", "example.com/data"}}};
  h.api->put_pod(pod);
  h.run_until([] { return false; }, 1s);
  CHECK(h.api->binds == 0);
  CHECK(h.api->events.empty());
  // The last gate goes: bound without waiting for a backoff or resync.
  pod["spec"].as_object().erase("schedulingGates");
  h.api->put_pod(pod);
  REQUIRE(h.run_until([&] { return !h.node_of("default/gated").empty(); }, 5s));
  CHECK(h.node_of("default/gated") == "gpu-0");
  h.finish();
}
