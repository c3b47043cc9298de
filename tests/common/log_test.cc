#include "common/log.h"

#include <catch2/catch.hpp>

using namespace gpuslice;

TEST_CASE("JSON log lines carry msg and fields") {
  auto line = log::format_line(log::Format::json, log::Severity::info, 2, 1700000000123456, "review done",
                               {{"uid", "a\"b"}, {"allowed", true}, {"ops", 3}});
  CHECK(line ==
        "{\"ts\":1700000000.123456,\"v\":2,\"msg\":\"review done\",\"uid\":\"a\\\"b\",\"allowed\":true,\"ops\":3}\n");
}

TEST_CASE("text log lines use the klog header") {
  auto line =
      log::format_line(log::Format::text, log::Severity::error, 0, 1700000000123456, "bind failed", {{"pod", "ns/p"}});
  CHECK(line.rfind("E1114 22:13:20.123456", 0) == 0);
  CHECK(line.find("] \"bind failed\" pod=\"ns/p\"\n") != std::string::npos);
}
