#include "kube/kubeconfig.h"

#include "common/base64.h"
#include "common/json_access.h"
#include "common/yaml_json.h"

#include <fmt/format.h>
#include <boost/json/value.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

namespace gpuslice::kube {

namespace {

bool is_absolute(std::string_view p) {
  return !p.empty() && p.front() == '/';
}

std::string resolve(std::string_view base_dir, const std::string& p) {
  if (p.empty() || is_absolute(p) || base_dir.empty()) {
    return p;
  }
  std::string out(base_dir);
  if (out.back() != '/') {
    out.push_back('/');
  }
  return out + p;
}

namespace json = boost::json;

// The document is read with every scalar as its text (YamlScalars::kText): a map is a json::object, a list a
// json::array, a scalar a json::string, `~`/empty a null.
const json::value* field(const json::object& parent, const char* key) {
  const json::value* v = parent.if_contains(key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

// Reads an optional scalar string field; errors when present but not a scalar.
Result<std::string> str_field(const json::object& parent, const char* key, const std::string& where) {
  const json::value* n = field(parent, key);
  if (n == nullptr) {
    return std::string();
  }
  if (!n->is_string()) {
    return make_error(fmt::format("{}.{}: expected a string", where, key));
  }
  return std::string(n->get_string());
}

Result<bool> bool_field(const json::object& parent, const char* key, const std::string& where) {
  const json::value* n = field(parent, key);
  if (n == nullptr) {
    return false;
  }
  if (!n->is_string()) {
    return make_error(fmt::format("{}.{}: expected true or false", where, key));
  }
  const std::string s(n->get_string());
  if (s == "true" || s == "True" || s == "TRUE") {
    return true;
  }
  if (s == "false" || s == "False" || s == "FALSE") {
    return false;
  }
  return make_error(fmt::format("{}.{}: \"{}\" is not true or false", where, key, s));
}

Result<std::string> data_field(const json::object& parent, const char* key, const std::string& where) {
  auto s = str_field(parent, key, where);
  if (!s) {
    return s;
  }
  if (s->empty()) {
    return s;
  }
  auto decoded = base64_decode(*s);
  if (!decoded) {
    return make_error(fmt::format("{}.{}: not valid base64", where, key));
  }
  return std::move(*decoded);
}

#define GS_TRY_ASSIGN(lhs, expr)    \
  do {                              \
    auto gs_r_ = (expr);            \
    if (!gs_r_) {                   \
      return gs_r_.error();         \
    }                               \
    lhs = std::move(gs_r_.value()); \
  } while (0)

// Iterates a list of {name: X, <inner>: {...}} entries.
template <class F>
Status for_each_named(const json::object& root, const char* list, const char* inner, F&& f) {
  const json::value* entries = field(root, list);
  if (entries == nullptr) {
    return Status::Ok();
  }
  if (!entries->is_array()) {
    return make_error(fmt::format("{}: expected a list", list));
  }
  static const json::object kEmpty;
  for (std::size_t i = 0; i < entries->get_array().size(); ++i) {
    const json::value& ev = entries->get_array()[i];
    if (!ev.is_object()) {
      return make_error(fmt::format("{}[{}]: expected a map with name and {}", list, i, inner));
    }
    const json::object& e = ev.get_object();
    auto name = str_field(e, "name", fmt::format("{}[{}]", list, i));
    if (!name) {
      return name.error();
    }
    if (name->empty()) {
      return make_error(fmt::format("{}[{}].name: missing", list, i));
    }
    const json::value* body = field(e, inner);
    const std::string where = fmt::format("{}[{}].{}", list, *name, inner);
    if (body != nullptr && !body->is_object()) {
      return make_error(fmt::format("{}: expected a map", where));
    }
    Status s = f(*name, body != nullptr ? body->get_object() : kEmpty, where);
    if (!s) {
      return s;
    }
  }
  return Status::Ok();
}

Result<ExecConfig> parse_exec(const json::object& n, std::string_view base_dir, const std::string& where) {
  ExecConfig e;
  GS_TRY_ASSIGN(e.api_version, str_field(n, "apiVersion", where));
  GS_TRY_ASSIGN(e.command, str_field(n, "command", where));
  GS_TRY_ASSIGN(e.interactive_mode, str_field(n, "interactiveMode", where));
  GS_TRY_ASSIGN(e.provide_cluster_info, bool_field(n, "provideClusterInfo", where));
  if (e.command.empty()) {
    return make_error(fmt::format("{}.command: missing", where));
  }
  // client-go resolves the command against the kubeconfig only when it names a path, not a $PATH lookup.
  if (e.command.find('/') != std::string::npos) {
    e.command = resolve(base_dir, e.command);
  }
  if (const json::value* args = field(n, "args")) {
    if (!args->is_array()) {
      return make_error(fmt::format("{}.args: expected a list of strings", where));
    }
    for (std::size_t i = 0; i < args->get_array().size(); ++i) {
      const json::value& a = args->get_array()[i];
      if (!a.is_string()) {
        return make_error(fmt::format("{}.args[{}]: expected a string", where, i));
      }
      e.args.emplace_back(a.get_string());
    }
  }
  if (const json::value* env = field(n, "env")) {
    if (!env->is_array()) {
      return make_error(fmt::format("{}.env: expected a list of {{name, value}}", where));
    }
    for (std::size_t i = 0; i < env->get_array().size(); ++i) {
      const json::value& item = env->get_array()[i];
      if (!item.is_object()) {
        return make_error(fmt::format("{}.env[{}]: expected {{name, value}}", where, i));
      }
      std::string name, value;
      GS_TRY_ASSIGN(name, str_field(item.get_object(), "name", fmt::format("{}.env[{}]", where, i)));
      GS_TRY_ASSIGN(value, str_field(item.get_object(), "value", fmt::format("{}.env[{}]", where, i)));
      if (name.empty() || name.find('=') != std::string::npos) {
        return make_error(fmt::format("{}.env[{}].name: \"{}\" is not a valid variable name", where, i, name));
      }
      e.env.emplace_back(std::move(name), std::move(value));
    }
  }
  return e;
}

Result<KubeconfigFile> parse_document(const json::value& doc, std::string_view base_dir) {
  KubeconfigFile f;
  if (doc.is_null()) {
    return f;  // an empty file is a valid, empty kubeconfig
  }
  if (!doc.is_object()) {
    return make_error("kubeconfig: top level is not a map");
  }
  const json::object& root = doc.get_object();
  GS_TRY_ASSIGN(f.current_context, str_field(root, "current-context", "kubeconfig"));

  Status s = for_each_named(
      root, "clusters", "cluster",
      [&](const std::string& name, const json::object& c, const std::string& where) -> Status {
        KubeconfigFile::Cluster cl;
        GS_TRY_ASSIGN(cl.server, str_field(c, "server", where));
        GS_TRY_ASSIGN(cl.tls_server_name, str_field(c, "tls-server-name", where));
        GS_TRY_ASSIGN(cl.insecure_skip_tls_verify, bool_field(c, "insecure-skip-tls-verify", where));
        std::string ca_file;
        GS_TRY_ASSIGN(ca_file, str_field(c, "certificate-authority", where));
        cl.ca_file = resolve(base_dir, ca_file);
        GS_TRY_ASSIGN(cl.ca_pem, data_field(c, "certificate-authority-data", where));
        std::string proxy;
        GS_TRY_ASSIGN(proxy, str_field(c, "proxy-url", where));
        if (!proxy.empty()) {
          return make_error(fmt::format("{}.proxy-url: \"{}\": proxies are not supported", where, proxy));
        }
        f.clusters.emplace(name, std::move(cl));  // first entry of a name wins, as in client-go's merge
        return Status::Ok();
      });
  if (!s) {
    return s.error();
  }
  s = for_each_named(
      root, "users", "user", [&](const std::string& name, const json::object& u, const std::string& where) -> Status {
        KubeconfigFile::User us;
        std::string cert_file, key_file, token_file;
        GS_TRY_ASSIGN(cert_file, str_field(u, "client-certificate", where));
        GS_TRY_ASSIGN(key_file, str_field(u, "client-key", where));
        GS_TRY_ASSIGN(token_file, str_field(u, "tokenFile", where));
        us.client_cert_file = resolve(base_dir, cert_file);
        us.client_key_file = resolve(base_dir, key_file);
        us.token_file = resolve(base_dir, token_file);
        GS_TRY_ASSIGN(us.client_cert_pem, data_field(u, "client-certificate-data", where));
        GS_TRY_ASSIGN(us.client_key_pem, data_field(u, "client-key-data", where));
        GS_TRY_ASSIGN(us.token, str_field(u, "token", where));
        if (const json::value* exec = field(u, "exec")) {
          if (!exec->is_object()) {
            return make_error(fmt::format("{}.exec: expected a map", where));
          }
          auto e = parse_exec(exec->get_object(), base_dir, where + ".exec");
          if (!e) {
            return e.error();
          }
          us.exec = std::move(*e);
        }
        // Recorded, not rejected here: only the user a context selects must be usable.
        if (const json::value* ap = field(u, "auth-provider")) {
          const json::value* pname = ap->is_object() ? field(ap->get_object(), "name") : nullptr;
          std::string provider = pname != nullptr && pname->is_string() ? std::string(pname->get_string()) : "?";
          us.unsupported = fmt::format("auth-provider ({})", provider);
        } else {
          for (const char* key : {"username", "password", "as", "as-uid", "as-groups", "as-user-extra"}) {
            if (field(u, key) != nullptr) {
              us.unsupported = key;
              break;
            }
          }
        }
        f.users.emplace(name, std::move(us));
        return Status::Ok();
      });
  if (!s) {
    return s.error();
  }
  s = for_each_named(root, "contexts", "context",
                     [&](const std::string& name, const json::object& c, const std::string& where) -> Status {
                       KubeconfigFile::Context ctx;
                       GS_TRY_ASSIGN(ctx.cluster, str_field(c, "cluster", where));
                       GS_TRY_ASSIGN(ctx.user, str_field(c, "user", where));
                       GS_TRY_ASSIGN(ctx.namespace_, str_field(c, "namespace", where));
                       f.contexts.emplace(name, std::move(ctx));
                       return Status::Ok();
                     });
  if (!s) {
    return s.error();
  }
  return f;
}

std::string dir_of(const std::string& path) {
  std::filesystem::path p(path);
  if (p.is_relative()) {
    std::error_code ec;
    auto cwd = std::filesystem::current_path(ec);
    if (!ec) {
      p = cwd / p;
    }
  }
  return p.parent_path().string();
}

Result<KubeconfigFile> load_one(const std::string& path, const Environment& env) {
  auto text = env.read_file(path);
  if (!text) {
    return make_error(fmt::format("kubeconfig {}: {}", path, text.message()));
  }
  auto f = parse_kubeconfig(*text, dir_of(path));
  if (!f) {
    return make_error(fmt::format("kubeconfig {}: {}", path, f.message()));
  }
  f->path = path;
  return f;
}

}  // namespace

Result<KubeconfigFile> parse_kubeconfig(std::string_view yaml_text, std::string_view base_dir) {
  // The bounded reader (aliases, depth; common/yaml_json.h), first document only as client-go's loader reads it.
  YamlReadOptions options;
  options.scalars = YamlScalars::kText;
  options.first_document_only = true;
  auto doc = yaml_to_json_first(yaml_text, options);
  if (!doc) {
    return make_error(fmt::format("kubeconfig: {}", doc.message()));
  }
  return parse_document(*doc, base_dir);
}

KubeconfigFile merge_kubeconfigs(const std::vector<KubeconfigFile>& files) {
  KubeconfigFile out;
  for (const auto& f : files) {
    if (out.current_context.empty()) {
      out.current_context = f.current_context;
    }
    for (const auto& [k, v] : f.clusters) {
      out.clusters.emplace(k, v);
    }
    for (const auto& [k, v] : f.users) {
      out.users.emplace(k, v);
    }
    for (const auto& [k, v] : f.contexts) {
      out.contexts.emplace(k, v);
    }
    if (!f.path.empty()) {
      out.path += out.path.empty() ? f.path : ":" + f.path;
    }
  }
  return out;
}

Result<RestConfig> select_context(const KubeconfigFile& merged, std::string_view context) {
  const std::string name(context.empty() ? std::string_view(merged.current_context) : context);
  if (name.empty()) {
    return make_error("kubeconfig: no current-context is set and no context was given");
  }
  const auto ctx = merged.contexts.find(name);
  if (ctx == merged.contexts.end()) {
    return make_error(fmt::format("kubeconfig: context \"{}\" not found", name));
  }
  const auto cl = merged.clusters.find(ctx->second.cluster);
  if (cl == merged.clusters.end()) {
    return make_error(fmt::format("kubeconfig: context \"{}\": cluster \"{}\" not found", name, ctx->second.cluster));
  }
  RestConfig rc;
  rc.context = name;
  rc.source = "kubeconfig " + merged.path;
  rc.server = cl->second.server;
  if (rc.server.empty()) {
    return make_error(fmt::format("kubeconfig: clusters[{}].cluster.server: missing", ctx->second.cluster));
  }
  rc.tls_server_name = cl->second.tls_server_name;
  rc.insecure_skip_tls_verify = cl->second.insecure_skip_tls_verify;
  rc.ca_file = cl->second.ca_file;
  rc.ca_pem = cl->second.ca_pem;
  if (rc.insecure_skip_tls_verify && (!rc.ca_file.empty() || !rc.ca_pem.empty())) {
    // client-go refuses this combination; silently ignoring the CA would be surprising.
    return make_error(
        fmt::format("kubeconfig: clusters[{}].cluster: insecure-skip-tls-verify and certificate-authority are both set",
                    ctx->second.cluster));
  }
  if (!ctx->second.namespace_.empty()) {
    rc.default_namespace = ctx->second.namespace_;
  }
  if (!ctx->second.user.empty()) {
    const auto us = merged.users.find(ctx->second.user);
    if (us == merged.users.end()) {
      return make_error(fmt::format("kubeconfig: context \"{}\": user \"{}\" not found", name, ctx->second.user));
    }
    const auto& u = us->second;
    const std::string where = fmt::format("kubeconfig: users[{}].user", ctx->second.user);
    if (!u.unsupported.empty()) {
      return make_error(
          fmt::format("{}: {} is not supported by gpuslice; use a client certificate, a token, "
                      "tokenFile or an exec plugin (client.authentication.k8s.io/v1)",
                      where, u.unsupported));
    }
    rc.client_cert_file = u.client_cert_file;
    rc.client_cert_pem = u.client_cert_pem;
    rc.client_key_file = u.client_key_file;
    rc.client_key_pem = u.client_key_pem;
    rc.token = u.token;
    rc.token_file = u.token_file;
    rc.exec = u.exec;
    const bool has_cert = !rc.client_cert_file.empty() || !rc.client_cert_pem.empty();
    const bool has_key = !rc.client_key_file.empty() || !rc.client_key_pem.empty();
    if (has_cert != has_key) {
      return make_error(fmt::format("{}: client-certificate and client-key must be given together", where));
    }
    if (rc.exec) {
      const auto& v = rc.exec->api_version;
      if (v != "client.authentication.k8s.io/v1" && v != "client.authentication.k8s.io/v1beta1") {
        return make_error(
            fmt::format("{}.exec.apiVersion: \"{}\" is not supported; use "
                        "client.authentication.k8s.io/v1",
                        where, v));
      }
      if (rc.exec->interactive_mode == "Always") {
        return make_error(
            fmt::format("{}.exec.interactiveMode: \"Always\" needs a terminal; gpuslice runs "
                        "non-interactively",
                        where));
      }
      if (!rc.exec->interactive_mode.empty() && rc.exec->interactive_mode != "Never" &&
          rc.exec->interactive_mode != "IfAvailable") {
        return make_error(fmt::format("{}.exec.interactiveMode: \"{}\" is not Never, IfAvailable or Always", where,
                                      rc.exec->interactive_mode));
      }
    }
  }
  return rc;
}

Environment Environment::system() {
  Environment env;
  env.getenv = [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) {
      return std::nullopt;
    }
    return std::string(v);
  };
  env.read_file = [](const std::string& path) -> Result<std::string> {
    constexpr std::size_t kMax = 16u << 20;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      return make_error(fmt::format("cannot read {}", path));
    }
    std::string out;
    char buf[65536];
    while (in) {
      in.read(buf, sizeof buf);
      out.append(buf, static_cast<std::size_t>(in.gcount()));
      if (out.size() > kMax) {
        return make_error(fmt::format("{} is larger than {} bytes", path, kMax));
      }
    }
    if (in.bad()) {
      return make_error(fmt::format("error reading {}", path));
    }
    return out;
  };
  return env;
}

Status load_files(RestConfig& config, const Environment& env) {
  auto load = [&](const std::string& file, std::string& pem, const char* field) -> Status {
    if (!pem.empty() || file.empty()) {
      return Status::Ok();
    }
    auto text = env.read_file(file);
    if (!text) {
      return make_error(fmt::format("{} {}: {}", field, file, text.message()));
    }
    pem = std::move(*text);
    return Status::Ok();
  };
  for (Status s : {load(config.ca_file, config.ca_pem, "certificate-authority"),
                   load(config.client_cert_file, config.client_cert_pem, "client-certificate"),
                   load(config.client_key_file, config.client_key_pem, "client-key")}) {
    if (!s) {
      return s;
    }
  }
  return Status::Ok();
}

Result<RestConfig> load_kubeconfig(const std::string& explicit_path, std::string_view context, const Environment& env) {
  std::vector<KubeconfigFile> files;
  if (!explicit_path.empty()) {
    auto f = load_one(explicit_path, env);
    if (!f) {
      return f.error();
    }
    files.push_back(std::move(*f));
  } else {
    const auto list = env.getenv("KUBECONFIG");
    std::vector<std::string> paths;
    if (list && !list->empty()) {
      std::set<std::string> seen;
      std::size_t start = 0;
      while (start <= list->size()) {
        const auto colon = list->find(':', start);
        std::string p = list->substr(start, colon == std::string::npos ? std::string::npos : colon - start);
        if (!p.empty() && seen.insert(p).second) {
          paths.push_back(p);
        }
        if (colon == std::string::npos) {
          break;
        }
        start = colon + 1;
      }
    } else {
      const auto home = env.getenv("HOME");
      if (!home || home->empty()) {
        return make_error("kubeconfig: neither --kubeconfig, $KUBECONFIG nor $HOME is set");
      }
      paths.push_back(*home + "/.kube/config");
    }
    std::string skipped;
    for (const auto& p : paths) {
      auto text = env.read_file(p);
      if (!text) {
        // kubectl skips missing entries of $KUBECONFIG; keep the reason in case none loads.
        skipped += (skipped.empty() ? "" : "; ") + text.message();
        continue;
      }
      auto f = parse_kubeconfig(*text, dir_of(p));
      if (!f) {
        return make_error(fmt::format("kubeconfig {}: {}", p, f.message()));
      }
      f->path = p;
      files.push_back(std::move(*f));
    }
    if (files.empty()) {
      return make_error(fmt::format("kubeconfig: no readable file ({})", skipped));
    }
  }
  auto merged = merge_kubeconfigs(files);
  auto rc = select_context(merged, context);
  if (!rc) {
    return rc;
  }
  Status s = load_files(*rc, env);
  if (!s) {
    return make_error(fmt::format("kubeconfig: {}", s.message()));
  }
  return rc;
}

Result<RestConfig> load_in_cluster_config(const Environment& env) {
  const auto host = env.getenv("KUBERNETES_SERVICE_HOST");
  const auto port = env.getenv("KUBERNETES_SERVICE_PORT");
  if (!host || host->empty() || !port || port->empty()) {
    return make_error(
        "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set (not running "
        "in a pod?)");
  }
  RestConfig rc;
  rc.source = "in-cluster";
  const std::string h = host->find(':') != std::string::npos && host->front() != '[' ? "[" + *host + "]" : *host;
  rc.server = "https://" + h + ":" + *port;
  const std::string dir = env.service_account_dir;
  rc.token_file = dir + "/token";
  auto token = env.read_file(rc.token_file);
  if (!token) {
    return make_error(fmt::format("in-cluster config: token: {}", token.message()));
  }
  rc.ca_file = dir + "/ca.crt";
  auto ca = env.read_file(rc.ca_file);
  if (!ca) {
    return make_error(fmt::format("in-cluster config: CA: {}", ca.message()));
  }
  rc.ca_pem = std::move(*ca);
  auto ns = env.read_file(dir + "/namespace");
  if (ns) {
    std::string n(trim(*ns));
    if (!n.empty()) {
      rc.default_namespace = n;
    }
  }
  return rc;
}

Result<RestConfig> load_default_config(const std::string& explicit_path, const Environment& env) {
  if (!explicit_path.empty()) {
    return load_kubeconfig(explicit_path, {}, env);
  }
  const auto kc = env.getenv("KUBECONFIG");
  if (kc && !kc->empty()) {
    return load_kubeconfig({}, {}, env);
  }
  const auto host = env.getenv("KUBERNETES_SERVICE_HOST");
  if (host && !host->empty()) {
    return load_in_cluster_config(env);
  }
  return load_kubeconfig({}, {}, env);
}

}  // namespace gpuslice::kube
