#pragma once
// Client configuration: kubeconfig files (clientcmd semantics: $KUBECONFIG colon list merged first-wins,
// current-context or an override, relative paths resolved against the directory of the file that named
// them) and in-cluster service-account configuration. Parsing is pure over text; file and environment
// access goes through an injected Environment so tests need no real $HOME or /var/run/secrets.
//
// Supported auth: client-certificate[-data] + client-key[-data], token, tokenFile, exec plugins
// (client.authentication.k8s.io/v1 and v1beta1). auth-provider, username/password and impersonation are
// rejected with an error naming the user and the field.

#include "common/result.h"

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuslice::kube {

/// users[].user.exec
struct ExecConfig {
  std::string api_version;  ///< client.authentication.k8s.io/v1 or /v1beta1
  std::string command;      ///< resolved against the kubeconfig's directory when it contains a '/'
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  std::string interactive_mode;  ///< Never | IfAvailable | Always ("Always" is rejected: we have no terminal)
  bool provide_cluster_info = false;
};

/// Everything a client needs to reach and authenticate to one API server.
struct RestConfig {
  std::string server;           ///< https://host:port[/prefix]
  std::string tls_server_name;  ///< overrides the name verified (and sent as SNI)
  bool insecure_skip_tls_verify = false;
  std::string ca_file;  ///< absolute path (read into ca_pem by load_* functions)
  std::string ca_pem;   ///< PEM bundle; empty with empty ca_file: the system roots
  std::string client_cert_file;
  std::string client_cert_pem;
  std::string client_key_file;
  std::string client_key_pem;
  std::string token;       ///< static bearer token
  std::string token_file;  ///< re-read periodically and on 401 (projected service-account tokens rotate)
  std::optional<ExecConfig> exec;
  std::string default_namespace = "default";  ///< context namespace, or the service account's namespace
  std::string context;                        ///< the context used ("" for in-cluster)
  std::string source;                         ///< "kubeconfig <path(s)>" or "in-cluster", for logs
};

/// One parsed kubeconfig file: the named entries with file paths already made absolute.
struct KubeconfigFile {
  struct Cluster {
    std::string server, tls_server_name, ca_file, ca_pem;
    bool insecure_skip_tls_verify = false;
  };
  struct User {
    std::string client_cert_file, client_cert_pem, client_key_file, client_key_pem, token, token_file;
    std::optional<ExecConfig> exec;
    std::string unsupported;  ///< first unsupported field seen ("auth-provider (oidc)", "username", ...)
  };
  struct Context {
    std::string cluster, user, namespace_;
  };
  std::map<std::string, Cluster> clusters;
  std::map<std::string, User> users;
  std::map<std::string, Context> contexts;
  std::string current_context;
  std::string path;  ///< the file it came from ("" for text)
};

/// Parses one kubeconfig document. `base_dir` resolves relative paths (certificate-authority,
/// client-certificate, client-key, tokenFile, exec command with a '/'). *-data fields are base64-decoded.
/// Errors carry the field path and value, e.g. `users[admin].user.client-key-data: not valid base64`.
/// Never throws (YAML errors become Errors with line and column).
Result<KubeconfigFile> parse_kubeconfig(std::string_view yaml_text, std::string_view base_dir);

/// Merges files in order; the first file defining a name (or a non-empty current-context) wins.
KubeconfigFile merge_kubeconfigs(const std::vector<KubeconfigFile>& files);

/// Resolves `context` (or current-context when empty) into a RestConfig. File paths are left for
/// load_files(). Errors: missing context/cluster/user, empty server, unsupported auth, both token and
/// tokenFile is fine (token wins, as in client-go), cert without key.
Result<RestConfig> select_context(const KubeconfigFile& merged, std::string_view context = {});

/// Injected process environment and filesystem.
struct Environment {
  std::function<std::optional<std::string>(const std::string& name)> getenv;
  std::function<Result<std::string>(const std::string& path)> read_file;
  std::string service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
  /// The real process environment and filesystem (files capped at 16 MiB).
  static Environment system();
};

/// Reads ca_file, client_cert_file, client_key_file into their *_pem fields (data fields win when both
/// are set). The token file is not read here: the client reads it per request period.
Status load_files(RestConfig& config, const Environment& env);

/// Loads kubeconfig: `explicit_path` (--kubeconfig) if non-empty, else every file of $KUBECONFIG (colon
/// list; missing files skipped as kubectl does, but at least one must exist), else $HOME/.kube/config.
/// Then select_context(context) and load_files().
Result<RestConfig> load_kubeconfig(const std::string& explicit_path, std::string_view context, const Environment& env);

/// In-cluster config: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (IPv6 bracketed), token
/// file <sa_dir>/token (re-read as it rotates), CA <sa_dir>/ca.crt, namespace <sa_dir>/namespace.
Result<RestConfig> load_in_cluster_config(const Environment& env);

/// `gpuslice serve` order: --kubeconfig if given; else $KUBECONFIG if set; else in-cluster when
/// KUBERNETES_SERVICE_HOST is set; else ~/.kube/config.
Result<RestConfig> load_default_config(const std::string& explicit_path, const Environment& env);

}  // namespace gpuslice::kube
