#include "kube/auth.h"

#include "common/base64.h"
#include "common/json_access.h"
#include "common/rfc3339.h"

#include <fmt/format.h>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstring>

extern char** environ;

namespace gpuslice::kube {

namespace json = boost::json;

Result<ExecCredential> parse_exec_credential(std::string_view text, std::string_view expected_api_version) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) {
    return make_error(
        fmt::format("exec plugin output is not a JSON object ({})", ec ? ec.message() : std::string("not an object")));
  }
  const auto& o = v.get_object();
  const std::string api_version = string_at(o, "apiVersion");
  if (api_version != expected_api_version) {
    return make_error(fmt::format("exec plugin output: apiVersion \"{}\" does not match the kubeconfig's \"{}\"",
                                  api_version, expected_api_version));
  }
  if (string_at(o, "kind") != "ExecCredential") {
    return make_error(fmt::format("exec plugin output: kind \"{}\" is not ExecCredential", string_at(o, "kind")));
  }
  const auto* status_v = o.if_contains("status");
  if (status_v == nullptr || !status_v->is_object()) {
    return make_error("exec plugin output: status is missing");
  }
  const auto& status = status_v->get_object();
  ExecCredential cred;
  cred.token = string_at(status, "token");
  cred.client_certificate_pem = string_at(status, "clientCertificateData");
  cred.client_key_pem = string_at(status, "clientKeyData");
  if (cred.client_certificate_pem.empty() != cred.client_key_pem.empty()) {
    return make_error(
        "exec plugin output: status.clientCertificateData and status.clientKeyData must be given "
        "together");
  }
  if (cred.token.empty() && cred.client_certificate_pem.empty()) {
    return make_error("exec plugin output: status has neither token nor clientCertificateData");
  }
  const std::string expiry = string_at(status, "expirationTimestamp");
  if (!expiry.empty()) {
    auto t = parse_rfc3339(expiry);
    if (!t) {
      return make_error(fmt::format("exec plugin output: status.expirationTimestamp: {}", t.message()));
    }
    cred.expiration = *t;
  }
  return cred;
}

std::string exec_info_json(const ExecConfig& exec, const RestConfig& config) {
  json::object spec{{"interactive", false}};
  if (exec.provide_cluster_info) {
    json::object cluster{{"server", config.server}};
    if (!config.tls_server_name.empty()) {
      cluster["tls-server-name"] = config.tls_server_name;
    }
    if (config.insecure_skip_tls_verify) {
      cluster["insecure-skip-tls-verify"] = true;
    }
    if (!config.ca_pem.empty()) {
      // The wire format carries certificate-authority-data as base64 ([]byte in Go's JSON).
      cluster["certificate-authority-data"] = base64_encode(config.ca_pem);
    }
    spec["cluster"] = std::move(cluster);
  }
  return json::serialize(
      json::object{{"apiVersion", exec.api_version}, {"kind", "ExecCredential"}, {"spec", std::move(spec)}});
}

Result<ExecOutput> run_exec_plugin(const ExecConfig& exec, const std::string& exec_info,
                                   std::chrono::milliseconds timeout) {
  constexpr std::size_t kMaxOutput = 1u << 20;
  // Everything the child needs is prepared before fork(): after it only async-signal-safe calls are made.
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    const auto name = kv.substr(0, kv.find('='));
    bool overridden = name == "KUBERNETES_EXEC_INFO";
    for (const auto& [k, v] : exec.env) {
      overridden = overridden || name == k;
    }
    if (!overridden) {
      env_strings.emplace_back(kv);
    }
  }
  for (const auto& [k, v] : exec.env) {
    env_strings.push_back(k + "=" + v);
  }
  env_strings.push_back("KUBERNETES_EXEC_INFO=" + exec_info);
  std::vector<char*> envp;
  for (auto& s : env_strings) {
    envp.push_back(s.data());
  }
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings{exec.command};
  argv_strings.insert(argv_strings.end(), exec.args.begin(), exec.args.end());
  std::vector<char*> argv;
  for (auto& s : argv_strings) {
    argv.push_back(s.data());
  }
  argv.push_back(nullptr);
  const bool search_path = exec.command.find('/') == std::string::npos;

  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    return make_error(fmt::format("exec plugin {}: pipe: {}", exec.command, std::strerror(errno)));
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return make_error(fmt::format("exec plugin {}: pipe: {}", exec.command, std::strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) {
      close(fd);
    }
    return make_error(fmt::format("exec plugin {}: fork: {}", exec.command, std::strerror(errno)));
  }
  if (pid == 0) {
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
      dup2(devnull, 0);
    }
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    if (search_path) {
      execvpe(argv[0], argv.data(), envp.data());
    } else {
      execve(argv[0], argv.data(), envp.data());
    }
    const char msg[] = "exec failed\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  ExecOutput out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  bool too_large = false;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    const int r = poll(fds, 2, static_cast<int>(left.count()));
    if (r < 0) {
      if (errno == EINTR) {
        continue;
      }
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) {
        continue;
      }
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) {
          continue;
        }
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      std::string& target = i == 0 ? out.stdout_text : out.stderr_text;
      target.append(buf, static_cast<std::size_t>(n));
      if (target.size() > kMaxOutput) {
        too_large = true;
        open_fds = 0;
        break;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) {
      close(f.fd);
    }
  }
  if (timed_out || too_large) {
    kill(pid, SIGKILL);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return make_error(fmt::format("exec plugin {}: no result within {} ms; killed", exec.command, timeout.count()));
  }
  if (too_large) {
    return make_error(fmt::format("exec plugin {}: output larger than {} bytes", exec.command, kMaxOutput));
  }
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return out;
}

Authenticator::Authenticator(RestConfig config, Environment env, AuthOptions options)
    : config_(std::move(config)), env_(std::move(env)), options_(std::move(options)) {}

Status Authenticator::refresh_exec() {
  const ExecConfig& exec = *config_.exec;
  ++exec_runs_;
  auto out = options_.exec_runner(exec, exec_info_json(exec, config_), options_.exec_timeout);
  if (!out) {
    return out.error();
  }
  if (out->exit_code != 0) {
    std::string err = out->stderr_text.substr(0, 512);
    while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) {
      err.pop_back();
    }
    return make_error(fmt::format("exec plugin {} exited with code {}: {}", exec.command, out->exit_code, err));
  }
  auto cred = parse_exec_credential(out->stdout_text, exec.api_version);
  if (!cred) {
    return make_error(fmt::format("exec plugin {}: {}", exec.command, cred.message()));
  }
  exec_cred_ = std::move(*cred);
  return Status::Ok();
}

namespace {
bool exec_fresh(const std::optional<ExecCredential>& c, std::chrono::system_clock::time_point now,
                std::chrono::seconds margin) {
  return c && (!c->expiration || now + margin < *c->expiration);
}
}  // namespace

Result<std::string> Authenticator::bearer_token() {
  if (!config_.token.empty()) {
    return config_.token;  // a static token wins over tokenFile, as in client-go
  }
  if (!config_.token_file.empty()) {
    const auto now = options_.steady_now();
    if (!file_read_at_ || now - *file_read_at_ >= options_.token_file_reread) {
      ++token_file_reads_;
      auto text = env_.read_file(config_.token_file);
      if (!text) {
        if (!file_token_.empty()) {
          return file_token_;  // a transient read failure during rotation: keep the last good token
        }
        return make_error(fmt::format("tokenFile {}: {}", config_.token_file, text.message()));
      }
      std::string t = std::move(*text);
      while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) {
        t.pop_back();
      }
      file_token_ = std::move(t);
      file_read_at_ = now;
    }
    return file_token_;
  }
  if (config_.exec) {
    if (!exec_fresh(exec_cred_, options_.wall_now(), options_.exec_expiry_margin)) {
      Status s = refresh_exec();
      if (!s) {
        return s.error();
      }
    }
    return exec_cred_->token;
  }
  return std::string();
}

Result<ClientCertificate> Authenticator::client_certificate() {
  if (!config_.client_cert_pem.empty()) {
    return ClientCertificate{config_.client_cert_pem, config_.client_key_pem};
  }
  if (config_.exec) {
    if (!exec_fresh(exec_cred_, options_.wall_now(), options_.exec_expiry_margin)) {
      Status s = refresh_exec();
      if (!s) {
        return s.error();
      }
    }
    return ClientCertificate{exec_cred_->client_certificate_pem, exec_cred_->client_key_pem};
  }
  return ClientCertificate{};
}

bool Authenticator::invalidate() {
  if (!config_.token.empty()) {
    return false;
  }
  if (!config_.token_file.empty()) {
    file_read_at_.reset();
    return true;
  }
  if (config_.exec) {
    exec_cred_.reset();
    return true;
  }
  return false;
}

}  // namespace gpuslice::kube
