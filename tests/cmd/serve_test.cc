// `gpuslice certs` + `gpuslice serve` as processes: certificates on disk, the server on 127.0.0.1 port 0
// (port read from its log), a real AdmissionReview through curl --cacert, a clean SIGTERM exit, and start-up
// errors that name the field and value.
#include "tests/support/process.h"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using gpuslice::testing::have_tool;
using gpuslice::testing::run_capture;
using gpuslice::testing::slurp;

const std::string kBinary = std::string(GPUSLICE_BINARY_DIR) + "/cmd/gpuslice";

/// Starts the binary with stderr (the log) to `log_path`.
pid_t spawn(const std::vector<std::string>& args, const std::string& log_path) {
  pid_t pid = ::fork();
  if (pid == 0) {
    FILE* f = std::fopen(log_path.c_str(), "w");
    ::dup2(fileno(f), 2);
    ::dup2(fileno(f), 1);
    std::vector<char*> argv;
    for (const auto& a : args) {
      argv.push_back(const_cast<char*>(a.c_str()));
    }
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             ("gpuslice-cli-test-" + name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("cli: gpuslice certs then gpuslice serve answer an AdmissionReview through curl") {
  if (!have_tool("curl")) {
    WARN("curl not installed; skipped");
    return;
  }
  TempDir dir("serve");
  const auto pki = (dir.path / "pki").string();
  int status = 0;
  run_capture(kBinary + " certs --service gpuslice --namespace kube-system --ip-san 127.0.0.1 --days 2 --out-dir " +
                  pki + " 2>&1",
              status);
  REQUIRE(status == 0);
  for (const char* f : {"ca.crt", "ca.key", "tls.crt", "tls.key", "ca-bundle.b64"}) {
    CHECK(std::filesystem::exists(std::filesystem::path(pki) / f));
  }
  const auto log = (dir.path / "serve.log").string();
  pid_t pid = spawn({kBinary, "serve", "--tls-cert-file", pki + "/tls.crt", "--tls-private-key-file", pki + "/tls.key",
                     "--webhook-bind-address", "127.0.0.1:0", "--health-bind-address", "", "--enable-scheduler=false",
                     "--scheduler-name", "hami-scheduler", "--logging-format", "json"},
                    log);
  REQUIRE(pid > 0);
  std::string port;
  const std::regex port_re("\"port\":([0-9]+)");
  for (int i = 0; i < 400 && port.empty(); ++i) {
    std::smatch m;
    std::string text = slurp(log);
    if (std::regex_search(text, m, port_re)) {
      port = m[1];
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  INFO(slurp(log));
  REQUIRE_FALSE(port.empty());

  const std::string pod = slurp(std::string(GPUSLICE_SOURCE_DIR) + "/tests/webhook/testdata/single.json");
  std::ofstream(dir.path / "review.json")
      << R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"cli-1",)"
      << R"("kind":{"group":"","version":"v1","kind":"Pod"},"namespace":"team-a","operation":"CREATE","object":)" << pod
      << "}}";
  std::string out =
      run_capture("curl -sS --max-time 20 --cacert " + pki + "/ca.crt -H 'Content-Type: application/json' " +
                      "--data-binary @" + (dir.path / "review.json").string() + " https://127.0.0.1:" + port +
                      "/mutate | python3 -c 'import sys,json,base64; r=json.load(sys.stdin)[\"response\"]; "
                      "print(r[\"uid\"]); print(base64.b64decode(r[\"patch\"]).decode())'",
                  status);
  CHECK(status == 0);
  CHECK(out.rfind("cli-1\n", 0) == 0);
  CHECK(out.find(R"("path":"/spec/schedulerName","value":"hami-scheduler")") != std::string::npos);

  REQUIRE(::kill(pid, SIGTERM) == 0);
  int wstatus = 0;
  REQUIRE(::waitpid(pid, &wstatus, 0) == pid);
  CHECK(WIFEXITED(wstatus));
  CHECK(WEXITSTATUS(wstatus) == 0);
  CHECK(slurp(log).find("shutting down") != std::string::npos);
}

TEST_CASE("cli: serve start-up errors name the field and the value") {
  TempDir dir("errors");
  int status = 0;
  std::ofstream(dir.path / "bad.yaml") << "apiVersion: gpuslice.io/v1alpha1\nkind: GpusliceConfiguration\n"
                                          "webhook:\n  readTimeout: 5x\n";
  std::string out = run_capture(kBinary + " serve --config " + (dir.path / "bad.yaml").string() + " 2>&1", status);
  CHECK(status != 0);
  CHECK(out.find("webhook.readTimeout") != std::string::npos);
  CHECK(out.find("5x") != std::string::npos);
  out = run_capture(kBinary +
                        " serve --webhook-bind-address 127.0.0.1:notaport --tls-cert-file x --tls-private-key-file y " +
                        "--health-bind-address '' 2>&1",
                    status);
  CHECK(status != 0);
  CHECK(out.find("webhook-bind-address: \"127.0.0.1:notaport\"") != std::string::npos);
  out = run_capture(kBinary + " serve --webhook-handshake-timeout 5x 2>&1", status);
  CHECK(status != 0);
  CHECK(out.find("--webhook-handshake-timeout: \"5x\"") != std::string::npos);
  out = run_capture(kBinary + " serve --webhook-write-timeout 0s 2>&1", status);
  CHECK(status != 0);
  CHECK(out.find("webhook.writeTimeout: \"0s\" must be greater than 0") != std::string::npos);
  out = run_capture(
      kBinary + " certs --service Bad_Name --namespace ns --out-dir " + (dir.path / "x").string() + " 2>&1", status);
  CHECK(status != 0);
  CHECK(out.find("service: \"Bad_Name\"") != std::string::npos);
}
