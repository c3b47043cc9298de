#pragma once
// Helpers for the webhook core tests: fixtures produced by kubectl's client-side dry run
// (testdata/*.json, see testdata/regen.sh), AdmissionReview wrapping, and an independent RFC 6902 applier
// (nlohmann-json's json::patch) used as the oracle for every patch the policy produces.

#include "common/base64.h"
#include "common/config.h"
#include "common/gpu_request.h"
#include "common/json_patch.h"
#include "webhook/admission.h"
#include "webhook/policy.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace gpuslice::webhook::testing {

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The kubectl-produced JSON of testdata/<name>.yaml.
inline std::string fixture_text(const std::string& name) {
  return read_text(std::string(GPUSLICE_SOURCE_DIR) + "/tests/webhook/testdata/" + name + ".json");
}

inline boost::json::object fixture(const std::string& name) {
  return boost::json::parse(fixture_text(name)).as_object();
}

/// An AdmissionReview as kube-apiserver sends it for a CREATE of `object_json`.
inline std::string make_review(const std::string& object_json, const std::string& api_version = "admission.k8s.io/v1",
                               const std::string& uid = "0d2f5c5e-7c1a-4d4e-9a57-3f8d7b1c2a10",
                               const std::string& kind = "Pod", const std::string& ns = "team-a") {
  std::string group = kind == "Pod" ? "" : "apps";
  std::string resource = kind == "Pod" ? "pods" : "deployments";
  return R"({"kind":"AdmissionReview","apiVersion":")" + api_version + R"(","request":{"uid":")" + uid +
         R"(","kind":{"group":")" + group + R"(","version":"v1","kind":")" + kind + R"("},"resource":{"group":")" +
         group + R"(","version":"v1","resource":")" + resource + R"("},"namespace":")" + ns +
         R"(","operation":"CREATE","userInfo":{"username":"kubernetes-admin","groups":["system:masters"]},"object":)" +
         object_json +
         R"(,"oldObject":null,"dryRun":false,"options":{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1"}}})";
}

/// The outcome of one policy call checked against the oracle.
struct Mutated {
  MutationResult result;
  nlohmann::json pod;  ///< the pod after nlohmann applied the patch
};

/// Runs the policy, applies its patch with nlohmann (and with our apply_patch, which must agree), and checks
/// that running the policy again on the result changes nothing (reinvocation safety).
inline Mutated mutate_and_apply(const boost::json::object& pod, const Configuration& config,
                                const std::string& ns = "team-a") {
  Mutated m;
  m.result = mutate_pod(pod, ns, config);
  std::string pod_text = boost::json::serialize(pod);
  m.pod = nlohmann::json::parse(pod_text);
  if (m.result.patch.empty()) return m;
  REQUIRE(m.result.allowed);
  nlohmann::json patch = nlohmann::json::parse(serialize_patch(m.result.patch));
  INFO("patch: " << patch.dump());
  m.pod = m.pod.patch(patch);

  auto ours = apply_patch(boost::json::value(pod), m.result.patch);
  REQUIRE(ours.ok());
  CHECK(nlohmann::json::parse(boost::json::serialize(ours.value())) == m.pod);

  auto again = mutate_pod(boost::json::parse(m.pod.dump()).as_object(), ns, config);
  INFO("second pass patch: " << serialize_patch(again.patch));
  CHECK(again.allowed);
  CHECK(again.gpu_pod == m.result.gpu_pod);  // GPU-less pods may be cleaned (annotations, overwriteEnv) too
  CHECK(again.patch.empty());
  return m;
}

/// The gpuslice.io/gpu-request annotation of a mutated pod, decoded.
inline PodGpuRequest annotation_of(const nlohmann::json& pod) {
  REQUIRE(pod.contains("metadata"));
  REQUIRE(pod["metadata"].contains("annotations"));
  const auto& a = pod["metadata"]["annotations"];
  REQUIRE(a.contains(std::string(kGpuRequestAnnotation)));
  auto decoded = decode_gpu_request(a[std::string(kGpuRequestAnnotation)].get<std::string>());
  REQUIRE(decoded.ok());
  return decoded.value();
}

inline ContainerGpuRequest want(std::string name, bool init, int64_t gpus, std::optional<int64_t> mem_mib,
                                std::optional<int64_t> mem_percent, int64_t cores) {
  return ContainerGpuRequest{std::move(name), init, gpus, mem_mib, mem_percent, cores};
}

}  // namespace gpuslice::webhook::testing
