// Snapshot: building from Kubernetes objects, incremental updates, assumptions, quota, and the free-capacity index.
#include "scheduler/snapshot.h"

#include "sched_fixtures.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using Catch::Matchers::Contains;
namespace json = boost::json;

namespace {

const CardState& card_of(const Snapshot& s, std::string_view node, std::string_view uuid) {
  const NodeState* n = s.find_node(node);
  REQUIRE(n != nullptr);
  const CardState* c = n->find_card(uuid);
  REQUIRE(c != nullptr);
  return *c;
}

PodInfo pod_info(std::string name, std::string ns = "default") {
  PodInfo p;
  p.name = std::move(name);
  p.ns = std::move(ns);
  return p;
}

}  // namespace

TEST_CASE("a node is registered only with a valid annotation and allocatable nvidia.com/gpu above 0", "[snapshot]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "a", .cards = {card("GPU-a")}})).ok());
  REQUIRE(s.upsert_node(node({.name = "zero", .cards = {card("GPU-z")}, .gpus = "0"})).ok());
  REQUIRE(s.upsert_node(node({.name = "none", .no_register = true})).ok());
  CHECK(s.node_count() == 3);
  CHECK(s.find_node("a")->registered());
  CHECK(s.find_node("a")->cards.size() == 1);
  CHECK_FALSE(s.find_node("zero")->registered());
  CHECK(s.find_node("zero")->cards.empty());
  CHECK_FALSE(s.find_node("none")->registered());
  // allocatable drops to 0: the cards go; back above 0: they return.
  REQUIRE(s.upsert_node(node({.name = "a", .cards = {card("GPU-a")}, .gpus = "0"})).ok());
  CHECK_FALSE(s.find_node("a")->registered());
  REQUIRE(s.upsert_node(node({.name = "a", .cards = {card("GPU-a")}})).ok());
  CHECK(s.find_node("a")->registered());
}

TEST_CASE("node fields: labels, taints, unschedulable, allocatable", "[snapshot]") {
  Snapshot s;
  NodeSpec spec{.name = "n",
                .cards = {card("GPU-a")},
                .labels = {{"zone", "z1"}},
                .unschedulable = true,
                .cpu = "7500m",
                .memory = "16Gi",
                .pods = "42"};
  spec.taints = json::array{json::object{{"key", "k"}, {"value", "v"}, {"effect", "NoSchedule"}}};
  REQUIRE(s.upsert_node(node(spec)).ok());
  const NodeState& n = *s.find_node("n");
  CHECK(n.labels.at("zone") == "z1");
  CHECK(n.labels.at("kubernetes.io/hostname") == "n");
  CHECK(n.unschedulable);
  REQUIRE(n.taints.size() == 1);
  CHECK(n.taints[0] == Taint{"k", "v", "NoSchedule"});
  CHECK(n.allocatable.cpu_milli == 7500);
  CHECK(n.allocatable.memory_bytes == int64_t(16) << 30);
  CHECK(n.allocatable.ephemeral_bytes == int64_t(100) << 30);
  CHECK(n.allocatable_pods == 42);
  CHECK(n.allocatable_gpus == 10);
}

TEST_CASE("a bad register annotation: error naming node, field, value and the node kept unregistered", "[snapshot]") {
  Snapshot s;
  auto st = s.upsert_node(
      node({.name = "bad-1", .labels = {{"x", "y"}}, .register_text = R"([{"id":"GPU-a","devmem":"lots"}])"}));
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.message(), Contains("node \"bad-1\""));
  CHECK_THAT(st.message(), Contains("devmem"));
  CHECK_THAT(st.message(), Contains("\"lots\""));
  const NodeState* n = s.find_node("bad-1");
  REQUIRE(n != nullptr);
  CHECK_FALSE(n->registered());
  CHECK(n->cards.empty());
  CHECK_FALSE(n->register_error.empty());
  CHECK(n->labels.at("x") == "y");
  // Fixing the annotation registers it.
  REQUIRE(s.upsert_node(node({.name = "bad-1", .cards = {card("GPU-a")}})).ok());
  CHECK(s.find_node("bad-1")->registered());
}

TEST_CASE("device-cordon marks cards and the legacy register form is accepted", "[snapshot]") {
  Snapshot s;
  REQUIRE(
      s.upsert_node(node({.name = "n",
                          .gpus = "20",
                          .cordon = "GPU-b",
                          .register_text = "GPU-a,10,1000,100,NVIDIA T4,0,true:GPU-b,10,1000,100,NVIDIA T4,0,true:"}))
          .ok());
  CHECK_FALSE(card_of(s, "n", "GPU-a").cordoned);
  CHECK(card_of(s, "n", "GPU-b").cordoned);
  CHECK_FALSE(card_of(s, "n", "GPU-b").usable());
}

TEST_CASE("card usage comes from pods holding allocations that are not Succeeded/Failed", "[snapshot]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a"), card("GPU-b")}})).ok());
  REQUIRE(s.upsert_pod(placed_pod("p1", "n", "GPU-a,NVIDIA,20000,30:;")).ok());
  REQUIRE(s.upsert_pod(placed_pod("p2", "n", "GPU-a,NVIDIA,1000,10:GPU-b,NVIDIA,1000,10:;", /*bind=*/false)).ok());
  CHECK(card_of(s, "n", "GPU-a").used_mem_mib == 21000);
  CHECK(card_of(s, "n", "GPU-a").used_cores == 40);
  CHECK(card_of(s, "n", "GPU-a").used_slots == 2);
  CHECK(card_of(s, "n", "GPU-b").used_slots == 1);
  CHECK(s.find_node("n")->pod_count == 2);  // the Pending (not yet bound) pod counts on vgpu-node too

  // Same object again: idempotent.
  REQUIRE(s.upsert_pod(placed_pod("p1", "n", "GPU-a,NVIDIA,20000,30:;")).ok());
  CHECK(card_of(s, "n", "GPU-a").used_mem_mib == 21000);

  // Succeeded: released.
  json::object done = placed_pod("p1", "n", "GPU-a,NVIDIA,20000,30:;");
  done["status"] = json::object{{"phase", "Succeeded"}};
  REQUIRE(s.upsert_pod(done).ok());
  CHECK(card_of(s, "n", "GPU-a").used_mem_mib == 1000);
  CHECK(s.find_pod("default", "p1") == nullptr);

  REQUIRE(s.remove_pod("default", "p2"));
  CHECK(card_of(s, "n", "GPU-a").used_slots == 0);
  CHECK(card_of(s, "n", "GPU-b").used_mem_mib == 0);
  CHECK(s.find_node("n")->pod_count == 0);
  CHECK_FALSE(s.remove_pod("default", "p2"));
}

TEST_CASE("other bound pods count for cpu, memory and pod count only", "[snapshot]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a")}})).ok());
  json::object web = pod(
      "web",
      json::array{json::object{{"name", "c"}, {"resources", {{"requests", {{"cpu", "1500m"}, {"memory", "1Gi"}}}}}}});
  spec(web)["nodeName"] = "n";
  REQUIRE(s.upsert_pod(web).ok());
  const NodeState& n = *s.find_node("n");
  CHECK(n.requested.cpu_milli == 1500);
  CHECK(n.requested.memory_bytes == int64_t(1) << 30);
  CHECK(n.pod_count == 1);
  CHECK(card_of(s, "n", "GPU-a").used_slots == 0);
  // An unscheduled pod counts nowhere.
  REQUIRE(s.upsert_pod(pod("floating", json::array{})).ok());
  CHECK(s.find_pod("default", "floating") == nullptr);
}

TEST_CASE("events in any order: pods before their node, node re-registration keeps usage", "[snapshot]") {
  Snapshot s;
  REQUIRE(s.upsert_pod(placed_pod("p1", "n", "GPU-a,NVIDIA,5000,20:;")).ok());
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a")}})).ok());
  CHECK(card_of(s, "n", "GPU-a").used_mem_mib == 5000);
  CHECK(s.find_node("n")->pod_count == 1);
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a"), card("GPU-b")}})).ok());
  CHECK(card_of(s, "n", "GPU-a").used_mem_mib == 5000);
  REQUIRE(s.remove_node("n"));
  CHECK(s.find_node("n") == nullptr);
  CHECK(s.find_pod("default", "p1") != nullptr);
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a")}})).ok());
  CHECK(card_of(s, "n", "GPU-a").used_cores == 20);
  CHECK_FALSE(s.remove_node("nope"));
}

TEST_CASE("init containers: per card max(init peak, app sum) - app slots only - init done -> app only", "[snapshot]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a"), card("GPU-b")}})).ok());
  json::object p =
      placed_pod("p", "n", "GPU-a,NVIDIA,8000,50:;GPU-a,NVIDIA,3000,10:;GPU-a,NVIDIA,2000,10:GPU-b,NVIDIA,2000,10:;");
  spec(p)["initContainers"] = json::array{container("init", "1", "8000", "50")};
  spec(p)["containers"] = json::array{container("c1", "1", "3000", "10"), container("c2", "2", "2000", "10")};
  REQUIRE(s.upsert_pod(p).ok());
  CHECK(card_of(s, "n", "GPU-a").used_mem_mib == 8000);  // max(8000, 3000+2000)
  CHECK(card_of(s, "n", "GPU-a").used_cores == 50);      // max(50, 20)
  CHECK(card_of(s, "n", "GPU-a").used_slots == 2);       // app entries only
  CHECK(card_of(s, "n", "GPU-b").used_mem_mib == 2000);
  CHECK(s.quota_used("default") == QuotaAmounts{8000, 50, 3});  // max(init 8000/50/1, app 7000/30/3)

  p["status"] = json::object{
      {"phase", "Running"},
      {"initContainerStatuses", json::array{json::object{{"state", {{"terminated", {{"exitCode", 0}}}}}}}}};
  REQUIRE(s.upsert_pod(p).ok());
  CHECK(card_of(s, "n", "GPU-a").used_mem_mib == 5000);
  CHECK(card_of(s, "n", "GPU-a").used_cores == 20);
  CHECK(s.quota_used("default") == QuotaAmounts{7000, 30, 3});
}

TEST_CASE("a card used only by init containers holds one time-slicing slot while they run", "[snapshot]") {
  // HAMi v2.10 counts max(init ? 1 : 0, app entries, 1) slots per pod and card (pkg/scheduler/pods.go).
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a"), card("GPU-b")}})).ok());
  json::object p = placed_pod("p", "n", "GPU-b,NVIDIA,2000,20:;GPU-a,NVIDIA,1000,10:;");
  spec(p)["initContainers"] = json::array{container("warmup", "1", "2000", "20")};
  spec(p)["containers"] = json::array{container("c", "1", "1000", "10")};
  REQUIRE(s.upsert_pod(p).ok());
  CHECK(card_of(s, "n", "GPU-b").used_slots == 1);
  CHECK(card_of(s, "n", "GPU-b").used_mem_mib == 2000);
  CHECK(card_of(s, "n", "GPU-a").used_slots == 1);
  p["status"] = json::object{
      {"phase", "Running"},
      {"initContainerStatuses", json::array{json::object{{"state", {{"terminated", {{"exitCode", 0}}}}}}}}};
  REQUIRE(s.upsert_pod(p).ok());
  CHECK(card_of(s, "n", "GPU-b").used_slots == 0);
  CHECK(card_of(s, "n", "GPU-a").used_slots == 1);
}

TEST_CASE("an undecodable -allocated annotation is an error naming pod and field - the pod counts without GPUs",
          "[snapshot]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a")}})).ok());
  auto st = s.upsert_pod(placed_pod("p", "n", "GPU-a,NVIDIA,many,30:;"));
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.message(), Contains("default/p"));
  CHECK_THAT(st.message(), Contains("hami.io/vgpu-devices-allocated"));
  CHECK_THAT(st.message(), Contains("\"many\""));
  CHECK(card_of(s, "n", "GPU-a").used_slots == 0);
  CHECK(s.find_node("n")->pod_count == 1);
}

TEST_CASE("assume, confirm, forget and expire", "[snapshot]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a")}})).ok());
  PodInfo p = pod_info("p");
  p.gpu.containers.push_back({"main", false, 1, 20000, std::nullopt, 30});
  PodDevices devs = {{{"GPU-a", "NVIDIA", 20000, 30}}};

  REQUIRE(s.assume(p, "n", devs, 1000).ok());
  CHECK(card_of(s, "n", "GPU-a").used_mem_mib == 20000);
  CHECK(s.find_pod("default", "p")->assumed);

  // A stale watch event (the pod before our patch) does not drop the assumption.
  REQUIRE(s.upsert_pod(gpu_pod("p", "1", "20000", "30")).ok());
  CHECK(card_of(s, "n", "GPU-a").used_mem_mib == 20000);
  CHECK(s.find_pod("default", "p")->assumed);

  // The confirming event replaces it: counted once.
  REQUIRE(s.upsert_pod(placed_pod("p", "n", "GPU-a,NVIDIA,20000,30:;")).ok());
  CHECK(card_of(s, "n", "GPU-a").used_mem_mib == 20000);
  CHECK_FALSE(s.find_pod("default", "p")->assumed);
  CHECK_FALSE(s.forget("default", "p"));  // confirmed records stay

  PodInfo q = pod_info("q");
  REQUIRE(s.assume(q, "n", {{{"GPU-a", "NVIDIA", 1000, 5}}}, 1000).ok());
  CHECK(card_of(s, "n", "GPU-a").used_mem_mib == 21000);
  CHECK(s.forget("default", "q"));
  CHECK(card_of(s, "n", "GPU-a").used_mem_mib == 20000);

  REQUIRE(s.assume(pod_info("r1"), "n", {{{"GPU-a", "NVIDIA", 1, 1}}}, 1000).ok());
  REQUIRE(s.assume(pod_info("r2"), "n", {{{"GPU-a", "NVIDIA", 1, 1}}}, 1050).ok());
  CHECK(s.expire_assumed(1080, 60) == std::vector<std::string>{"default/r1"});
  CHECK(s.find_pod("default", "r2") != nullptr);
  CHECK(s.expire_assumed(1111, 60) == std::vector<std::string>{"default/r2"});
  CHECK(card_of(s, "n", "GPU-a").used_mem_mib == 20000);

  auto bad = s.assume(pod_info("x"), "ghost", devs, 1);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.message(), Contains("\"ghost\""));
}

TEST_CASE("ResourceQuota limits: the minimum over objects, limits.* only, memory x memoryFactor", "[snapshot][quota]") {
  gpuslice::DeviceConfig dc;
  dc.memory_factor = 2;
  Snapshot s(dc);
  REQUIRE(s.upsert_quota(quota("q1", "team",
                               {{"limits.nvidia.com/gpumem", "30000"},
                                {"limits.nvidia.com/gpucores", "200"},
                                {"requests.nvidia.com/gpumem", "1"}}))
              .ok());
  REQUIRE(s.upsert_quota(quota("q2", "team", {{"limits.nvidia.com/gpumem", "20000"}, {"limits.nvidia.com/gpu", "3"}}))
              .ok());
  QuotaLimits l = s.quota_limits("team");
  CHECK(l.mem_mib == 40000);
  CHECK(l.cores == 200);
  CHECK(l.gpus == 3);
  CHECK_FALSE(s.quota_limits("other").any());
  REQUIRE(s.remove_quota("team", "q2"));
  CHECK(s.quota_limits("team").mem_mib == 60000);
  CHECK_FALSE(s.quota_limits("team").gpus.has_value());
  auto bad = s.upsert_quota(quota("q3", "team", {{"limits.nvidia.com/gpucores", "1.5"}}));
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.message(), Contains("limits.nvidia.com/gpucores"));
  CHECK_THAT(bad.message(), Contains("\"1.5\""));
}

TEST_CASE("quota usage: per-card value x cards, summed over the namespace", "[snapshot][quota]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a"), card("GPU-b")}})).ok());
  REQUIRE(s.upsert_pod(placed_pod("p1", "n", "GPU-a,NVIDIA,10000,20:GPU-b,NVIDIA,10000,20:;", true, "team")).ok());
  REQUIRE(s.upsert_pod(placed_pod("p2", "n", "GPU-a,NVIDIA,5000,10:;", true, "team")).ok());
  REQUIRE(s.upsert_pod(placed_pod("p3", "n", "GPU-b,NVIDIA,7000,10:;", true, "other")).ok());
  CHECK(s.quota_used("team") == QuotaAmounts{25000, 50, 3});
  CHECK(s.quota_used("other") == QuotaAmounts{7000, 10, 1});
  REQUIRE(s.remove_pod("team", "p1"));
  CHECK(s.quota_used("team") == QuotaAmounts{5000, 10, 1});
}

TEST_CASE("node score is HAMi's formula over existing usage", "[snapshot]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a", 1000, 100), card("GPU-b", 1000, 100)}})).ok());
  CHECK(s.find_node("n")->score == 0);
  REQUIRE(s.upsert_pod(placed_pod("p", "n", "GPU-a,NVIDIA,500,50:;")).ok());
  // 10 x (1/20 + 50/200 + 500/2000)
  CHECK(s.find_node("n")->score == Approx(10 * (0.05 + 0.25 + 0.25)));
}

TEST_CASE("the free-capacity index visits exactly the nodes that may fit, in node-policy order", "[snapshot][index]") {
  std::mt19937 rng(12345);  // fixed seed: the test is deterministic
  Snapshot s;
  std::uniform_int_distribution<int> cards_d(0, 4), mem_d(1, 40000), cores_d(0, 100);
  for (int i = 0; i < 300; ++i) {
    std::string name = "node-" + std::to_string(i % 37) + "-" + std::to_string(i);
    std::vector<gpuslice::scheduler::DeviceInfo> cs;
    int nc = cards_d(rng);
    for (int c = 0; c < nc; ++c) {
      cs.push_back(card(name + "-c" + std::to_string(c), 40000, 100, "NVIDIA L40", 0, 4));
    }
    REQUIRE(s.upsert_node(node({.name = name, .cards = cs})).ok());
    for (int c = 0; c < nc; ++c) {
      int pods = std::uniform_int_distribution<int>(0, 4)(rng);
      for (int k = 0; k < pods; ++k) {
        std::string alloc =
            cs[c].id + ",NVIDIA," + std::to_string(mem_d(rng) / 4) + "," + std::to_string(cores_d(rng) / 5) + ":;";
        REQUIRE(s.upsert_pod(placed_pod(name + "-p" + std::to_string(c) + "-" + std::to_string(k), name, alloc)).ok());
      }
    }
  }
  for (int trial = 0; trial < 60; ++trial) {
    CapacityQuery q{std::uniform_int_distribution<int>(0, 3)(rng), mem_d(rng) / 2, cores_d(rng) / 2};
    for (NodeOrder order : {NodeOrder::binpack, NodeOrder::spread}) {
      std::vector<const NodeState*> got;
      s.visit_candidates(q, order, [&](const NodeState& n) {
        got.push_back(&n);
        return false;
      });
      // Brute force: every node whose usable cards satisfy q, sorted by policy then name.
      std::vector<const NodeState*> want;
      s.for_each_node([&](const NodeState& n) {
        int64_t usable = 0, mem = -1, cores = -1;
        for (const CardState& c : n.cards) {
          if (c.usable()) {
            ++usable;
            mem = std::max(mem, c.free_mem_mib());
            cores = std::max(cores, c.free_cores());
          }
        }
        if (q.cards == 0 || (usable >= q.cards && mem >= q.min_card_mem_mib && cores >= q.min_card_cores)) {
          want.push_back(&n);
        }
      });
      std::stable_sort(want.begin(), want.end(), [&](const NodeState* a, const NodeState* b) {
        if (a->score != b->score) {
          return order == NodeOrder::binpack ? a->score > b->score : a->score < b->score;
        }
        return a->name < b->name;
      });
      INFO("trial " << trial << " cards " << q.cards << " mem " << q.min_card_mem_mib << " cores " << q.min_card_cores);
      REQUIRE(got == want);
    }
  }
  // Early stop: the visitor's true ends the walk.
  int visits = 0;
  s.visit_candidates({}, NodeOrder::binpack, [&](const NodeState&) { return ++visits == 3; });
  CHECK(visits == 3);
}
