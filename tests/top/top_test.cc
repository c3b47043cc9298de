// `gpuslice top`'s pure half (top/top.h): the view from listed objects as the API holds them after the seed scenario
// (examples/tenant-a), and its tables.
#include "top/top.h"

#include "scheduler/allocation.h"
#include "scheduler/pod_info.h"
#include "scheduler/schedule.h"
#include "simulate/manifest.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include "tests/support/process.h"

#include <fstream>
#include <sstream>

using namespace gpuslice;
using namespace gpuslice::scheduler;
using gpuslice::simulate::parse_manifests;
namespace json = boost::json;

namespace {

std::string read(const std::string& rel) {
  return gpuslice::testing::slurp(std::string(GPUSLICE_SOURCE_DIR) + "/" + rel);
}

/// The Node and Pod objects as the API server holds them after the seed scenario: the webhook set
/// schedulerName, the scheduler annotated and bound share-1..3, and reported share-4 and big unschedulable.
struct Listed {
  std::vector<json::object> nodes, pods;
};

Listed seed_objects() {
  Listed out;
  Snapshot snap;
  auto nodes = parse_manifests(read("examples/tenant-a/nodes.yaml"), "nodes.yaml");
  REQUIRE(nodes.ok());
  for (const auto& m : nodes.value()) {
    REQUIRE(snap.upsert_node(m.object).ok());
    out.nodes.push_back(m.object);
  }
  auto pods = parse_manifests(read("examples/tenant-a/pods.yaml"), "pods.yaml");
  REQUIRE(pods.ok());
  int64_t created = 1000;
  for (const auto& m : pods.value()) {
    json::object pod = m.object;
    pod["spec"].as_object()["schedulerName"] = "gpuslice-scheduler";
    pod["metadata"].as_object()["creationTimestamp"] =
        "1970-01-01T00:16:" + std::to_string(40 + (created++ - 1000)) + "Z";
    auto info = parse_pod(pod, snap.devices());
    REQUIRE(info.ok());
    Decision d = schedule(snap, info.value(), ScheduleOptions{});
    if (d.scheduled) {
      REQUIRE(snap.assume(info.value(), d.node, d.devices, 1000).ok());
      json::object& meta = pod["metadata"].as_object();
      meta["annotations"] = allocation_annotations(d.node, d.devices, 1000);
      meta["annotations"].as_object()[kBindPhaseAnnotation] = kBindPhaseSuccess;
      pod["spec"].as_object()["nodeName"] = d.node;
      pod["status"] = json::object{{"phase", "Running"}};
    } else {
      pod["status"] = json::object{
          {"phase", "Pending"},
          {"conditions",
           json::array{json::object{
               {"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"}, {"message", d.message}}}}};
    }
    out.pods.push_back(std::move(pod));
  }
  return out;
}

}  // namespace

TEST_CASE("top: the seed scenario from the API alone: the A100 holds share-1..3, 60000/81920 MiB and two pending") {
  Listed l = seed_objects();
  std::vector<std::string> warnings;
  status::StatusView v =
      top::build_view_from_objects(l.nodes, l.pods, DeviceConfig{}, "gpuslice-scheduler", 1100, &warnings);
  CHECK(warnings.empty());
  CHECK(v.state.source == "api");
  REQUIRE(v.nodes.size() == 1);
  REQUIRE(v.nodes[0].cards.size() == 1);
  const status::CardView& c = v.nodes[0].cards[0];
  CHECK(c.mem_used_mib == 60000);
  CHECK(c.mem_total_mib == 81920);
  CHECK(c.cores_used == 90);
  REQUIRE(c.holders.size() == 3);
  CHECK(c.holders[0].pod == "share-1");
  CHECK(c.holders[2].pod == "share-3");
  CHECK(c.holders[1].container == "cuda");
  CHECK_FALSE(c.holders[0].assumed);
  REQUIRE(v.pending.size() == 2);
  CHECK(v.pending[0].name == "share-4");  // created first
  CHECK(v.pending[0].reason == "CardInsufficientCore");
  CHECK(v.pending[1].name == "big");
  CHECK(v.pending[1].reason == "CardInsufficientMemory");
  CHECK(v.pending[1].age_seconds == 1100 - 1004);

  // Another scheduler's pending pods are not ours to explain.
  status::StatusView other = top::build_view_from_objects(l.nodes, l.pods, DeviceConfig{}, "hami-scheduler", 1100);
  CHECK(other.pending.empty());
  CHECK(other.nodes[0].cards[0].holders.size() == 3);  // what holds a card is counted whoever placed it
}

TEST_CASE("top: tables show the card bar, the holders and the pending reasons, wide adds UUID and message") {
  Listed l = seed_objects();
  status::StatusView v = top::build_view_from_objects(l.nodes, l.pods, DeviceConfig{}, "gpuslice-scheduler", 1100);
  std::string all = top::render_top(v, top::TopView::all, false, status::NodeSort::name);
  CHECK_THAT(all, Catch::StartsWith("NODES (1, 1 cards, memory 60000/81920 MiB, cores 90/100, stranded -)\n"));
  CHECK_THAT(all, Catch::Contains("CARDS\n"));
  CHECK_THAT(all, Catch::Contains("PODS\n"));
  CHECK_THAT(all, Catch::Contains("\nPENDING ("));
  CHECK_THAT(all, Catch::Contains("60000/81920"));
  CHECK_THAT(all, Catch::Contains("[#######...]"));  // 60000/81920 = 73 %: 7 of 10 cells
  CHECK_THAT(all, Catch::Contains("CardInsufficientCore"));
  CHECK_THAT(all, Catch::Contains("CardInsufficientMemory"));
  for (const char* pod : {"share-1", "share-2", "share-3", "share-4", "big"}) {
    CHECK_THAT(all, Catch::Contains(pod));
  }
  std::string pending = top::render_top(v, top::TopView::pending, false, status::NodeSort::name);
  CHECK(pending.find("CARDS") == std::string::npos);
  CHECK(pending.find("share-1") == std::string::npos);
  std::string wide = top::render_top(v, top::TopView::cards, true, status::NodeSort::name);
  CHECK_THAT(wide, Catch::Contains("GPU-7d1e0c2a-5b7f-4c1e-9a43-a100a1000000"));
  std::string wide_pending = top::render_top(v, top::TopView::pending, true, status::NodeSort::name);
  CHECK_THAT(wide_pending, Catch::Contains("0/1 nodes are available"));
}

TEST_CASE("top: views and sorts parse and bad values are named") {
  CHECK(top::parse_top_view("cards").value() == top::TopView::cards);
  CHECK(top::parse_top_view("po").value() == top::TopView::pods);
  CHECK(top::parse_top_view("").value() == top::TopView::all);
  CHECK(top::parse_top_view("gpus-x").message() == "view \"gpus-x\": not one of all, nodes, cards, pods, pending");
  CHECK(top::parse_sort("stranded").value() == status::NodeSort::stranded);
  CHECK(top::parse_sort("size").message() == "--sort: \"size\": not one of name, used, free, stranded");
}
