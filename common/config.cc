#include "common/config.h"

#include "common/yaml_json.h"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <utility>

namespace gpuslice {
namespace json = boost::json;
namespace {

// A tiny schema walker over the document as JSON whose scalars are all text (YamlScalars::kText: each field types
// its own value, so `threads: 2` and `threads: "2"` read alike, as they did over yaml-cpp's nodes); nulls stay null.
// Each mapping declares its fields; anything else is an unknown field.
struct Walker {
  std::string error;

  bool fail(const std::string& path, const std::string& what) {
    if (error.empty()) error = path + ": " + what;
    return false;
  }

  static std::string scalar_text(const json::value& n) {
    return n.is_string() ? std::string(n.get_string()) : std::string("<non-scalar>");
  }

  bool str(const json::value& n, const std::string& path, std::string& out) {
    if (!n.is_string()) return fail(path, "must be a string");
    out = n.get_string();
    return true;
  }
  bool boolean(const json::value& n, const std::string& path, bool& out) {
    if (!n.is_string()) return fail(path, "must be true or false");
    std::string_view s = n.get_string();
    if (s == "true") {
      out = true;
    } else if (s == "false") {
      out = false;
    } else {
      return fail(path, "\"" + std::string(s) + "\" is not a boolean (true or false)");
    }
    return true;
  }
  template <class I>
  bool integer(const json::value& n, const std::string& path, I& out, I min, I max) {
    if (!n.is_string()) return fail(path, "must be an integer");
    std::string s(n.get_string());
    long long v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || s.empty()) {
      return fail(path, "\"" + s + "\" is not an integer");
    }
    if (v < static_cast<long long>(min) || v > static_cast<long long>(max)) {
      return fail(path, "\"" + s + "\" is out of range [" + std::to_string(min) + ", " + std::to_string(max) + "]");
    }
    out = static_cast<I>(v);
    return true;
  }
  bool number(const json::value& n, const std::string& path, double& out, double min) {
    if (!n.is_string()) return fail(path, "must be a number");
    std::string s(n.get_string());
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) {
      return fail(path, "\"" + s + "\" is not a number");
    }
    if (v < min) return fail(path, "\"" + s + "\" must be at least " + std::to_string(min));
    out = v;
    return true;
  }
  bool duration(const json::value& n, const std::string& path, std::chrono::milliseconds& out) {
    if (!n.is_string()) return fail(path, "must be a duration such as 15s");
    auto d = parse_duration(n.get_string());
    if (!d.ok()) return fail(path, "\"" + std::string(n.get_string()) + "\" is not a duration (" + d.message() + ")");
    out = d.value();
    return true;
  }
  bool one_of(const json::value& n, const std::string& path, std::string& out,
              std::initializer_list<const char*> allowed) {
    if (!str(n, path, out)) return false;
    std::string list;
    for (const char* a : allowed) {
      if (out == a) return true;
      list += list.empty() ? a : std::string(", ") + a;
    }
    return fail(path, "\"" + out + "\" is not one of " + list);
  }
  bool strings(const json::value& n, const std::string& path, std::vector<std::string>& out) {
    if (n.is_null()) {
      out.clear();
      return true;
    }
    if (!n.is_array()) return fail(path, "must be a list of strings");
    out.clear();
    const json::array& a = n.get_array();
    for (size_t i = 0; i < a.size(); ++i) {
      std::string s;
      if (!str(a[i], path + "[" + std::to_string(i) + "]", s)) return false;
      out.push_back(std::move(s));
    }
    return true;
  }

  using FieldFn = std::function<bool(const json::value&, const std::string&)>;
  bool mapping(const json::value& n, const std::string& path, const std::map<std::string, FieldFn>& fields) {
    if (n.is_null()) return true;
    if (!n.is_object()) return fail(path.empty() ? "<document>" : path, "must be a mapping");
    for (const auto& kv : n.get_object()) {
      std::string key(kv.key());
      std::string sub = path.empty() ? key : path + "." + key;
      auto it = fields.find(key);
      if (it == fields.end()) return fail(sub, "unknown field");
      if (!it->second(kv.value(), sub)) return false;
    }
    return true;
  }
};

// scheduler.scoreWeights: score plugin name (kube-scheduler's) -> weight. kube-scheduler's own profile rewrites a
// weight of 0 to 1 and only refuses an overflowing total (runtime/framework.go); gpuslice takes 0 as "this score
// off" (its config has no disabled list) and bounds weights to 0..100 so the weighted sum stays small.
bool score_weights(Walker& w, const json::value& n, const std::string& path, ScoreWeights& out) {
  if (n.is_null()) return true;
  if (!n.is_object()) return w.fail(path, "must be a mapping of score plugin name to weight");
  static const std::pair<std::string_view, int64_t ScoreWeights::*> kPlugins[] = {
      {"TaintToleration", &ScoreWeights::taint_toleration},
      {"NodeAffinity", &ScoreWeights::node_affinity},
      {"PodTopologySpread", &ScoreWeights::pod_topology_spread},
      {"InterPodAffinity", &ScoreWeights::inter_pod_affinity},
      {"NodeResourcesFit", &ScoreWeights::node_resources_fit},
      {"NodeResourcesBalancedAllocation", &ScoreWeights::node_resources_balanced_allocation},
  };
  for (const auto& kv : n.get_object()) {
    const std::string key(kv.key());
    const std::string sub = path + "." + key;
    const auto* it =
        std::find_if(std::begin(kPlugins), std::end(kPlugins), [&](const auto& e) { return e.first == key; });
    if (it == std::end(kPlugins)) {
      if (key == "GpuSlice") {
        return w.fail(sub,
                      "GpuSlice has no weight: its node policy (nodeSchedulerPolicy) ranks nodes after the "
                      "preference scores and before the resource scores (docs/scheduling.md)");
      }
      if (key == "ImageLocality") {
        return w.fail(sub, "ImageLocality is not implemented by gpuslice (node images are not read)");
      }
      std::string list;
      for (const auto& e : kPlugins) list += (list.empty() ? "" : ", ") + std::string(e.first);
      return w.fail(sub, "\"" + key + "\" is not a score plugin (one of " + list + ")");
    }
    if (!w.integer<int64_t>(kv.value(), sub, out.*(it->second), 0, 100)) return false;
  }
  return true;
}

}  // namespace

Result<std::chrono::milliseconds> parse_duration(std::string_view text) {
  if (text.empty()) return make_error("empty duration");
  if (text == "0") return std::chrono::milliseconds(0);
  double total_ms = 0;
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.')) ++i;
    if (start == i) return make_error("expected a number at \"" + std::string(text.substr(start)) + "\"");
    std::string num(text.substr(start, i - start));
    char* end = nullptr;
    double v = std::strtod(num.c_str(), &end);
    if (end != num.c_str() + num.size()) return make_error("bad number \"" + num + "\"");
    size_t ustart = i;
    while (i < text.size() && !((text[i] >= '0' && text[i] <= '9') || text[i] == '.')) ++i;
    std::string_view unit = text.substr(ustart, i - ustart);
    if (unit.empty()) {
      return make_error("missing unit (ms, s, m or h)");
    }
    static constexpr std::pair<std::string_view, double> kUnitMs[] = {
        {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
    const auto* u =
        std::find_if(std::begin(kUnitMs), std::end(kUnitMs), [&](const auto& e) { return e.first == unit; });
    if (u == std::end(kUnitMs)) {
      return make_error("unknown unit \"" + std::string(unit) + "\"");
    }
    total_ms += v * u->second;
  }
  if (total_ms > 1e12) return make_error("too large");
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(total_ms)));
}

std::string format_duration(std::chrono::milliseconds d) {
  auto ms = d.count();
  if (ms % 3600000 == 0 && ms != 0) return std::to_string(ms / 3600000) + "h";
  if (ms % 60000 == 0 && ms != 0) return std::to_string(ms / 60000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

Result<Configuration> parse_configuration(std::string_view yaml_text) {
  YamlReadOptions options;
  options.scalars = YamlScalars::kText;
  auto doc = yaml_to_json_first(yaml_text, options);
  if (!doc.ok()) return doc.error();
  const json::value& root = doc.value();
  Configuration c;
  Walker w;
  using N = const json::value&;
  using P = const std::string&;
  if (!root.is_object()) return make_error("configuration must be a mapping with apiVersion and kind");
  const json::value* api_version = root.get_object().if_contains("apiVersion");
  if (api_version == nullptr || !api_version->is_string() || api_version->get_string() != kConfigApiVersion) {
    return make_error("apiVersion: \"" + (api_version != nullptr ? Walker::scalar_text(*api_version) : std::string()) +
                      "\" is not supported (want " + std::string(kConfigApiVersion) + ")");
  }
  const json::value* kind = root.get_object().if_contains("kind");
  if (kind == nullptr || !kind->is_string() || kind->get_string() != kConfigKind) {
    return make_error("kind: \"" + (kind != nullptr ? Walker::scalar_text(*kind) : std::string()) +
                      "\" is not supported (want " + std::string(kConfigKind) + ")");
  }
  auto& d = c.devices;
  auto& wh = c.webhook;
  auto& s = c.scheduler;
  auto& le = c.scheduler.leader_election;
  bool ok = w.mapping(
      root, "",
      {
          {"apiVersion", [](N, P) { return true; }},
          {"kind", [](N, P) { return true; }},
          {"schedulerName", [&](N n, P p) { return w.str(n, p, c.scheduler_name); }},
          {"kubeconfig", [&](N n, P p) { return w.str(n, p, c.kubeconfig); }},
          {"logging",
           [&](N n, P p) {
             return w.mapping(n, p,
                              {
                                  {"format",
                                   [&](N m, P q) {
                                     return w.one_of(m, q, c.logging_format, {"text", "json"});
                                   }},
                                  {"verbosity", [&](N m, P q) { return w.integer(m, q, c.verbosity, 0, 10); }},
                              });
           }},
          {"resources",
           [&](N n, P p) {
             return w.mapping(
                 n, p,
                 {
                     {"gpu", [&](N m, P q) { return w.str(m, q, d.gpu_resource); }},
                     {"memory", [&](N m, P q) { return w.str(m, q, d.memory_resource); }},
                     {"memoryPercentage", [&](N m, P q) { return w.str(m, q, d.memory_percentage_resource); }},
                     {"cores", [&](N m, P q) { return w.str(m, q, d.cores_resource); }},
                     {"priority", [&](N m, P q) { return w.str(m, q, d.priority_resource); }},
                     {"defaultMemory",
                      [&](N m, P q) { return w.integer<int64_t>(m, q, d.default_memory_mib, 0, INT32_MAX); }},
                     {"defaultCores", [&](N m, P q) { return w.integer<int64_t>(m, q, d.default_cores, 0, 100); }},
                     {"defaultGPUNum", [&](N m, P q) { return w.integer<int64_t>(m, q, d.default_gpu_num, 1, 64); }},
                     {"memoryFactor", [&](N m, P q) { return w.integer<int64_t>(m, q, d.memory_factor, 1, 1 << 20); }},
                 });
           }},
          {"webhook",
           [&](N n, P p) {
             return w.mapping(
                 n, p,
                 {
                     {"enabled", [&](N m, P q) { return w.boolean(m, q, wh.enabled); }},
                     {"bindAddress", [&](N m, P q) { return w.str(m, q, wh.bind_address); }},
                     {"tlsCertFile", [&](N m, P q) { return w.str(m, q, wh.tls_cert_file); }},
                     {"tlsPrivateKeyFile", [&](N m, P q) { return w.str(m, q, wh.tls_private_key_file); }},
                     {"maxBodyBytes",
                      [&](N m, P q) { return w.integer<uint64_t>(m, q, wh.max_body_bytes, 1024, 64u << 20); }},
                     {"maxHeaderBytes",
                      [&](N m, P q) { return w.integer<uint32_t>(m, q, wh.max_header_bytes, 1024, 1u << 20); }},
                     {"readTimeout", [&](N m, P q) { return w.duration(m, q, wh.read_timeout); }},
                     {"idleTimeout", [&](N m, P q) { return w.duration(m, q, wh.idle_timeout); }},
                     {"handshakeTimeout", [&](N m, P q) { return w.duration(m, q, wh.handshake_timeout.emplace()); }},
                     {"writeTimeout", [&](N m, P q) { return w.duration(m, q, wh.write_timeout.emplace()); }},
                     {"clientHelloTimeout", [&](N m, P q) { return w.duration(m, q, wh.client_hello_timeout); }},
                     {"maxConnections",
                      [&](N m, P q) { return w.integer<uint32_t>(m, q, wh.max_connections, 1, 1000000); }},
                     {"maxPendingPerSource",
                      [&](N m, P q) { return w.integer<uint32_t>(m, q, wh.max_pending_per_source, 1, 1000000); }},
                     {"threads", [&](N m, P q) { return w.integer(m, q, wh.threads, 1, 256); }},
                     {"takeoverSchedulerNames", [&](N m, P q) { return w.strings(m, q, wh.takeover_scheduler_names); }},
                     {"ignoredNamespaces", [&](N m, P q) { return w.strings(m, q, wh.ignored_namespaces); }},
                     {"runtimeClassName", [&](N m, P q) { return w.str(m, q, wh.runtime_class_name); }},
                     {"gpuCorePolicy",
                      [&](N m, P q) {
                        return w.one_of(m, q, wh.gpu_core_policy, {"default", "force", "disable"});
                      }},
                     {"overwriteEnv", [&](N m, P q) { return w.boolean(m, q, wh.overwrite_env); }},
                 });
           }},
          {"scheduler",
           [&](N n, P p) {
             return w.mapping(
                 n, p,
                 {
                     {"enabled", [&](N m, P q) { return w.boolean(m, q, s.enabled); }},
                     {"nodeSchedulerPolicy",
                      [&](N m, P q) {
                        return w.one_of(m, q, s.node_scheduler_policy, {"binpack", "spread"});
                      }},
                     {"gpuSchedulerPolicy",
                      [&](N m, P q) {
                        return w.one_of(m, q, s.gpu_scheduler_policy, {"spread", "binpack"});
                      }},
                     {"nodeLock",
                      [&](N m, P q) {
                        return w.one_of(m, q, s.node_lock, {"hami", "off"});
                      }},
                     {"nodeLockTimeout", [&](N m, P q) { return w.duration(m, q, s.node_lock_timeout); }},
                     {"nodeLockLookahead", [&](N m, P q) { return w.integer(m, q, s.node_lock_lookahead, 1, 100000); }},
                     {"nodeLabelSelector", [&](N m, P q) { return w.str(m, q, s.node_label_selector); }},
                     {"kubeQPS", [&](N m, P q) { return w.number(m, q, s.kube_qps, 0.1); }},
                     {"kubeBurst", [&](N m, P q) { return w.integer(m, q, s.kube_burst, 1, 100000); }},
                     {"kubeTimeout", [&](N m, P q) { return w.duration(m, q, s.kube_timeout); }},
                     {"maxBackoff", [&](N m, P q) { return w.duration(m, q, s.max_backoff); }},
                     {"hamiLegacyMetrics", [&](N m, P q) { return w.boolean(m, q, s.hami_legacy_metrics); }},
                     {"scoreWeights", [&](N m, P q) { return score_weights(w, m, q, s.score_weights); }},
                     {"defaultSpreading", [&](N m, P q) { return w.boolean(m, q, s.default_spreading); }},
                     {"preemption",
                      [&](N m, P q) {
                        return w.mapping(
                            m, q,
                            {
                                {"enabled", [&](N x, P r) { return w.boolean(x, r, s.preemption.enabled); }},
                                {"maxInFlight",
                                 [&](N x, P r) { return w.integer(x, r, s.preemption.max_in_flight, 1, 10000); }},
                            });
                      }},
                     {"leaderElection",
                      [&](N m, P q) {
                        return w.mapping(
                            m, q,
                            {
                                {"leaderElect", [&](N x, P r) { return w.boolean(x, r, le.enabled); }},
                                {"resourceName", [&](N x, P r) { return w.str(x, r, le.lease_name); }},
                                {"resourceNamespace", [&](N x, P r) { return w.str(x, r, le.lease_namespace); }},
                                {"leaseDuration", [&](N x, P r) { return w.duration(x, r, le.lease_duration); }},
                                {"renewDeadline", [&](N x, P r) { return w.duration(x, r, le.renew_deadline); }},
                                {"retryPeriod", [&](N x, P r) { return w.duration(x, r, le.retry_period); }},
                            });
                      }},
                 });
           }},
          {"server",
           [&](N n, P p) {
             return w.mapping(
                 n, p,
                 {
                     {"healthBindAddress", [&](N m, P q) { return w.str(m, q, c.server.health_bind_address); }},
                     {"metricsBindAddress", [&](N m, P q) { return w.str(m, q, c.server.metrics_bind_address); }},
                 });
           }},
      });
  if (!ok) return make_error(w.error);
  if (auto st = validate_configuration(c); !st.ok()) return st.error();
  return c;
}

Status validate_configuration(const Configuration& c) {
  if (c.scheduler_name.empty()) return make_error("schedulerName: \"\" must not be empty");
  const auto& le = c.scheduler.leader_election;
  if (le.enabled) {
    if (!(le.lease_duration > le.renew_deadline)) {
      return make_error("scheduler.leaderElection.leaseDuration: \"" + format_duration(le.lease_duration) +
                        "\" must be greater than renewDeadline \"" + format_duration(le.renew_deadline) + "\"");
    }
    if (!(le.renew_deadline > le.retry_period)) {
      return make_error("scheduler.leaderElection.renewDeadline: \"" + format_duration(le.renew_deadline) +
                        "\" must be greater than retryPeriod \"" + format_duration(le.retry_period) + "\"");
    }
  }
  for (auto [field, timeout] : {std::pair{"webhook.handshakeTimeout", c.webhook.handshake_timeout},
                                std::pair{"webhook.writeTimeout", c.webhook.write_timeout}}) {
    if (timeout && timeout->count() <= 0) {
      return make_error(std::string(field) + ": \"" + format_duration(*timeout) + "\" must be greater than 0");
    }
  }
  if (c.webhook.client_hello_timeout.count() <= 0) {
    return make_error("webhook.clientHelloTimeout: \"" + format_duration(c.webhook.client_hello_timeout) +
                      "\" must be greater than 0");
  }
  for (const auto* name : {&c.devices.gpu_resource, &c.devices.memory_resource, &c.devices.memory_percentage_resource,
                           &c.devices.cores_resource}) {
    if (name->empty()) return make_error("resources: resource names must not be empty");
  }
  return Status::Ok();
}

Result<Configuration> load_configuration_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(path + ": cannot open configuration file");
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = parse_configuration(ss.str());
  if (!r.ok()) return make_error(path + ": " + r.message());
  return r;
}

std::string effective_lease_namespace(const LeaderElectionConfig& leader_election, std::string_view running_namespace) {
  if (!leader_election.lease_namespace.empty()) {
    return leader_election.lease_namespace;
  }
  if (!running_namespace.empty()) {
    return std::string(running_namespace);
  }
  return std::string(kDefaultNamespace);
}

}  // namespace gpuslice
