#pragma once
// Runtime credentials: the bearer token (static, token file re-read every period and on 401, or an exec
// plugin's ExecCredential cached until expirationTimestamp) and the client certificate (static or exec).
// Time and process execution are injected.

#include "common/result.h"
#include "kube/kubeconfig.h"

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace gpuslice::kube {

/// client.authentication.k8s.io ExecCredential status.
struct ExecCredential {
  std::string token;
  std::string client_certificate_pem;
  std::string client_key_pem;
  std::optional<std::chrono::system_clock::time_point> expiration;  ///< none: valid until a 401
};

/// Parses the plugin's stdout. Checks apiVersion (must equal `expected_api_version`) and kind, and that
/// status has a token or both certificate and key. Errors name the field.
Result<ExecCredential> parse_exec_credential(std::string_view json, std::string_view expected_api_version);

/// The KUBERNETES_EXEC_INFO value: {"apiVersion":...,"kind":"ExecCredential","spec":{"interactive":false}}
/// (plus spec.cluster.server etc. when provideClusterInfo).
std::string exec_info_json(const ExecConfig& exec, const RestConfig& config);

struct ExecOutput {
  int exit_code = 0;
  std::string stdout_text;
  std::string stderr_text;
};
/// Runs a plugin: command + args, the process environment plus `exec.env` plus KUBERNETES_EXEC_INFO,
/// stdin from /dev/null, output capped at 1 MiB, killed after `timeout`.
using ExecRunner = std::function<Result<ExecOutput>(const ExecConfig& exec, const std::string& exec_info,
                                                    std::chrono::milliseconds timeout)>;
/// fork/exec with poll(); blocks the caller for at most `timeout`.
Result<ExecOutput> run_exec_plugin(const ExecConfig& exec, const std::string& exec_info,
                                   std::chrono::milliseconds timeout);

struct AuthOptions {
  std::chrono::seconds token_file_reread{60};  ///< client-go re-reads BearerTokenFile about every minute
  std::chrono::milliseconds exec_timeout{30000};
  /// Refresh exec credentials this long before expirationTimestamp.
  std::chrono::seconds exec_expiry_margin{10};
  std::function<std::chrono::steady_clock::time_point()> steady_now = [] { return std::chrono::steady_clock::now(); };
  std::function<std::chrono::system_clock::time_point()> wall_now = [] { return std::chrono::system_clock::now(); };
  ExecRunner exec_runner = run_exec_plugin;
};

struct ClientCertificate {
  std::string cert_pem;
  std::string key_pem;
  bool operator==(const ClientCertificate&) const = default;
};

/// Not thread-safe: owned by one Client on one executor.
class Authenticator {
 public:
  Authenticator(RestConfig config, Environment env, AuthOptions options = {});

  /// The bearer token for the next request ("" = none). Token file: re-read when older than the period.
  /// Exec: run when there is no cached credential or it expires within the margin.
  Result<std::string> bearer_token();
  /// The client certificate (static, or from the exec plugin); empty cert_pem when none.
  Result<ClientCertificate> client_certificate();
  /// Called on a 401: the next bearer_token()/client_certificate() re-reads the file or re-runs the plugin.
  /// Returns true when a refresh can change anything (token file or exec), i.e. a retry is worthwhile.
  bool invalidate();
  /// How many times the token file was read / the plugin was run (for tests and metrics).
  int token_file_reads() const { return token_file_reads_; }
  int exec_runs() const { return exec_runs_; }

 private:
  Status refresh_exec();

  RestConfig config_;
  Environment env_;
  AuthOptions options_;
  std::string file_token_;
  std::optional<std::chrono::steady_clock::time_point> file_read_at_;
  std::optional<ExecCredential> exec_cred_;
  int token_file_reads_ = 0;
  int exec_runs_ = 0;
};

}  // namespace gpuslice::kube
