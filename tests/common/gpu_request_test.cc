#include "common/gpu_request.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <catch2/catch.hpp>

using namespace gpuslice;
using Catch::Matchers::Contains;

namespace {
boost::json::object pod(const char* containers_json) {
  return boost::json::parse(std::string("{\"spec\":{\"containers\":") + containers_json + "}}").as_object();
}
}  // namespace

TEST_CASE("a bare GPU count asks for a whole exclusive card") {
  auto r = extract_gpu_request(pod(R"([{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}])"), DeviceConfig{});
  REQUIRE(r.ok());
  REQUIRE(r->containers.size() == 1);
  CHECK(r->containers[0].gpus == 1);
  CHECK(r->containers[0].mem_percent == 100);
  CHECK(r->containers[0].cores == 100);
}

TEST_CASE("memory and cores without a count default to one GPU, memoryFactor applies") {
  DeviceConfig d;
  d.memory_factor = 2;
  auto r = extract_gpu_request(
      pod(R"([{"name":"c","resources":{"limits":{"nvidia.com/gpumem":"1000","nvidia.com/gpucores":"30"}}}])"), d);
  REQUIRE(r.ok());
  CHECK(r->containers[0].gpus == 1);
  CHECK(r->containers[0].mem_mib == 2000);
  CHECK(r->containers[0].cores == 30);
}

TEST_CASE("requests are read where limits are absent") {
  auto r = extract_gpu_request(
      pod(R"([{"name":"c","resources":{"requests":{"nvidia.com/gpu":"2","nvidia.com/gpumem-percentage":"50"}}}])"),
      DeviceConfig{});
  REQUIRE(r.ok());
  CHECK(r->containers[0].gpus == 2);
  CHECK(r->containers[0].mem_percent == 50);
  CHECK(r->containers[0].cores == 0);
}

TEST_CASE("bad values name the container, resource and value") {
  auto r =
      extract_gpu_request(pod(R"([{"name":"c","resources":{"limits":{"nvidia.com/gpumem":"1.5"}}}])"), DeviceConfig{});
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "container \"c\": nvidia.com/gpumem: \"1.5\" is not a whole number");
  auto p = extract_gpu_request(pod(R"([{"name":"c","resources":{"limits":{"nvidia.com/gpumem-percentage":"101"}}}])"),
                               DeviceConfig{});
  REQUIRE_FALSE(p.ok());
  CHECK(p.message() == "container \"c\": nvidia.com/gpumem-percentage: \"101\" is outside 0..100");
}

TEST_CASE("the annotation round-trips") {
  PodGpuRequest req;
  req.containers.push_back({"i", true, 0, std::nullopt, std::nullopt, 0});
  req.containers.push_back({"c", false, 2, 20000, std::nullopt, 30});
  req.containers.push_back({"p", false, 1, std::nullopt, 50, 0});
  auto back = decode_gpu_request(encode_gpu_request(req));
  REQUIRE(back.ok());
  CHECK(back.value() == req);
  CHECK_FALSE(decode_gpu_request("{\"containers\":[{\"gpus\":1,\"cores\":3}]}").ok());
  CHECK_FALSE(decode_gpu_request("[]").ok());
}

TEST_CASE("kubelet's rule: the count is the nvidia.com/gpu limit, memory or cores without it is an error") {
  auto mem_only = pod(R"([{"name":"c","resources":{"limits":{"nvidia.com/gpumem":"3000"}}}])");
  CHECK(extract_gpu_request(mem_only, DeviceConfig{}).ok());  // the webhook defaults the count
  auto k = extract_gpu_request(mem_only, DeviceConfig{}, CountRule::kubelet);
  REQUIRE_FALSE(k.ok());
  CHECK_THAT(k.message(), Contains("container \"c\": asks for nvidia.com/gpumem=3000 without nvidia.com/gpu"));
  CHECK_THAT(k.message(), Contains("add resources.limits.nvidia.com/gpu: \"1\""));

  // An explicit count of 0 asks for no GPU under both rules (found by tests/fuzz/mutation_policy_fuzz.cc: the
  // webhook admitted `gpu: 0` beside gpumem as a GPU-less container and wrote gpus 0 into gpuslice.io/gpu-request,
  // while the scheduler's kubelet rule refused the pod, so it stayed Pending for good).
  auto zero = pod(R"([{"name":"z","resources":{"limits":{"nvidia.com/gpu":"0","nvidia.com/gpucores":"20"}}}])");
  auto kz = extract_gpu_request(zero, DeviceConfig{}, CountRule::kubelet);
  REQUIRE(kz.ok());
  CHECK(kz->containers.at(0).gpus == 0);
  CHECK(kz.value() == extract_gpu_request(zero, DeviceConfig{}).value());
  auto mixed = pod(R"([{"name":"model","resources":{"limits":{"nvidia.com/gpu":0,"nvidia.com/gpumem":8000}}},)"
                   R"({"name":"embedder","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":2000}}}])");
  auto km = extract_gpu_request(mixed, DeviceConfig{}, CountRule::kubelet);
  REQUIRE(km.ok());
  CHECK(km.value() == extract_gpu_request(mixed, DeviceConfig{}).value());
  CHECK(encode_gpu_request(km.value()) == R"({"containers":[{"name":"model","init":false,"gpus":0},)"
                                          R"({"name":"embedder","init":false,"gpus":1,"memMiB":2000,"cores":0}]})");
  // Zero in requests (as the webhook reads it when limits lack the name) is the same; a positive count only in
  // requests is still the error (kubelet allocates from limits).
  auto req_zero = pod(R"([{"name":"r","resources":{"requests":{"nvidia.com/gpu":"0","nvidia.com/gpumem":"10"}}}])");
  REQUIRE(extract_gpu_request(req_zero, DeviceConfig{}, CountRule::kubelet).ok());
  auto req_two = pod(R"([{"name":"r","resources":{"requests":{"nvidia.com/gpu":"2","nvidia.com/gpumem":"10"}}}])");
  auto kr = extract_gpu_request(req_two, DeviceConfig{}, CountRule::kubelet);
  REQUIRE_FALSE(kr.ok());
  CHECK_THAT(kr.message(), Contains("without nvidia.com/gpu in resources.limits"));

  auto ok =
      pod(R"([{"name":"c","resources":{"limits":{"nvidia.com/gpu":"2","nvidia.com/gpumem":"3000"}}},{"name":"cpu"}])");
  auto kok = extract_gpu_request(ok, DeviceConfig{}, CountRule::kubelet);
  REQUIRE(kok.ok());
  CHECK(kok->containers.at(0).gpus == 2);
  CHECK(kok->containers.at(1).gpus == 0);
  CHECK(kok.value() == extract_gpu_request(ok, DeviceConfig{}).value());
}

TEST_CASE("the annotation's text is what boost::json::serialize writes for the same object") {
  PodGpuRequest req;
  CHECK(encode_gpu_request(req) == R"({"containers":[]})");
  req.containers.push_back({"init \"x\"\n\u00e9", true, 0, std::nullopt, std::nullopt, 0});
  req.containers.push_back({"c", false, 2, 20000, std::nullopt, 30});
  req.containers.push_back({"p", false, 1, std::nullopt, 50, 0});
  req.containers.push_back({"both", false, 1024, int64_t{-1}, int64_t{100}, 100});
  boost::json::array arr;
  for (const auto& c : req.containers) {
    boost::json::object o;
    o["name"] = c.name;
    o["init"] = c.init;
    o["gpus"] = c.gpus;
    if (c.gpus > 0) {
      if (c.mem_mib) o["memMiB"] = *c.mem_mib;
      if (c.mem_percent) o["memPercent"] = *c.mem_percent;
      o["cores"] = c.cores;
    }
    arr.emplace_back(std::move(o));
  }
  boost::json::object root;
  root["containers"] = std::move(arr);
  CHECK(encode_gpu_request(req) == boost::json::serialize(root));
}
