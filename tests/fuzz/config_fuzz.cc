// The configuration file (common/config.h: parse_configuration, the durations). Oracles:
//  - an error is a message (never empty, never a throw);
//  - an accepted configuration passes validate_configuration and its fields are within the documented ranges;
//  - round trip: the accepted configuration written back as a document (JSON, which YAML reads; durations by
//    format_duration) parses to the same configuration, compared by that same writing;
//  - a duration (the first line of the input) that parses formats back to text that parses to the same value.
#include "common/config.h"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace gpuslice;
namespace json = boost::json;

namespace {
void require(bool ok) {
  if (!ok) {
    std::abort();
  }
}

bool printable = true;  // every string of the configuration is printable ASCII (see write_config)

json::value str(const std::string& s) {
  for (unsigned char c : s) {
    printable = printable && c >= 0x20 && c < 0x7f;
  }
  return json::value(s);
}

json::value dur(std::chrono::milliseconds d) {
  return json::value(format_duration(d));
}

json::array strs(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) {
    a.push_back(str(s));
  }
  return a;
}

// Every field parse_configuration reads, under its document name.
std::string write_config(const Configuration& c) {
  const auto& d = c.devices;
  const auto& w = c.webhook;
  const auto& s = c.scheduler;
  const auto& le = s.leader_election;
  json::object webhook{{"enabled", w.enabled},
                       {"bindAddress", str(w.bind_address)},
                       {"tlsCertFile", str(w.tls_cert_file)},
                       {"tlsPrivateKeyFile", str(w.tls_private_key_file)},
                       {"maxBodyBytes", w.max_body_bytes},
                       {"maxHeaderBytes", w.max_header_bytes},
                       {"readTimeout", dur(w.read_timeout)},
                       {"idleTimeout", dur(w.idle_timeout)},
                       {"threads", w.threads},
                       {"takeoverSchedulerNames", strs(w.takeover_scheduler_names)},
                       {"ignoredNamespaces", strs(w.ignored_namespaces)},
                       {"runtimeClassName", str(w.runtime_class_name)},
                       {"gpuCorePolicy", str(w.gpu_core_policy)},
                       {"overwriteEnv", w.overwrite_env},
                       {"clientHelloTimeout", dur(w.client_hello_timeout)},
                       {"maxConnections", w.max_connections},
                       {"maxPendingPerSource", w.max_pending_per_source}};
  if (w.handshake_timeout) {
    webhook["handshakeTimeout"] = dur(*w.handshake_timeout);
  }
  if (w.write_timeout) {
    webhook["writeTimeout"] = dur(*w.write_timeout);
  }
  json::object doc{
      {"apiVersion", kConfigApiVersion},
      {"kind", kConfigKind},
      {"schedulerName", str(c.scheduler_name)},
      {"kubeconfig", str(c.kubeconfig)},
      {"logging", json::object{{"format", str(c.logging_format)}, {"verbosity", c.verbosity}}},
      {"resources", json::object{{"gpu", str(d.gpu_resource)},
                                 {"memory", str(d.memory_resource)},
                                 {"memoryPercentage", str(d.memory_percentage_resource)},
                                 {"cores", str(d.cores_resource)},
                                 {"priority", str(d.priority_resource)},
                                 {"defaultMemory", d.default_memory_mib},
                                 {"defaultCores", d.default_cores},
                                 {"defaultGPUNum", d.default_gpu_num},
                                 {"memoryFactor", d.memory_factor}}},
      {"webhook", std::move(webhook)},
      {"scheduler",
       json::object{
           {"enabled", s.enabled},
           {"nodeSchedulerPolicy", str(s.node_scheduler_policy)},
           {"gpuSchedulerPolicy", str(s.gpu_scheduler_policy)},
           {"nodeLock", str(s.node_lock)},
           {"nodeLockTimeout", dur(s.node_lock_timeout)},
           {"nodeLockLookahead", s.node_lock_lookahead},
           {"nodeLabelSelector", str(s.node_label_selector)},
           {"kubeQPS", s.kube_qps},
           {"kubeBurst", s.kube_burst},
           {"kubeTimeout", dur(s.kube_timeout)},
           {"maxBackoff", dur(s.max_backoff)},
           {"hamiLegacyMetrics", s.hami_legacy_metrics},
           {"defaultSpreading", s.default_spreading},
           {"scoreWeights",
            json::object{{"TaintToleration", s.score_weights.taint_toleration},
                         {"NodeAffinity", s.score_weights.node_affinity},
                         {"PodTopologySpread", s.score_weights.pod_topology_spread},
                         {"InterPodAffinity", s.score_weights.inter_pod_affinity},
                         {"NodeResourcesFit", s.score_weights.node_resources_fit},
                         {"NodeResourcesBalancedAllocation", s.score_weights.node_resources_balanced_allocation}}},
           {"preemption", json::object{{"enabled", s.preemption.enabled}, {"maxInFlight", s.preemption.max_in_flight}}},
           {"leaderElection", json::object{{"leaderElect", le.enabled},
                                           {"resourceName", str(le.lease_name)},
                                           {"resourceNamespace", str(le.lease_namespace)},
                                           {"leaseDuration", dur(le.lease_duration)},
                                           {"renewDeadline", dur(le.renew_deadline)},
                                           {"retryPeriod", dur(le.retry_period)}}}}},
      {"server", json::object{{"healthBindAddress", str(c.server.health_bind_address)},
                              {"metricsBindAddress", str(c.server.metrics_bind_address)}}}};
  return json::serialize(doc);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  const std::string_view line = text.substr(0, std::min(text.find('\n'), size_t{64}));
  if (auto d = parse_duration(line)) {
    require(d->count() >= 0);
    auto back = parse_duration(format_duration(*d));
    require(back && *back == *d);
  } else {
    require(!d.message().empty());
  }

  auto c = parse_configuration(text);
  if (!c) {
    const std::string& m = c.message();
    require(!m.empty());
    return 0;
  }
  require(validate_configuration(*c).ok());
  require(c->webhook.threads >= 1 && c->webhook.threads <= 256);
  require(c->webhook.max_body_bytes >= 1024 && c->webhook.max_body_bytes <= (64u << 20));
  require(c->webhook.client_hello_timeout.count() > 0);
  require(c->webhook.max_connections >= 1 && c->webhook.max_connections <= 1000000);
  require(c->webhook.max_pending_per_source >= 1 && c->webhook.max_pending_per_source <= 1000000);
  require(c->devices.memory_factor >= 1 && c->devices.default_gpu_num >= 1 && c->devices.default_cores <= 100);
  require(c->scheduler.kube_qps >= 0.1 && c->verbosity >= 0 && c->verbosity <= 10);
  for (auto d : {c->webhook.read_timeout, c->webhook.idle_timeout, c->scheduler.node_lock_timeout,
                 c->scheduler.kube_timeout, c->scheduler.max_backoff}) {
    require(d.count() >= 0);
  }

  printable = true;
  const std::string written = write_config(*c);
  if (!printable) {
    return 0;  // a string YAML would re-read differently (control bytes, non-ASCII): not this oracle's concern
  }
  auto again = parse_configuration(written);
  require(again.ok());
  require(write_config(*again) == written);
  return 0;
}
