// serve's Lease namespace (scheduler/loop_service.h), which `gpuslice doctor` must find by the same rule
// (common/config.h: effective_lease_namespace).
#include "scheduler/loop_service.h"

#include <catch2/catch.hpp>

using namespace gpuslice;

TEST_CASE("serve puts its Lease where doctor looks", "[loop][lease]") {
  Configuration config;
  kube::RestConfig rest;
  SECTION("out of cluster (a kubeconfig, as the Kamaji sidecar): gpuslice-system, not kube-system") {
    rest.source = "kubeconfig /etc/gpuslice/kubeconfig";
    rest.default_namespace = "default";  // the context's namespace says nothing about gpuslice
    CHECK(scheduler::lease_namespace_for(config, rest) == "gpuslice-system");
    CHECK(scheduler::lease_namespace_for(config, rest) ==
          effective_lease_namespace(config.scheduler.leader_election, ""));
  }
  SECTION("in cluster: the ServiceAccount's namespace") {
    rest.source = "in-cluster";
    rest.default_namespace = "tenant-a-gpu";
    CHECK(scheduler::lease_namespace_for(config, rest) == "tenant-a-gpu");
  }
  SECTION("leaderElection.resourceNamespace wins") {
    rest.source = "in-cluster";
    rest.default_namespace = "tenant-a-gpu";
    config.scheduler.leader_election.lease_namespace = "leases";
    CHECK(scheduler::lease_namespace_for(config, rest) == "leases");
  }
}
