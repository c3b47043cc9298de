#pragma once
// Test helpers for running shell commands (curl, openssl s_client, the gpuslice binary) and reading files.
// Header-only; included by tests that drive processes (tests/cmd/serve_test.cc, tests/webhook/server_test.cc).

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace gpuslice::testing {

/// The whole file, or "" when it cannot be read.
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Runs `cmd` with /bin/sh and returns its stdout; `status` is pclose()'s wait status.
inline std::string run_capture(const std::string& cmd, int& status) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) {
    out.append(buf, n);
  }
  status = ::pclose(p);
  return out;
}

/// Whether `name` is on PATH.
inline bool have_tool(const char* name) {
  return std::system((std::string("command -v ") + name + " >/dev/null 2>&1").c_str()) == 0;
}

}  // namespace gpuslice::testing
