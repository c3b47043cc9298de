#include "simulate/simulate.h"

#include "common/json_access.h"
#include "common/json_patch.h"
#include "scheduler/framework/framework.h"
#include "scheduler/preemption.h"
#include "scheduler/schedule.h"
#include "webhook/policy.h"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

namespace gpuslice::simulate {
namespace json = boost::json;
using namespace gpuslice::scheduler;  // the composition drives the scheduling core

namespace {

bool bound(const json::object& pod) {
  if (!string_at_pointer(pod, "/spec/nodeName").empty()) {
    return true;
  }
  const json::object* a = annotations_of(pod);
  return a != nullptr && a->contains(kVgpuNodeAnnotation);
}

struct CardPods {
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> pods;  // (node, uuid) -> pods
  void add(const std::string& node, const PodDevices& devices, const std::string& pod) {
    for (const auto& slot : devices) {
      for (const auto& d : slot) {
        auto& v = pods[{node, d.uuid}];
        if (std::find(v.begin(), v.end(), pod) == v.end()) {
          v.push_back(pod);
        }
      }
    }
  }
};

std::vector<SimulatedDevice> devices_of(const Snapshot& snap, const PodInfo& info, const Decision& d) {
  std::vector<SimulatedDevice> out;
  const NodeState* node = snap.find_node(d.node);
  for (size_t i = 0; i < d.devices.size(); ++i) {
    for (const ContainerDevice& dev : d.devices[i]) {
      SimulatedDevice sd;
      sd.container = i < info.gpu.containers.size() ? info.gpu.containers[i].name : std::to_string(i);
      sd.uuid = dev.uuid;
      const CardState* card = node ? node->find_card(dev.uuid) : nullptr;
      sd.type = card ? card->info.type : dev.type;
      sd.mem_mib = dev.mem_mib;
      sd.cores = dev.cores;
      out.push_back(std::move(sd));
    }
  }
  return out;
}

}  // namespace

Result<SimulationResult> simulate(const SimulationInput& input, const Configuration& config, int64_t now_unix) {
  Snapshot snap(config.devices);
  CardPods card_pods;
  struct Queued {
    const std::string* file;
    const Manifest* m;
  };
  std::vector<Queued> queue;
  std::vector<const std::vector<std::pair<std::string, std::vector<Manifest>>>*> groups = {&input.node_files,
                                                                                           &input.pod_files};
  // Pass 0: PriorityClasses, so pods naming one get spec.priority (and preemptionPolicy) as the API server would
  // give them on creation.
  struct PriorityClassInfo {
    int64_t value = 0;
    std::string preemption_policy;
  };
  std::map<std::string, PriorityClassInfo> classes;
  std::optional<PriorityClassInfo> global_default;
  for (const auto* group : groups) {
    for (const auto& [file, manifests] : *group) {
      for (const Manifest& m : manifests) {
        if (string_at(m.object, "kind") != "PriorityClass") {
          continue;
        }
        const json::value* v = m.object.if_contains("value");
        if (v == nullptr || !v->is_int64()) {
          return make_error(file + ": document " + std::to_string(m.document) + ": priorityclass " +
                            string_at_pointer(m.object, "/metadata/name") + ": value: missing or not an integer");
        }
        PriorityClassInfo pc{v->get_int64(), string_at(m.object, "preemptionPolicy")};
        classes[string_at_pointer(m.object, "/metadata/name")] = pc;
        if (const json::value* g = m.object.if_contains("globalDefault");
            g != nullptr && g->is_bool() && g->get_bool()) {
          global_default = pc;
        }
      }
    }
  }
  auto with_priority = [&](const json::object& pod) -> Result<json::object> {
    json::object out = pod;
    if (out.contains("spec") && out["spec"].is_object() && !out["spec"].as_object().contains("priority")) {
      json::object& spec = out["spec"].as_object();
      const std::string name = string_at(spec, "priorityClassName");
      std::optional<PriorityClassInfo> pc = global_default;
      if (!name.empty()) {
        auto it = classes.find(name);
        if (it == classes.end()) {
          if (name != "system-cluster-critical" && name != "system-node-critical") {
            return make_error("spec.priorityClassName: \"" + name + "\": no such PriorityClass among the manifests");
          }
          pc = PriorityClassInfo{name == "system-node-critical" ? 2000001000 : 2000000000, ""};
        } else {
          pc = it->second;
        }
      }
      if (pc) {
        spec["priority"] = pc->value;
        if (!pc->preemption_policy.empty() && !spec.contains("preemptionPolicy")) {
          spec["preemptionPolicy"] = pc->preemption_policy;
        }
      }
    }
    return out;
  };
  // Pass 1: cluster state (nodes, quotas, pods already bound) from every file.
  for (const auto* group : groups) {
    for (const auto& [file, manifests] : *group) {
      for (const Manifest& m : manifests) {
        std::string at = file + ": document " + std::to_string(m.document) + ": ";
        std::string kind = string_at(m.object, "kind");
        if (kind == "Node") {
          if (Status st = snap.upsert_node(m.object); !st.ok()) {
            return make_error(at + st.message());
          }
        } else if (kind == "ResourceQuota") {
          if (Status st = snap.upsert_quota(m.object); !st.ok()) {
            return make_error(at + st.message());
          }
        } else if (kind == "Namespace" || kind == "PersistentVolumeClaim" || kind == "PersistentVolume" ||
                   kind == "StorageClass" || kind == "CSINode" || kind == "PodDisruptionBudget") {
          // What the default plugins read besides nodes and pods (scheduler/framework/cluster_objects.h).
          ClusterObjects& objs = snap.objects();
          Status st = kind == "Namespace"               ? objs.upsert_namespace(m.object)
                      : kind == "PersistentVolumeClaim" ? objs.upsert_claim(m.object)
                      : kind == "PersistentVolume"      ? objs.upsert_volume(m.object)
                      : kind == "StorageClass"          ? objs.upsert_storage_class(m.object)
                      : kind == "PodDisruptionBudget"   ? objs.upsert_disruption_budget(m.object)
                                                        : objs.upsert_csi_node(m.object);
          if (!st.ok()) {
            return make_error(at + st.message());
          }
        } else if (kind == "Service" || kind == "ReplicationController" || kind == "ReplicaSet" ||
                   kind == "StatefulSet") {
          // The selectors of default spreading (scheduler/framework/spread_sources.h).
          SpreadSources& src = snap.objects().spread_sources();
          Status st = kind == "Service"                 ? src.upsert_service(m.object)
                      : kind == "ReplicationController" ? src.upsert_replication_controller(m.object)
                      : kind == "ReplicaSet"            ? src.upsert_replica_set(m.object)
                                                        : src.upsert_stateful_set(m.object);
          if (!st.ok()) {
            return make_error(at + st.message());
          }
        } else if (kind == "Pod") {
          if (bound(m.object)) {
            auto prioritized = with_priority(m.object);
            if (!prioritized.ok()) {
              return make_error(at + prioritized.message());
            }
            if (Status st = snap.upsert_pod(prioritized.value()); !st.ok()) {
              return make_error(at + st.message());
            }
            std::string ns = string_at_pointer(m.object, "/metadata/namespace");
            std::string key =
                (ns.empty() ? std::string("default") : ns) + "/" + string_at_pointer(m.object, "/metadata/name");
            if (const PodRecord* rec =
                    snap.find_pod(ns.empty() ? "default" : ns, string_at_pointer(m.object, "/metadata/name"))) {
              card_pods.add(rec->gpu_node, rec->devices, key);
            }
          } else {
            queue.push_back(Queued{&file, &m});
          }
        }
        // Other kinds (Deployment, Service, ...) are not simulated and are skipped.
      }
    }
  }

  SimulationResult result;
  ScheduleOptions options = ScheduleOptions::from(config.scheduler);
  const auto profile = scheduler::framework::Framework::default_profile(config.scheduler.score_weights,
                                                                        config.scheduler.default_spreading);
  options.profile = profile.get();     // scheduler.scoreWeights, as the live loop
  options.select_volume_nodes = true;  // as the live loop: a WaitForFirstConsumer claim gets the chosen node
  for (const Queued& q : queue) {
    const json::object& original = q.m->object;
    SimulatedPod out;
    out.name = string_at_pointer(original, "/metadata/name");
    out.ns = string_at_pointer(original, "/metadata/namespace");
    if (out.ns.empty()) {
      out.ns = "default";
    }
    std::string at = *q.file + ": document " + std::to_string(q.m->document) + ": ";
    if (out.name.empty()) {
      return make_error(at + "metadata.name: missing");
    }
    auto prioritized = with_priority(q.m->object);
    if (!prioritized.ok()) {
      return make_error(at + prioritized.message());
    }
    webhook::MutationResult mr = webhook::mutate_pod(prioritized.value(), out.ns, config);
    if (!mr.allowed) {
      out.status = "Rejected";
      out.message = mr.message;
      result.pods.push_back(std::move(out));
      continue;
    }
    auto patched = apply_patch(json::value(prioritized.value()), mr.patch);
    if (!patched.ok()) {
      return make_error(at + "applying the webhook's patch: " + patched.message());
    }
    if (!patched->is_object()) {
      return make_error(at + "the webhook's patch did not leave an object");
    }
    const json::object& pod = patched->get_object();
    auto info = parse_pod(pod, config.devices);
    if (!info.ok()) {
      out.status = "Pending";
      out.message = info.message();
      result.pods.push_back(std::move(out));
      continue;
    }
    Decision d = schedule(snap, info.value(), options);
    if (!d.scheduled) {
      out.status = "Pending";
      out.message = d.message;
      if (config.scheduler.preemption.enabled) {
        // What the live loop's PostFilter would do; shown, not done (the snapshot is left as it was).
        PreemptionResult pr = find_preemption(snap, info.value(), "", options);
        if (pr.found) {
          out.message += " preemption: would be " + preemption_summary(pr.chosen) + ".";
          SimulatedPreemption sp;
          sp.node = pr.chosen.node;
          sp.budget_violations = pr.chosen.budget_violations;
          for (const PreemptionVictim& v : pr.chosen.victims) {
            sp.victims.push_back(v.key());
          }
          sp.devices = devices_of(snap, *info, pr.chosen.placement);
          out.preemption = std::move(sp);
        }  // no candidate: the message stays the filters' (nothing would be preempted)
      }
      result.pods.push_back(std::move(out));
      continue;
    }
    if (Status st = snap.assume(info.value(), d.node, d.devices, now_unix); !st.ok()) {
      return make_error(at + st.message());
    }
    for (const StaticBinding& sb : d.volumes_to_bind) {
      // As the live loop: later pods see the PV as this claim's (kube-scheduler's assume cache).
      snap.objects().assume_claim_ref(sb.volume, AssumedClaimRef{info->ns, sb.claim, sb.claim_uid, info->key()});
      out.volumes.push_back(SimulatedVolume{sb.claim, sb.volume});
    }
    for (const std::string& c : d.claims_to_select) {
      out.volumes.push_back(SimulatedVolume{c, ""});
    }
    card_pods.add(d.node, d.devices, info->key());
    out.status = "Scheduled";
    out.node = d.node;
    out.devices = devices_of(snap, *info, d);
    result.pods.push_back(std::move(out));
  }

  snap.for_each_node([&](const NodeState& n) {
    for (const CardState& c : n.cards) {
      SimulatedCard sc;
      sc.node = n.name;
      sc.uuid = c.info.id;
      sc.type = c.info.type;
      sc.mem_used_mib = c.used_mem_mib;
      sc.mem_total_mib = c.info.devmem;
      sc.cores_used = c.used_cores;
      sc.cores_total = c.info.devcore;
      if (auto it = card_pods.pods.find({n.name, c.info.id}); it != card_pods.pods.end()) {
        sc.pods = it->second;
      }
      result.cards.push_back(std::move(sc));
    }
  });
  return result;
}

json::object simulation_to_json(const SimulationResult& r) {
  json::array pods;
  for (const SimulatedPod& p : r.pods) {
    json::object o;
    o["namespace"] = p.ns;
    o["name"] = p.name;
    o["status"] = p.status;
    if (p.node) {
      o["node"] = *p.node;
    } else {
      o["node"] = nullptr;
    }
    json::array devs;
    for (const SimulatedDevice& d : p.devices) {
      devs.push_back(json::object{
          {"container", d.container}, {"uuid", d.uuid}, {"type", d.type}, {"memMiB", d.mem_mib}, {"cores", d.cores}});
    }
    o["devices"] = std::move(devs);
    if (!p.volumes.empty()) {  // only pods with unbound WaitForFirstConsumer claims carry the key
      json::array vols;
      for (const SimulatedVolume& v : p.volumes) {
        json::object vo{{"claim", v.claim}};
        if (v.volume.empty()) {
          vo["provision"] = true;
        } else {
          vo["persistentVolume"] = v.volume;
        }
        vols.push_back(std::move(vo));
      }
      o["volumes"] = std::move(vols);
    }
    o["message"] = p.message;
    if (p.preemption) {
      json::array victims;
      for (const std::string& v : p.preemption->victims) {
        victims.push_back(json::string(v));
      }
      json::array pdevs;
      for (const SimulatedDevice& d : p.preemption->devices) {
        pdevs.push_back(json::object{
            {"container", d.container}, {"uuid", d.uuid}, {"type", d.type}, {"memMiB", d.mem_mib}, {"cores", d.cores}});
      }
      o["preemption"] = json::object{{"node", p.preemption->node},
                                     {"victims", std::move(victims)},
                                     {"budgetViolations", p.preemption->budget_violations},
                                     {"devices", std::move(pdevs)}};
    }
    pods.push_back(std::move(o));
  }
  json::array cards;
  for (const SimulatedCard& c : r.cards) {
    json::array names;
    for (const std::string& p : c.pods) {
      names.push_back(json::string(p));
    }
    cards.push_back(json::object{{"node", c.node},
                                 {"uuid", c.uuid},
                                 {"type", c.type},
                                 {"memUsedMiB", c.mem_used_mib},
                                 {"memTotalMiB", c.mem_total_mib},
                                 {"coresUsed", c.cores_used},
                                 {"coresTotal", c.cores_total},
                                 {"pods", std::move(names)}});
  }
  return json::object{{"pods", std::move(pods)}, {"cards", std::move(cards)}};
}

namespace {

std::string render(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()));
    for (size_t i = 0; i < r.size(); ++i) {
      width[i] = std::max(width[i], r[i].size());
    }
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) {
        line += std::string(width[i] - r[i].size() + 3, ' ');
      }
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::string simulation_to_table(const SimulationResult& r) {
  std::vector<std::vector<std::string>> pods = {{"POD", "STATUS", "NODE", "DEVICES / MESSAGE"}};
  for (const SimulatedPod& p : r.pods) {
    std::string detail;
    if (p.status == "Scheduled") {
      for (size_t i = 0; i < p.devices.size(); ++i) {
        const SimulatedDevice& d = p.devices[i];
        detail += (i ? "; " : "") + d.container + ": " + d.uuid + " (" + d.type + ") " + std::to_string(d.mem_mib) +
                  " MiB " + std::to_string(d.cores) + "%";
      }
      if (p.devices.empty()) {
        detail = "no GPU";
      }
      for (const SimulatedVolume& v : p.volumes) {
        detail += "; claim " + v.claim + ": " + (v.volume.empty() ? "provisioned on the node" : "binds " + v.volume);
      }
    } else {
      detail = p.message;
    }
    pods.push_back({p.ns + "/" + p.name, p.status, p.node.value_or("-"), detail});
  }
  std::vector<std::vector<std::string>> cards = {{"NODE", "CARD", "TYPE", "MEMORY MiB", "CORES %", "PODS"}};
  for (const SimulatedCard& c : r.cards) {
    std::string names;
    for (size_t i = 0; i < c.pods.size(); ++i) {
      names += (i ? "," : "") + c.pods[i];
    }
    cards.push_back({c.node, c.uuid, c.type, std::to_string(c.mem_used_mib) + "/" + std::to_string(c.mem_total_mib),
                     std::to_string(c.cores_used) + "/" + std::to_string(c.cores_total), names.empty() ? "-" : names});
  }
  return render(pods) + "\n" + render(cards);
}

}  // namespace gpuslice::simulate
