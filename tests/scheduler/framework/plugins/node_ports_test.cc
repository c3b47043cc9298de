// NodePorts on its own and through the profile. Asserts kubernetes/kubernetes
// pkg/scheduler/framework/plugins/nodeports/node_ports.go (PreFilter collects the app containers' hostPorts, Skip
// when none; Filter fails Unschedulable with ErrReason "node(s) didn't have free ports for the requested pod
// ports" when HostPortInfo.CheckConflict finds the same protocol and port with the same hostIP or 0.0.0.0 on
// either side, pkg/scheduler/framework/types.go) and node_ports_test.go's cases.
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using framework::Code;
namespace json = boost::json;

TEST_CASE("NodePorts Filter: per-node verdicts, wildcard hostIP, protocols, containerPort alone") {
  Snapshot s = nodes_snapshot({NodeSpec{"busy", {card("GPU-1")}}, NodeSpec{"free", {card("GPU-2")}}});
  REQUIRE(s.upsert_pod(bound(R"({"metadata":{"name":"a","namespace":"default"},"spec":{"containers":[{"name":"c",
      "image":"x","ports":[{"containerPort":53,"hostPort":53,"protocol":"UDP"},
                           {"containerPort":80,"hostPort":8080,"hostIP":"127.0.0.1"}]}]}})",
                             "busy")));
  PluginHarness h(framework::make_node_ports());
  auto want = [](const std::string& port) {
    return pod_info(J(R"({"metadata":{"name":"b","namespace":"default"},"spec":{"containers":[{"name":"c",
        "image":"x","ports":[)" +
                      port + "]}]}}"));
  };
  CHECK(h.run(s, want(R"({"containerPort":80})")).pre_filter.code == Code::skip);  // no hostPort

  PluginResult tcp = h.run(s, want(R"({"containerPort":80,"hostPort":8080})"));  // 0.0.0.0 vs 127.0.0.1
  CHECK(tcp.filter.at("busy").code == Code::unschedulable);
  CHECK(tcp.reasons("busy") == "node(s) didn't have free ports for the requested pod ports");
  CHECK(tcp.passes("free"));
  CHECK(h.run(s, want(R"({"containerPort":80,"hostPort":8080,"hostIP":"127.0.0.2"})")).passes("busy"));
  CHECK_FALSE(h.run(s, want(R"({"containerPort":80,"hostPort":8080,"hostIP":"127.0.0.1"})")).passes("busy"));
  CHECK_FALSE(h.run(s, want(R"({"containerPort":53,"hostPort":53,"protocol":"UDP"})")).passes("busy"));
  CHECK(h.run(s, want(R"({"containerPort":53,"hostPort":53})")).passes("busy"));  // TCP vs UDP
  CHECK(h.run(s, want(R"({"containerPort":53,"hostPort":53,"protocol":"SCTP"})")).passes("busy"));
}

TEST_CASE("NodePorts: same hostPort clashes, other protocol or distinct hostIPs do not") {
  Snapshot s = cluster({NodeSpec{"n1", {card("GPU-1")}}});
  REQUIRE(s.upsert_pod(P(R"({"metadata":{"name":"a"},"spec":{"nodeName":"n1","containers":[{"name":"c","image":"x",
      "ports":[{"containerPort":80,"hostPort":8080,"hostIP":"10.0.0.1"}]}]}})")));
  auto want = [](std::string port) {
    return P(R"({"metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"x","ports":[)" + port + "]}]}}");
  };
  Decision d = decide(s, want(R"({"containerPort":80,"hostPort":8080})"));
  CHECK_FALSE(d.scheduled);
  CHECK(d.message == "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports.");
  CHECK(decide(s, want(R"({"containerPort":80,"hostPort":8080,"protocol":"UDP"})")).scheduled);
  CHECK(decide(s, want(R"({"containerPort":80,"hostPort":8080,"hostIP":"10.0.0.2"})")).scheduled);
  CHECK_FALSE(decide(s, want(R"({"containerPort":80,"hostPort":8080,"hostIP":"10.0.0.1"})")).scheduled);
  CHECK(decide(s, want(R"({"containerPort":8080})")).scheduled);
}
