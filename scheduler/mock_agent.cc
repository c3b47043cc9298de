#include "scheduler/mock_agent.h"

#include "common/json_access.h"
#include "common/log.h"
#include "scheduler/allocation.h"
#include "scheduler/node_lock.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

namespace gpuslice::scheduler {
namespace {

namespace asio = boost::asio;

}  // namespace

std::optional<std::string> mock_allocate_patch(const boost::json::object& pod,
                                               const std::set<std::string, std::less<>>& managed_nodes) {
  const std::string node = string_at_pointer(pod, "/spec/nodeName");
  if (node.empty() || !managed_nodes.count(node)) {
    return std::nullopt;
  }
  const std::string phase = string_at_pointer(pod, "/status/phase");
  if (phase == "Succeeded" || phase == "Failed") {
    return std::nullopt;
  }
  if (annotation(pod, kBindPhaseAnnotation).value_or("") != kBindPhaseAllocating) {
    return std::nullopt;
  }
  boost::json::object annotations;
  const auto to_allocate = annotation(pod, kDevicesToAllocateAnnotation);
  std::string result = std::string(kBindPhaseSuccess);
  if (to_allocate) {
    auto devices = decode_pod_devices(*to_allocate);
    if (!devices) {
      result = std::string(kBindPhaseFailed);
    } else {
      // Allocate consumes every container's entry; the slots stay, empty (e.g. "GPU-a,NVIDIA,3000,30:;" -> ";").
      PodDevices emptied(devices->size());
      annotations[kDevicesToAllocateAnnotation] = encode_pod_devices(emptied);
    }
  }
  annotations[kBindPhaseAnnotation] = result;
  boost::json::object meta{{"annotations", std::move(annotations)}};
  const std::string rv = kube::resource_version_of(pod);
  if (!rv.empty()) {
    meta["resourceVersion"] = rv;
  }
  return boost::json::serialize(boost::json::object{{"metadata", std::move(meta)}});
}

MockDeviceAgent::MockDeviceAgent(asio::any_io_executor executor, std::shared_ptr<LoopApi> api)
    : executor_(std::move(executor)), api_(std::move(api)) {}

void MockDeviceAgent::on_node_event(const kube::ReflectorEvent& e) {
  using T = kube::ReflectorEventType;
  auto apply = [&](const boost::json::object& n) {
    const std::string name = kube::name_of(n);
    managed_.insert(name);
    nodes_[name] = {kube::resource_version_of(n), annotation(n, kNodeLockAnnotation)};
    consider_node_lock(name);
  };
  switch (e.type) {
    case T::relisted:
      managed_.clear();
      nodes_.clear();
      for (const auto& n : *e.items) {
        apply(n);
      }
      break;
    case T::added:
    case T::modified:
      apply(*e.object);
      break;
    case T::deleted:
      managed_.erase(kube::name_of(*e.object));
      nodes_.erase(kube::name_of(*e.object));
      break;
    case T::bookmark:
      break;
  }
}

void MockDeviceAgent::on_pod_event(const kube::ReflectorEvent& e) {
  using T = kube::ReflectorEventType;
  switch (e.type) {
    case T::relisted:
      for (const auto& p : *e.items) {
        consider_pod(p);
      }
      break;
    case T::added:
    case T::modified:
      consider_pod(*e.object);
      break;
    case T::deleted: {
      const std::string key = kube::namespace_of(*e.object) + "/" + kube::name_of(*e.object);
      done_phase_[key] = "deleted";
      const std::string node = string_at_pointer(*e.object, "/spec/nodeName");
      if (!node.empty()) {
        consider_node_lock(node);
      }
      break;
    }
    case T::bookmark:
      break;
  }
}

void MockDeviceAgent::consider_pod(const boost::json::object& pod) {
  const std::string ns = kube::namespace_of(pod);
  const std::string name = kube::name_of(pod);
  const std::string key = ns + "/" + name;
  const std::string node = string_at_pointer(pod, "/spec/nodeName");
  const std::string phase = annotation(pod, kBindPhaseAnnotation).value_or("");
  if (phase == kBindPhaseSuccess || phase == kBindPhaseFailed) {
    done_phase_[key] = phase;
    if (!node.empty() && managed_.count(node)) {
      consider_node_lock(node);
    }
    return;
  }
  done_phase_.erase(key);
  auto patch = mock_allocate_patch(pod, managed_);
  if (!patch || busy_.count(key)) {
    return;
  }
  busy_.insert(key);
  asio::co_spawn(executor_, allocate(ns, name, node, std::move(*patch)), asio::detached);
}

asio::awaitable<void> MockDeviceAgent::allocate(std::string ns, std::string name, std::string node, std::string patch) {
  auto self = shared_from_this();
  const std::string key = ns + "/" + name;
  auto r = co_await api_->patch_pod(ns, name, patch);
  busy_.erase(key);
  if (!r) {
    if (r.error().is_conflict()) {
      // Changed since our copy; its event may already have passed while we were busy: read it and judge again.
      ++stats_.conflicts;
      auto g = co_await api_->get_pod(ns, name);
      if (g) {
        consider_pod(*g);
      }
    } else if (!r.error().is_not_found()) {
      // Transport trouble or a 5xx: the pod's next event may never come (it is bound and waiting), so retry
      // here, bounded, or the node lock would stall until the scheduler's timeout.
      log::warning("mock allocate failed; retrying", {{"pod", key}, {"error", r.error().to_string()}});
      for (int attempt = 0; attempt < 10; ++attempt) {
        asio::steady_timer t(executor_);
        t.expires_after(std::chrono::milliseconds(200 << std::min(attempt, 4)));
        co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
        auto g = co_await api_->get_pod(ns, name);
        if (g) {
          consider_pod(*g);
          break;
        }
        if (g.error().is_not_found()) {
          break;
        }
      }
    }
    co_return;
  }
  const std::string phase = annotation(*r, kBindPhaseAnnotation).value_or("");
  done_phase_[key] = phase;
  if (phase == kBindPhaseFailed) {
    ++stats_.failed;
  } else {
    ++stats_.allocated;
  }
  log::info("mock allocate", {{"pod", key}, {"node", node}, {"bindPhase", phase}}, 1);
  co_await release_lock(node, ns, name);
}

void MockDeviceAgent::consider_node_lock(const std::string& node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || !it->second.second) {
    return;
  }
  auto parsed = parse_node_lock(*it->second.second);
  if (!parsed || parsed->legacy) {
    return;  // not ours to judge: the scheduler's janitor handles expiry
  }
  auto done = done_phase_.find(parsed->ns + "/" + parsed->pod);
  if (done == done_phase_.end()) {
    return;
  }
  const std::string busy_key = "node:" + node;
  if (busy_.count(busy_key)) {
    return;
  }
  busy_.insert(busy_key);
  auto task = [](std::shared_ptr<MockDeviceAgent> self, std::string n, std::string ns,
                 std::string pod) -> asio::awaitable<void> {
    co_await self->release_lock(n, ns, pod);
    self->busy_.erase("node:" + n);
  };
  asio::co_spawn(executor_, task(shared_from_this(), node, parsed->ns, parsed->pod), asio::detached);
}

asio::awaitable<void> MockDeviceAgent::release_lock(std::string node, std::string ns, std::string name) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto it = nodes_.find(node);
    if (it == nodes_.end() || !lock_held_by(it->second.second, ns, name)) {
      co_return;
    }
    auto r = co_await api_->patch_node(node, node_lock_patch(it->second.first, std::nullopt));
    if (r) {
      nodes_[node] = {kube::resource_version_of(*r), annotation(*r, kNodeLockAnnotation)};
      ++stats_.locks_released;
      log::info("mock agent released node lock", {{"node", node}, {"pod", ns + "/" + name}}, 1);
      co_return;
    }
    if (r.error().is_not_found()) {
      co_return;
    }
    ++stats_.conflicts;
    auto g = co_await api_->get_node(node);
    if (g) {
      nodes_[node] = {kube::resource_version_of(*g), annotation(*g, kNodeLockAnnotation)};
    }
  }
}

int run_mock_device_agent(const MockAgentConfig& config) {
  auto rest = kube::load_default_config(config.kubeconfig, kube::Environment::system());
  if (!rest) {
    log::error("kubeconfig", {{"error", rest.message()}});
    return 1;
  }
  asio::io_context io;
  kube::ClientOptions co;
  co.qps = config.qps;
  co.burst = config.burst;
  co.max_idle_connections = 32;  // allocations run concurrently: keep their connections alive
  co.user_agent = "gpuslice-mock-device-agent";
  auto client = kube::Client::create(io.get_executor(), std::move(*rest), co);
  if (!client) {
    log::error("kube client", {{"error", client.message()}});
    return 1;
  }
  auto agent = std::make_shared<MockDeviceAgent>(io.get_executor(), make_client_api(*client));
  kube::ReflectorOptions nodes;
  nodes.resource = kube::resources::nodes();
  nodes.label_selector = config.node_selector;
  nodes.name = "nodes";
  kube::ReflectorOptions pods;
  pods.resource = kube::resources::pods();
  pods.field_selector = "spec.nodeName!=";
  pods.name = "pods";
  // Nodes first: pods are judged against the managed set, so the pod informer starts once nodes are listed.
  auto pod_reflector = std::make_shared<kube::Reflector>(
      *client, std::move(pods), [agent](const kube::ReflectorEvent& e) { agent->on_pod_event(e); });
  bool pods_started = false;
  auto node_reflector = std::make_shared<kube::Reflector>(
      *client, std::move(nodes), [agent, pod_reflector, &pods_started, &io](const kube::ReflectorEvent& e) {
        agent->on_node_event(e);
        if (e.type == kube::ReflectorEventType::relisted && !pods_started) {
          pods_started = true;
          asio::co_spawn(io, pod_reflector->run(), asio::detached);
        }
      });
  asio::co_spawn(io, node_reflector->run(), asio::detached);
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](boost::system::error_code, int) {
    log::info("mock device agent stopping");
    node_reflector->stop();
    pod_reflector->stop();
    io.stop();
  });
  log::info("mock device agent running", {{"nodeSelector", config.node_selector}});
  io.run();
  return 0;
}

}  // namespace gpuslice::scheduler
