#include "scheduler/pod_text.h"

#include <catch2/catch.hpp>

#include <random>
#include <string>

using namespace gpuslice::scheduler;

namespace {
// A pod as kube-apiserver returns bench/pods.sh gpu_pod (what the loop keeps while it is pending).
std::string pod_text(int i) {
  const std::string n = std::to_string(i);
  return R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":"gpu-)" + n +
         R"(","namespace":"gpuslice-scale","uid":"6f1c2a3b-1234-4234-8123-0000000)" + n +
         R"(","resourceVersion":"2000)" + n +
         R"(","creationTimestamp":"2026-12-04T19:43:00Z","labels":{"bench":"gpu","gpuslice.io/webhook":"ignore"}},)"
         R"("spec":{"volumes":[{"name":"kube-api-access-x7k2p","projected":{"sources":[{"serviceAccountToken":)"
         R"({"expirationSeconds":3607,"path":"token"}},{"configMap":{"name":"kube-root-ca.crt","items":[{"key":)"
         R"("ca.crt","path":"ca.crt"}]}},{"downwardAPI":{"items":[{"path":"namespace","fieldRef":{"apiVersion":)"
         R"("v1","fieldPath":"metadata.namespace"}}]}}],"defaultMode":420}}],"containers":[{"name":"c","image":)"
         R"("registry.k8s.io/pause:3.10","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpucores":"5",)"
         R"("nvidia.com/gpumem":"1000"},"requests":{"nvidia.com/gpu":"1","nvidia.com/gpucores":"5",)"
         R"("nvidia.com/gpumem":"1000"}},"volumeMounts":[{"name":"kube-api-access-x7k2p","readOnly":true,)"
         R"("mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}],"terminationMessagePath":)"
         R"("/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],)"
         R"("restartPolicy":"Always","terminationGracePeriodSeconds":0,"dnsPolicy":"ClusterFirst",)"
         R"("serviceAccountName":"default","serviceAccount":"default","securityContext":{},"schedulerName":)"
         R"("gpuslice-scheduler","tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists",)"
         R"("effect":"NoExecute","tolerationSeconds":300},{"key":"node.kubernetes.io/unreachable","operator":)"
         R"("Exists","effect":"NoExecute","tolerationSeconds":300}],"priority":0,"enableServiceLinks":true,)"
         R"("preemptionPolicy":"PreemptLowerPriority"},"status":{"phase":"Pending","qosClass":"BestEffort"}})";
}
}  // namespace

TEST_CASE("pod text: a pod packs to a fraction of its text and unpacks byte for byte") {
  PodTextCodec codec;
  const std::string text = pod_text(7);
  const std::string packed = codec.pack(text);
  CHECK(packed.size() * 5 < text.size());  // the bench pod: 1.7 KB -> ~0.2 KB
  auto back = codec.unpack(packed);
  REQUIRE(back);
  CHECK(*back == text);
}

TEST_CASE("pod text: one codec packs and unpacks many texts in any order") {
  PodTextCodec codec;
  std::vector<std::string> packed;
  for (int i = 0; i < 50; ++i) {
    packed.push_back(codec.pack(pod_text(i)));
    if (i % 3 == 0) {
      REQUIRE(codec.unpack(packed.front()) == pod_text(0));
    }
  }
  for (int i = 49; i >= 0; --i) {
    auto back = codec.unpack(packed[static_cast<size_t>(i)]);
    REQUIRE(back);
    CHECK(*back == pod_text(i));
  }
}

TEST_CASE("pod text: equal texts pack equal, different texts differently (the node fingerprint compares packed)") {
  PodTextCodec a, b;
  CHECK(a.pack(pod_text(1)) == b.pack(pod_text(1)));
  CHECK(a.pack(pod_text(1)) == a.pack(pod_text(1)));
  CHECK(a.pack(pod_text(1)) != a.pack(pod_text(2)));
  CHECK(a.pack("{\"l\":1}") != a.pack("{\"l\":2}"));
}

TEST_CASE("pod text: short and incompressible texts are kept as they are, empty included") {
  PodTextCodec codec;
  std::mt19937 rng(42);
  std::string noise(3000, '\0');
  for (char& c : noise) {
    c = static_cast<char>(rng());
  }
  for (const std::string& text : {std::string(), std::string("x"), noise, std::string("a\0b", 3)}) {
    const std::string packed = codec.pack(text);
    CHECK(packed.size() <= text.size() + 1);
    auto back = codec.unpack(packed);
    REQUIRE(back);
    CHECK(*back == text);
  }
}

TEST_CASE("pod text: what pack() did not write is refused, not misread") {
  PodTextCodec codec;
  const std::string packed = codec.pack(pod_text(3));
  CHECK_FALSE(codec.unpack(""));
  CHECK_FALSE(codec.unpack("q{}"));
  CHECK_FALSE(codec.unpack(packed.substr(0, packed.size() / 2)));  // truncated
  CHECK_FALSE(codec.unpack(packed + "trailing"));
  std::string flipped = packed;
  flipped[1] = static_cast<char>(flipped[1] ^ 0x7f);
  auto bad = codec.unpack(flipped);
  CHECK((!bad || *bad != pod_text(3)));
  // The codec still works after refusing.
  CHECK(codec.unpack(packed) == pod_text(3));
}

TEST_CASE("pod text: the dictionary is a pod's JSON") {
  CHECK(PodTextCodec::dictionary().substr(0, 13) == R"({"kind":"Pod")");
  CHECK(PodTextCodec::dictionary().size() < 32768);  // within deflate's window
}
