#include "common/config.h"

#include <catch2/catch.hpp>

using namespace gpuslice;
using namespace std::chrono_literals;

TEST_CASE("defaults follow HAMi") {
  auto r = parse_configuration("apiVersion: gpuslice.io/v1alpha1\nkind: GpusliceConfiguration\n");
  REQUIRE(r.ok());
  CHECK(r->scheduler_name == "gpuslice-scheduler");
  CHECK(r->devices.gpu_resource == "nvidia.com/gpu");
  CHECK(r->devices.memory_factor == 1);
  CHECK(r->scheduler.gpu_scheduler_policy == "spread");
  CHECK(r->scheduler.node_scheduler_policy == "binpack");
  CHECK(r->scheduler.node_lock_timeout == 5min);
  CHECK(r->scheduler.node_lock_lookahead == 64);
  CHECK(r->webhook.max_body_bytes == 4u * 1024 * 1024);
  CHECK(r->scheduler.preemption.enabled);  // kube-scheduler's DefaultPreemption is on by default
  CHECK(r->scheduler.preemption.max_in_flight == 16);
}

TEST_CASE("scheduler.preemption: the switch and the cap") {
  auto head = std::string("apiVersion: gpuslice.io/v1alpha1\nkind: GpusliceConfiguration\n");
  auto r = parse_configuration(head + "scheduler: {preemption: {enabled: false, maxInFlight: 3}}\n");
  REQUIRE(r.ok());
  CHECK_FALSE(r->scheduler.preemption.enabled);
  CHECK(r->scheduler.preemption.max_in_flight == 3);
  auto bad = parse_configuration(head + "scheduler: {preemption: {maxInFlight: 0}}\n");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("scheduler.preemption.maxInFlight: \"0\"") == 0);
  auto unknown = parse_configuration(head + "scheduler: {preemption: {victims: 2}}\n");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.message() == "scheduler.preemption.victims: unknown field");
}

TEST_CASE("scheduler.hamiLegacyMetrics: HAMi's legacy metric names, on by default") {
  auto head = std::string("apiVersion: gpuslice.io/v1alpha1\nkind: GpusliceConfiguration\n");
  auto d = parse_configuration(head);
  REQUIRE(d.ok());
  CHECK(d->scheduler.hami_legacy_metrics);
  auto off = parse_configuration(head + "scheduler: {hamiLegacyMetrics: false}\n");
  REQUIRE(off.ok());
  CHECK_FALSE(off->scheduler.hami_legacy_metrics);
  auto bad = parse_configuration(head + "scheduler: {hamiLegacyMetrics: sometimes}\n");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("scheduler.hamiLegacyMetrics: \"sometimes\"") == 0);
}

TEST_CASE("scheduler.defaultSpreading: kube-scheduler's system default spreading, on unless turned off") {
  auto head = std::string("apiVersion: gpuslice.io/v1alpha1\nkind: GpusliceConfiguration\n");
  auto d = parse_configuration(head);
  REQUIRE(d.ok());
  CHECK(d->scheduler.default_spreading);
  auto off = parse_configuration(head + "scheduler: {defaultSpreading: false}\n");
  REQUIRE(off.ok());
  CHECK_FALSE(off->scheduler.default_spreading);
  auto bad = parse_configuration(head + "scheduler: {defaultSpreading: zone}\n");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("scheduler.defaultSpreading: \"zone\"") == 0);
}

TEST_CASE("scheduler.scoreWeights: kube-scheduler's default weights, a map of plugin name to weight") {
  auto head = std::string("apiVersion: gpuslice.io/v1alpha1\nkind: GpusliceConfiguration\n");
  auto d = parse_configuration(head);
  REQUIRE(d.ok());
  // pkg/scheduler/apis/config/v1/default_plugins.go
  const ScoreWeights& dw = d->scheduler.score_weights;
  CHECK(dw.taint_toleration == 3);
  CHECK(dw.node_affinity == 2);
  CHECK(dw.pod_topology_spread == 2);
  CHECK(dw.inter_pod_affinity == 2);
  CHECK(dw.node_resources_fit == 1);
  CHECK(dw.node_resources_balanced_allocation == 1);

  auto r = parse_configuration(head + R"(scheduler:
  scoreWeights:
    TaintToleration: 5
    NodeAffinity: 100
    PodTopologySpread: 0
    InterPodAffinity: 7
    NodeResourcesFit: 0
    NodeResourcesBalancedAllocation: 4
)");
  REQUIRE(r.ok());
  const ScoreWeights& w = r->scheduler.score_weights;
  CHECK(w.taint_toleration == 5);
  CHECK(w.node_affinity == 100);
  CHECK(w.pod_topology_spread == 0);
  CHECK(w.inter_pod_affinity == 7);
  CHECK(w.node_resources_fit == 0);
  CHECK(w.node_resources_balanced_allocation == 4);

  // Only the named ones change.
  auto one = parse_configuration(head + "scheduler: {scoreWeights: {NodeAffinity: 9}}\n");
  REQUIRE(one.ok());
  ScoreWeights want;
  want.node_affinity = 9;
  CHECK(one->scheduler.score_weights == want);
  auto empty = parse_configuration(head + "scheduler: {scoreWeights: {}}\n");
  REQUIRE(empty.ok());
  CHECK(empty->scheduler.score_weights == ScoreWeights{});
}

TEST_CASE("scheduler.scoreWeights: bad names and weights name the field and the value") {
  auto head = std::string("apiVersion: gpuslice.io/v1alpha1\nkind: GpusliceConfiguration\n");
  auto msg = [&](const std::string& body) {
    auto r = parse_configuration(head + body);
    REQUIRE_FALSE(r.ok());
    return r.message();
  };
  CHECK(msg("scheduler: {scoreWeights: {NodeAffinty: 2}}\n") ==
        "scheduler.scoreWeights.NodeAffinty: \"NodeAffinty\" is not a score plugin (one of TaintToleration, "
        "NodeAffinity, PodTopologySpread, InterPodAffinity, NodeResourcesFit, NodeResourcesBalancedAllocation)");
  CHECK(msg("scheduler: {scoreWeights: {NodeAffinity: -1}}\n") ==
        "scheduler.scoreWeights.NodeAffinity: \"-1\" is out of range [0, 100]");
  CHECK(msg("scheduler: {scoreWeights: {TaintToleration: 101}}\n") ==
        "scheduler.scoreWeights.TaintToleration: \"101\" is out of range [0, 100]");
  CHECK(msg("scheduler: {scoreWeights: {InterPodAffinity: heavy}}\n") ==
        "scheduler.scoreWeights.InterPodAffinity: \"heavy\" is not an integer");
  CHECK(msg("scheduler: {scoreWeights: {GpuSlice: 10}}\n")
            .find("scheduler.scoreWeights.GpuSlice: GpuSlice has no "
                  "weight") == 0);
  CHECK(msg("scheduler: {scoreWeights: {ImageLocality: 1}}\n") ==
        "scheduler.scoreWeights.ImageLocality: ImageLocality is not implemented by gpuslice (node images are not "
        "read)");
  CHECK(msg("scheduler: {scoreWeights: [NodeAffinity]}\n") ==
        "scheduler.scoreWeights: must be a mapping of score plugin name to weight");
}

TEST_CASE("fields are read") {
  auto r = parse_configuration(R"(apiVersion: gpuslice.io/v1alpha1
kind: GpusliceConfiguration
schedulerName: hami-scheduler
resources: {memoryFactor: 2, defaultCores: 10}
webhook: {ignoredNamespaces: [kube-system], gpuCorePolicy: force, readTimeout: 2s}
scheduler:
  nodeLock: "off"
  leaderElection: {leaseDuration: 30s, renewDeadline: 20s, retryPeriod: 4s}
)");
  REQUIRE(r.ok());
  CHECK(r->scheduler_name == "hami-scheduler");
  CHECK(r->devices.memory_factor == 2);
  CHECK(r->devices.default_cores == 10);
  CHECK(r->webhook.ignored_namespaces == std::vector<std::string>{"kube-system"});
  CHECK(r->webhook.gpu_core_policy == "force");
  CHECK(r->webhook.read_timeout == 2s);
  CHECK(r->scheduler.node_lock == "off");
  CHECK(r->scheduler.leader_election.lease_duration == 30s);
}

TEST_CASE("bad configuration names the field and the value") {
  auto head = std::string("apiVersion: gpuslice.io/v1alpha1\nkind: GpusliceConfiguration\n");
  auto r1 = parse_configuration(head + "webhook: {bogus: 1}\n");
  REQUIRE_FALSE(r1.ok());
  CHECK(r1.message() == "webhook.bogus: unknown field");
  auto r2 = parse_configuration(head + "scheduler: {nodeLockTimeout: 5x}\n");
  REQUIRE_FALSE(r2.ok());
  CHECK(r2.message().find("scheduler.nodeLockTimeout: \"5x\"") == 0);
  auto r2b = parse_configuration(head + "scheduler: {nodeLockLookahead: 0}\n");
  REQUIRE_FALSE(r2b.ok());
  CHECK(r2b.message() == "scheduler.nodeLockLookahead: \"0\" is out of range [1, 100000]");
  auto r2c = parse_configuration(head + "scheduler: {nodeLockLookahead: 8}\n");
  REQUIRE(r2c.ok());
  CHECK(r2c->scheduler.node_lock_lookahead == 8);
  auto r3 = parse_configuration(head + "resources: {memoryFactor: zero}\n");
  REQUIRE_FALSE(r3.ok());
  CHECK(r3.message() == "resources.memoryFactor: \"zero\" is not an integer");
  auto r4 = parse_configuration("apiVersion: v1\nkind: GpusliceConfiguration\n");
  REQUIRE_FALSE(r4.ok());
  CHECK(r4.message().find("apiVersion: \"v1\"") == 0);
  auto r5 = parse_configuration(head + "scheduler: {gpuSchedulerPolicy: random}\n");
  REQUIRE_FALSE(r5.ok());
  CHECK(r5.message() == "scheduler.gpuSchedulerPolicy: \"random\" is not one of spread, binpack");
  auto r6 = parse_configuration(head + "scheduler: {leaderElection: {leaseDuration: 5s}}\n");
  REQUIRE_FALSE(r6.ok());
  CHECK(r6.message().find("leaseDuration") != std::string::npos);
  auto r7 = parse_configuration("a: [1, 2\n");
  REQUIRE_FALSE(r7.ok());
  CHECK(r7.message().find("invalid YAML at line") == 0);
}

TEST_CASE("Go-style durations") {
  CHECK(parse_duration("300ms").value() == 300ms);
  CHECK(parse_duration("1h30m").value() == 90min);
  CHECK(parse_duration("1.5s").value() == 1500ms);
  CHECK_FALSE(parse_duration("5").ok());
  CHECK_FALSE(parse_duration("-5s").ok());
  CHECK_FALSE(parse_duration("5d").ok());
  CHECK(format_duration(5min) == "5m");
  CHECK(format_duration(1500ms) == "1500ms");
}

TEST_CASE("webhook.handshakeTimeout and writeTimeout: unset follow readTimeout, set stand alone") {
  const std::string head = "apiVersion: gpuslice.io/v1alpha1\nkind: GpusliceConfiguration\n";
  auto unset = parse_configuration(head + "webhook: {readTimeout: 3s}\n");
  REQUIRE(unset.ok());
  CHECK_FALSE(unset->webhook.handshake_timeout.has_value());
  CHECK_FALSE(unset->webhook.write_timeout.has_value());
  auto set = parse_configuration(head + "webhook: {readTimeout: 3s, handshakeTimeout: 1500ms, writeTimeout: 1m}\n");
  REQUIRE(set.ok());
  CHECK(set->webhook.read_timeout == 3s);
  CHECK(set->webhook.handshake_timeout == 1500ms);
  CHECK(set->webhook.write_timeout == 1min);
}

namespace {
/// The error of a configuration whose webhook section is `{fields}`, or "<ok>".
std::string webhook_error(const std::string& fields) {
  auto r =
      parse_configuration("apiVersion: gpuslice.io/v1alpha1\nkind: GpusliceConfiguration\nwebhook: {" + fields + "}\n");
  return r.ok() ? "<ok>" : r.message();
}
}  // namespace

TEST_CASE("webhook.handshakeTimeout and writeTimeout: bad values name the field and the value") {
  CHECK(webhook_error("handshakeTimeout: 10") ==
        "webhook.handshakeTimeout: \"10\" is not a duration (missing unit (ms, s, m or h))");
  CHECK(webhook_error("writeTimeout: -1s").find("webhook.writeTimeout: \"-1s\" is not a duration") == 0);
  CHECK(webhook_error("handshakeTimeout: 0s") == "webhook.handshakeTimeout: \"0s\" must be greater than 0");
  CHECK(webhook_error("writeTimeout: \"0\"") == "webhook.writeTimeout: \"0s\" must be greater than 0");
  CHECK(webhook_error("writeTimeout: [1s]") == "webhook.writeTimeout: must be a duration such as 15s");
  CHECK(webhook_error("handshakeTimeout: 1ms, writeTimeout: 1ms") == "<ok>");
  // validate_configuration (run again after flags) sees a value set by a flag as well.
  Configuration c;
  c.webhook.write_timeout = 0ms;
  auto st = validate_configuration(c);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message() == "webhook.writeTimeout: \"0s\" must be greater than 0");
  c.webhook.write_timeout = 1ms;
  CHECK(validate_configuration(c).ok());
}

TEST_CASE("webhook.clientHelloTimeout, maxConnections and maxPendingPerSource: defaults, values, errors") {
  Configuration defaults;
  CHECK(defaults.webhook.client_hello_timeout == 3s);
  CHECK(defaults.webhook.max_connections == 4096);
  CHECK(defaults.webhook.max_pending_per_source == 1024);
  auto set = parse_configuration(
      "apiVersion: gpuslice.io/v1alpha1\nkind: GpusliceConfiguration\n"
      "webhook: {clientHelloTimeout: 500ms, maxConnections: 20000, maxPendingPerSource: 64}\n");
  REQUIRE(set.ok());
  CHECK(set->webhook.client_hello_timeout == 500ms);
  CHECK(set->webhook.max_connections == 20000);
  CHECK(set->webhook.max_pending_per_source == 64);
  CHECK(webhook_error("clientHelloTimeout: 3") ==
        "webhook.clientHelloTimeout: \"3\" is not a duration (missing unit (ms, s, m or h))");
  CHECK(webhook_error("clientHelloTimeout: 0s") == "webhook.clientHelloTimeout: \"0s\" must be greater than 0");
  CHECK(webhook_error("maxConnections: 0") == "webhook.maxConnections: \"0\" is out of range [1, 1000000]");
  CHECK(webhook_error("maxConnections: many") == "webhook.maxConnections: \"many\" is not an integer");
  CHECK(webhook_error("maxPendingPerSource: 1000001") ==
        "webhook.maxPendingPerSource: \"1000001\" is out of range [1, 1000000]");
  Configuration c;
  c.webhook.client_hello_timeout = 0ms;
  auto st = validate_configuration(c);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message() == "webhook.clientHelloTimeout: \"0s\" must be greater than 0");
}

TEST_CASE("the Lease namespace: one rule for serve and doctor") {
  LeaderElectionConfig le;
  // Nothing names one: gpuslice-system, where manifests/base and the chart grant the Lease (not kube-system).
  CHECK(effective_lease_namespace(le, "") == "gpuslice-system");
  CHECK(effective_lease_namespace(le, "") == std::string(kDefaultNamespace));
  // In-cluster (serve) or the ConfigMap's namespace (doctor): the namespace gpuslice runs in.
  CHECK(effective_lease_namespace(le, "tenant-7") == "tenant-7");
  // resourceNamespace wins over both.
  le.lease_namespace = "elsewhere";
  CHECK(effective_lease_namespace(le, "tenant-7") == "elsewhere");
  CHECK(effective_lease_namespace(le, "") == "elsewhere");
  auto parsed = parse_configuration("apiVersion: gpuslice.io/v1alpha1\nkind: GpusliceConfiguration\n");
  REQUIRE(parsed.ok());
  CHECK(effective_lease_namespace(parsed->scheduler.leader_election, "") == "gpuslice-system");
}

TEST_CASE("the configuration file is read by the bounded YAML reader: aliases, cycles, quoted and plain alike") {
  auto head = std::string("apiVersion: gpuslice.io/v1alpha1\nkind: GpusliceConfiguration\n");
  // Fields type their own text: quoted and plain scalars read alike, as over yaml-cpp's nodes.
  auto quoted = parse_configuration(head + "webhook: {threads: \"3\", enabled: 'false'}\nscheduler: {kubeQPS: 7.5}\n");
  REQUIRE(quoted.ok());
  CHECK(quoted->webhook.threads == 3);
  CHECK_FALSE(quoted->webhook.enabled);
  CHECK(quoted->scheduler.kube_qps == 7.5);
  // Aliases work within the bounds.
  auto alias = parse_configuration(head + "webhook: {ignoredNamespaces: &ns [a, b], takeoverSchedulerNames: *ns}\n");
  REQUIRE(alias.ok());
  CHECK(alias->webhook.takeover_scheduler_names == std::vector<std::string>{"a", "b"});
  // A cycle and an alias bomb are errors, not a hang.
  auto cycle = parse_configuration(head + "webhook: &w {ignoredNamespaces: *w}\n");
  REQUIRE_FALSE(cycle.ok());
  CHECK(cycle.message() == "document 0: line 3, column 33: alias *w is inside the node anchored &w (an alias cycle)");
  std::string bomb = head + "x0: &x0 [a, a, a, a, a, a, a, a, a, a]\n";
  for (int i = 1; i < 9; ++i) {
    bomb += "x" + std::to_string(i) + ": &x" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) {
      bomb += (j != 0 ? ", *x" : "*x") + std::to_string(i - 1);
    }
    bomb += "]\n";
  }
  auto laughs = parse_configuration(bomb);
  REQUIRE_FALSE(laughs.ok());
  CHECK(laughs.message().find("aliases expand to more than 400000 nodes") != std::string::npos);
  auto nulls = parse_configuration(head + "webhook: {ignoredNamespaces: ~, runtimeClassName: ~}\n");
  REQUIRE_FALSE(nulls.ok());
  CHECK(nulls.message() == "webhook.runtimeClassName: must be a string");
}
