// NodeResourcesFit on its own. Asserts kubernetes/kubernetes pkg/scheduler/framework/plugins/noderesources/fit.go
// (fitsRequest: "Too many pods" when pods+1 > allocatable pods; "Insufficient <resource>" for cpu, memory and
// ephemeral-storage when requested + asked > allocatable, a zero request never failing; every insufficient
// resource a reason of its own; Unschedulable, not unresolvable) and fit_test.go's cases; its Score with the
// default strategy, least_allocated.go / least_allocated_test.go: per resource (allocatable - requested) x 100 /
// allocatable over the node's and the pod's non-zero requests (resource_allocation.go: a container naming no
// request counts 100m cpu and 200 MiB memory), cpu and memory weight 1, 0 when over allocatable.
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using framework::Code;

namespace {
boost::json::object requesting(const std::string& name, const std::string& cpu, const std::string& mem,
                               const std::string& eph = "") {
  boost::json::object req{{"cpu", cpu}, {"memory", mem}};
  if (!eph.empty()) {
    req["ephemeral-storage"] = eph;
  }
  return boost::json::object{
      {"metadata", {{"name", name}, {"namespace", "default"}}},
      {"spec",
       {{"containers",
         boost::json::array{boost::json::object{{"name", "c"}, {"image", "x"}, {"resources", {{"requests", req}}}}}}}}};
}
}  // namespace

TEST_CASE("NodeResourcesFit: each insufficient resource is a reason, Too many pods, zero requests fit") {
  NodeSpec small{"small", {card("GPU-1")}};
  small.cpu = "2";
  small.memory = "4Gi";
  small.pods = "2";
  Snapshot s = nodes_snapshot({small});
  boost::json::object bound = requesting("used", "1500m", "3Gi");
  spec(bound)["nodeName"] = "small";
  boost::json::object st{{"phase", "Running"}};
  bound["status"] = st;
  REQUIRE(s.upsert_pod(bound));
  PluginHarness h(framework::make_node_resources_fit());

  CHECK(h.run(s, pod_info(requesting("fits", "500m", "1Gi"))).passes("small"));
  PluginResult cpu = h.run(s, pod_info(requesting("cpu", "501m", "1Gi")));
  CHECK(cpu.filter.at("small").code == Code::unschedulable);
  CHECK(cpu.reasons("small") == "Insufficient cpu");
  CHECK(h.run(s, pod_info(requesting("both", "1", "2Gi"))).reasons("small") == "Insufficient cpu, Insufficient memory");
  CHECK(h.run(s, pod_info(requesting("eph", "0", "0", "200Gi"))).reasons("small") == "Insufficient ephemeral-storage");

  // The second pod fills allocatable pods (2): a third does not fit even with no requests.
  boost::json::object second = requesting("used-2", "0", "0");
  spec(second)["nodeName"] = "small";
  second["status"] = st;
  REQUIRE(s.upsert_pod(second));
  CHECK(h.run(s, pod_info(requesting("zero", "0", "0"))).reasons("small") == "Too many pods");
  CHECK(h.run(s, pod_info(requesting("all", "1", "2Gi"))).reasons("small") ==
        "Insufficient cpu, Insufficient memory, Too many pods");
}

TEST_CASE("NodeResourcesFit Score: LeastAllocated over non-zero cpu and memory requests") {
  NodeSpec a{"a", {card("GPU-1")}};
  a.cpu = "4";
  a.memory = "8Gi";
  NodeSpec b = a;
  b.name = "b";
  Snapshot s = nodes_snapshot({a, b});
  boost::json::object used = requesting("used", "1", "2Gi");
  spec(used)["nodeName"] = "a";
  used["status"] = boost::json::object{{"phase", "Running"}};
  REQUIRE(s.upsert_pod(used));
  PluginHarness h(framework::make_node_resources_fit(1));
  CHECK(h.plugin().weight == 1);
  CHECK(h.plugin().resource_score);

  // a: cpu (4000 - 2000) x 100 / 4000 = 50, memory (8 - 4) / 8 = 50; b: 75 and 75.
  PodInfo p = pod_info(requesting("p", "1", "2Gi"));
  h.run(s, p);
  auto sc = h.scores(s, p, {"a", "b"});
  REQUIRE(sc);
  CHECK(*sc == std::map<std::string, int64_t>{{"a", 50}, {"b", 75}});

  // A pod naming no request counts 100m and 200 MiB (and so does one already on the node):
  // b: cpu 3900 x 100 / 4000 = 97, memory (8192 - 200) x 100 / 8192 = 97.
  PodInfo none = pod_info(J(R"({"metadata":{"name":"none","namespace":"default"},
      "spec":{"containers":[{"name":"c","image":"x"}]}})"));
  CHECK(none.facts->nonzero_cpu_milli == 100);
  CHECK(none.facts->nonzero_memory_bytes == 200LL * 1024 * 1024);
  h.run(s, none);
  CHECK(h.scores(s, none, {"b"})->at("b") == 97);
  boost::json::object idle = J(R"({"metadata":{"name":"idle","namespace":"default"},
      "spec":{"nodeName":"b","containers":[{"name":"c","image":"x"},{"name":"d","image":"x"}]},
      "status":{"phase":"Running"}})");
  REQUIRE(s.upsert_pod(idle));
  CHECK(s.find_node("b")->nonzero_requested.cpu_milli == 200);
  CHECK(s.find_node("b")->requested.cpu_milli == 0);
  // b: cpu (4000 - 300) x 100 / 4000 = 92, memory (8192 - 600) x 100 / 8192 = 92.
  CHECK(h.scores(s, none, {"b"})->at("b") == 92);
  REQUIRE(s.remove_pod("default", "idle"));
  CHECK(s.find_node("b")->nonzero_requested.cpu_milli == 0);

  // Over allocatable scores 0 for that resource: cpu 0, memory (8 - 2 - 2) / 8 = 50 -> 25.
  PodInfo big = pod_info(requesting("big", "8", "2Gi"));
  h.run(s, big);
  CHECK(h.scores(s, big, {"a"})->at("a") == 25);
}

TEST_CASE("NodeResourcesFit: non-zero requests are per container, max(app sum, largest init) + overhead") {
  PodInfo p = pod_info(J(R"({"metadata":{"name":"p","namespace":"default"},"spec":{
      "initContainers":[{"name":"i","image":"x","resources":{"requests":{"cpu":"500m"}}}],
      "containers":[{"name":"a","image":"x","resources":{"requests":{"cpu":"100m","memory":"1Gi"}}},
                    {"name":"b","image":"x","resources":{"limits":{"memory":"1Gi"}}}],
      "overhead":{"cpu":"10m"}}})"));
  // app cpu 100m + 100m (b names none) = 200m < init 500m; + 10m overhead. Memory 1Gi + 1Gi (limits count as
  // requests) vs init's default 200 MiB.
  CHECK(p.facts->nonzero_cpu_milli == 510);
  CHECK(p.facts->nonzero_memory_bytes == 2LL * 1024 * 1024 * 1024);
  // An explicit zero is a request of zero, not a missing one.
  PodInfo zero = pod_info(requesting("zero", "0", "0"));
  CHECK(zero.facts->nonzero_cpu_milli == 0);
  CHECK(zero.facts->nonzero_memory_bytes == 0);
}
