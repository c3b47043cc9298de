// Priority preemption at card level (scheduler/preemption.h) on crafted snapshots: victims chosen per card (memory,
// cores, slots, several containers), reprieve, kube-scheduler's node order, PodDisruptionBudgets, quota,
// eligibility (preemptionPolicy Never, equal priority, terminating victims on the nominated node), nominations.
// The judge: kubernetes/kubernetes pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go and
// pkg/scheduler/framework/preemption/preemption.go.
#include "scheduler/preemption.h"

#include "common/rfc3339.h"
#include "sched_fixtures.h"

#include <catch2/catch.hpp>

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using Catch::Matchers::Contains;
namespace json = boost::json;

namespace {

// A running pod holding `mem` MiB and `cores` % of card `uuid` on `node`, with a priority and a start time.
json::object running(std::string name, std::string node, std::string uuid, int64_t mem, int32_t priority,
                     int64_t start_unix = 1000, std::string ns = "default", int64_t cores = 0) {
  json::object p =
      placed_pod(std::move(name), node, uuid + ",NVIDIA," + std::to_string(mem) + "," + std::to_string(cores) + ":;",
                 true, std::move(ns));
  spec(p)["priority"] = priority;
  json::object status;
  status["phase"] = "Running";
  status["startTime"] = gpuslice::format_rfc3339(gpuslice::WallTime(std::chrono::seconds(start_unix)));
  p["status"] = std::move(status);
  p["metadata"].as_object()["uid"] = "uid-" + std::string(p["metadata"].as_object()["name"].as_string());
  return p;
}

json::object with_labels(json::object p, json::object labels) {
  p["metadata"].as_object()["labels"] = std::move(labels);
  return p;
}

json::object preemptor(std::string mem, int32_t priority, std::string ns = "default", std::string cores = "") {
  json::object p = gpu_pod("hi", "1", std::move(mem), std::move(cores), std::move(ns));
  spec(p)["priority"] = priority;
  return p;
}

PodInfo info_of(const Snapshot& s, const json::object& p) {
  auto info = parse_pod(p, s.devices());
  REQUIRE(info.ok());
  return std::move(info.value());
}

PreemptionResult preempt(Snapshot& s, const json::object& p, std::string_view nominated = "") {
  PodInfo info = info_of(s, p);
  // The pod does not fit as things stand (the loop only preempts then).
  REQUIRE_FALSE(schedule(s, info, {}).scheduled);
  return find_preemption(s, info, nominated, {});
}

std::vector<std::string> victim_names(const PreemptionCandidate& c) {
  std::vector<std::string> v;
  for (const auto& x : c.victims) {
    v.push_back(x.name);
  }
  return v;
}

// A card's usage as a string, to check the dry run leaves the snapshot exactly as it was.
std::string usage(const Snapshot& s) {
  std::string out;
  s.for_each_node([&](const NodeState& n) {
    out += n.name + ":" + std::to_string(n.pod_count) + "[";
    for (const CardState& c : n.cards) {
      out += c.info.id + "=" + std::to_string(c.used_mem_mib) + "/" + std::to_string(c.used_cores) + "/" +
             std::to_string(c.used_slots) + " ";
    }
    out += "]";
  });
  return out + std::to_string(s.pod_count());
}

// One node, one 81920 MiB card full of four 20000 MiB pods of priority 10 started at 1000..4000.
Snapshot full_card(std::string node_name = "n1", std::string uuid = "GPU-0", int32_t priority = 10) {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = node_name, .cards = {card(uuid)}})).ok());
  for (int i = 0; i < 4; ++i) {
    REQUIRE(s.upsert_pod(running("low-" + std::to_string(i), node_name, uuid, 20000, priority, 1000 + 1000 * i)).ok());
  }
  return s;
}

}  // namespace

TEST_CASE("a card full of 20000 MiB pods: a 40000 MiB pod evicts exactly two, the least important", "[preemption]") {
  Snapshot s = full_card();
  const std::string before = usage(s);
  PreemptionResult r = preempt(s, preemptor("40000", 100));
  REQUIRE(r.eligible);
  REQUIRE(r.found);
  CHECK(r.chosen.node == "n1");
  // Reprieve goes most important first (earliest start at equal priority), so the two latest started go.
  CHECK(victim_names(r.chosen) == std::vector<std::string>{"low-2", "low-3"});
  CHECK(r.chosen.budget_violations == 0);
  CHECK(r.chosen.victims[0].uid == "uid-low-2");
  REQUIRE(r.chosen.placement.scheduled);
  REQUIRE(r.chosen.placement.devices.size() == 1);
  CHECK(r.chosen.placement.devices[0].at(0).uuid == "GPU-0");
  CHECK(r.chosen.placement.devices[0].at(0).mem_mib == 40000);
  CHECK(usage(s) == before);  // the dry run restored the snapshot
  CHECK(preemption_summary(r.chosen) == "preempting 2 pods on node n1 (default/low-2, default/low-3)");
}

TEST_CASE("lower priority goes before earlier start: victims are the lowest priority first", "[preemption]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n1", .cards = {card("GPU-0")}})).ok());
  REQUIRE(s.upsert_pod(running("a", "n1", "GPU-0", 20000, 50, 1000)).ok());
  REQUIRE(s.upsert_pod(running("b", "n1", "GPU-0", 20000, 5, 1000)).ok());
  REQUIRE(s.upsert_pod(running("c", "n1", "GPU-0", 20000, 50, 9000)).ok());
  REQUIRE(s.upsert_pod(running("d", "n1", "GPU-0", 20000, 6, 9000)).ok());
  PreemptionResult r = preempt(s, preemptor("40000", 100));
  REQUIRE(r.found);
  CHECK(victim_names(r.chosen) == std::vector<std::string>{"d", "b"});  // most important first in the list
}

TEST_CASE("multi-card: pods on a card the preemptor does not need are never evicted", "[preemption][cards]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n1", .cards = {card("GPU-A"), card("GPU-B")}})).ok());
  // Card A: three 25000 MiB pods of priority 10 (6920 MiB free). Card B: one 70000 MiB pod of priority 5.
  for (int i = 0; i < 3; ++i) {
    REQUIRE(s.upsert_pod(running("a" + std::to_string(i), "n1", "GPU-A", 25000, 10)).ok());
  }
  REQUIRE(s.upsert_pod(running("b0", "n1", "GPU-B", 70000, 5)).ok());
  PreemptionResult r = preempt(s, preemptor("40000", 100));
  REQUIRE(r.found);
  // Freeing card B alone makes room; every pod on card A is reprieved (they are the more important ones).
  CHECK(victim_names(r.chosen) == std::vector<std::string>{"b0"});
  CHECK(r.chosen.placement.devices[0].at(0).uuid == "GPU-B");
}

TEST_CASE("multi-card: the victims of one card suffice even when another card has lower priority pods that do not help",
          "[preemption][cards]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n1", .cards = {card("GPU-A"), card("GPU-B", 30000)}})).ok());
  // Card B is too small for the preemptor whatever leaves it; its priority-1 pod must stay.
  REQUIRE(s.upsert_pod(running("small", "n1", "GPU-B", 20000, 1)).ok());
  for (int i = 0; i < 4; ++i) {
    REQUIRE(s.upsert_pod(running("a" + std::to_string(i), "n1", "GPU-A", 20000, 10, 1000 + i)).ok());
  }
  PreemptionResult r = preempt(s, preemptor("40000", 100));
  REQUIRE(r.found);
  CHECK(victim_names(r.chosen) == std::vector<std::string>{"a2", "a3"});
}

TEST_CASE("two containers on one card: the card must hold both", "[preemption][containers]") {
  Snapshot s = full_card();
  json::object p = pod("hi", json::array{container("one", "1", "30000"), container("two", "1", "30000")});
  spec(p)["priority"] = 100;
  PreemptionResult r = preempt(s, p);
  REQUIRE(r.found);
  // 60000 MiB needed on the only card: three of the four 20000 MiB pods go.
  CHECK(victim_names(r.chosen) == std::vector<std::string>{"low-1", "low-2", "low-3"});
  REQUIRE(r.chosen.placement.devices.size() == 2);
  CHECK(r.chosen.placement.devices[0].at(0).uuid == "GPU-0");
  CHECK(r.chosen.placement.devices[1].at(0).uuid == "GPU-0");
}

TEST_CASE("two containers, two cards each: one victim pair per card", "[preemption][containers]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n1", .cards = {card("GPU-A"), card("GPU-B")}})).ok());
  for (int i = 0; i < 4; ++i) {
    REQUIRE(s.upsert_pod(running("a" + std::to_string(i), "n1", "GPU-A", 20000, 10, 1000 + i)).ok());
    REQUIRE(s.upsert_pod(running("b" + std::to_string(i), "n1", "GPU-B", 20000, 10, 2000 + i)).ok());
  }
  json::object p = pod("hi", json::array{container("one", "2", "40000")});  // two cards of 40000 MiB each
  spec(p)["priority"] = 100;
  PreemptionResult r = preempt(s, p);
  REQUIRE(r.found);
  auto names = victim_names(r.chosen);
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"a2", "a3", "b2", "b3"});
}

TEST_CASE("cores and slots count per card", "[preemption][cards]") {
  SECTION("cores") {
    Snapshot s;
    REQUIRE(s.upsert_node(node({.name = "n1", .cards = {card("GPU-0")}})).ok());
    REQUIRE(s.upsert_pod(running("c0", "n1", "GPU-0", 1000, 10, 1000, "default", 40)).ok());
    REQUIRE(s.upsert_pod(running("c1", "n1", "GPU-0", 1000, 10, 2000, "default", 40)).ok());
    PreemptionResult r = preempt(s, preemptor("1000", 100, "default", "50"));
    REQUIRE(r.found);
    CHECK(victim_names(r.chosen) == std::vector<std::string>{"c1"});  // 60% free after one leaves
  }
  SECTION("slots") {
    Snapshot s;
    REQUIRE(s.upsert_node(node({.name = "n1", .cards = {card("GPU-0", 81920, 100, "NVIDIA A100", 0, 2)}})).ok());
    REQUIRE(s.upsert_pod(running("s0", "n1", "GPU-0", 1000, 10, 1000)).ok());
    REQUIRE(s.upsert_pod(running("s1", "n1", "GPU-0", 1000, 10, 2000)).ok());
    PreemptionResult r = preempt(s, preemptor("1000", 100));
    REQUIRE(r.found);
    CHECK(victim_names(r.chosen) == std::vector<std::string>{"s1"});  // one slot is all it needs
  }
}

TEST_CASE("equal priority never preempts, nor does a lower one", "[preemption][eligibility]") {
  Snapshot s = full_card("n1", "GPU-0", 100);
  PreemptionResult r = preempt(s, preemptor("40000", 100));
  CHECK(r.eligible);
  CHECK_FALSE(r.found);
  CHECK(r.message == "0/1 nodes are available: 1 No preemption victims found for incoming pod.");
  PreemptionResult lower = preempt(s, preemptor("40000", 7));
  CHECK_FALSE(lower.found);
}

TEST_CASE("preemptionPolicy Never stays pending", "[preemption][eligibility]") {
  Snapshot s = full_card();
  json::object p = preemptor("40000", 100);
  spec(p)["preemptionPolicy"] = "Never";
  PreemptionResult r = preempt(s, p);
  CHECK_FALSE(r.eligible);
  CHECK_FALSE(r.found);
  CHECK(r.message == "not eligible due to preemptionPolicy=Never.");
}

TEST_CASE("preemption that cannot help says why per node", "[preemption]") {
  Snapshot s = full_card();
  REQUIRE(s.upsert_node(node({.name = "tainted",
                              .cards = {card("GPU-T")},
                              .taints = json::array{json::object{{"key", "k"}, {"effect", "NoSchedule"}}}}))
              .ok());
  REQUIRE(s.upsert_pod(running("t0", "tainted", "GPU-T", 81920, 1)).ok());
  PreemptionResult r = preempt(s, preemptor("90000", 100));  // bigger than any card
  CHECK_FALSE(r.found);
  CHECK_THAT(r.message, Contains("0/2 nodes are available: "));
  CHECK_THAT(r.message, Contains("1 Preemption is not helpful for scheduling"));
  CHECK_THAT(r.message, Contains("CardInsufficientMemory"));
}

TEST_CASE("node order: PDB violations, highest victim priority, sum, count, latest start", "[preemption][pick]") {
  SECTION("a PodDisruptionBudget-protected node is spared when another choice exists") {
    Snapshot s;
    for (const char* n : {"n1", "n2"}) {
      REQUIRE(s.upsert_node(node({.name = n, .cards = {card(std::string("GPU-") + n)}})).ok());
    }
    for (int i = 0; i < 4; ++i) {
      // n1's pods are the less important ones by start time, but protected.
      REQUIRE(s.upsert_pod(with_labels(running("p" + std::to_string(i), "n1", "GPU-n1", 20000, 10, 5000 + i),
                                       json::object{{"app", "protected"}}))
                  .ok());
      REQUIRE(s.upsert_pod(running("u" + std::to_string(i), "n2", "GPU-n2", 20000, 10, 1000 + i)).ok());
    }
    json::object pdb{{"metadata", {{"name", "guard"}, {"namespace", "default"}}},
                     {"spec", {{"selector", {{"matchLabels", {{"app", "protected"}}}}}}},
                     {"status", {{"disruptionsAllowed", 1}}}};
    REQUIRE(s.objects().upsert_disruption_budget(pdb).ok());
    PreemptionResult r = preempt(s, preemptor("40000", 100));
    REQUIRE(r.found);
    REQUIRE(r.candidates.size() == 2);
    CHECK(r.candidates[0].node == "n1");
    CHECK(r.candidates[0].budget_violations == 1);  // two victims, one disruption allowed
    CHECK(r.chosen.node == "n2");
    CHECK(r.chosen.budget_violations == 0);
    // With the budget's room for two, n1 is fine again and its later start wins.
    pdb["status"].as_object()["disruptionsAllowed"] = 2;
    REQUIRE(s.objects().upsert_disruption_budget(pdb).ok());
    CHECK(preempt(s, preemptor("40000", 100)).chosen.node == "n1");
  }
  SECTION("a budget is respected where possible on the only node: its pod is reprieved first, else counted") {
    Snapshot s = full_card();
    json::object guard{{"metadata", {{"name", "g"}, {"namespace", "default"}}},
                       {"spec", {{"selector", {{"matchLabels", {{"app", "x"}}}}}}},
                       {"status", {{"disruptionsAllowed", 0}}}};
    REQUIRE(s.objects().upsert_disruption_budget(guard).ok());
    REQUIRE(
        s.upsert_pod(with_labels(running("low-3", "n1", "GPU-0", 20000, 10, 4000), json::object{{"app", "x"}})).ok());
    PreemptionResult r = preempt(s, preemptor("40000", 100));
    REQUIRE(r.found);
    // The protected pod is tried first for a reprieve and kept; two others go instead.
    CHECK(victim_names(r.chosen) == std::vector<std::string>{"low-1", "low-2"});
    CHECK(r.chosen.budget_violations == 0);
    // Every pod protected: the budget cannot be kept, the node is still preempted and the violations counted.
    for (int i = 0; i < 3; ++i) {
      REQUIRE(s.upsert_pod(with_labels(running("low-" + std::to_string(i), "n1", "GPU-0", 20000, 10, 1000 + 1000 * i),
                                       json::object{{"app", "x"}}))
                  .ok());
    }
    PreemptionResult all = preempt(s, preemptor("40000", 100));
    REQUIRE(all.found);
    CHECK(victim_names(all.chosen) == std::vector<std::string>{"low-2", "low-3"});
    CHECK(all.chosen.budget_violations == 2);
    // Pods the API server already lists as disrupted are not charged again.
    guard["status"].as_object()["disruptedPods"] = json::object{{"low-2", "2026-12-01T10:00:00Z"}};
    REQUIRE(s.objects().upsert_disruption_budget(guard).ok());
    CHECK(preempt(s, preemptor("40000", 100)).chosen.budget_violations == 1);
  }
  SECTION("the lowest highest-priority victim") {
    Snapshot s;
    for (const char* n : {"n1", "n2"}) {
      REQUIRE(s.upsert_node(node({.name = n, .cards = {card(std::string("GPU-") + n)}})).ok());
    }
    for (int i = 0; i < 4; ++i) {
      REQUIRE(s.upsert_pod(running("a" + std::to_string(i), "n1", "GPU-n1", 20000, 50, 9000)).ok());
      REQUIRE(s.upsert_pod(running("b" + std::to_string(i), "n2", "GPU-n2", 20000, 10, 1000)).ok());
    }
    CHECK(preempt(s, preemptor("40000", 100)).chosen.node == "n2");
  }
  SECTION("the lowest sum of priorities, then the fewest victims") {
    Snapshot s;
    for (const char* n : {"n1", "n2"}) {
      REQUIRE(s.upsert_node(node({.name = n, .cards = {card(std::string("GPU-") + n)}})).ok());
    }
    REQUIRE(s.upsert_pod(running("n1-big0", "n1", "GPU-n1", 40000, 10)).ok());
    REQUIRE(s.upsert_pod(running("n1-big1", "n1", "GPU-n1", 40000, 10)).ok());
    for (int i = 0; i < 4; ++i) {
      REQUIRE(s.upsert_pod(running("n2-s" + std::to_string(i), "n2", "GPU-n2", 20000, 10)).ok());
    }
    PreemptionResult r = preempt(s, preemptor("40000", 100));
    CHECK(r.chosen.node == "n1");
    CHECK(r.chosen.victims.size() == 1);
  }
  SECTION("the latest start among the highest-priority victims") {
    Snapshot s;
    for (const char* n : {"n1", "n2"}) {
      REQUIRE(s.upsert_node(node({.name = n, .cards = {card(std::string("GPU-") + n)}})).ok());
    }
    for (int i = 0; i < 4; ++i) {
      REQUIRE(s.upsert_pod(running("a" + std::to_string(i), "n1", "GPU-n1", 20000, 10, 1000)).ok());
      REQUIRE(s.upsert_pod(running("b" + std::to_string(i), "n2", "GPU-n2", 20000, 10, 2000)).ok());
    }
    CHECK(preempt(s, preemptor("40000", 100)).chosen.node == "n2");
  }
}

TEST_CASE("quota: evicting pods of the preemptor's namespace frees its ResourceQuota", "[preemption][quota]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n1", .cards = {card("GPU-1")}})).ok());
  REQUIRE(s.upsert_node(node({.name = "n2", .cards = {card("GPU-2")}})).ok());
  REQUIRE(s.upsert_quota(quota("q", "team", json::object{{"limits.nvidia.com/gpumem", "70000"}})).ok());
  REQUIRE(s.upsert_pod(running("t0", "n1", "GPU-1", 30000, 10, 1000, "team")).ok());
  REQUIRE(s.upsert_pod(running("t1", "n1", "GPU-1", 30000, 10, 2000, "team")).ok());
  // n2 is empty: only the quota stops the pod. Freeing n2 cannot help (nothing there); n1's team pods can.
  PreemptionResult r = preempt(s, preemptor("40000", 100, "team"));
  REQUIRE(r.found);
  CHECK(r.chosen.node == "n1");
  CHECK(victim_names(r.chosen) == std::vector<std::string>{"t1"});
}

TEST_CASE("a nomination is never a victim and holds its cards", "[preemption][nominated]") {
  Snapshot s = full_card();
  // Two pods leave; a priority-50 preemptor is nominated onto the room they made.
  REQUIRE(s.remove_pod("default", "low-2"));
  REQUIRE(s.remove_pod("default", "low-3"));
  json::object mid = preemptor("40000", 50);
  mid["metadata"].as_object()["name"] = "mid";
  PodInfo mid_info = info_of(s, mid);
  Decision d = schedule(s, mid_info, {});
  REQUIRE(d.scheduled);
  REQUIRE(s.nominate(mid_info, d.node, d.devices, 100).ok());
  CHECK(s.expire_assumed(100000, 10).empty());  // nominations do not expire with assumptions
  // A priority-100 pod of 40000 MiB: the nominated 40000 is not a candidate victim, two low pods are.
  PreemptionResult r = preempt(s, preemptor("40000", 100));
  REQUIRE(r.found);
  CHECK(victim_names(r.chosen) == std::vector<std::string>{"low-0", "low-1"});
}

TEST_CASE("eligibility: a terminating victim on the nominated node means wait, not preempt again",
          "[preemption][eligibility]") {
  Snapshot s = full_card();
  json::object going = running("low-3", "n1", "GPU-0", 20000, 10, 4000);
  going["metadata"].as_object()["deletionTimestamp"] = "2026-12-01T10:00:00Z";
  going["status"].as_object()["conditions"] =
      json::array{json::object{{"type", "DisruptionTarget"}, {"status", "True"}, {"reason", "PreemptionByScheduler"}}};
  REQUIRE(s.upsert_pod(going).ok());
  PodInfo info = info_of(s, preemptor("40000", 100));
  std::string why;
  CHECK_FALSE(eligible_to_preempt(s, info, "n1", {}, &why));
  CHECK(why == "not eligible due to a terminating pod on the nominated node.");
  CHECK_FALSE(find_preemption(s, info, "n1", {}).eligible);
  // Without a nomination, or nominated to a node that is gone, it may preempt.
  CHECK(eligible_to_preempt(s, info, "", {}, nullptr));
  CHECK(eligible_to_preempt(s, info, "gone", {}, nullptr));
  // A pod deleted for another reason (no DisruptionTarget by the scheduler) does not hold the preemptor back.
  going["status"].as_object()["conditions"] = json::array{};
  REQUIRE(s.upsert_pod(going).ok());
  CHECK(eligible_to_preempt(s, info, "n1", {}, nullptr));
}

TEST_CASE("pick_candidate: a node with nothing to evict wins at once", "[preemption][pick]") {
  std::vector<PreemptionCandidate> c(2);
  c[0].node = "a";
  c[0].victims.push_back(PreemptionVictim{"default", "x", "", 1, 0, false, false});
  c[1].node = "b";
  CHECK(pick_candidate(c) == 1);
  // Negative priorities add up correctly (each shifted by 2^31).
  std::vector<PreemptionCandidate> d(2);
  d[0].node = "a";
  d[0].victims = {PreemptionVictim{"d", "x", "", -5, 0, false, false},
                  PreemptionVictim{"d", "y", "", -5, 0, false, false}};
  d[1].node = "b";
  d[1].victims = {PreemptionVictim{"d", "z", "", -5, 0, false, false}};
  CHECK(pick_candidate(d) == 1);
}

TEST_CASE("PodDisruptionBudget parsing: selector, disruptionsAllowed, disruptedPods, errors name the field",
          "[preemption][pdb]") {
  ClusterObjects o;
  REQUIRE(o.upsert_disruption_budget(
               json::object{{"metadata", {{"name", "b"}, {"namespace", "ns"}}},
                            {"spec", {{"selector", {{"matchLabels", {{"app", "x"}}}}}}},
                            {"status", {{"disruptionsAllowed", 3}, {"disruptedPods", {{"p1", "t"}}}}}})
              .ok());
  const DisruptionBudgetInfo& b = o.disruption_budgets().at("ns/b");
  CHECK(b.disruptions_allowed == 3);
  CHECK(b.disrupted_pods == std::vector<std::string>{"p1"});
  CHECK(b.covers("ns", Labels{{"app", "x"}}));
  CHECK_FALSE(b.covers("other", Labels{{"app", "x"}}));
  CHECK_FALSE(b.covers("ns", Labels{{"app", "y"}}));
  // An empty selector matches nothing (upstream skips it).
  REQUIRE(o.upsert_disruption_budget(json::object{{"metadata", {{"name", "e"}, {"namespace", "ns"}}},
                                                  {"spec", {{"selector", json::object{}}}}})
              .ok());
  CHECK_FALSE(o.disruption_budgets().at("ns/e").covers("ns", Labels{{"app", "x"}}));
  auto bad = o.upsert_disruption_budget(
      json::object{{"metadata", {{"name", "z"}, {"namespace", "ns"}}}, {"status", {{"disruptionsAllowed", "many"}}}});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message() == "poddisruptionbudget ns/z: status.disruptionsAllowed: \"many\" is not an int32");
  CHECK(o.remove_disruption_budget("ns", "b"));
}
