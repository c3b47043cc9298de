// The default profile across plugins through schedule(): decisions the loop has assumed but the API has not
// confirmed yet count for every plugin (the per-plugin behaviour is in plugins/<plugin>_test.cc).
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using framework::Code;
namespace json = boost::json;

TEST_CASE("NodePorts and InterPodAffinity see an assumed (not yet bound) GPU pod: the two reported bugs") {
  // The loop assumes each decision before the API shows it; the next decision must already see its ports and
  // labels, or a burst of replicas lands on one node.
  Snapshot s = cluster({NodeSpec{"n1", {card("GPU-1")}}});
  auto gpu_pod = [](std::string name, std::string extra) {
    return P(R"({"metadata":{"name":")" + name + R"(","namespace":"default","labels":{"app":"web"}},"spec":{)" + extra +
             R"("containers":[{"name":"c","image":"x","ports":[{"containerPort":80,"hostPort":8080}],
             "resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"1000"}}}]}})");
  };
  auto first = parse_pod(gpu_pod("web-1", ""), gpuslice::DeviceConfig{});
  REQUIRE(first.ok());
  Decision d1 = schedule(s, *first, ScheduleOptions{});
  REQUIRE(d1.scheduled);
  REQUIRE(s.assume(*first, d1.node, d1.devices, 0));
  Decision d2 = decide(s, gpu_pod("web-2", ""));
  CHECK_FALSE(d2.scheduled);
  CHECK(d2.message == "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports.");
  // hostIP 0.0.0.0 (the default) clashes with any address; two specific addresses do not clash.
  auto at = [&](std::string name, std::string ip) {
    return P(R"({"metadata":{"name":")" + name + R"("},"spec":{"containers":[{"name":"c","image":"x",
        "ports":[{"containerPort":80,"hostPort":9090,"hostIP":")" +
             ip + R"("}]}]}})");
  };
  REQUIRE(s.upsert_pod([&] {
    auto p = at("bound", "127.0.0.1");
    p["spec"].as_object()["nodeName"] = "n1";
    return p;
  }()));
  CHECK_FALSE(decide(s, at("wild", "0.0.0.0")).scheduled);
  CHECK(decide(s, at("other", "127.0.0.2")).scheduled);
  CHECK_FALSE(decide(s, at("same", "127.0.0.1")).scheduled);

  // Anti-affinity through assume(): the second replica waits.
  Snapshot t = cluster({NodeSpec{"n1", {card("GPU-1")}}});
  auto rep = parse_pod(P(fill(kWeb, "web-1", "")), gpuslice::DeviceConfig{});
  REQUIRE(rep.ok());
  Decision r1 = schedule(t, *rep, ScheduleOptions{});
  REQUIRE(r1.scheduled);
  REQUIRE(t.assume(*rep, r1.node, r1.devices, 0));
  Decision r2 = decide(t, P(fill(kWeb, "web-2", "")));
  CHECK_FALSE(r2.scheduled);
  CHECK(r2.message == "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules.");
  // A pod with no GPU counts as well (every pod on the node, GPU or not).
  Snapshot u = cluster({NodeSpec{"n1", {card("GPU-1")}}});
  REQUIRE(u.upsert_pod(P(R"({"metadata":{"name":"cpu-web","namespace":"default","labels":{"app":"web"}},
      "spec":{"nodeName":"n1","containers":[{"name":"c","image":"x"}]}})")));
  CHECK(decide(u, P(fill(kWeb, "web-9", ""))).message ==
        "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules.");
}

namespace {
json::object gpu_cpu_pod(const std::string& name, const std::string& cpu, const std::string& extra_spec = "") {
  return P(R"({"metadata":{"name":")" + name + R"(","namespace":"default"},"spec":{)" + extra_spec +
           R"("containers":[{"name":"c","image":"x","resources":{"requests":{"cpu":")" + cpu +
           R"(","memory":"1Gi"},"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"1000"}}}]}})");
}
json::object cpu_only(const std::string& name, const std::string& node, const std::string& cpu) {
  return P(R"({"metadata":{"name":")" + name + R"(","namespace":"default"},"spec":{"nodeName":")" + node +
           R"(","containers":[{"name":"c","image":"x","resources":{"requests":{"cpu":")" + cpu +
           R"(","memory":"1Gi"}}}]},"status":{"phase":"Running"}})");
}
Decision decide_with(const Snapshot& s, const json::object& pod, const framework::ScoreWeights& w,
                     std::string node_policy = "binpack", bool default_spreading = true) {
  auto info = parse_pod(pod, gpuslice::DeviceConfig{});
  REQUIRE(info.ok());
  auto profile = framework::Framework::default_profile(w, default_spreading);
  ScheduleOptions o;
  o.node_policy = std::move(node_policy);
  o.profile = profile.get();
  return schedule(s, *info, o);
}
}  // namespace

TEST_CASE("Scores: a configured weight changes the decision (TaintToleration 3 vs NodeAffinity)") {
  // n1 carries a PreferNoSchedule taint but the label the pod prefers (weight 100): kube-scheduler's defaults
  // give n2 3 x 100 (no intolerable taint) against n1's 2 x 100 (node affinity): n2. NodeAffinity at 5: n1.
  NodeSpec n1{"n1", {card("GPU-1")}, {{"disk", "ssd"}}};
  n1.taints.push_back(json::object{{"key", "busy"}, {"value", "yes"}, {"effect", "PreferNoSchedule"}});
  Snapshot s = cluster({n1, NodeSpec{"n2", {card("GPU-2")}}});
  json::object pod =
      gpu_cpu_pod("p", "1", R"("affinity":{"nodeAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[
      {"weight":100,"preference":{"matchExpressions":[{"key":"disk","operator":"In","values":["ssd"]}]}}]}},)");
  framework::ScoreWeights defaults;
  CHECK(decide_with(s, pod, defaults).node == "n2");
  framework::ScoreWeights heavy_affinity;
  heavy_affinity.node_affinity = 5;
  CHECK(decide_with(s, pod, heavy_affinity).node == "n1");
  framework::ScoreWeights no_taint_score;
  no_taint_score.taint_toleration = 0;
  CHECK(decide_with(s, pod, no_taint_score).node == "n1");
}

TEST_CASE("Scores: the GPU node policy stays above LeastAllocated/BalancedAllocation, which decide among equals") {
  // n1 holds a GPU pod (HAMi node score above 0) and most of its cpu is taken by a CPU-only pod; n2 and n3 are
  // empty of GPU pods, n2 has more cpu requested than n3.
  Snapshot s =
      cluster({NodeSpec{"n1", {card("GPU-n1")}}, NodeSpec{"n2", {card("GPU-n2")}}, NodeSpec{"n3", {card("GPU-n3")}}});
  REQUIRE(s.upsert_pod(placed_pod("g", "n1", "GPU-n1,NVIDIA,10000,10:;")));
  REQUIRE(s.upsert_pod(cpu_only("busy1", "n1", "24")));
  REQUIRE(s.upsert_pod(cpu_only("busy2", "n2", "8")));
  framework::ScoreWeights w;
  // binpack: n1 although LeastAllocated and BalancedAllocation rank it last (HAMi's extender returns one node).
  Decision bin = decide_with(s, gpu_cpu_pod("p", "1"), w);
  CHECK(bin.node == "n1");
  CHECK(bin.nodes_visited == 1);  // the best GPU group is n1 alone: nothing else is examined
  // spread: n2 and n3 tie on the GPU node score (0); the resource scores pick n3, the least requested.
  CHECK(decide_with(s, gpu_cpu_pod("p", "1"), w, "spread").node == "n3");
  // Without resource scores the tie goes to the policy order (name): n2.
  framework::ScoreWeights off;
  off.node_resources_fit = 0;
  off.node_resources_balanced_allocation = 0;
  Decision plain = decide_with(s, gpu_cpu_pod("p", "1"), off, "spread");
  CHECK(plain.node == "n2");
  CHECK(plain.nodes_visited == 1);
  // A pod without a GPU request is scored as kube-scheduler does: all weighted scores in one sum, n3.
  CHECK(decide_with(s, P(R"({"metadata":{"name":"c","namespace":"default"},"spec":{"containers":[{"name":"c",
      "image":"x","resources":{"requests":{"cpu":"1","memory":"1Gi"}}}]}})"),
                    w)
            .node == "n3");
  // Preferences still rank above the GPU policy: a preferred node affinity to n2 wins over binpack's n1.
  json::object to_n2 =
      gpu_cpu_pod("p", "1", R"("affinity":{"nodeAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[
      {"weight":1,"preference":{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"In","values":["n2"]}]}}]}},)");
  CHECK(decide_with(s, to_n2, w).node == "n2");
}

TEST_CASE("Scores: the lock-aware choice looks past a busy first choice in rank order") {
  Snapshot s =
      cluster({NodeSpec{"n1", {card("GPU-n1")}}, NodeSpec{"n2", {card("GPU-n2")}}, NodeSpec{"n3", {card("GPU-n3")}}});
  REQUIRE(s.upsert_pod(cpu_only("busy2", "n2", "8")));
  auto info = parse_pod(gpu_cpu_pod("p", "1"), gpuslice::DeviceConfig{});
  REQUIRE(info.ok());
  std::function<size_t(std::string_view)> busy = [](std::string_view n) -> size_t { return n == "n1" ? 1 : 0; };
  ScheduleOptions o;
  o.busy = &busy;
  // All three tie on the GPU node score; resources rank n1 = n3 > n2; n1 is busy: n3.
  Decision d = schedule(s, *info, o);
  CHECK(d.node == "n3");
  busy = [](std::string_view n) -> size_t { return n != "n2" ? 1 : 0; };
  CHECK(schedule(s, *info, o).node == "n2");
  busy = [](std::string_view) -> size_t { return 1; };
  CHECK(schedule(s, *info, o).node == "n1");  // all equally busy: the first choice stands
  busy = [](std::string_view n) -> size_t { return n == "n1" ? 2 : 1; };
  CHECK(schedule(s, *info, o).node == "n3");  // all busy: the least loaded, in rank order (n3 before n2)
}

TEST_CASE("Scores: default spreading ranks after the GPU node policy for a GPU pod, above the resource scores") {
  // A Service selects app=web, so an app=web pod without constraints of its own gets kube-scheduler's system
  // default spreading (hostname maxSkew 3, zone maxSkew 5, ScheduleAnyway). n1 holds a GPU replica; n2 a
  // CPU-only replica (1 cpu); n3 a larger pod of another app (4 cpu).
  Snapshot s =
      cluster({NodeSpec{"n1", {card("GPU-n1")}}, NodeSpec{"n2", {card("GPU-n2")}}, NodeSpec{"n3", {card("GPU-n3")}}});
  REQUIRE(s.objects().spread_sources().upsert_service(
      J(R"({"metadata":{"name":"web","namespace":"default"},"spec":{"selector":{"app":"web"}}})")));
  json::object g = placed_pod("g", "n1", "GPU-n1,NVIDIA,10000,10:;");
  g["metadata"].as_object()["labels"] = json::object{{"app", "web"}};
  REQUIRE(s.upsert_pod(g));
  json::object replica = cpu_only("web-cpu", "n2", "1");
  replica["metadata"].as_object()["labels"] = json::object{{"app", "web"}};
  REQUIRE(s.upsert_pod(replica));
  REQUIRE(s.upsert_pod(cpu_only("other", "n3", "4")));
  json::object pod = gpu_cpu_pod("web-new", "1");
  pod["metadata"].as_object()["labels"] = json::object{{"app", "web"}};
  framework::ScoreWeights w;
  // binpack: n1, whose card is in use, although it already runs a replica: a spreading the pod did not ask for
  // does not undo HAMi's binpack.
  CHECK(decide_with(s, pod, w).node == "n1");
  // spread: n2 and n3 tie on the GPU node score. The resource scores alone prefer n2 (1 cpu requested against
  // 4); default spreading (weight 2 x 34 points) prefers n3, which runs no replica.
  CHECK(decide_with(s, pod, w, "spread").node == "n3");
  CHECK(decide_with(s, pod, w, "spread", false).node == "n2");
  // Without the Service there is no default selector, hence no default spreading: n2.
  REQUIRE(s.objects().spread_sources().remove_service("default", "web"));
  CHECK(decide_with(s, pod, w, "spread").node == "n2");
  // Constraints of its own replace the defaults (here: a preference for the replica's node, zone-free).
  REQUIRE(s.objects().spread_sources().upsert_service(
      J(R"({"metadata":{"name":"web","namespace":"default"},"spec":{"selector":{"app":"web"}}})")));
  json::object own = gpu_cpu_pod("web-own", "1", R"("topologySpreadConstraints":[{"maxSkew":1,
      "topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"ScheduleAnyway",
      "labelSelector":{"matchLabels":{"app":"none"}}}],)");
  own["metadata"].as_object()["labels"] = json::object{{"app", "web"}};
  CHECK(decide_with(s, own, w, "spread").node == "n2");
}
