// kubeconfig and in-cluster configuration, and the Authenticator (token file, exec plugin).
#include "kube/kubeconfig.h"
#include "common/base64.h"
#include "kube/auth.h"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>

using namespace gpuslice::kube;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "gpuslice-kube-XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string write(const std::string& rel, const std::string& content, bool executable = false) const {
    const fs::path p = path / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
    if (executable) {
      chmod(p.c_str(), 0755);
    }
    return p.string();
  }
  std::string read(const std::string& rel) const {
    std::ifstream in(path / rel);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
};

// The real filesystem with a fake process environment.
Environment env_with(std::map<std::string, std::string> vars) {
  Environment env = Environment::system();
  env.getenv = [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) {
      return std::nullopt;
    }
    return it->second;
  };
  return env;
}

const char* kCertKubeconfig = R"(apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: https://127.0.0.1:16443
    certificate-authority: pki/ca.crt
    tls-server-name: kubernetes.default.svc
users:
- name: admin
  user:
    client-certificate: pki/admin.crt
    client-key: /abs/admin.key
contexts:
- name: lab
  context: {cluster: lab, user: admin, namespace: team-a}
- name: other
  context: {cluster: lab, user: tok}
current-context: lab
)";
}  // namespace

TEST_CASE("kubeconfig: client certificate files resolved against the file's directory") {
  auto f = parse_kubeconfig(kCertKubeconfig, "/etc/lab");
  REQUIRE(f);
  auto rc = select_context(*f);
  REQUIRE(rc);
  REQUIRE(rc->server == "https://127.0.0.1:16443");
  REQUIRE(rc->ca_file == "/etc/lab/pki/ca.crt");
  REQUIRE(rc->client_cert_file == "/etc/lab/pki/admin.crt");
  REQUIRE(rc->client_key_file == "/abs/admin.key");
  REQUIRE(rc->tls_server_name == "kubernetes.default.svc");
  REQUIRE(rc->default_namespace == "team-a");
  REQUIRE(rc->context == "lab");
  auto missing_user = select_context(*f, "other");
  REQUIRE_FALSE(missing_user);
  REQUIRE(missing_user.message() == "kubeconfig: context \"other\": user \"tok\" not found");
  auto missing_ctx = select_context(*f, "nope");
  REQUIRE_FALSE(missing_ctx);
  REQUIRE(missing_ctx.message().find("\"nope\"") != std::string::npos);
}

TEST_CASE("kubeconfig: load_kubeconfig reads the PEM files") {
  TempDir dir;
  dir.write("kube/pki/ca.crt", "CA-PEM");
  dir.write("kube/pki/admin.crt", "CERT-PEM");
  dir.write("kube/pki/admin.key", "KEY-PEM");
  std::string text = kCertKubeconfig;
  text.replace(text.find("/abs/admin.key"), 14, "pki/admin.key");
  const auto path = dir.write("kube/config", text);
  auto rc = load_kubeconfig(path, {}, env_with({}));
  REQUIRE(rc);
  REQUIRE(rc->ca_pem == "CA-PEM");
  REQUIRE(rc->client_cert_pem == "CERT-PEM");
  REQUIRE(rc->client_key_pem == "KEY-PEM");

  fs::remove(dir.path / "kube/pki/admin.key");
  auto missing = load_kubeconfig(path, {}, env_with({}));
  REQUIRE_FALSE(missing);
  REQUIRE(missing.message().find("client-key") != std::string::npos);
  REQUIRE(missing.message().find("admin.key") != std::string::npos);
}

TEST_CASE("kubeconfig: *-data fields, token and tokenFile") {
  const std::string text =
      "clusters:\n- name: c\n  cluster:\n    server: https://k:6443\n"
      "    certificate-authority-data: " +
      gpuslice::base64_encode("CA") +
      "\n"
      "users:\n"
      "- name: d\n  user:\n    client-certificate-data: " +
      gpuslice::base64_encode("C") + "\n    client-key-data: " + gpuslice::base64_encode("K") +
      "\n"
      "- name: t\n  user: {token: abc.def}\n"
      "- name: tf\n  user: {tokenFile: secrets/token}\n"
      "contexts:\n- {name: d, context: {cluster: c, user: d}}\n"
      "- {name: t, context: {cluster: c, user: t}}\n"
      "- {name: tf, context: {cluster: c, user: tf}}\n"
      "- {name: anon, context: {cluster: c}}\n";
  auto f = parse_kubeconfig(text, "/home/u/.kube");
  REQUIRE(f);
  auto d = select_context(*f, "d");
  REQUIRE(d);
  REQUIRE(d->ca_pem == "CA");
  REQUIRE(d->client_cert_pem == "C");
  REQUIRE(d->client_key_pem == "K");
  REQUIRE(select_context(*f, "t")->token == "abc.def");
  REQUIRE(select_context(*f, "tf")->token_file == "/home/u/.kube/secrets/token");
  auto anon = select_context(*f, "anon");
  REQUIRE(anon);
  REQUIRE(anon->token.empty());
  auto none = select_context(*f);
  REQUIRE_FALSE(none);
  REQUIRE(none.message().find("current-context") != std::string::npos);
}

TEST_CASE("kubeconfig: exec plugin settings") {
  const char* text = R"(
clusters: [{name: c, cluster: {server: "https://k:6443"}}]
users:
- name: e
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./bin/get-token
      args: [--cluster, lab]
      env: [{name: FOO, value: bar}]
      interactiveMode: Never
      provideClusterInfo: true
- name: path
  user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: kubelogin, interactiveMode: IfAvailable}}
- name: old
  user: {exec: {apiVersion: client.authentication.k8s.io/v1alpha1, command: x}}
- name: tty
  user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: x, interactiveMode: Always}}
contexts:
- {name: e, context: {cluster: c, user: e}}
- {name: path, context: {cluster: c, user: path}}
- {name: old, context: {cluster: c, user: old}}
- {name: tty, context: {cluster: c, user: tty}}
)";
  auto f = parse_kubeconfig(text, "/cfg");
  REQUIRE(f);
  auto e = select_context(*f, "e");
  REQUIRE(e);
  REQUIRE(e->exec);
  REQUIRE(e->exec->command == "/cfg/./bin/get-token");
  REQUIRE(e->exec->args == std::vector<std::string>{"--cluster", "lab"});
  REQUIRE(e->exec->env.size() == 1);
  REQUIRE(e->exec->env[0].first == "FOO");
  REQUIRE(e->exec->provide_cluster_info);
  REQUIRE(select_context(*f, "path")->exec->command == "kubelogin");  // $PATH lookup, not resolved
  auto old = select_context(*f, "old");
  REQUIRE_FALSE(old);
  REQUIRE(old.message().find("v1alpha1") != std::string::npos);
  auto tty = select_context(*f, "tty");
  REQUIRE_FALSE(tty);
  REQUIRE(tty.message().find("Always") != std::string::npos);
}

TEST_CASE("kubeconfig: unsupported auth and malformed documents give clear errors") {
  const char* text = R"(
clusters: [{name: c, cluster: {server: "https://k:6443"}}]
users:
- name: oidc
  user: {auth-provider: {name: oidc, config: {idp-issuer-url: "https://x"}}}
- name: basic
  user: {username: admin, password: secret}
- name: halfcert
  user: {client-certificate: a.crt}
contexts:
- {name: oidc, context: {cluster: c, user: oidc}}
- {name: basic, context: {cluster: c, user: basic}}
- {name: halfcert, context: {cluster: c, user: halfcert}}
)";
  auto f = parse_kubeconfig(text, "/cfg");
  REQUIRE(f);
  auto oidc = select_context(*f, "oidc");
  REQUIRE_FALSE(oidc);
  REQUIRE(oidc.message().find("users[oidc]") != std::string::npos);
  REQUIRE(oidc.message().find("auth-provider (oidc) is not supported") != std::string::npos);
  auto basic = select_context(*f, "basic");
  REQUIRE_FALSE(basic);
  REQUIRE(basic.message().find("username is not supported") != std::string::npos);
  auto half = select_context(*f, "halfcert");
  REQUIRE_FALSE(half);
  REQUIRE(half.message().find("client-key") != std::string::npos);

  auto bad_b64 = parse_kubeconfig("users: [{name: u, user: {client-key-data: '***'}}]", "/");
  REQUIRE_FALSE(bad_b64);
  REQUIRE(bad_b64.message() == "users[u].user.client-key-data: not valid base64");
  auto yaml = parse_kubeconfig("clusters:\n- name: c\n  cluster: {server: [unclosed\n", "/");
  REQUIRE_FALSE(yaml);
  REQUIRE(yaml.message().find("line") != std::string::npos);
  REQUIRE_FALSE(parse_kubeconfig("- just\n- a list\n", "/"));
  auto noname = parse_kubeconfig("clusters: [{cluster: {server: x}}]", "/");
  REQUIRE_FALSE(noname);
  REQUIRE(noname.message() == "clusters[0].name: missing");
  auto badbool = parse_kubeconfig("clusters: [{name: c, cluster: {insecure-skip-tls-verify: maybe}}]", "/");
  REQUIRE_FALSE(badbool);
  REQUIRE(badbool.message().find("\"maybe\"") != std::string::npos);
  auto proxy = parse_kubeconfig("clusters: [{name: c, cluster: {server: x, proxy-url: 'http://p:3128'}}]", "/");
  REQUIRE_FALSE(proxy);
  REQUIRE(proxy.message().find("proxy-url") != std::string::npos);
  auto noserver =
      parse_kubeconfig("clusters: [{name: c, cluster: {}}]\ncontexts: [{name: x, context: {cluster: c}}]", "/");
  REQUIRE(noserver);
  auto ns = select_context(*noserver, "x");
  REQUIRE_FALSE(ns);
  REQUIRE(ns.message().find("server") != std::string::npos);
  auto insecure_ca = parse_kubeconfig(
      "clusters: [{name: c, cluster: {server: 'https://x', insecure-skip-tls-verify: true, certificate-authority: "
      "ca}}]\ncontexts: [{name: x, context: {cluster: c}}]",
      "/");
  REQUIRE(insecure_ca);
  REQUIRE_FALSE(select_context(*insecure_ca, "x"));
  REQUIRE(parse_kubeconfig("", "/"));  // an empty file is an empty config
}

TEST_CASE("kubeconfig: read with the bounded YAML reader (aliases, cycles, nesting, typed-looking scalars)") {
  // Anchors and aliases are ordinary YAML and work.
  auto shared = parse_kubeconfig(R"(
clusters:
- name: a
  cluster: &c {server: "https://k:6443", insecure-skip-tls-verify: true}
- name: b
  cluster: *c
)",
                                 "/");
  REQUIRE(shared);
  REQUIRE(shared->clusters.at("b").server == "https://k:6443");
  REQUIRE(shared->clusters.at("b").insecure_skip_tls_verify);
  // Scalars stay text: a token or a server that looks like a number or a boolean is read as written.
  auto numeric =
      parse_kubeconfig("users: [{name: u, user: {token: 0x1F}}]\nclusters: [{name: c, cluster: {server: 1.5}}]", "/");
  REQUIRE(numeric);
  REQUIRE(numeric->users.at("u").token == "0x1F");
  REQUIRE(numeric->clusters.at("c").server == "1.5");
  // Billion laughs: refused on the alias budget, at once, naming the cap (YAML::Load expanded it).
  std::string laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    laughs += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) {
      laughs += std::string(k ? ", " : "") + "*a" + (i > 1 ? std::to_string(i - 1) : "");
    }
    laughs += "]\n";
  }
  auto bomb = parse_kubeconfig(laughs, "/");
  REQUIRE_FALSE(bomb);
  REQUIRE(bomb.message().rfind("kubeconfig: ", 0) == 0);
  REQUIRE(bomb.message().find("alias") != std::string::npos);
  auto cycle = parse_kubeconfig("clusters: &l [{name: c, cluster: {server: x}}, *l]\n", "/");
  REQUIRE_FALSE(cycle);
  REQUIRE(cycle.message().find("&l") != std::string::npos);
  auto deep = parse_kubeconfig(std::string(100000, '['), "/");
  REQUIRE_FALSE(deep);
  REQUIRE(deep.message().rfind("kubeconfig: ", 0) == 0);
}

TEST_CASE("kubeconfig: $KUBECONFIG list merges first-wins and skips missing files") {
  TempDir dir;
  const auto a = dir.write("a/config", R"(
clusters: [{name: c, cluster: {server: "https://first:1"}}]
users: [{name: u, user: {tokenFile: tok}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
)");
  const auto b = dir.write("b/config", R"(
clusters: [{name: c, cluster: {server: "https://second:2"}}, {name: d, cluster: {server: "https://d:3"}}]
users: [{name: u, user: {token: ignored}}]
contexts: [{name: y, context: {cluster: d, user: u}}]
current-context: y
)");
  auto env = env_with({{"KUBECONFIG", dir.path.string() + "/missing:" + a + ":" + b}});
  auto rc = load_kubeconfig({}, {}, env);
  REQUIRE(rc);
  REQUIRE(rc->server == "https://first:1");
  REQUIRE(rc->token_file == (dir.path / "a/tok").string());  // relative to the file that named it
  auto y = load_kubeconfig({}, "y", env);
  REQUIRE(y);
  REQUIRE(y->server == "https://d:3");
  REQUIRE(y->token.empty());
  REQUIRE(y->token_file == (dir.path / "a/tok").string());  // user u came from a/config

  auto none = load_kubeconfig({}, {}, env_with({{"KUBECONFIG", "/nonexistent/x"}}));
  REQUIRE_FALSE(none);
  REQUIRE(none.message().find("/nonexistent/x") != std::string::npos);
  auto home = load_kubeconfig({}, {}, env_with({{"HOME", (dir.path / "a").string()}}));
  REQUIRE_FALSE(home);  // ~/.kube/config does not exist there
  REQUIRE(home.message().find(".kube/config") != std::string::npos);
}

TEST_CASE("in-cluster config from the service-account directory") {
  TempDir dir;
  dir.write("sa/token", "tok-1\n");
  dir.write("sa/ca.crt", "CA");
  dir.write("sa/namespace", "gpuslice-system\n");
  auto env = env_with({{"KUBERNETES_SERVICE_HOST", "10.0.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}});
  env.service_account_dir = (dir.path / "sa").string();
  auto rc = load_in_cluster_config(env);
  REQUIRE(rc);
  REQUIRE(rc->server == "https://10.0.0.1:443");
  REQUIRE(rc->ca_pem == "CA");
  REQUIRE(rc->token_file == (dir.path / "sa/token").string());
  REQUIRE(rc->default_namespace == "gpuslice-system");
  REQUIRE(rc->source == "in-cluster");

  auto v6 = env_with({{"KUBERNETES_SERVICE_HOST", "fd00::1"}, {"KUBERNETES_SERVICE_PORT", "6443"}});
  v6.service_account_dir = env.service_account_dir;
  REQUIRE(load_in_cluster_config(v6)->server == "https://[fd00::1]:6443");

  auto no_port = env_with({{"KUBERNETES_SERVICE_HOST", "10.0.0.1"}});
  auto e = load_in_cluster_config(no_port);
  REQUIRE_FALSE(e);
  REQUIRE(e.message().find("KUBERNETES_SERVICE_PORT") != std::string::npos);

  fs::remove(dir.path / "sa/token");
  auto no_token = load_in_cluster_config(env);
  REQUIRE_FALSE(no_token);
  REQUIRE(no_token.message().find("token") != std::string::npos);

  // load_default_config: in-cluster when no kubeconfig is named and the service env is set.
  dir.write("sa/token", "tok-2");
  REQUIRE(load_default_config({}, env)->source == "in-cluster");
}

TEST_CASE("Authenticator re-reads the token file every period and after invalidate()") {
  TempDir dir;
  const auto token = dir.write("token", "first\n");
  RestConfig rc;
  rc.token_file = token;
  auto now = std::chrono::steady_clock::time_point{} + 100s;
  AuthOptions opts;
  opts.steady_now = [&] { return now; };
  Authenticator auth(rc, env_with({}), opts);
  REQUIRE(auth.bearer_token().value() == "first");
  dir.write("token", "second");
  now += 30s;
  REQUIRE(auth.bearer_token().value() == "first");  // cached within the period
  REQUIRE(auth.token_file_reads() == 1);
  now += 31s;
  REQUIRE(auth.bearer_token().value() == "second");  // rotated: picked up after ~a minute
  dir.write("token", "third");
  REQUIRE(auth.invalidate());
  REQUIRE(auth.bearer_token().value() == "third");  // a 401 forces a re-read
  REQUIRE(auth.token_file_reads() == 3);
  fs::remove(token);
  REQUIRE(auth.invalidate());
  REQUIRE(auth.bearer_token().value() == "third");  // a transient read failure keeps the last good token

  RestConfig fixed;
  fixed.token = "static";
  Authenticator s(fixed, env_with({}), opts);
  REQUIRE(s.bearer_token().value() == "static");
  REQUIRE_FALSE(s.invalidate());  // nothing to refresh: no point retrying a 401

  RestConfig missing;
  missing.token_file = (dir.path / "nope").string();
  Authenticator m(missing, env_with({}), opts);
  auto err = m.bearer_token();
  REQUIRE_FALSE(err);
  REQUIRE(err.message().find("nope") != std::string::npos);
}

TEST_CASE("exec plugin: a real script, KUBERNETES_EXEC_INFO, cached until expirationTimestamp") {
  TempDir dir;
  // The plugin counts its runs, records its environment, and prints a credential that expires at a fixed time.
  const auto script = dir.write("bin/plugin.sh", R"(#!/bin/sh
n=$(cat "$COUNT_FILE" 2>/dev/null || echo 0)
n=$((n+1))
echo $n > "$COUNT_FILE"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$INFO_FILE"
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"tok-%s-%s","expirationTimestamp":"2030-01-01T00:00:00Z"}}' "$1" "$n"
)",
                                true);
  const std::string kubeconfig = R"(
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users:
- name: e
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: bin/plugin.sh
      args: [arg1]
      interactiveMode: Never
      env:
      - {name: COUNT_FILE, value: ")" +
                                 (dir.path / "count").string() + R"("}
      - {name: INFO_FILE, value: ")" +
                                 (dir.path / "info").string() + R"("}
contexts: [{name: e, context: {cluster: c, user: e}}]
current-context: e
)";
  const auto path = dir.write("config", kubeconfig);
  auto rc = load_kubeconfig(path, {}, env_with({}));
  REQUIRE(rc);
  REQUIRE(rc->exec->command == script);

  auto wall = std::chrono::system_clock::time_point(std::chrono::seconds(1893456000 - 3600));  // 2029-12-31T23:00Z
  AuthOptions opts;
  opts.wall_now = [&] { return wall; };
  Authenticator auth(*rc, env_with({}), opts);
  REQUIRE(auth.bearer_token().value() == "tok-arg1-1");
  REQUIRE(dir.read("info") ==
          R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":false}})");
  REQUIRE(auth.bearer_token().value() == "tok-arg1-1");  // cached
  REQUIRE(auth.exec_runs() == 1);
  wall += 3595s;  // within the 10 s margin of expiry
  REQUIRE(auth.bearer_token().value() == "tok-arg1-2");
  REQUIRE(auth.exec_runs() == 2);
  REQUIRE(auth.invalidate());
  REQUIRE(auth.bearer_token().value() == "tok-arg1-3");
  REQUIRE(dir.read("count") == "3\n");
}

TEST_CASE("exec plugin failures are reported with the command and stderr") {
  TempDir dir;
  ExecConfig e;
  e.api_version = "client.authentication.k8s.io/v1";
  e.command = dir.write("fail.sh", "#!/bin/sh\necho 'login required' >&2\nexit 3\n", true);
  RestConfig rc;
  rc.exec = e;
  Authenticator auth(rc, env_with({}));
  auto t = auth.bearer_token();
  REQUIRE_FALSE(t);
  REQUIRE(t.message().find("exited with code 3: login required") != std::string::npos);

  e.command = dir.write("slow.sh", "#!/bin/sh\nsleep 30\n", true);
  auto slow = run_exec_plugin(e, "{}", 200ms);
  REQUIRE_FALSE(slow);
  REQUIRE(slow.message().find("killed") != std::string::npos);

  e.command = (dir.path / "does-not-exist").string();
  auto missing = run_exec_plugin(e, "{}", 5s);
  REQUIRE(missing);
  REQUIRE(missing->exit_code == 127);
}

TEST_CASE("ExecCredential parsing") {
  const std::string v1 = "client.authentication.k8s.io/v1";
  auto ok = parse_exec_credential(
      R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":"C","clientKeyData":"K"}})",
      v1);
  REQUIRE(ok);
  REQUIRE(ok->client_certificate_pem == "C");
  REQUIRE_FALSE(ok->expiration);
  auto wrong_version = parse_exec_credential(
      R"({"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"t"}})", v1);
  REQUIRE_FALSE(wrong_version);
  REQUIRE(wrong_version.message().find("v1beta1") != std::string::npos);
  REQUIRE_FALSE(parse_exec_credential(
      R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}})", v1));
  REQUIRE_FALSE(parse_exec_credential(
      R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":"C"}})",
      v1));
  auto bad_time = parse_exec_credential(
      R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t","expirationTimestamp":"soon"}})",
      v1);
  REQUIRE_FALSE(bad_time);
  REQUIRE(bad_time.message().find("expirationTimestamp") != std::string::npos);
  REQUIRE_FALSE(parse_exec_credential("not json", v1));
}
