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
