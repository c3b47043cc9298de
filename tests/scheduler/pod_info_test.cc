// Pod parsing: GPU request resolution, selectors, policies, weights, node affinity, requests.
#include "scheduler/pod_info.h"

#include "sched_fixtures.h"

#include <catch2/catch.hpp>

using namespace gpuslice::scheduler;
using namespace gpuslice::scheduler::testing;
using Catch::Matchers::Contains;
namespace json = boost::json;

TEST_CASE("the GPU request comes from resources with HAMi's rules", "[pod]") {
  gpuslice::DeviceConfig dc;
  json::object p = pod("p", json::array{container("a", "2", "3000", "30"), container("b", "1", "", "", "50"),
                                        container("c", "1"), json::object{{"name", "plain"}}});
  auto r = parse_pod(p, dc);
  REQUIRE(r.ok());
  const auto& cs = r->gpu.containers;
  REQUIRE(cs.size() == 4);
  CHECK(cs[0].gpus == 2);
  CHECK(cs[0].mem_mib == 3000);
  CHECK(cs[0].cores == 30);
  CHECK(cs[1].gpus == 1);
  CHECK(cs[1].mem_percent == 50);
  CHECK(cs[2].mem_percent == 100);  // bare count: whole card, exclusive
  CHECK(cs[2].cores == 100);
  CHECK(cs[3].gpus == 0);
  CHECK(r->gpu.any());
}

TEST_CASE("gpuslice.io/gpu-request never overrides the spec: forged both ways, it is ignored and reported", "[pod]") {
  // Claims two cards for a pod that asks for one.
  json::object p = gpu_pod("p", "1", "3000", "30");
  annotate(p, "gpuslice.io/gpu-request",
           R"({"containers":[{"name":"main","init":false,"gpus":2,"memMiB":5000,"cores":10}]})");
  auto r = parse_pod(p, {});
  REQUIRE(r.ok());
  CHECK(r->gpu.containers.at(0).gpus == 1);
  CHECK(r->gpu.containers.at(0).mem_mib == 3000);
  REQUIRE(r->ignored_annotations.size() == 1);
  CHECK_THAT(r->ignored_annotations[0], Contains("gpuslice.io/gpu-request disagrees"));

  // A CPU-only pod claiming two GPUs is a CPU-only pod.
  json::object cpu = pod("cpu", json::array{json::object{{"name", "plain"}}});
  annotate(cpu, "gpuslice.io/gpu-request",
           R"({"containers":[{"name":"plain","init":false,"gpus":2,"memMiB":5000,"cores":10}]})");
  auto c = parse_pod(cpu, {});
  REQUIRE(c.ok());
  CHECK_FALSE(c->gpu.any());
  CHECK(c->ignored_annotations.size() == 1);

  // A GPU pod whose annotation claims none is still a GPU pod (it gets the lock and its own entry).
  json::object none = gpu_pod("none", "1", "3000", "30");
  annotate(none, "gpuslice.io/gpu-request", R"({"containers":[{"name":"main","init":false,"gpus":0}]})");
  auto n = parse_pod(none, {});
  REQUIRE(n.ok());
  CHECK(n->gpu.any());
  CHECK(n->ignored_annotations.size() == 1);

  // Unreadable: ignored too, not an error.
  annotate(p, "gpuslice.io/gpu-request", "{not json");
  auto bad = parse_pod(p, {});
  REQUIRE(bad.ok());
  CHECK_THAT(bad->ignored_annotations.at(0), Contains("does not parse"));

  // The webhook's own value (same spec) is silent.
  json::object ok = gpu_pod("ok", "1", "3000", "30");
  annotate(ok, "gpuslice.io/gpu-request", gpuslice::encode_gpu_request(parse_pod(ok, {})->gpu));
  CHECK(parse_pod(ok, {})->ignored_annotations.empty());
}

TEST_CASE("memory or cores without an nvidia.com/gpu limit: Pending with the container and the fix", "[pod]") {
  json::object p = pod("p", json::array{container("a", "", "3000", "30")});
  auto r = parse_pod(p, {});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.message(), Contains("default/p"));
  CHECK_THAT(r.message(), Contains("container \"a\""));
  CHECK_THAT(r.message(), Contains("nvidia.com/gpumem=3000"));
  CHECK_THAT(r.message(), Contains("add resources.limits.nvidia.com/gpu"));
  // A count in requests only is not what kubelet allocates by.
  json::object req =
      pod("q", json::array{json::object{
                   {"name", "a"},
                   {"resources",
                    json::object{{"requests", json::object{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "10"}}}}}}});
  CHECK_FALSE(parse_pod(req, {}).ok());
}

TEST_CASE("scheduler-owned hami.io annotations on a pod that is not bound are reported as ignored", "[pod]") {
  json::object p = gpu_pod("p", "1", "3000", "30");
  annotate(p, "hami.io/vgpu-node", "gpu-0");
  annotate(p, "hami.io/bind-phase", "allocating");
  auto r = parse_pod(p, {});
  REQUIRE(r.ok());
  CHECK(r->ignored_annotations.empty());
  CHECK(r->unbound_owned_annotations == std::vector<std::string>{"hami.io/vgpu-node", "hami.io/bind-phase"});
  // Once bound, they are the scheduler's own (the device plugin reads them): nothing to report.
  p["spec"].as_object()["nodeName"] = "gpu-0";
  CHECK(parse_pod(p, {})->unbound_owned_annotations.empty());
}

TEST_CASE("card selection annotations and policy overrides", "[pod]") {
  json::object p = gpu_pod("p", "1");
  annotate(p, "nvidia.com/use-gputype", "A100, H100,");
  annotate(p, "nvidia.com/nouse-gputype", "MIG");
  annotate(p, "nvidia.com/use-gpuuuid", "GPU-a,GPU-b");
  annotate(p, "nvidia.com/nouse-gpuuuid", "GPU-c");
  annotate(p, "nvidia.com/numa-bind", "true");
  annotate(p, "nvidia.com/vgpu-mode", "mps");
  annotate(p, "hami.io/node-scheduler-policy", "spread");
  annotate(p, "hami.io/gpu-scheduler-policy", "binpack");
  annotate(p, "hami.io/device-scoring-weights", "slot=1,core=0,memory=3");
  auto r = parse_pod(p, {});
  REQUIRE(r.ok());
  CHECK(r->selectors.use_types == std::vector<std::string>{"A100", "H100"});
  CHECK(r->selectors.nouse_types == std::vector<std::string>{"MIG"});
  CHECK(r->selectors.use_uuids == std::vector<std::string>{"GPU-a", "GPU-b"});
  CHECK(r->selectors.nouse_uuids == std::vector<std::string>{"GPU-c"});
  CHECK(r->selectors.numa_bind);
  CHECK(r->selectors.vgpu_mode == "mps");
  CHECK(r->node_policy == "spread");
  CHECK(r->gpu_policy == "binpack");
  CHECK(r->weights == ScoringWeights{1, 0, 3});
}

TEST_CASE("device-scoring-weights must name slot, core, memory as non-negative integers, one positive", "[pod]") {
  CHECK(parse_scoring_weights("slot=1,core=1,memory=3").value() == ScoringWeights{1, 1, 3});
  CHECK(parse_scoring_weights(" memory=2 , slot=0,core=0").value() == ScoringWeights{0, 0, 2});
  for (const char* bad : {"slot=1,core=1", "slot=1,core=1,memory=1,extra=1", "slot=-1,core=1,memory=1",
                          "slot=0,core=0,memory=0", "slot=x,core=1,memory=1", "slot=1,slot=1,memory=1", "", "slot"}) {
    auto r = parse_scoring_weights(bad);
    INFO(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.message(), Contains("hami.io/device-scoring-weights"));
    CHECK_THAT(r.message(), Contains(std::string("\"") + bad + "\""));
  }
  json::object p = gpu_pod("p", "1");
  annotate(p, "hami.io/device-scoring-weights", "slot=1");
  auto r = parse_pod(p, {});
  REQUIRE_FALSE(r.ok());  // HAMi fails the whole Filter on a bad value
  CHECK_THAT(r.message(), Contains("\"slot=1\""));
}

TEST_CASE("node selector, required affinity and tolerations are read", "[pod]") {
  json::object p = gpu_pod("p", "1");
  spec(p)["nodeSelector"] = json::object{{"zone", "z1"}};
  spec(p)["affinity"] = json::parse(R"({"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{
      "nodeSelectorTerms":[{"matchExpressions":[{"key":"gpu","operator":"Gt","values":["3"]}]},
                           {"matchFields":[{"key":"metadata.name","operator":"In","values":["n1"]}]}]}}})");
  spec(p)["tolerations"] =
      json::parse(R"([{"key":"k","operator":"Exists","effect":"NoSchedule"},{"key":"v","value":"1"}])");
  auto r = parse_pod(p, {});
  REQUIRE(r.ok());
  CHECK(r->node_selector.at("zone") == "z1");
  REQUIRE(r->required_affinity.size() == 2);
  CHECK(r->required_affinity[0].match_expressions.at(0).op == SelectorOp::gt);
  CHECK(r->required_affinity[1].match_fields.at(0).values == std::vector<std::string>{"n1"});
  REQUIRE(r->tolerations.size() == 2);
  CHECK(r->tolerations[0].op_exists);
  CHECK_FALSE(r->tolerations[1].op_exists);

  spec(p)["affinity"] = json::parse(R"({"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{
      "nodeSelectorTerms":[{"matchExpressions":[{"key":"gpu","operator":"Near","values":["3"]}]}]}}})");
  auto bad = parse_pod(p, {});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.message(), Contains("matchExpressions[0].operator: \"Near\""));
  spec(p)["affinity"] = json::parse(R"({"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{
      "nodeSelectorTerms":[{"matchExpressions":[{"key":"gpu","operator":"Lt","values":["x"]}]}]}}})");
  CHECK_FALSE(parse_pod(p, {}).ok());
}

TEST_CASE("effective requests: app sum vs init max, requests else limits, plus overhead", "[pod]") {
  json::object p = pod("p", json::array{});
  spec(p)["containers"] = json::parse(R"([
      {"name":"a","resources":{"requests":{"cpu":"500m","memory":"1Gi"}}},
      {"name":"b","resources":{"limits":{"cpu":"1","memory":"512Mi","ephemeral-storage":"1Gi"}}}])");
  spec(p)["initContainers"] = json::parse(R"([{"name":"i","resources":{"requests":{"cpu":"2","memory":"1Mi"}}}])");
  spec(p)["overhead"] = json::object{{"cpu", "100m"}};
  auto r = pod_requests(p);
  REQUIRE(r.ok());
  CHECK(r->cpu_milli == 2100);
  CHECK(r->memory_bytes == (int64_t(1) << 30) + (int64_t(512) << 20));
  CHECK(r->ephemeral_bytes == int64_t(1) << 30);

  spec(p)["containers"] = json::parse(R"([{"name":"a","resources":{"requests":{"cpu":"lots"}}}])");
  auto bad = pod_requests(p);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.message(), Contains("spec.containers[0].resources.requests.cpu"));
  CHECK_THAT(bad.message(), Contains("\"lots\""));
}

TEST_CASE("pods without a name are rejected - namespace defaults", "[pod]") {
  json::object p = gpu_pod("p", "1");
  p["metadata"].as_object().erase("namespace");
  CHECK(parse_pod(p, {}).value().ns == "default");
  p["metadata"].as_object().erase("name");
  CHECK_FALSE(parse_pod(p, {}).ok());
}
