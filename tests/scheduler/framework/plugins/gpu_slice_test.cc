// GpuSlice on its own: HAMi's device fit as a filter (no upstream kube-scheduler plugin; the behaviour asserted is
// HAMi v2.10's, Project-HAMi/HAMi pkg/device/nvidia/device.go Fit and pkg/scheduler/score.go, docs in
// /work/shared/docs/hami-protocol.md, and the reasons with numbers of issue 11), Reserve recording the cards.
#include "tests/scheduler/framework/plugins/plugin_harness.h"

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using framework::Code;
namespace json = boost::json;

TEST_CASE("GpuSlice Filter: per-node card reasons with their numbers, Reserve records the cards") {
  NodeSpec unreg{"unreg", {card("GPU-u")}};
  unreg.no_register = true;
  Snapshot s =
      nodes_snapshot({NodeSpec{"big", {card("GPU-b", 81920)}}, NodeSpec{"small", {card("GPU-s", 20000)}}, unreg});
  PluginHarness h(framework::make_gpu_slice());
  PodInfo p = pod_info(gpu_pod("p", "1", "30000"));
  PluginResult r = h.run(s, p);
  REQUIRE(r.filter_ran);
  CHECK(r.passes("big"));
  CHECK(r.filter.at("small").code == Code::unschedulable);
  CHECK(r.reasons("small") == "CardInsufficientMemory");
  REQUIRE(r.filter.at("small").shortfalls.size() == 1);
  CHECK(r.filter.at("small").shortfalls[0].asked == 30000);
  CHECK(r.filter.at("small").shortfalls[0].best == 20000);
  CHECK(r.reasons("unreg") == "node unregistered");

  // Through the profile: the summary keeps the short reason first, then the numbers.
  Snapshot only_small = nodes_snapshot({NodeSpec{"small", {card("GPU-s", 20000)}}});
  Decision d = schedule(only_small, p, ScheduleOptions{});
  CHECK(d.message ==
        "0/1 nodes are available: 1 CardInsufficientMemory (asks 30000 MiB per card, largest free 20000 MiB).");
  Decision ok = schedule(s, p, ScheduleOptions{});
  REQUIRE(ok.scheduled);
  CHECK(ok.node == "big");
  REQUIRE(ok.devices.size() == 1);
  REQUIRE(ok.devices[0].size() == 1);
  CHECK(ok.devices[0][0].uuid == "GPU-b");
  CHECK(ok.devices[0][0].mem_mib == 30000);
}
