// The node-lock I/O (scheduler/node_locker.h) against the in-memory API (loop_fake_api.h): taking a free lock
// with one write, waiting for a live holder, binders of one node served in arrival order with
// one writer at a time, expired and orphaned locks taken over, test-and-set writes that other node writers do not
// disturb (a changed lock re-read, a node without annotations locked by resourceVersion), release only by the
// owner, the janitor, giving up after the wait, and stop().
#include "scheduler/node_locker.h"

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
#include <memory>
#include <optional>
#include <string>

using namespace gpuslice::scheduler;
using gpuslice::WallTime;
using gpuslice::scheduler::testing::FakeApi;
namespace kube = gpuslice::kube;
namespace json = boost::json;
namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

std::optional<std::string> lock_of(const json::object& node) {
  const auto* a = node.at("metadata").as_object().if_contains("annotations");
  if (a == nullptr) {
    return std::nullopt;
  }
  const auto* v = a->as_object().if_contains(kNodeLockAnnotation);
  return v != nullptr && v->is_string() ? std::optional<std::string>(std::string(v->get_string())) : std::nullopt;
}

asio::awaitable<void> acquire_into(NodeLocker& locker, std::string node, PodKey key,
                                   std::shared_ptr<std::optional<bool>> out) {
  *out = co_await locker.acquire(std::move(node), std::move(key));
}

asio::awaitable<void> release_then(NodeLocker& locker, std::string node, PodKey key, std::shared_ptr<bool> done) {
  co_await locker.release(std::move(node), key.ns, key.name, "test");
  *done = true;
}

// The locker as the loop wires it: node events (and every node a write returns) observed, owners known to the
// loop answered from `owners`, janitor tasks spawned on the executor.
struct Harness {
  // Declared first so it is destroyed last: coroutine frames still queued on `io` are destroyed with it and
  // their locals may touch the locker.
  std::unique_ptr<NodeLocker> locker;
  asio::io_context io;
  std::shared_ptr<FakeApi> api = std::make_shared<FakeApi>(io.get_executor());
  WallTime wall_now{std::chrono::seconds(1796024904)};
  bool leading = true;
  bool synced = true;
  std::map<std::string, LockOwnerState> owners;  // "ns/pod" -> what the loop's caches say

  explicit Harness(std::chrono::milliseconds wait = 5000ms) {
    NodeLockerOptions o;
    o.timeout = 5min;
    o.wait = wait;
    // Wall time is injected (lock values and their age); steady time stays real because Asio timers use it.
    o.clock.wall = [this] { return wall_now; };
    NodeLocker::Hooks h;
    h.may_write = [this] { return leading; };
    h.may_sweep = [this] { return leading && synced; };
    h.cached_owner = [this](const std::string& ns, const std::string& pod,
                            const std::string& /*node*/) -> std::optional<LockOwnerState> {
      auto it = owners.find(ns + "/" + pod);
      return it == owners.end() ? std::nullopt : std::optional<LockOwnerState>(it->second);
    };
    h.node_written = [this](const json::object& n) { observe(n); };
    h.spawn = [this](asio::awaitable<void> task) { asio::co_spawn(io, std::move(task), asio::detached); };
    locker = std::make_unique<NodeLocker>(io.get_executor(), o, api, std::move(h));
    api->subscribe_nodes([this](const kube::ReflectorEvent& e) {
      if (e.type == kube::ReflectorEventType::deleted) {
        locker->forget(kube::name_of(*e.object));
      } else if (e.object != nullptr) {
        observe(*e.object);
      }
    });
  }

  void observe(const json::object& n) { locker->observe(kube::name_of(n), kube::resource_version_of(n), lock_of(n)); }

  /// A node written by someone else (the device plugin, a user), delivered as a watch event.
  void put_node(const std::string& name, std::optional<std::string> lock) {
    json::object annotations;
    if (lock) {
      annotations[kNodeLockAnnotation] = *lock;
    }
    api->put_node(json::object{{"metadata", json::object{{"name", name}, {"annotations", annotations}}}});
    settle();
  }

  /// A binder of `pod`: the loop knows it as active while it binds (its binders_), so the janitor keeps its lock.
  std::shared_ptr<std::optional<bool>> acquire(const std::string& node, const std::string& pod) {
    owners.try_emplace("default/" + pod, LockOwnerState::active);
    auto out = std::make_shared<std::optional<bool>>();
    asio::co_spawn(io, acquire_into(*locker, node, PodKey{"default", pod}, out), asio::detached);
    return out;
  }

  void release(const std::string& node, const std::string& pod) {
    auto done = std::make_shared<bool>(false);
    asio::co_spawn(io, release_then(*locker, node, PodKey{"default", pod}, done), asio::detached);
    REQUIRE(run_until([&] { return *done; }));
  }

  std::optional<std::string> lock(const std::string& node) { return lock_of(api->nodes.at(node)); }

  /// Runs what is ready now (watch events, janitor steps that need no timer).
  void settle() {
    for (int i = 0; i < 5; ++i) {
      io.run_for(2ms);
      io.restart();
    }
  }

  bool run_until(const std::function<bool()>& done, std::chrono::seconds cap = 20s) {
    return testing::run_until(io, done, cap);
  }

  /// Runs the executor for `d` (for "nothing happens meanwhile" checks; no assertion depends on timing).
  void run_for(std::chrono::milliseconds d) {
    io.run_for(d);
    io.restart();
  }

  long count(const std::string& call) const { return std::count(api->calls.begin(), api->calls.end(), call); }
  /// Lock writes to `node`, of either kind (test-and-set JSON patch, or the merge patch with resourceVersion).
  long writes(const std::string& node) const { return count("patch_node " + node) + count("json_patch_node " + node); }

  ~Harness() {
    locker->stop();
    run_for(20ms);
  }
};

}  // namespace

TEST_CASE("node locker: a free lock is taken with one write; taking it again writes nothing", "[node_locker]") {
  Harness h;
  h.put_node("gpu-0", std::nullopt);
  auto r = h.acquire("gpu-0", "p");
  REQUIRE(h.run_until([&] { return r->has_value(); }));
  CHECK(**r);
  CHECK(h.lock("gpu-0") == format_node_lock(h.wall_now, "default", "p"));
  CHECK(h.locker->taken() == 1);
  CHECK(h.writes("gpu-0") == 1);

  h.settle();
  auto again = h.acquire("gpu-0", "p");
  REQUIRE(h.run_until([&] { return again->has_value(); }));
  CHECK(**again);
  CHECK(h.writes("gpu-0") == 1);
  CHECK(h.locker->taken() == 1);
}

TEST_CASE("node locker: a live holder makes the binder wait until the lock is released", "[node_locker]") {
  Harness h;
  h.owners["default/holder"] = LockOwnerState::active;
  h.put_node("gpu-0", format_node_lock(h.wall_now - 10s, "default", "holder"));
  auto r = h.acquire("gpu-0", "p");
  h.run_for(200ms);
  CHECK_FALSE(r->has_value());
  CHECK(h.writes("gpu-0") == 0);
  CHECK(h.count("get_pod default/holder") == 0);  // the loop knew the owner: no GET

  h.put_node("gpu-0", std::nullopt);  // the device plugin releases it after Allocate
  REQUIRE(h.run_until([&] { return r->has_value(); }));
  CHECK(**r);
  CHECK(h.lock("gpu-0") == format_node_lock(h.wall_now, "default", "p"));
}

TEST_CASE("node locker: binders of one node take the lock in arrival order, one writer at a time", "[node_locker]") {
  Harness h;
  for (const char* p : {"holder", "a", "b", "c"}) {
    h.owners[std::string("default/") + p] = LockOwnerState::active;  // being bound by the loop
  }
  h.put_node("gpu-0", format_node_lock(h.wall_now - 10s, "default", "holder"));
  auto a = h.acquire("gpu-0", "a");
  auto b = h.acquire("gpu-0", "b");
  auto c = h.acquire("gpu-0", "c");
  h.run_for(100ms);
  CHECK(h.writes("gpu-0") == 0);

  h.put_node("gpu-0", std::nullopt);
  REQUIRE(h.run_until([&] { return a->has_value(); }));
  CHECK(**a);
  h.run_for(100ms);
  CHECK_FALSE(b->has_value());
  CHECK_FALSE(c->has_value());
  CHECK(h.lock("gpu-0") == format_node_lock(h.wall_now, "default", "a"));

  h.release("gpu-0", "a");  // a's bind failed
  REQUIRE(h.run_until([&] { return b->has_value(); }));
  CHECK(**b);
  CHECK_FALSE(c->has_value());
  h.release("gpu-0", "b");
  REQUIRE(h.run_until([&] { return c->has_value(); }));
  CHECK(**c);
  CHECK(h.lock("gpu-0") == format_node_lock(h.wall_now, "default", "c"));
  // Three takes and two releases, no conflicting patch from a waiter.
  CHECK(h.writes("gpu-0") == 5);
  CHECK(h.count("get_node gpu-0") == 0);
  CHECK(h.locker->taken() == 3);
  CHECK(h.locker->released() == 2);
}

TEST_CASE("node locker: an expired lock is overwritten", "[node_locker]") {
  Harness h;
  h.owners["default/holder"] = LockOwnerState::active;
  h.put_node("gpu-0", format_node_lock(h.wall_now - 6min, "default", "holder"));
  auto r = h.acquire("gpu-0", "p");
  REQUIRE(h.run_until([&] { return r->has_value(); }));
  CHECK(**r);
  CHECK(h.lock("gpu-0") == format_node_lock(h.wall_now, "default", "p"));
}

TEST_CASE("node locker: an owner unknown to the loop is asked of the API; a deleted one loses its lock",
          "[node_locker]") {
  Harness h;
  h.synced = false;  // keep the janitor out: this is the binder's own takeover
  h.put_node("gpu-0", format_node_lock(h.wall_now - 30s, "default", "ghost"));
  auto r = h.acquire("gpu-0", "p");
  REQUIRE(h.run_until([&] { return r->has_value(); }));
  CHECK(**r);
  CHECK(h.count("get_pod default/ghost") == 1);
  CHECK(h.lock("gpu-0") == format_node_lock(h.wall_now, "default", "p"));
}

TEST_CASE("node locker: an owner the API shows waiting for Allocate here keeps its lock; the binder gives up",
          "[node_locker]") {
  Harness h(300ms);
  h.api->put_pod(json::object{
      {"metadata", json::object{{"name", "holder"},
                                {"namespace", "default"},
                                {"annotations",
                                 json::object{{"hami.io/vgpu-node", "gpu-0"}, {"hami.io/bind-phase", "allocating"}}}}},
      {"spec", json::object{{"nodeName", "gpu-0"}}},
      {"status", json::object{{"phase", "Pending"}}}});
  const std::string held = format_node_lock(h.wall_now - 30s, "default", "holder");
  h.put_node("gpu-0", held);
  auto r = h.acquire("gpu-0", "p");
  REQUIRE(h.run_until([&] { return r->has_value(); }));
  CHECK_FALSE(**r);
  CHECK(h.count("get_pod default/holder") >= 1);
  CHECK(h.lock("gpu-0") == held);
  CHECK(h.writes("gpu-0") == 0);
}

TEST_CASE("node locker: no node, not leading or stopped: not taken", "[node_locker]") {
  Harness h;
  auto missing = h.acquire("gpu-9", "p");
  REQUIRE(h.run_until([&] { return missing->has_value(); }));
  CHECK_FALSE(**missing);

  h.put_node("gpu-0", std::nullopt);
  h.leading = false;
  auto follower = h.acquire("gpu-0", "p");
  REQUIRE(h.run_until([&] { return follower->has_value(); }));
  CHECK_FALSE(**follower);
  CHECK(h.writes("gpu-0") == 0);

  h.leading = true;
  h.owners["default/holder"] = LockOwnerState::active;
  h.put_node("gpu-0", format_node_lock(h.wall_now - 10s, "default", "holder"));
  auto waiting = h.acquire("gpu-0", "p");
  h.run_for(50ms);
  REQUIRE_FALSE(waiting->has_value());
  h.locker->stop();
  REQUIRE(h.run_until([&] { return waiting->has_value(); }, 2s));
  CHECK_FALSE(**waiting);
}

TEST_CASE("node locker: the node's other writers cost no conflict: the take tests the lock, not the resourceVersion",
          "[node_locker]") {
  Harness h;
  h.put_node("gpu-0", std::nullopt);
  // kubelet (or the device plugin's register annotations) changed the node and the watch has not told us yet: the
  // last resourceVersion we saw is stale, the lock is still free.
  h.api->nodes.at("gpu-0")["metadata"].as_object()["resourceVersion"] = "999";
  auto r = h.acquire("gpu-0", "p");
  REQUIRE(h.run_until([&] { return r->has_value(); }));
  CHECK(**r);
  CHECK(h.count("get_node gpu-0") == 0);
  CHECK(h.count("json_patch_node gpu-0") == 1);
  CHECK(h.count("patch_node gpu-0") == 0);
  CHECK(h.lock("gpu-0") == format_node_lock(h.wall_now, "default", "p"));
}

TEST_CASE("node locker: a lock taken by a rival after we looked fails the test; the binder re-reads and waits",
          "[node_locker]") {
  Harness h;
  h.put_node("gpu-0", std::nullopt);
  // Another scheduler (or HAMi's) took the lock; our cache still shows it free.
  const std::string rival = format_node_lock(h.wall_now - 1s, "other", "rival");
  h.api->nodes.at("gpu-0")["metadata"].as_object()["annotations"].as_object()[kNodeLockAnnotation] = rival;
  h.owners["other/rival"] = LockOwnerState::active;
  auto r = h.acquire("gpu-0", "p");
  h.run_for(200ms);
  CHECK_FALSE(r->has_value());  // waits for the rival's release rather than overwriting it
  CHECK(h.lock("gpu-0") == rival);
  CHECK(h.count("json_patch_node gpu-0") == 1);
  CHECK(h.count("get_node gpu-0") == 1);
  h.put_node("gpu-0", std::nullopt);  // the rival's device plugin released it
  REQUIRE(h.run_until([&] { return r->has_value(); }));
  CHECK(**r);
  CHECK(h.lock("gpu-0") == format_node_lock(h.wall_now, "default", "p"));
}

TEST_CASE("node locker: a node without an annotations map is locked with the resourceVersion precondition",
          "[node_locker]") {
  Harness h;
  h.api->put_node(json::object{{"metadata", json::object{{"name", "bare"}}}});
  h.settle();
  auto r = h.acquire("bare", "p");
  REQUIRE(h.run_until([&] { return r->has_value(); }));
  CHECK(**r);
  CHECK(h.count("json_patch_node bare") == 1);  // 422: no map to test in
  CHECK(h.count("get_node bare") == 1);
  CHECK(h.count("patch_node bare") == 1);  // the merge patch with the fresh resourceVersion
  CHECK(h.lock("bare") == format_node_lock(h.wall_now, "default", "p"));
}

TEST_CASE("node locker: release removes only the lock of that pod", "[node_locker]") {
  Harness h;
  h.owners["default/a"] = LockOwnerState::active;
  h.put_node("gpu-0", format_node_lock(h.wall_now - 10s, "default", "a"));
  h.release("gpu-0", "b");
  CHECK(h.writes("gpu-0") == 0);
  CHECK(h.lock("gpu-0").has_value());
  h.release("gpu-0", "a");
  CHECK_FALSE(h.lock("gpu-0").has_value());
  CHECK(h.locker->released() == 1);
  h.release("gpu-0", "a");  // already gone: nothing to write
  CHECK(h.writes("gpu-0") == 1);
}

TEST_CASE("node locker: the janitor releases orphaned and expired locks, keeps live ones, only when synced",
          "[node_locker]") {
  Harness h;
  h.synced = false;
  h.owners["default/live"] = LockOwnerState::active;
  h.put_node("orphan", format_node_lock(h.wall_now - 30s, "default", "ghost"));
  h.put_node("old", format_node_lock(h.wall_now - 6min, "default", "live"));
  h.put_node("busy", format_node_lock(h.wall_now - 30s, "default", "live"));
  h.run_for(50ms);
  CHECK(h.lock("orphan").has_value());  // not synced: the caches could be incomplete
  CHECK(h.lock("old").has_value());

  h.synced = true;
  h.locker->sweep();
  REQUIRE(h.run_until([&] { return !h.lock("orphan") && !h.lock("old"); }));
  CHECK(h.count("get_pod default/ghost") == 1);
  CHECK(h.lock("busy") == format_node_lock(h.wall_now - 30s, "default", "live"));
  CHECK(h.locker->released() == 2);
}

TEST_CASE("node locker: check_held_by judges every lock naming the pod and no other", "[node_locker]") {
  Harness h;
  h.owners["default/x"] = LockOwnerState::active;
  h.owners["default/y"] = LockOwnerState::active;
  h.put_node("n1", format_node_lock(h.wall_now - 10s, "default", "x"));
  h.put_node("n2", format_node_lock(h.wall_now - 10s, "default", "x"));
  h.put_node("n3", format_node_lock(h.wall_now - 10s, "default", "y"));
  h.run_for(20ms);
  CHECK(h.locker->released() == 0);

  h.owners["default/x"] = LockOwnerState::finished;
  h.owners["default/y"] = LockOwnerState::finished;
  h.locker->check_held_by("default", "x");
  REQUIRE(h.run_until([&] { return !h.lock("n1") && !h.lock("n2"); }));
  h.run_for(20ms);
  CHECK(h.lock("n3").has_value());  // y's lock waits for its own event or the sweep
  CHECK(h.locker->released() == 2);
}

TEST_CASE("node locker: a finished owner's lock is left to the device plugin for the release grace", "[node_locker]") {
  // HAMi's plugin releases the lock right after Allocate; a janitor stepping in at once only races it (a failed
  // test and a read, each time). Measured in the lab: one 422 and one GET per pod through the bind client.
  Harness h;
  h.owners["default/done"] = LockOwnerState::allocation_over;
  h.put_node("n1", format_node_lock(h.wall_now - 2s, "default", "done"));
  h.locker->check_held_by("default", "done");
  h.run_for(50ms);
  CHECK(h.lock("n1").has_value());
  CHECK(h.writes("n1") == 0);
  // The plugin died: after the grace (10 s from the lock's time) the sweep frees it.
  h.wall_now += 8s;
  h.locker->sweep();
  REQUIRE(h.run_until([&] { return !h.lock("n1"); }));
  CHECK(h.writes("n1") == 1);
  CHECK(h.locker->released() == 1);
}

TEST_CASE("node locker: with a binder waiting, the janitor leaves a finished owner's lock to the binder's one write",
          "[node_locker]") {
  Harness h;
  h.owners["default/first"] = LockOwnerState::active;
  h.put_node("n1", format_node_lock(h.wall_now - 30s, "default", "first"));
  auto second = h.acquire("n1", "second");
  h.run_for(50ms);
  CHECK_FALSE(second->has_value());  // first is still allocating
  // first's allocation is over (bind-phase success) and its lock is past the grace: the binder takes it over
  // directly, the janitor writes nothing.
  h.owners["default/first"] = LockOwnerState::allocation_over;
  h.locker->check_held_by("default", "first");
  h.locker->sweep();
  h.put_node("n1", format_node_lock(h.wall_now - 30s, "default", "first"));  // any node event wakes the binder
  REQUIRE(h.run_until([&] { return second->has_value(); }));
  CHECK(**second);
  CHECK(h.lock("n1") == format_node_lock(h.wall_now, "default", "second"));
  CHECK(h.writes("n1") == 1);
  CHECK(h.locker->released() == 0);
}
