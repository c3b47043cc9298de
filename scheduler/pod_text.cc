// PodTextCodec: raw deflate (zlib) against a preset dictionary of a kube-apiserver pod's JSON (scheduler/pod_text.h).
#include "scheduler/pod_text.h"

#include <zlib.h>

#include <cstring>

namespace gpuslice::scheduler {

namespace {

// What a kube-apiserver writes for a pod, in its field order, with the values every pod repeats (defaults, the
// service account's projected volume, the default tolerations, HAMi's and gpuslice's annotation names). deflate
// finds most of a pod's text here; the dictionary is part of the format: changing it makes earlier packed texts
// unreadable (they live only in this process, so only within one binary).
constexpr std::string_view kDictionary =
    R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":"","generateName":"","namespace":"default","uid":)"
    R"("","resourceVersion":"","creationTimestamp":"2026-01-01T00:00:00Z","deletionTimestamp":"","labels":{)"
    R"("app":"","app.kubernetes.io/name":"","pod-template-hash":"","controller-revision-hash":"","gpuslice.)"
    R"(io/webhook":"ignore"},"annotations":{"gpuslice.io/gpu-request":"","hami.io/vgpu-node":"","hami.io/vg)"
    R"(pu-time":"","hami.io/vgpu-devices-to-allocate":"GPU-,NVIDIA,","hami.io/vgpu-devices-allocated":"","h)"
    R"(ami.io/bind-phase":"allocating","hami.io/bind-time":"","nvidia.com/use-gputype":""},"ownerReferences)"
    R"(":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"","uid":"","controller":true,"blockOwnerDelet)"
    R"(ion":true}]},"spec":{"volumes":[{"name":"kube-api-access-","projected":{"sources":[{"serviceAccountT)"
    R"(oken":{"expirationSeconds":3607,"path":"token"}},{"configMap":{"name":"kube-root-ca.crt","items":[{")"
    R"(key":"ca.crt","path":"ca.crt"}]}},{"downwardAPI":{"items":[{"path":"namespace","fieldRef":{"apiVersi)"
    R"(on":"v1","fieldPath":"metadata.namespace"}}]}}],"defaultMode":420}}],"initContainers":[],"containers)"
    R"(":[{"name":"","image":"","command":[],"args":[],"env":[{"name":"","value":""}],"ports":[{"containerP)"
    R"(ort":8080,"protocol":"TCP"}],"resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpucores":"5",")"
    R"(nvidia.com/gpumem":"1000","cpu":"100m","memory":"128Mi"},"requests":{"nvidia.com/gpu":"1","nvidia.co)"
    R"(m/gpucores":"5","nvidia.com/gpumem":"1000","cpu":"100m","memory":"128Mi"}},"volumeMounts":[{"name":")"
    R"(kube-api-access-","readOnly":true,"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}],"ter)"
    R"(minationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfN)"
    R"(otPresent"}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst",)"
    R"("nodeSelector":{},"serviceAccountName":"default","serviceAccount":"default","nodeName":"","securityC)"
    R"(ontext":{},"affinity":{},"schedulerName":"gpuslice-scheduler","tolerations":[{"key":"node.kubernetes)"
    R"(.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300},{"key":"node.kubern)"
    R"(etes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}],"priority":0)"
    R"(,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"},"status":{"phase":"Pending","c)"
    R"(onditions":[{"type":"PodScheduled","status":"False","lastProbeTime":null,"lastTransitionTime":"","re)"
    R"(ason":"Unschedulable","message":"0/1 nodes are available: "}],"qosClass":"BestEffort"}})";

constexpr int kLevel = 1;  // fastest: a relist packs every pending pod (bench pod: 1,676 -> 193 bytes; level 6: 158)
constexpr int kWindowBits = -15;  // raw deflate, 32 KiB window (the dictionary fits)
constexpr int kMemLevel = 8;

}  // namespace

struct PodTextCodec::Streams {
  z_stream deflate{};
  z_stream inflate{};
  bool deflate_ok = false;
  bool inflate_ok = false;
  Streams() {
    deflate_ok = deflateInit2(&deflate, kLevel, Z_DEFLATED, kWindowBits, kMemLevel, Z_DEFAULT_STRATEGY) == Z_OK;
    inflate_ok = inflateInit2(&inflate, kWindowBits) == Z_OK;
  }
  ~Streams() {
    if (deflate_ok) {
      deflateEnd(&deflate);
    }
    if (inflate_ok) {
      inflateEnd(&inflate);
    }
  }
  Streams(const Streams&) = delete;
  Streams& operator=(const Streams&) = delete;
};

PodTextCodec::PodTextCodec() : streams_(std::make_unique<Streams>()) {}
PodTextCodec::~PodTextCodec() = default;

std::string_view PodTextCodec::dictionary() {
  return kDictionary;
}

// Format: one byte, 'z' then the raw deflate stream, or 't' then the text as is (when deflate is unavailable or
// would not make it smaller).
std::string PodTextCodec::pack(std::string_view text) {
  std::string out;
  z_stream& z = streams_->deflate;
  if (streams_->deflate_ok && deflateReset(&z) == Z_OK &&
      deflateSetDictionary(&z, reinterpret_cast<const Bytef*>(kDictionary.data()),
                           static_cast<uInt>(kDictionary.size())) == Z_OK) {
    out.resize(1 + deflateBound(&z, static_cast<uLong>(text.size())));
    out[0] = 'z';
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
    z.avail_in = static_cast<uInt>(text.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data() + 1);
    z.avail_out = static_cast<uInt>(out.size() - 1);
    if (deflate(&z, Z_FINISH) == Z_STREAM_END && z.total_out < text.size()) {
      out.resize(1 + z.total_out);
      out.shrink_to_fit();
      return out;
    }
  }
  out.assign(1, 't');
  out.append(text);
  return out;
}

std::optional<std::string> PodTextCodec::unpack(std::string_view packed) {
  if (packed.empty()) {
    return std::nullopt;
  }
  if (packed[0] == 't') {
    return std::string(packed.substr(1));
  }
  if (packed[0] != 'z' || !streams_->inflate_ok) {
    return std::nullopt;
  }
  z_stream& z = streams_->inflate;
  if (inflateReset(&z) != Z_OK || inflateSetDictionary(&z, reinterpret_cast<const Bytef*>(kDictionary.data()),
                                                       static_cast<uInt>(kDictionary.size())) != Z_OK) {
    return std::nullopt;
  }
  std::string out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data() + 1));
  z.avail_in = static_cast<uInt>(packed.size() - 1);
  char buf[16384];
  for (;;) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    const int rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      return std::nullopt;
    }
    out.append(buf, sizeof buf - z.avail_out);
    if (rc == Z_STREAM_END) {
      return z.avail_in == 0 ? std::optional<std::string>(std::move(out)) : std::nullopt;
    }
    if (z.avail_in == 0 && z.avail_out != 0) {
      return std::nullopt;  // truncated
    }
  }
}

}  // namespace gpuslice::scheduler
