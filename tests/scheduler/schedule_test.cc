// Filter and score (hami-protocol.md §6-10): every node-level and card-level rule, policies, quota, messages.
#include "scheduler/schedule.h"

#include "sched_fixtures.h"

#include <catch2/catch.hpp>

#include <functional>
#include <random>
#include <set>
#include <string_view>

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using Catch::Matchers::Contains;
namespace json = boost::json;

namespace {

Decision decide(const Snapshot& s, const json::object& pod_json, ScheduleOptions opt = {}) {
  auto info = parse_pod(pod_json, s.devices());
  REQUIRE(info.ok());
  return schedule(s, info.value(), opt);
}

// Decide and, when placed, assume the decision (as the loop and simulate do).
Decision place(Snapshot& s, const json::object& pod_json, ScheduleOptions opt = {}) {
  auto info = parse_pod(pod_json, s.devices());
  REQUIRE(info.ok());
  Decision d = schedule(s, info.value(), opt);
  if (d.scheduled) {
    REQUIRE(s.assume(info.value(), d.node, d.devices, 100).ok());
  }
  return d;
}

std::string uuid_of(const Decision& d, size_t slot = 0, size_t i = 0) {
  return d.devices.at(slot).at(i).uuid;
}

const NodeFailure& failure_of(const Decision& d, std::string_view node) {
  for (const NodeFailure& f : d.failures) {
    if (f.node == node) {
      return f;
    }
  }
  FAIL("no failure recorded for " << node);
  return d.failures.front();
}

}  // namespace

TEST_CASE("seed scenario: three 20000 MiB / 30 % pods share an A100 - 4th core-starved - 90000 MiB never fits",
          "[schedule][seed]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "a100", .cards = {card("GPU-a100", 81920, 100, "NVIDIA A100-SXM4-80GB")}})).ok());
  for (int i = 1; i <= 3; ++i) {
    Decision d = place(s, gpu_pod("share-" + std::to_string(i), "1", "20000", "30"));
    REQUIRE(d.scheduled);
    CHECK(d.node == "a100");
    CHECK(d.devices == PodDevices{{{"GPU-a100", "NVIDIA", 20000, 30}}});
  }
  Decision fourth = place(s, gpu_pod("share-4", "1", "20000", "30"));
  CHECK_FALSE(fourth.scheduled);
  CHECK(fourth.message ==
        "0/1 nodes are available: 1 CardInsufficientCore (asks 30% of a card's cores, largest free 10%).");
  CHECK(failure_of(fourth, "a100").detail == "1/1 CardInsufficientCore (asks 30% of a card's cores, largest free 10%)");
  Decision big = place(s, gpu_pod("big", "1", "90000"));
  CHECK_FALSE(big.scheduled);
  CHECK(big.message ==
        "0/1 nodes are available: 1 CardInsufficientMemory (asks 90000 MiB per card, largest free 21920 MiB).");
}

TEST_CASE("without gpumem the first pod takes the whole card's memory", "[schedule]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a")}})).ok());
  Decision first = place(s, gpu_pod("p1", "1", "", "30"));
  REQUIRE(first.scheduled);
  CHECK(first.devices[0][0].mem_mib == 81920);
  Decision second = place(s, gpu_pod("p2", "1", "", "30"));
  CHECK_FALSE(second.scheduled);
  CHECK(second.message ==
        "0/1 nodes are available: 1 CardInsufficientMemory (asks 81920 MiB per card, largest free 0 MiB).");
}

TEST_CASE("gpumem-percentage resolves against the chosen card", "[schedule]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a", 81920)}})).ok());
  json::object p = pod("p", json::array{container("c", "1", "", "20", "25")});
  Decision d = decide(s, p);
  REQUIRE(d.scheduled);
  CHECK(d.devices[0][0].mem_mib == 20480);
  CHECK(d.devices[0][0].cores == 20);
}

TEST_CASE("nvidia.com/gpu: 2 takes two distinct cards and more than the node has is NodeInsufficientDevice",
          "[schedule]") {
  Snapshot s;
  REQUIRE(
      s.upsert_node(node({.name = "l4",
                          .cards = {card("GPU-0", 23034, 100, "NVIDIA L4"), card("GPU-1", 23034, 100, "NVIDIA L4")}}))
          .ok());
  Decision two = decide(s, gpu_pod("p", "2"));
  REQUIRE(two.scheduled);
  REQUIRE(two.devices[0].size() == 2);
  CHECK(two.devices[0][0].uuid != two.devices[0][1].uuid);
  CHECK(two.devices[0][0].mem_mib == 23034);
  CHECK(two.devices[0][0].cores == 100);
  Decision three = decide(s, gpu_pod("p", "3"));
  CHECK_FALSE(three.scheduled);
  CHECK(failure_of(three, "l4").detail == "NodeInsufficientDevice (asks 3 cards, node has 2)");  // HAMi's bare string
  CHECK(three.message == "0/1 nodes are available: 1 NodeInsufficientDevice (asks 3 cards, largest node has 2).");
}

TEST_CASE("node level: unschedulable, selector/affinity, taints, resources, unregistered", "[schedule][node]") {
  Snapshot s;
  auto gpu = std::vector<DeviceInfo>{card("GPU-x")};
  REQUIRE(s.upsert_node(node({.name = "cordoned", .cards = {card("GPU-c")}, .unschedulable = true})).ok());
  REQUIRE(s.upsert_node(node({.name = "zone-b", .cards = {card("GPU-b")}, .labels = {{"zone", "b"}}})).ok());
  NodeSpec tainted{.name = "tainted", .cards = {card("GPU-t")}, .labels = {{"zone", "a"}}};
  tainted.taints = json::array{json::object{{"key", "dedicated"}, {"value", "ml"}, {"effect", "NoSchedule"}}};
  REQUIRE(s.upsert_node(node(tainted)).ok());
  REQUIRE(s.upsert_node(node({.name = "small", .cards = {card("GPU-s")}, .labels = {{"zone", "a"}}, .cpu = "1"})).ok());
  REQUIRE(s.upsert_node(node({.name = "unreg", .labels = {{"zone", "a"}}, .no_register = true})).ok());

  json::object p = gpu_pod("p", "1", "1000", "10");
  spec(p)["nodeSelector"] = json::object{{"zone", "a"}};
  spec(p)["containers"].as_array()[0].as_object()["resources"].as_object()["requests"] = json::object{{"cpu", "2"}};
  Decision d = decide(s, p);
  CHECK_FALSE(d.scheduled);
  CHECK(failure_of(d, "cordoned").detail == "node(s) were unschedulable");
  CHECK(failure_of(d, "zone-b").detail == "node(s) didn't match Pod's node affinity/selector");
  CHECK(failure_of(d, "tainted").detail == "node(s) had untolerated taint {dedicated: ml}");
  CHECK(failure_of(d, "small").detail == "Insufficient cpu");
  CHECK(failure_of(d, "unreg").detail == "node unregistered");
  CHECK(d.message ==
        "0/5 nodes are available: 1 Insufficient cpu, 1 node unregistered, 1 node(s) didn't match Pod's node "
        "affinity/selector, 1 node(s) had untolerated taint {dedicated: ml}, 1 node(s) were unschedulable.");

  // Tolerating the taint opens the tainted node.
  spec(p)["tolerations"] =
      json::parse(R"([{"key":"dedicated","operator":"Equal","value":"ml","effect":"NoSchedule"}])");
  Decision ok = decide(s, p);
  REQUIRE(ok.scheduled);
  CHECK(ok.node == "tainted");
}

TEST_CASE("taints: NoExecute counts, PreferNoSchedule does not - Exists and empty-key tolerations",
          "[schedule][node]") {
  auto with_taint = [](std::string effect) {
    Snapshot s;
    NodeSpec n{.name = "n", .cards = {card("GPU-a")}};
    n.taints = json::array{json::object{{"key", "k"}, {"value", "v"}, {"effect", effect}}};
    REQUIRE(s.upsert_node(node(n)).ok());
    return s;
  };
  Snapshot ne = with_taint("NoExecute");
  CHECK_FALSE(decide(ne, gpu_pod("p", "1", "100")).scheduled);
  Snapshot pref = with_taint("PreferNoSchedule");
  CHECK(decide(pref, gpu_pod("p", "1", "100")).scheduled);

  json::object exists = gpu_pod("p", "1", "100");
  spec(exists)["tolerations"] = json::parse(R"([{"key":"k","operator":"Exists"}])");
  CHECK(decide(ne, exists).scheduled);
  json::object all = gpu_pod("p", "1", "100");
  spec(all)["tolerations"] = json::parse(R"([{"operator":"Exists"}])");
  CHECK(decide(ne, all).scheduled);
  json::object wrong_value = gpu_pod("p", "1", "100");
  spec(wrong_value)["tolerations"] = json::parse(R"([{"key":"k","value":"other"}])");
  CHECK_FALSE(decide(ne, wrong_value).scheduled);
  json::object wrong_effect = gpu_pod("p", "1", "100");
  spec(wrong_effect)["tolerations"] = json::parse(R"([{"key":"k","operator":"Exists","effect":"NoSchedule"}])");
  CHECK_FALSE(decide(ne, wrong_effect).scheduled);
}

TEST_CASE("unschedulable nodes admit pods tolerating node.kubernetes.io/unschedulable", "[schedule][node]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a")}, .unschedulable = true})).ok());
  json::object p = gpu_pod("p", "1", "100");
  CHECK_FALSE(decide(s, p).scheduled);
  spec(p)["tolerations"] = json::parse(R"([{"key":"node.kubernetes.io/unschedulable","operator":"Exists"}])");
  CHECK(decide(s, p).scheduled);
}

TEST_CASE("required node affinity operators", "[schedule][node]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n1", .cards = {card("GPU-1")}, .labels = {{"gen", "3"}, {"pool", "a"}}})).ok());
  REQUIRE(s.upsert_node(node({.name = "n2", .cards = {card("GPU-2")}, .labels = {{"gen", "5"}}})).ok());
  auto placed_on = [&](const char* terms) {
    json::object p = gpu_pod("p", "1", "100");
    spec(p)["affinity"] = json::parse(
        std::string(R"({"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":)") +
        terms + "}}}");
    Decision d = decide(s, p);
    return d.scheduled ? d.node : std::string("-");
  };
  CHECK(placed_on(R"([{"matchExpressions":[{"key":"pool","operator":"In","values":["a"]}]}])") == "n1");
  CHECK(placed_on(R"([{"matchExpressions":[{"key":"pool","operator":"NotIn","values":["a"]}]}])") == "n2");
  CHECK(placed_on(R"([{"matchExpressions":[{"key":"pool","operator":"Exists"}]}])") == "n1");
  CHECK(placed_on(R"([{"matchExpressions":[{"key":"pool","operator":"DoesNotExist"}]}])") == "n2");
  CHECK(placed_on(R"([{"matchExpressions":[{"key":"gen","operator":"Gt","values":["4"]}]}])") == "n2");
  CHECK(placed_on(R"([{"matchExpressions":[{"key":"gen","operator":"Lt","values":["4"]}]}])") == "n1");
  CHECK(placed_on(R"([{"matchExpressions":[{"key":"gen","operator":"Gt","values":["9"]}]}])") == "-");
  CHECK(placed_on(R"([{"matchFields":[{"key":"metadata.name","operator":"In","values":["n2"]}]}])") == "n2");
  // Terms are ORed, expressions ANDed.
  CHECK(placed_on(
            R"([{"matchExpressions":[{"key":"gen","operator":"In","values":["5"]},{"key":"pool","operator":"Exists"}]},
                      {"matchExpressions":[{"key":"gen","operator":"In","values":["3"]}]}])") == "n1");
}

TEST_CASE("cpu, memory and pod count fit against other bound pods", "[schedule][node]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a")}, .cpu = "4", .memory = "8Gi", .pods = "2"})).ok());
  json::object web =
      pod("web",
          json::array{json::object{{"name", "c"}, {"resources", {{"requests", {{"cpu", "3"}, {"memory", "6Gi"}}}}}}});
  spec(web)["nodeName"] = "n";
  REQUIRE(s.upsert_pod(web).ok());
  json::object p = gpu_pod("p", "1", "100");
  spec(p)["containers"].as_array()[0].as_object()["resources"].as_object()["requests"] =
      json::object{{"cpu", "2"}, {"memory", "4Gi"}};
  Decision d = decide(s, p);
  CHECK_FALSE(d.scheduled);
  CHECK(failure_of(d, "n").reasons == std::vector<std::string>{"Insufficient cpu", "Insufficient memory"});
  CHECK(d.message == "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory.");

  json::object tiny = gpu_pod("tiny", "1", "100");
  REQUIRE(place(s, tiny).scheduled);  // second pod on the node
  Decision third = decide(s, gpu_pod("third", "1", "100"));
  CHECK_FALSE(third.scheduled);
  CHECK(third.message == "0/1 nodes are available: 1 Too many pods.");
}

TEST_CASE("card checks in HAMi's order with HAMi's reason strings", "[schedule][card]") {
  Snapshot s;
  DeviceInfo sick = card("GPU-sick");
  sick.health = false;
  REQUIRE(s.upsert_node(node({.name = "n",
                              .cards = {sick, card("GPU-cord"), card("GPU-t4", 16000, 100, "NVIDIA Tesla T4")},
                              .cordon = "GPU-cord,GPU-sick"}))
              .ok());
  json::object p = gpu_pod("p", "1", "1000", "10");
  annotate(p, "nvidia.com/use-gputype", "a100");
  Decision d = decide(s, p);
  CHECK_FALSE(d.scheduled);
  // The unhealthy card is also cordoned: health is checked first.
  CHECK(failure_of(d, "n").detail == "1/3 CardCordoned, 1/3 CardNotHealth, 1/3 CardTypeMismatch");
  CHECK(d.message == "0/1 nodes are available: 1 CardCordoned, 1 CardNotHealth, 1 CardTypeMismatch.");
}

TEST_CASE("use-/nouse-gputype: comma list, case-insensitive substring", "[schedule][card]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n",
                              .cards = {card("GPU-a", 80000, 100, "NVIDIA A100-SXM4-80GB"),
                                        card("GPU-t", 16000, 100, "NVIDIA Tesla T4")}}))
              .ok());
  auto with = [&](std::string_view key, std::string_view value) {
    json::object p = gpu_pod("p", "1", "1000", "10");
    annotate(p, key, value);
    Decision d = decide(s, p);
    return d.scheduled ? uuid_of(d) : d.message;
  };
  CHECK(with("nvidia.com/use-gputype", "t4") == "GPU-t");
  CHECK(with("nvidia.com/use-gputype", "H100, a100-sxm4") == "GPU-a");
  CHECK(with("nvidia.com/nouse-gputype", "A100") == "GPU-t");
  CHECK(with("nvidia.com/nouse-gputype", "tesla,SXM4") == "0/1 nodes are available: 1 CardTypeMismatch.");
  CHECK(with("nvidia.com/use-gputype", "H100") == "0/1 nodes are available: 1 CardTypeMismatch.");
}

TEST_CASE("use-/nouse-gpuuuid are exact", "[schedule][card]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-aa"), card("GPU-a")}})).ok());
  auto with = [&](std::string_view key, std::string_view value) {
    json::object p = gpu_pod("p", "1", "1000", "10");
    annotate(p, key, value);
    Decision d = decide(s, p);
    return d.scheduled ? uuid_of(d) : d.message;
  };
  CHECK(with("nvidia.com/use-gpuuuid", "GPU-a") == "GPU-a");
  CHECK(with("nvidia.com/use-gpuuuid", "GPU-aa") == "GPU-aa");
  CHECK(with("nvidia.com/nouse-gpuuuid", "GPU-a") == "GPU-aa");
  CHECK(with("nvidia.com/use-gpuuuid", "GPU") == "0/1 nodes are available: 1 CardUuidMismatch.");
  json::object p = gpu_pod("p", "1", "1000", "10");
  annotate(p, "nvidia.com/use-gpuuuid", "GPU-x");
  CHECK(failure_of(decide(s, p), "n").detail == "2/2 CardUuidMismatch");
}

TEST_CASE("vgpu-mode must contain the card's mode (empty mode is hami-core)", "[schedule][card]") {
  Snapshot s;
  DeviceInfo mps = card("GPU-mps");
  mps.mode = "mps";
  DeviceInfo plain = card("GPU-plain");
  plain.mode = "";
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {mps, plain}})).ok());
  json::object p = gpu_pod("p", "1", "1000", "10");
  annotate(p, "nvidia.com/vgpu-mode", "mps");
  CHECK(uuid_of(decide(s, p)) == "GPU-mps");
  annotate(p, "nvidia.com/vgpu-mode", "hami-core");
  CHECK(uuid_of(decide(s, p)) == "GPU-plain");
  annotate(p, "nvidia.com/vgpu-mode", "mig");
  CHECK(decide(s, p).message == "0/1 nodes are available: 1 CardTypeMismatch.");
}

TEST_CASE("MIG-mode cards are never chosen and say so with their own reason", "[schedule][card][mig]") {
  // HAMi's MIG protocol (hami.io/vgpu-mig-allocations) is not implemented: the v2.10 plugin in MIG mode would
  // reject an entry without its MIG reservation, so such a card must never be picked.
  Snapshot s;
  DeviceInfo mig = card("GPU-mig");
  mig.mode = "mig";
  REQUIRE(s.upsert_node(node({.name = "mig-only", .cards = {mig}})).ok());
  json::object p = gpu_pod("p", "1", "1000", "10");
  Decision d = decide(s, p);
  CHECK_FALSE(d.scheduled);
  CHECK(d.message == "0/1 nodes are available: 1 CardMigModeUnsupported.");
  annotate(p, "nvidia.com/vgpu-mode", "mig");
  CHECK(decide(s, p).message == "0/1 nodes are available: 1 CardMigModeUnsupported.");
  DeviceInfo mig2 = card("GPU-mig-2");
  mig2.mode = "mig";
  REQUIRE(s.upsert_node(node({.name = "mixed", .cards = {mig2, card("GPU-plain")}})).ok());
  json::object q = gpu_pod("q", "1", "1000", "10");
  Decision e = decide(s, q);
  REQUIRE(e.scheduled);
  CHECK(e.node == "mixed");
  CHECK(uuid_of(e) == "GPU-plain");
}

TEST_CASE("time-slicing slots, exclusive requests and exhausted compute units", "[schedule][card]") {
  SECTION("count <= used: CardTimeSlicingExhausted") {
    Snapshot s;
    REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a", 81920, 100, "NVIDIA A100", 0, 2)}})).ok());
    REQUIRE(place(s, gpu_pod("p1", "1", "100", "1")).scheduled);
    REQUIRE(place(s, gpu_pod("p2", "1", "100", "1")).scheduled);
    CHECK(decide(s, gpu_pod("p3", "1", "100", "1")).message == "0/1 nodes are available: 1 CardTimeSlicingExhausted.");
  }
  SECTION("100 % cores on a used card: ExclusiveDeviceAllocateConflict") {
    Snapshot s;
    REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a")}})).ok());
    REQUIRE(place(s, gpu_pod("p1", "1", "100", "0")).scheduled);
    CHECK(decide(s, gpu_pod("p2", "1", "100", "100")).message ==
          "0/1 nodes are available: 1 ExclusiveDeviceAllocateConflict.");
  }
  SECTION("cores full and a 0-core request: CardComputeUnitsExhausted") {
    Snapshot s;
    REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a")}})).ok());
    REQUIRE(place(s, gpu_pod("p1", "1", "100", "60")).scheduled);
    REQUIRE(place(s, gpu_pod("p2", "1", "100", "40")).scheduled);
    CHECK(decide(s, gpu_pod("p3", "1", "100", "0")).message == "0/1 nodes are available: 1 CardComputeUnitsExhausted.");
  }
  SECTION("mutex policy: idle cards only") {
    Snapshot s;
    REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a")}})).ok());
    REQUIRE(place(s, gpu_pod("p1", "1", "100", "10")).scheduled);
    json::object p = gpu_pod("p2", "1", "100", "10");
    annotate(p, "hami.io/gpu-scheduler-policy", "mutex");
    CHECK(decide(s, p).message == "0/1 nodes are available: 1 ExclusiveDeviceAllocateConflict.");
  }
}

TEST_CASE("numa-bind keeps a container's cards on one NUMA node", "[schedule][card]") {
  Snapshot s;
  REQUIRE(
      s.upsert_node(node({.name = "n",
                          .cards = {card("GPU-0", 1000, 100, "NVIDIA A", 0), card("GPU-1", 1000, 100, "NVIDIA A", 1),
                                    card("GPU-2", 1000, 100, "NVIDIA A", 1)}}))
          .ok());
  // Make GPU-0 the least used so spread would pair it with a NUMA-1 card without numa-bind.
  REQUIRE(place(s, gpu_pod("x", "1", "10", "1")).scheduled);  // lands on GPU-0 (least used, lowest numa)
  json::object p = gpu_pod("p", "2", "100", "10");
  annotate(p, "nvidia.com/numa-bind", "true");
  Decision d = decide(s, p);
  REQUIRE(d.scheduled);
  std::vector<std::string> got{uuid_of(d, 0, 0), uuid_of(d, 0, 1)};
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<std::string>{"GPU-1", "GPU-2"});

  Snapshot one_each;
  REQUIRE(one_each
              .upsert_node(
                  node({.name = "n",
                        .cards = {card("GPU-0", 1000, 100, "NVIDIA A", 0), card("GPU-1", 1000, 100, "NVIDIA A", 1)}}))
              .ok());
  Decision f = decide(one_each, p);
  CHECK_FALSE(f.scheduled);
  CHECK(failure_of(f, "n").detail == "1/2 AllocatedCardsInsufficientRequest (asks 2 cards, 1 fit), 1/2 NumaNotFit");
}

TEST_CASE("containers accumulate on shared cards - init containers fit on a fresh copy - every slot kept",
          "[schedule][init]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a", 81920)}})).ok());
  json::object p = pod(
      "p", json::array{container("a", "1", "30000", "30"), container("none", ""), container("b", "1", "30000", "30")});
  spec(p)["initContainers"] = json::array{container("init", "1", "80000", "90")};
  Decision d = decide(s, p);
  REQUIRE(d.scheduled);
  REQUIRE(d.devices.size() == 4);  // init, a, none, b
  CHECK(d.devices[0] == ContainerDevices{{"GPU-a", "NVIDIA", 80000, 90}});
  CHECK(d.devices[1].size() == 1);
  CHECK(d.devices[2].empty());
  CHECK(d.devices[3].size() == 1);
  CHECK(encode_pod_devices(d.devices) == "GPU-a,NVIDIA,80000,90:;GPU-a,NVIDIA,30000,30:;;GPU-a,NVIDIA,30000,30:;");

  // A third 30000 MiB app container no longer fits: app containers accumulate.
  json::object q = pod("q", json::array{container("a", "1", "30000", "30"), container("b", "1", "30000", "30"),
                                        container("c", "1", "30000", "30")});
  Decision f = decide(s, q);
  CHECK_FALSE(f.scheduled);
  CHECK(f.message ==
        "0/1 nodes are available: 1 CardInsufficientMemory (asks 30000 MiB per card, largest free 21920 MiB).");
}

TEST_CASE("node policy: binpack picks the most used node, spread the least - per-pod override", "[schedule][score]") {
  Snapshot s;
  for (const char* n : {"n1", "n2", "n3"}) {
    REQUIRE(s.upsert_node(node({.name = n, .cards = {card(std::string("GPU-") + n)}})).ok());
  }
  REQUIRE(s.upsert_pod(placed_pod("u2", "n2", "GPU-n2,NVIDIA,40000,50:;")).ok());
  REQUIRE(s.upsert_pod(placed_pod("u3", "n3", "GPU-n3,NVIDIA,10000,10:;")).ok());
  CHECK(decide(s, gpu_pod("p", "1", "100", "1")).node == "n2");
  ScheduleOptions spread;
  spread.node_policy = "spread";
  CHECK(decide(s, gpu_pod("p", "1", "100", "1"), spread).node == "n1");
  json::object p = gpu_pod("p", "1", "100", "1");
  annotate(p, "hami.io/node-scheduler-policy", "spread");
  CHECK(decide(s, p).node == "n1");
  annotate(p, "hami.io/node-scheduler-policy", "binpack");
  CHECK(decide(s, p, spread).node == "n2");
  annotate(p, "hami.io/node-scheduler-policy", "something-else");  // unknown: binpack, as HAMi
  CHECK(decide(s, p, spread).node == "n2");
  // binpack skips a full node and takes the next most used.
  CHECK(decide(s, gpu_pod("p", "1", "50000", "1")).node == "n3");
}

TEST_CASE("lock-aware choice: a busy first choice gives way to the next node in policy order, boundedly",
          "[schedule][score]") {
  Snapshot s;
  for (const char* n : {"n1", "n2", "n3", "n4"}) {
    REQUIRE(s.upsert_node(node({.name = n, .cards = {card(std::string("GPU-") + n)}})).ok());
  }
  // binpack order: n2 (most used), n3, then the empty ones.
  REQUIRE(s.upsert_pod(placed_pod("u2", "n2", "GPU-n2,NVIDIA,40000,50:;")).ok());
  REQUIRE(s.upsert_pod(placed_pod("u3", "n3", "GPU-n3,NVIDIA,10000,10:;")).ok());
  std::set<std::string, std::less<>> busy_nodes;
  std::map<std::string, size_t, std::less<>> loads;  // when set, a node's load (busy_nodes then unused)
  std::function<size_t(std::string_view)> busy = [&](std::string_view n) -> size_t {
    if (!loads.empty()) {
      auto it = loads.find(n);
      return it == loads.end() ? 0 : it->second;
    }
    return busy_nodes.count(n);
  };
  ScheduleOptions o;
  o.busy = &busy;
  CHECK(decide(s, gpu_pod("p", "1", "100", "1"), o).node == "n2");  // nothing busy: the policy's choice
  busy_nodes = {"n2"};
  CHECK(decide(s, gpu_pod("p", "1", "100", "1"), o).node == "n3");
  busy_nodes = {"n2", "n3"};
  CHECK(decide(s, gpu_pod("p", "1", "100", "1"), o).node != "n2");
  // Every node equally busy: the policy's first choice stands (the pod queues on its lock).
  busy_nodes = {"n1", "n2", "n3", "n4"};
  CHECK(decide(s, gpu_pod("p", "1", "100", "1"), o).node == "n2");
  // Every node busy, unevenly: the least loaded one looked at, the first in policy order on ties (n3 before n1).
  loads = {{"n1", 1}, {"n2", 3}, {"n3", 1}, {"n4", 2}};
  CHECK(decide(s, gpu_pod("p", "1", "100", "1"), o).node == "n3");
  loads = {{"n1", 2}, {"n2", 3}, {"n3", 4}, {"n4", 2}};
  CHECK(decide(s, gpu_pod("p", "1", "100", "1"), o).node == "n1");  // binpack order: n2, n3, n1, n4
  // ... among the nodes the lookahead reached: with 2, n2 and n3 only.
  o.busy_lookahead = 2;
  CHECK(decide(s, gpu_pod("p", "1", "100", "1"), o).node == "n2");
  loads = {{"n1", 1}, {"n2", 3}, {"n3", 2}, {"n4", 1}};
  CHECK(decide(s, gpu_pod("p", "1", "100", "1"), o).node == "n3");
  loads.clear();
  o.busy_lookahead = 64;
  // Looking ahead is bounded: with a lookahead of 1 a busy first choice stays.
  busy_nodes = {"n2"};
  o.busy_lookahead = 1;
  CHECK(decide(s, gpu_pod("p", "1", "100", "1"), o).node == "n2");
}

TEST_CASE("card policy: spread picks the least used card, binpack the most used - per-pod override",
          "[schedule][score]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-0"), card("GPU-1"), card("GPU-2")}})).ok());
  REQUIRE(s.upsert_pod(placed_pod("u0", "n", "GPU-0,NVIDIA,30000,30:;")).ok());
  REQUIRE(s.upsert_pod(placed_pod("u2", "n", "GPU-2,NVIDIA,10000,10:;")).ok());
  CHECK(uuid_of(decide(s, gpu_pod("p", "1", "100", "1"))) == "GPU-1");
  ScheduleOptions binpack;
  binpack.gpu_policy = "binpack";
  CHECK(uuid_of(decide(s, gpu_pod("p", "1", "100", "1"), binpack)) == "GPU-0");
  json::object p = gpu_pod("p", "1", "100", "1");
  annotate(p, "hami.io/gpu-scheduler-policy", "binpack");
  CHECK(uuid_of(decide(s, p)) == "GPU-0");
  annotate(p, "hami.io/gpu-scheduler-policy", "spread");
  CHECK(uuid_of(decide(s, p, binpack)) == "GPU-1");
}

TEST_CASE("device-scoring-weights change which card binpack prefers", "[schedule][score]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-mem", 10000), card("GPU-core", 10000)}})).ok());
  REQUIRE(s.upsert_pod(placed_pod("m", "n", "GPU-mem,NVIDIA,8000,5:;")).ok());    // memory-heavy
  REQUIRE(s.upsert_pod(placed_pod("c", "n", "GPU-core,NVIDIA,1000,80:;")).ok());  // core-heavy
  json::object p = gpu_pod("p", "1", "100", "1");
  annotate(p, "hami.io/gpu-scheduler-policy", "binpack");
  annotate(p, "hami.io/device-scoring-weights", "slot=0,core=0,memory=1");
  CHECK(uuid_of(decide(s, p)) == "GPU-mem");
  annotate(p, "hami.io/device-scoring-weights", "slot=0,core=1,memory=0");
  CHECK(uuid_of(decide(s, p)) == "GPU-core");
}

TEST_CASE("ties are broken by name: same input, same placement", "[schedule][score]") {
  Snapshot s;
  for (const char* n : {"node-c", "node-a", "node-b"}) {
    REQUIRE(s.upsert_node(node({.name = n, .cards = {card(std::string(n) + "-1"), card(std::string(n) + "-0")}})).ok());
  }
  for (const char* policy : {"binpack", "spread"}) {
    ScheduleOptions o;
    o.node_policy = policy;
    Decision first = decide(s, gpu_pod("p", "1", "100", "1"), o);
    CHECK(first.node == "node-a");
    CHECK(uuid_of(first) == "node-a-0");  // equal cards, both NVML index 0: the lower UUID, not registration order
    for (int i = 0; i < 5; ++i) {
      Decision again = decide(s, gpu_pod("p", "1", "100", "1"), o);
      CHECK(again.node == first.node);
      CHECK(again.devices == first.devices);
    }
  }
}

TEST_CASE("quota: per-card value x cards across containers (HAMi counts one card)", "[schedule][quota]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-0"), card("GPU-1"), card("GPU-2")}})).ok());
  REQUIRE(s.upsert_quota(quota("q", "team", {{"limits.nvidia.com/gpumem", "50000"}})).ok());
  // 2 cards x 20000 = 40000 <= 50000: fits.
  Decision ok = place(s, gpu_pod("p1", "2", "20000", "10", "team"));
  REQUIRE(ok.scheduled);
  CHECK(s.quota_used("team") == QuotaAmounts{40000, 20, 2});
  // 1 more card x 20000 = 60000 > 50000 (HAMi would compare 20000 per card and admit).
  Decision over = decide(s, gpu_pod("p2", "1", "20000", "10", "team"));
  CHECK_FALSE(over.scheduled);
  CHECK(over.message == "0/1 nodes are available: 1 ResourceQuotaNotFit.");
  CHECK(failure_of(over, "n").detail == "3/3 ResourceQuotaNotFit");
  // Two containers of one pod add up too.
  Decision two =
      decide(s, pod("p3", json::array{container("a", "1", "6000", "1"), container("b", "1", "6000", "1")}, "team"));
  CHECK(two.message == "0/1 nodes are available: 1 ResourceQuotaNotFit.");
  CHECK(decide(s, gpu_pod("p4", "1", "10000", "1", "team")).scheduled);
  // Other namespaces are not limited.
  CHECK(decide(s, gpu_pod("p5", "1", "60000", "1", "other")).scheduled);
}

TEST_CASE("quota on gpucores and on the card count", "[schedule][quota]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-0"), card("GPU-1"), card("GPU-2")}})).ok());
  REQUIRE(
      s.upsert_quota(quota("q", "team", {{"limits.nvidia.com/gpucores", "100"}, {"limits.nvidia.com/gpu", "2"}})).ok());
  CHECK(decide(s, gpu_pod("a", "2", "100", "50", "team")).scheduled);        // 100 cores, 2 cards
  CHECK_FALSE(decide(s, gpu_pod("b", "2", "100", "60", "team")).scheduled);  // 120 cores
  CHECK_FALSE(decide(s, gpu_pod("c", "3", "100", "10", "team")).scheduled);  // 3 cards
  REQUIRE(s.upsert_quota(quota("q", "team", {{"limits.nvidia.com/gpu", "0"}})).ok());
  CHECK(decide(s, gpu_pod("d", "1", "100", "1", "team")).message == "0/1 nodes are available: 1 ResourceQuotaNotFit.");
}

TEST_CASE("failure message: kube-scheduler format, entries sorted as strings", "[schedule][message]") {
  CHECK(format_failure_message(
            3, {{"CardInsufficientMemory", 1}, {"node(s) didn't match Pod's node affinity/selector", 2}}) ==
        "0/3 nodes are available: 1 CardInsufficientMemory, 2 node(s) didn't match Pod's node affinity/selector.");
  // With figures, each reason's numbers follow it; reasons without figures are unchanged.
  std::map<std::string, Shortfall, std::less<>> figures{
      {"CardInsufficientMemory", Shortfall{"CardInsufficientMemory", 90000, 81920}},
      {"AllocatedCardsInsufficientRequest", Shortfall{"AllocatedCardsInsufficientRequest", 4, 3}}};
  CHECK(format_failure_message(
            3, {{"CardInsufficientMemory", 2}, {"AllocatedCardsInsufficientRequest", 1}, {"Too many pods", 1}},
            &figures) ==
        "0/3 nodes are available: 1 AllocatedCardsInsufficientRequest (asks 4 cards, at most 3 fit), 1 Too many "
        "pods, 2 CardInsufficientMemory (asks 90000 MiB per card, largest free 81920 MiB).");
  CHECK(format_failure_message(12, {{"B", 10}, {"A", 2}}) == "0/12 nodes are available: 10 B, 2 A.");
  CHECK(format_failure_message(0, {}) == "0/0 nodes are available.");
  Snapshot empty;
  Decision d = decide(empty, gpu_pod("p", "1"));
  CHECK_FALSE(d.scheduled);
  CHECK(d.message == "0/0 nodes are available.");
}

TEST_CASE("pods without a GPU request only need the node-level filters", "[schedule]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "cpu-only", .no_register = true})).ok());
  Decision d = decide(s, pod("p", json::array{json::object{{"name", "c"}}}));
  REQUIRE(d.scheduled);
  CHECK(d.node == "cpu-only");
  CHECK(d.devices == PodDevices{{}});
}

TEST_CASE("the index prunes nodes yet decides exactly as a full scan", "[schedule][index]") {
  Snapshot s;
  for (int i = 0; i < 200; ++i) {
    std::string n = "n" + std::to_string(1000 + i);
    REQUIRE(s.upsert_node(node({.name = n, .cards = {card(n + "-0", 24000), card(n + "-1", 24000)}})).ok());
    // Most nodes nearly full in memory; a few roomy ones.
    if (i % 50 != 7) {
      REQUIRE(s.upsert_pod(placed_pod(n + "-a", n, n + "-0,NVIDIA,20000,10:" + n + "-1,NVIDIA,20000,10:;")).ok());
    }
  }
  Decision d = decide(s, gpu_pod("p", "1", "10000", "10"));
  REQUIRE(d.scheduled);
  CHECK(d.node == "n1007");  // the roomy nodes are idle (score 0); binpack finds the lowest-named among fitting ones
  CHECK(d.nodes_visited < 10);
  CHECK(d.nodes_total == 200);
}

TEST_CASE("with and without the index: identical decisions on a random cluster", "[schedule][index]") {
  std::mt19937 rng(777);  // fixed seed: deterministic
  Snapshot s;
  std::uniform_int_distribution<int> mem_d(500, 30000), core_d(0, 40), slot_d(0, 5);
  for (int i = 0; i < 120; ++i) {
    std::string n = "node-" + std::to_string(i);
    std::vector<DeviceInfo> cs;
    for (int c = 0; c < 4; ++c) {
      cs.push_back(card(n + "-" + std::to_string(c), 40000, 100, "NVIDIA L40S", c / 2, 6));
    }
    REQUIRE(s.upsert_node(node({.name = n, .cards = cs})).ok());
    for (int c = 0; c < 4; ++c) {
      for (int k = slot_d(rng); k > 0; --k) {
        std::string alloc =
            cs[c].id + ",NVIDIA," + std::to_string(mem_d(rng) / 3) + "," + std::to_string(core_d(rng) / 2) + ":;";
        REQUIRE(s.upsert_pod(placed_pod(n + "-" + std::to_string(c) + "-" + std::to_string(k), n, alloc)).ok());
      }
    }
  }
  int scheduled = 0;
  for (int i = 0; i < 800; ++i) {
    std::string gpus = std::to_string(std::uniform_int_distribution<int>(1, 3)(rng));
    json::object p = gpu_pod("p" + std::to_string(i), gpus, std::to_string(mem_d(rng)), std::to_string(core_d(rng)));
    if (i % 3 == 0) {
      annotate(p, "hami.io/node-scheduler-policy", "spread");
    }
    if (i % 5 == 0) {
      annotate(p, "hami.io/gpu-scheduler-policy", "binpack");
    }
    auto info = parse_pod(p, s.devices());
    REQUIRE(info.ok());
    ScheduleOptions with, without;
    without.use_index = false;
    Decision a = schedule(s, info.value(), with);
    Decision b = schedule(s, info.value(), without);
    INFO("pod " << i);
    REQUIRE(a.scheduled == b.scheduled);
    CHECK(a.node == b.node);
    CHECK(a.devices == b.devices);
    CHECK(a.message == b.message);
    CHECK(a.nodes_visited <= b.nodes_visited);
    if (a.scheduled) {
      ++scheduled;
      REQUIRE(s.assume(info.value(), a.node, a.devices, 0).ok());  // the cluster fills up as it goes
    }
  }
  CHECK(scheduled > 100);
  CHECK(scheduled < 800);  // both outcomes exercised
}

TEST_CASE("the issue's example message: 1 CardInsufficientMemory and 2 affinity mismatches", "[schedule][message]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "gpu-a", .cards = {card("GPU-a", 16000)}, .labels = {{"pool", "gpu"}}})).ok());
  REQUIRE(s.upsert_node(node({.name = "cpu-1", .cards = {card("GPU-x")}, .labels = {{"pool", "cpu"}}})).ok());
  REQUIRE(s.upsert_node(node({.name = "cpu-2", .cards = {card("GPU-y")}, .labels = {{"pool", "cpu"}}})).ok());
  json::object p = gpu_pod("p", "1", "20000", "10");
  spec(p)["nodeSelector"] = json::object{{"pool", "gpu"}};
  Decision d = decide(s, p);
  CHECK_FALSE(d.scheduled);
  CHECK(d.message ==
        "0/3 nodes are available: 1 CardInsufficientMemory (asks 20000 MiB per card, largest free 16000 MiB), 2 "
        "node(s) didn't match Pod's node affinity/selector.");
  REQUIRE(d.failures.size() == 3);
  CHECK(d.failures[0].node == "cpu-1");  // name order
}

TEST_CASE("ephemeral-storage fits against the node's allocatable", "[schedule][node]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "n", .cards = {card("GPU-a")}})).ok());  // 100Gi ephemeral-storage
  json::object p = gpu_pod("p", "1", "100", "1");
  spec(p)["containers"].as_array()[0].as_object()["resources"].as_object()["requests"] =
      json::object{{"ephemeral-storage", "101Gi"}};
  CHECK(decide(s, p).message == "0/1 nodes are available: 1 Insufficient ephemeral-storage.");
  spec(p)["containers"].as_array()[0].as_object()["resources"].as_object()["requests"] =
      json::object{{"ephemeral-storage", "99Gi"}};
  CHECK(decide(s, p).scheduled);
}

TEST_CASE("FilteringFailed note: HAMi's format, reasons sorted with their nodes", "[schedule][message]") {
  Decision f;
  f.failures = {{"a", {"CardInsufficientCore"}, "1/1 CardInsufficientCore"},
                {"b", {"CardInsufficientCore", "CardInsufficientMemory"}, ""},
                {"c", {"node unregistered"}, "node unregistered"}};
  CHECK(filtering_failed_note(f) ==
        "no available node, 3 nodes do not meet: 2 nodes CardInsufficientCore(a, b); 1 nodes "
        "CardInsufficientMemory(b); 1 nodes node unregistered(c)");
  CHECK(filtering_failed_note(Decision{}) == "no available node, 0 nodes do not meet");
}

TEST_CASE("FilteringFailed note: at most 10 node names per reason", "[schedule][message]") {
  Decision f;
  for (int i = 0; i < 12; ++i) {
    f.failures.push_back({"n" + std::to_string(10 + i), {"CardInsufficientMemory"}, ""});
  }
  CHECK(filtering_failed_note(f) ==
        "no available node, 12 nodes do not meet: 12 nodes CardInsufficientMemory(n10, n11, n12, n13, n14, n15, "
        "n16, n17, n18, n19, ...)");
}

TEST_CASE("FilteringFailed note of a real decision names every node that failed", "[schedule][message]") {
  Snapshot s;
  REQUIRE(s.upsert_node(node({.name = "small", .cards = {card("GPU-s", 2000)}})).ok());
  REQUIRE(s.upsert_node(node({.name = "plain", .no_register = true})).ok());
  Decision d = decide(s, gpu_pod("p", "1", "3000", "30"));
  REQUIRE_FALSE(d.scheduled);
  CHECK(filtering_failed_note(d) ==
        "no available node, 2 nodes do not meet: 1 nodes CardInsufficientMemory(small); 1 nodes node "
        "unregistered(plain)");
}
