#pragma once
// Runs ONE plugin of the default profile on its own, as kube-scheduler's plugin unit tests do (each upstream
// <plugin>_test.go calls PreFilter/Filter/Score/NormalizeScore on the plugin directly): PreFilter, Filter on every
// node with reasons asked for, and PreScore/Score/NormalizeScore over the nodes given.
#include "scheduler/framework/framework.h"
#include "scheduler/framework/plugins.h"
#include "scheduler/schedule.h"
#include "scheduler/snapshot.h"
#include "tests/scheduler/sched_fixtures.h"

#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::scheduler::testing {

inline boost::json::object J(std::string_view text) {
  return boost::json::parse(text).as_object();
}

inline PodInfo pod_info(const boost::json::object& pod) {
  auto info = parse_pod(pod, DeviceConfig{});
  REQUIRE(info.ok());
  return std::move(*info);
}

inline Snapshot nodes_snapshot(const std::vector<NodeSpec>& nodes) {
  Snapshot s;
  for (const NodeSpec& n : nodes) {
    REQUIRE(s.upsert_node(node(n)));
  }
  return s;
}

/// Helpers of the through-the-profile cases (schedule() with the default profile).
inline Snapshot cluster(std::vector<NodeSpec> nodes) {
  return nodes_snapshot(nodes);
}

inline boost::json::object P(std::string_view text) {
  return J(text);
}

inline Decision decide(const Snapshot& s, const boost::json::object& pod) {
  auto info = parse_pod(pod, DeviceConfig{});
  REQUIRE(info.ok());
  return schedule(s, *info, ScheduleOptions{});
}

/// A GPU replica of app=web with required anti-affinity to app=web on hostname; %N name, %S extra spec fields.
inline constexpr const char* kWeb = R"({"metadata":{"name":"%N","namespace":"default","labels":{"app":"web"}},
  "spec":{%S "containers":[{"name":"c","image":"x","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"1000"}}}],
  "affinity":{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[
    {"labelSelector":{"matchLabels":{"app":"web"}},"topologyKey":"kubernetes.io/hostname"}]}}}})";

inline std::string fill(std::string t, const std::string& name, const std::string& extra) {
  t.replace(t.find("%N"), 2, name);
  t.replace(t.find("%S"), 2, extra);
  return t;
}

/// A running pod bound to `node` (raw JSON with nodeName and phase added).
inline boost::json::object bound(std::string_view text, const std::string& node) {
  boost::json::object p = J(text);
  p["spec"].as_object()["nodeName"] = node;
  p["status"] = boost::json::object{{"phase", "Running"}};
  return p;
}

/// One plugin's verdicts for one pod.
struct PluginResult {
  framework::PluginStatus pre_filter;
  std::map<std::string, framework::PluginStatus> filter;  ///< per node name (not run when PreFilter skips/fails)
  bool filter_ran = false;
  bool triggers_scoring = false;

  /// The node's reasons joined by ", " ("" when it passes).
  std::string reasons(const std::string& node) const {
    std::string out;
    for (const std::string& r : filter.at(node).reasons) {
      out += (out.empty() ? "" : ", ") + r;
    }
    return out;
  }
  bool passes(const std::string& node) const { return filter.at(node).ok(); }
};

class PluginHarness {
 public:
  explicit PluginHarness(std::unique_ptr<framework::Plugin> plugin) : plugin_(std::move(plugin)) { plugin_->slot = 0; }

  const framework::Plugin& plugin() const { return *plugin_; }

  PluginResult run(const Snapshot& snap, const PodInfo& pod, const ScheduleOptions& options = {}) {
    PluginResult r;
    const PodFacts& facts = pod.facts ? *pod.facts : *empty_pod_facts();
    framework::CycleContext ctx{snap, pod, facts, options, true};
    state_ = std::make_unique<framework::CycleState>(1);
    r.pre_filter = plugin_->pre_filter(ctx, *state_);
    r.triggers_scoring = plugin_->triggers_scoring(ctx, *state_);
    if (r.pre_filter.code != framework::Code::success) {
      return r;
    }
    r.filter_ran = true;
    snap.for_each_node([&](const NodeState& n) { r.filter.emplace(n.name, plugin_->filter(ctx, *state_, n)); });
    return r;
  }

  /// PreScore, Score and NormalizeScore over `nodes` (after run() on the same pod, whose CycleState it reuses);
  /// nullopt when PreScore skips. Scores are NormalizeScore's output, before the plugin's weight.
  std::optional<std::map<std::string, int64_t>> scores(const Snapshot& snap, const PodInfo& pod,
                                                       const std::vector<std::string>& nodes,
                                                       const ScheduleOptions& options = {}) {
    const PodFacts& facts = pod.facts ? *pod.facts : *empty_pod_facts();
    framework::CycleContext ctx{snap, pod, facts, options, false};
    if (!state_) {
      state_ = std::make_unique<framework::CycleState>(1);
      (void)plugin_->pre_filter(ctx, *state_);
    }
    std::vector<const NodeState*> feasible;
    for (const std::string& n : nodes) {
      const NodeState* ns = snap.find_node(n);
      REQUIRE(ns != nullptr);
      feasible.push_back(ns);
    }
    if (!plugin_->pre_score(ctx, *state_, feasible)) {
      return std::nullopt;
    }
    std::vector<int64_t> s;
    for (const NodeState* n : feasible) {
      s.push_back(plugin_->score(ctx, *state_, *n));
    }
    plugin_->normalize(ctx, *state_, s);
    std::map<std::string, int64_t> out;
    for (size_t i = 0; i < nodes.size(); ++i) {
      out[nodes[i]] = s[i];
    }
    return out;
  }

 private:
  std::unique_ptr<framework::Plugin> plugin_;
  std::unique_ptr<framework::CycleState> state_;
};

}  // namespace gpuslice::scheduler::testing
