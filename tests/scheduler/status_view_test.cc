// The status view model (scheduler/status_view.h): what the page, its JSON, `gpuslice top` and HAMi's metric
// series show, from a snapshot and the pending pods.
#include "scheduler/status_view.h"

#include "sched_fixtures.h"
#include "scheduler/schedule.h"
#include "simulate/manifest.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include "tests/support/process.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

using namespace gpuslice;
using namespace gpuslice::scheduler;
using gpuslice::simulate::parse_manifests;
using namespace gpuslice::scheduler::testing;
namespace json = boost::json;

namespace {

std::string read(const std::string& rel) {
  return gpuslice::testing::slurp(std::string(GPUSLICE_SOURCE_DIR) + "/" + rel);
}

/// The seed scenario (examples/tenant-a) placed in file order the way the loop does: schedule, assume, or record
/// the unschedulable message as a pending pod.
struct Seed {
  Snapshot snap;
  std::vector<status::PendingInput> pending;
};

Seed seed() {
  Seed s;
  auto nodes = parse_manifests(read("examples/tenant-a/nodes.yaml"), "nodes.yaml");
  REQUIRE(nodes.ok());
  for (const auto& m : nodes.value()) REQUIRE(s.snap.upsert_node(m.object).ok());
  auto pods = parse_manifests(read("examples/tenant-a/pods.yaml"), "pods.yaml");
  REQUIRE(pods.ok());
  for (const auto& m : pods.value()) {
    auto info = parse_pod(m.object, s.snap.devices());
    REQUIRE(info.ok());
    Decision d = schedule(s.snap, info.value(), ScheduleOptions{});
    if (d.scheduled) {
      REQUIRE(s.snap.assume(info.value(), d.node, d.devices, 1000).ok());
    } else {
      s.pending.push_back({info.value().ns, info.value().name, info.value().gpu, d.message, 990});
    }
  }
  return s;
}

status::SchedulerState state_at(int64_t now) {
  status::SchedulerState st;
  st.synced = true;
  st.leading = true;
  st.now_unix = now;
  st.source = "test";
  return st;
}

}  // namespace

TEST_CASE("status view of the seed scenario: the A100 holds three pods, 60000 of 81920 MiB, 90 of 100 cores") {
  Seed s = seed();
  status::StatusView v = status::build_view(s.snap, s.pending, state_at(1000));
  REQUIRE(v.nodes.size() == 1);
  const status::NodeView& n = v.nodes[0];
  CHECK(n.name == "tenant-a-gpu-0");
  CHECK(n.registered);
  REQUIRE(n.cards.size() == 1);
  const status::CardView& c = n.cards[0];
  CHECK(c.type == "NVIDIA A100-SXM4-80GB");
  CHECK(c.mem_used_mib == 60000);
  CHECK(c.mem_total_mib == 81920);
  CHECK(c.cores_used == 90);
  CHECK(c.slots_used == 3);
  REQUIRE(c.holders.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(c.holders[i].ns == "default");
    CHECK(c.holders[i].pod == "share-" + std::to_string(i + 1));
    CHECK(c.holders[i].container == "cuda");
    CHECK(c.holders[i].mem_mib == 20000);
    CHECK(c.holders[i].cores == 30);
    CHECK(c.holders[i].assumed);
  }
  // 21920 MiB and 10 cores are free and a slot is left: nothing is stranded yet.
  CHECK(c.stranded_mem_mib == 0);
  CHECK(c.stranded_cores == 0);
  CHECK(v.summary.pods_holding == 3);
  CHECK(v.summary.best_free_mem_mib == 21920);
  CHECK(v.summary.best_free_cores == 10);

  REQUIRE(v.pending.size() == 2);
  CHECK(v.pending[0].name == "big");  // same age: namespace/name order
  CHECK(v.pending[0].reason == "CardInsufficientMemory");
  REQUIRE(v.pending[0].asks.size() == 1);
  CHECK(v.pending[0].asks[0].mem_mib == 90000);
  CHECK(v.pending[0].age_seconds == 10);
  CHECK(v.pending[1].name == "share-4");
  CHECK(v.pending[1].reason == "CardInsufficientCore");
  CHECK(v.pending[1].message ==
        "0/1 nodes are available: 1 CardInsufficientCore (asks 30% of a card's cores, largest free 10%).");
  REQUIRE(v.pending[1].reasons.size() == 1);
  CHECK(v.pending[1].reasons[0].detail == "asks 30% of a card's cores, largest free 10%");
  CHECK(v.pending[1].asks[0].cores == 30);
  REQUIRE(v.summary.pending_reasons.size() == 2);
}

TEST_CASE("status view: stranded capacity is free memory behind exhausted cores or slots, and the reverse") {
  status::CardView c;
  c.mem_total_mib = 81920;
  c.cores_total = 100;
  c.slots_total = 10;
  c.mem_used_mib = 20000;
  c.cores_used = 100;
  CHECK(status::stranded_memory(c) == 61920);
  CHECK(status::stranded_cores(c) == 0);
  c.cores_used = 40;
  CHECK(status::stranded_memory(c) == 0);
  c.mem_used_mib = 81920;
  CHECK(status::stranded_cores(c) == 60);
  c.mem_used_mib = 1000;
  c.slots_used = 10;  // every slot taken: both strand
  CHECK(status::stranded_memory(c) == 80920);
  CHECK(status::stranded_cores(c) == 60);
  c.cordoned = true;  // unavailable, not stranded
  CHECK(status::stranded_memory(c) == 0);
  CHECK(status::stranded_cores(c) == 0);
}

TEST_CASE("status view: a card whose cores are all taken strands its memory, per card, node, type and summary") {
  Snapshot snap;
  REQUIRE(snap.upsert_node(node({"gpu-1", {card("GPU-a"), card("GPU-b")}})).ok());
  REQUIRE(snap.upsert_node(node({"gpu-2", {card("GPU-c", 23034, 100, "NVIDIA L4")}})).ok());
  auto p = placed_pod("hog", "gpu-1", "GPU-a,NVIDIA,10000,100:;");
  REQUIRE(snap.upsert_pod(p).ok());
  status::StatusView v = status::build_view(snap, {}, state_at(1));
  REQUIRE(v.nodes.size() == 2);
  CHECK(v.nodes[0].cards[0].stranded_mem_mib == 71920);
  CHECK(v.nodes[0].cards[0].holders.at(0).container == "main");
  CHECK(v.nodes[0].cards[0].holders.at(0).assumed == false);
  CHECK(v.nodes[0].stranded_mem_mib == 71920);
  CHECK(v.summary.stranded_mem_mib == 71920);
  CHECK(v.summary.cards_stranded == 1);
  CHECK(v.summary.cards_full == 0);  // a slot is left, only the cores are gone
  REQUIRE(v.summary.by_type.size() == 2);
  CHECK(v.summary.by_type[0].type == "NVIDIA A100");
  CHECK(v.summary.by_type[0].cards == 2);
  CHECK(v.summary.by_type[0].stranded_mem_mib == 71920);
  CHECK(v.summary.by_type[1].type == "NVIDIA L4");
  CHECK(v.summary.best_free_mem_mib == 81920);
}

TEST_CASE("status view: kube-scheduler fit messages parse into reasons, taint texts with commas included") {
  using RC = status::ReasonCount;
  CHECK(status::parse_fit_message("0/3 nodes are available: 1 CardInsufficientCore, 2 node(s) were unschedulable.") ==
        std::vector<RC>{{"CardInsufficientCore", 1}, {"node(s) were unschedulable", 2}});
  CHECK(status::parse_fit_message("0/2 nodes are available: 2 node(s) had untolerated taint {a: b, c}.") ==
        std::vector<RC>{{"node(s) had untolerated taint {a: b, c}", 2}});
  CHECK(status::parse_fit_message("no nodes").empty());
  CHECK(status::parse_fit_message("").empty());
  CHECK(status::parse_fit_message("0/1 nodes are available: ").empty());
  // The PostFilter's tail (preemption) is not a reason of the filters.
  CHECK(status::parse_fit_message("0/1 nodes are available: 1 CardInsufficientMemory. preemption: 0/1 nodes are "
                                  "available: 1 No preemption victims found for incoming pod.") ==
        std::vector<RC>{{"CardInsufficientMemory", 1}});
}

TEST_CASE("status view: a pending pod not tried yet waits, one with another message is an error") {
  Snapshot snap;
  std::vector<status::PendingInput> in{{"ns", "a", {}, "", 0}, {"ns", "b", {}, "pod ns/b: bad weights", 0}};
  status::StatusView v = status::build_view(snap, in, state_at(5));
  REQUIRE(v.pending.size() == 2);
  CHECK(v.pending[0].reason == "Waiting");
  CHECK(v.pending[0].age_seconds == -1);
  CHECK(v.pending[1].reason == "Error");
}

TEST_CASE("status view: page queries parse, and bad values name the parameter") {
  auto q = status::parse_page_query("offset=50&limit=25&sort=stranded&q=A100%20SXM&pending_limit=0&other=1");
  REQUIRE(q.ok());
  CHECK(q.value().offset == 50);
  CHECK(q.value().limit == 25);
  CHECK(q.value().sort == status::NodeSort::stranded);
  CHECK(q.value().filter == "A100 SXM");
  CHECK(q.value().pending_limit == 0);
  CHECK(status::parse_page_query("").ok());
  auto bad = status::parse_page_query("limit=0");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message() == "query parameter limit: \"0\" is not an integer in 1..1000");
  CHECK(status::parse_page_query("limit=5000").message().find("limit") != std::string::npos);
  CHECK(status::parse_page_query("sort=size").message() ==
        "query parameter sort: \"size\" is not one of name, used, stranded, free");
  CHECK_FALSE(status::parse_page_query("offset=-1").ok());
  CHECK_FALSE(status::parse_page_query("offset=1x").ok());
}

TEST_CASE("status view: pagination, filter and sort select nodes, and the JSON carries totals and one page") {
  Snapshot snap;
  for (int i = 0; i < 120; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "n%03d", i);
    REQUIRE(snap.upsert_node(
                    node({name, {card(std::string("GPU-") + name, 1000, 100, i % 2 ? "NVIDIA L4" : "NVIDIA A100")}}))
                .ok());
  }
  REQUIRE(snap.upsert_pod(placed_pod("p", "n007", "GPU-n007,NVIDIA,900,10:;")).ok());
  REQUIRE(snap.upsert_pod(placed_pod("q", "n011", "GPU-n011,NVIDIA,100,100:;")).ok());
  status::StatusView v = status::build_view(snap, {}, state_at(1));

  auto page = status::parse_page_query("offset=100&limit=50").value();
  json::object doc = json::parse(status::render_json(v, page)).as_object();
  CHECK(doc.at("nodes").at("total").as_int64() == 120);
  CHECK(doc.at("nodes").at("items").as_array().size() == 20);
  CHECK(doc.at("nodes").at("items").as_array()[0].at("name").as_string() == "n100");
  CHECK(doc.at("summary").at("nodes").as_int64() == 120);
  CHECK(doc.at("summary").at("memUsedMiB").as_int64() == 1000);
  CHECK(doc.at("summary").at("strandedMemMiB").as_int64() == 900);  // n011: cores gone, 900 MiB left
  CHECK(doc.at("state").at("leading").as_bool());

  auto used = status::select_nodes(v, status::parse_page_query("sort=used").value());
  CHECK(v.nodes[used[0]].name == "n011");
  CHECK(v.nodes[used[1]].name == "n007");
  auto stranded = status::select_nodes(v, status::parse_page_query("sort=stranded").value());
  CHECK(v.nodes[stranded[0]].name == "n011");
  auto free = status::select_nodes(v, status::parse_page_query("sort=free").value());
  CHECK(v.nodes[free.back()].name == "n011");
  CHECK(status::select_nodes(v, status::parse_page_query("q=l4").value()).size() == 60);
  CHECK(status::select_nodes(v, status::parse_page_query("q=N00").value()).size() == 10);
  CHECK(status::select_nodes(v, status::parse_page_query("q=gpu-n1").value()).size() == 20);
  json::object none = json::parse(status::render_json(v, status::parse_page_query("offset=500").value())).as_object();
  CHECK(none.at("nodes").at("items").as_array().empty());
}

TEST_CASE("status view: HAMi v2.10 scheduler series with HAMi's names, labels and units") {
  Seed s = seed();
  std::string text = status::render_hami_metrics(status::build_view(s.snap, s.pending, state_at(1000)));
  const std::string uuid = "GPU-7d1e0c2a-5b7f-4c1e-9a43-a100a1000000";
  const std::string card_labels = "device_index=\"0\",device_type=\"NVIDIA A100-SXM4-80GB\",device_uuid=\"" + uuid +
                                  "\",node=\"tenant-a-gpu-0\",zone=\"vGPU\"}";
  CHECK_THAT(text, Catch::Contains("hami_gpu_memory_limit_bytes{" + card_labels + " 85899345920\n"));
  CHECK_THAT(text,
             Catch::Contains("hami_gpu_memory_allocated_bytes{device_cores=\"100\"," + card_labels + " 62914560000\n"));
  CHECK_THAT(text, Catch::Contains("hami_gpu_core_allocated_ratio{" + card_labels + " 90\n"));
  CHECK_THAT(text, Catch::Contains("hami_gpu_core_limit_ratio{" + card_labels + " 100\n"));
  CHECK_THAT(text, Catch::Contains("hami_gpu_shared_count{" + card_labels + " 3\n"));
  CHECK_THAT(
      text,
      Catch::Contains("hami_node_gpu_overview{device_cores=\"100\",device_index=\"0\",device_memory_limit=\"81920\","));
  CHECK_THAT(text, Catch::Contains("hami_node_gpu_memory_allocated_ratio{device_index=\"0\",device_uuid=\"" + uuid));
  CHECK_THAT(
      text,
      Catch::Contains("hami_vgpu_memory_allocated_bytes{container_index=\"0\",device_uuid=\"" + uuid +
                      "\",namespace=\"default\",node=\"tenant-a-gpu-0\",pod=\"share-2\",zone=\"vGPU\"} 20971520000\n"));
  CHECK_THAT(text,
             Catch::Contains("hami_vgpu_core_allocated_ratio{container_index=\"0\",device_uuid=\"" + uuid +
                             "\",namespace=\"default\",node=\"tenant-a-gpu-0\",pod=\"share-3\",zone=\"vGPU\"} 30\n"));
  CHECK_THAT(text, Catch::Contains("# TYPE hami_gpu_memory_allocated_bytes gauge\n"));
  // Legacy names (HAMi's --legacy-metrics) for older dashboards.
  CHECK_THAT(text, Catch::Contains("GPUDeviceMemoryAllocated{devicecores=\"100\",deviceidx=\"0\""));
  CHECK_THAT(text, Catch::Contains(
                       "GPUDeviceCoreAllocated{deviceidx=\"0\",devicetype=\"NVIDIA A100-SXM4-80GB\",deviceuuid=\"" +
                       uuid + "\",nodeid=\"tenant-a-gpu-0\",zone=\"vGPU\"} 90\n"));
  CHECK_THAT(
      text,
      Catch::Contains(
          "vGPUMemoryAllocated{containeridx=\"0\",deviceuuid=\"" + uuid +
          "\",nodename=\"tenant-a-gpu-0\",podname=\"share-1\",podnamespace=\"default\",zone=\"vGPU\"} 20971520000\n"));
  // gpuslice's own: pending by reason, stranded per card and its histogram.
  CHECK_THAT(text, Catch::Contains("gpuslice_scheduler_pending_gpu_pods{reason=\"CardInsufficientCore\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("gpuslice_scheduler_card_stranded_memory_bytes{device_type="));
  CHECK_THAT(text, Catch::Contains("gpuslice_scheduler_stranded_memory_per_card_bytes_bucket{le=\"0\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("gpuslice_scheduler_stranded_memory_per_card_bytes_count 1\n"));
  std::string modern = status::render_hami_metrics(status::build_view(s.snap, s.pending, state_at(1000)), false);
  CHECK(modern.find("GPUDeviceMemoryAllocated") == std::string::npos);
}

namespace {

/// tests/e2e/dashboard_check.py over `exposition` (written to a file) and the dashboards: its exit status and report.
struct DashboardCheck {
  int status = -1;
  std::string report;
};
DashboardCheck dashboard_check(const std::string& exposition, const std::string& dashboards,
                               const std::string& require = "") {
  static int n = 0;
  const std::string file = std::string(GPUSLICE_BINARY_DIR) + "/status_view_test." + std::to_string(::getpid()) + "." +
                           std::to_string(++n) + ".prom";
  {
    std::ofstream out(file, std::ios::binary);
    out << exposition;
  }
  std::string cmd = "python3 " + std::string(GPUSLICE_SOURCE_DIR) + "/tests/e2e/dashboard_check.py --metrics " + file;
  if (!require.empty()) cmd += " --require '" + require + "'";
  cmd += " " + dashboards + " 2>&1";
  DashboardCheck r;
  r.report = gpuslice::testing::run_capture(cmd, r.status);
  std::remove(file.c_str());
  return r;
}

const std::string kHamiDashboard =
    std::string(GPUSLICE_SOURCE_DIR) + "/tests/data/hami-dashboards/hami-vgpu-dashboard.queries.json";
const std::string kHamiOldDashboard =
    std::string(GPUSLICE_SOURCE_DIR) + "/tests/data/hami-dashboards/k8s-vgpu-scheduler-dashboard.queries.json";
const std::string kOwnDashboard = std::string(GPUSLICE_SOURCE_DIR) + "/manifests/grafana/gpuslice-dashboard.json";
/// What the status view renders (the rest of gpuslice's dashboard is the registry's: tests/e2e/status_page_test.sh).
const std::string kStatusViewSeries = "^(hami_|gpuslice_scheduler_(card_stranded_|stranded_|pending_gpu_pods))";

/// `text` without the samples (and HELP/TYPE) of `name`.
std::string without_series(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) == 0 || line.rfind(name + " ", 0) == 0 ||
        line.rfind("# HELP " + name + " ", 0) == 0 || line.rfind("# TYPE " + name + " ", 0) == 0)
      continue;
    out += line + "\n";
  }
  return out;
}

}  // namespace

TEST_CASE("HAMi's dashboards find every scheduler series they query, with their labels, legacy names on or off") {
  Seed s = seed();
  status::StatusView v = status::build_view(s.snap, s.pending, state_at(1000));
  for (bool legacy : {true, false}) {
    CAPTURE(legacy);
    DashboardCheck r =
        dashboard_check(status::render_hami_metrics(v, legacy), kHamiDashboard + " " + kHamiOldDashboard);
    INFO(r.report);
    CHECK(r.status == 0);
    // The five scheduler series HAMi's v2.10 dashboard reads (its vGPU-monitor series are the device plugin's).
    CHECK_THAT(r.report, Catch::Contains("HAMi vGPU metrics: 19 queries, 14 in-scope series references found (5 names: "
                                         "hami_gpu_core_allocated_ratio hami_gpu_memory_allocated_bytes "
                                         "hami_gpu_memory_limit_bytes hami_gpu_shared_count "
                                         "hami_node_gpu_memory_allocated_ratio)"));
    CHECK_THAT(r.report, Catch::Contains("skipped (hami-vgpu-monitor): hami_container_device_utilization_ratio "
                                         "hami_host_gpu_memory_used_bytes hami_host_gpu_utilization_ratio "
                                         "hami_vgpu_memory_limit_bytes hami_vgpu_memory_used_bytes"));
    // The older k8s-vgpu-scheduler dashboard reads only dcgm-exporter and the vGPU monitor.
    CHECK_THAT(r.report,
               Catch::Contains("k8s-vgpu-scheduler Dashboard: 12 queries, 0 in-scope series references found"));
  }
}

TEST_CASE("gpuslice's dashboard finds every series the status view renders, with their labels") {
  Seed s = seed();
  status::StatusView v = status::build_view(s.snap, s.pending, state_at(1000));
  DashboardCheck r = dashboard_check(status::render_hami_metrics(v, false), kOwnDashboard, kStatusViewSeries);
  INFO(r.report);
  CHECK(r.status == 0);
  for (const char* name : {"gpuslice_scheduler_card_stranded_memory_bytes", "gpuslice_scheduler_pending_gpu_pods",
                           "gpuslice_scheduler_stranded_memory_per_card_bytes_bucket",
                           "hami_vgpu_memory_allocated_bytes", "hami_gpu_core_limit_ratio"}) {
    CHECK_THAT(r.report, Catch::Contains(std::string(" ") + name));
  }
  CHECK(r.report.find("MISSING") == std::string::npos);
}

TEST_CASE("the dashboard check convicts: a missing series, a missing label, an unclassified name") {
  Seed s = seed();
  const std::string text = status::render_hami_metrics(status::build_view(s.snap, s.pending, state_at(1000)), false);
  DashboardCheck gone = dashboard_check(without_series(text, "hami_gpu_shared_count"), kHamiDashboard);
  CHECK(gone.status != 0);
  CHECK_THAT(gone.report,
             Catch::Contains("MISSING HAMi vGPU metrics: panel 'Shared containers' A: hami_gpu_shared_count "
                             "is not on /metrics"));
  // hami_gpu_memory_limit_bytes without device_uuid: the `and on (device_uuid)` joins with the monitor's series break.
  std::string no_uuid = text;
  for (size_t at = no_uuid.find("hami_gpu_memory_limit_bytes{"); at != std::string::npos;
       at = no_uuid.find("hami_gpu_memory_limit_bytes{", at + 1)) {
    size_t label = no_uuid.find("device_uuid=\"", at);
    size_t end = no_uuid.find("\",", label);
    no_uuid.erase(label, end + 2 - label);
  }
  DashboardCheck label = dashboard_check(no_uuid, kHamiDashboard);
  CHECK(label.status != 0);
  CHECK_THAT(label.report, Catch::Contains("panel 'Host GPU memory used' A: no hami_gpu_memory_limit_bytes sample has "
                                           "the labels ['device_uuid', 'node']"));
  // A dashboard querying a name no source claims must be classified before it can pass.
  const std::string unknown = std::string(GPUSLICE_BINARY_DIR) + "/status_view_test.unknown-dashboard.json";
  {
    std::ofstream out(unknown);
    out << R"json({"title": "t", "panels": [{"title": "p", "targets": [{"refId": "A", "expr": "sum(mystery_series)"}]}]})json";
  }
  DashboardCheck unclassified = dashboard_check(text, unknown);
  std::remove(unknown.c_str());
  CHECK(unclassified.status != 0);
  CHECK_THAT(unclassified.report, Catch::Contains("mystery_series is in no source of metric-sources.json"));
}

TEST_CASE(
    "HAMi's legacy metric names (serve --hami-legacy-metrics): the legacy names and labels only when asked, HAMi "
    "v2.10's names always") {
  Seed s = seed();
  status::StatusView v = status::build_view(s.snap, s.pending, state_at(1000));
  const std::string with = status::render_hami_metrics(v, true);
  const std::string without = status::render_hami_metrics(v, false);
  const char* legacy_names[] = {"GPUDeviceMemoryLimit",    "GPUDeviceCoreLimit",     "GPUDeviceMemoryAllocated",
                                "GPUDeviceSharedNum",      "GPUDeviceCoreAllocated", "nodeGPUOverview",
                                "nodeGPUMemoryPercentage", "vGPUMemoryAllocated",    "vGPUCoreAllocated"};
  for (const char* name : legacy_names) {
    CAPTURE(name);
    CHECK_THAT(with, Catch::Contains(std::string("\n") + name + "{"));
    CHECK_THAT(with, Catch::Contains(std::string("# TYPE ") + name + " gauge\n"));
    CHECK(without.find(std::string(name) + "{") == std::string::npos);
    CHECK(without.find(std::string("# HELP ") + name + " ") == std::string::npos);
  }
  for (const char* label : {"nodeid=", "deviceuuid=", "podnamespace=", "containeridx="}) {
    CHECK_THAT(with, Catch::Contains(label));
    CHECK(without.find(label) == std::string::npos);
  }
  // Without them, every line of the modern text is also in the legacy one, in the same order: the flag only drops.
  std::istringstream w(with), wo(without);
  std::string a, b;
  size_t kept = 0;
  while (std::getline(wo, b)) {
    bool found = false;
    while (std::getline(w, a)) {
      if (a == b) {
        found = true;
        break;
      }
    }
    CAPTURE(b);
    REQUIRE(found);
    ++kept;
  }
  CHECK(kept > 40);
  CHECK(without.size() < with.size());
}

TEST_CASE("status view: the page embeds its data with every '<' escaped and needs no external asset") {
  std::string page = status::render_page(R"({"x":"</script><img src=x>"})");
  CHECK(page.find("</script><img") == std::string::npos);
  CHECK_THAT(page, Catch::Contains(R"({"x":"\u003c/script>\u003cimg src=x>"})"));
  CHECK(page.find("/*GPUSLICE_INITIAL_JSON*/") == std::string::npos);
  std::string_view asset = status::page_asset();
  CHECK(asset.find("/*GPUSLICE_INITIAL_JSON*/") != std::string_view::npos);
  for (std::string_view external : {"http://", "https://", "//cdn", "<link ", "src=\"http"}) {
    CHECK(asset.find(external) == std::string_view::npos);
  }
}

TEST_CASE("status view: JSON at 5000 nodes stays one page and the summary covers every node") {
  Snapshot snap;
  for (int i = 0; i < 5000; ++i) {
    std::string name = "node-" + std::to_string(i);
    REQUIRE(snap.upsert_node(node({name, {card("GPU-" + name + "-0"), card("GPU-" + name + "-1")}})).ok());
  }
  status::StatusView v = status::build_view(snap, {}, state_at(1));
  std::string body = status::render_json(v, status::PageQuery{});
  json::object doc = json::parse(body).as_object();
  CHECK(doc.at("summary").at("cards").as_int64() == 10000);
  CHECK(doc.at("nodes").at("items").as_array().size() == 50);
  CHECK(body.size() < 100 * 1024);
}

TEST_CASE(
    "status view: the health port's answers: JSON, the page with its data, 400 on a bad query, 503 without a view") {
  Seed s = seed();
  status::StatusView v = status::build_view(s.snap, s.pending, state_at(1000));
  Page json_page = status::status_response(true, "limit=1", &v, "");
  CHECK(json_page.status == 200);
  CHECK(json_page.content_type == "application/json");
  json::object doc = json::parse(json_page.body).as_object();
  CHECK(doc.at("nodes").at("limit").as_int64() == 1);
  CHECK(doc.at("state").at("synced").as_bool());
  Page html = status::status_response(false, "", &v, "");
  CHECK(html.status == 200);
  CHECK(html.content_type == "text/html; charset=utf-8");
  CHECK_THAT(html.body, Catch::Contains("share-4"));
  CHECK_THAT(html.body, Catch::Contains("<!doctype html>"));
  Page bad = status::status_response(true, "sort=size", &v, "");
  CHECK(bad.status == 400);
  CHECK(bad.body == "400 bad request: query parameter sort: \"size\" is not one of name, used, stranded, free\n");
  Page none = status::status_response(false, "", nullptr, "the scheduler is not running");
  CHECK(none.status == 503);
  CHECK(none.body == "503 service unavailable: the scheduler is not running\n");
}

TEST_CASE("status view: the scheduler's figures after a reason are its detail, commas inside them kept") {
  using RC = status::ReasonCount;
  CHECK(status::parse_fit_message("0/2 nodes are available: 1 AllocatedCardsInsufficientRequest (asks 4 cards, 2 "
                                  "fit), 1 CardInsufficientCore (asks 30% of a card's cores, largest free 10%).") ==
        std::vector<RC>{{"AllocatedCardsInsufficientRequest", 1, "asks 4 cards, 2 fit"},
                        {"CardInsufficientCore", 1, "asks 30% of a card's cores, largest free 10%"}});
  CHECK(status::parse_fit_message("0/1 nodes are available: 1 node(s) were unschedulable.") ==
        std::vector<RC>{{"node(s) were unschedulable", 1, ""}});
}
