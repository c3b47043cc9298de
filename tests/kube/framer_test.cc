#include "kube/framer.h"

#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

using gpuslice::kube::LineFramer;

namespace {
struct Outcome {
  std::vector<std::string> lines;
  bool failed = false;
  bool operator==(const Outcome&) const = default;
};

Outcome frame(const std::vector<std::string>& pieces, std::size_t cap, bool finish = true) {
  LineFramer f(cap);
  Outcome out;
  auto on_line = [&](std::string_view l) { out.lines.emplace_back(l); };
  for (const auto& p : pieces) {
    if (!f.feed(p, on_line)) {
      out.failed = true;
      return out;
    }
  }
  if (finish && !f.finish(on_line)) {
    out.failed = true;
  }
  return out;
}
}  // namespace

TEST_CASE("framer splits lines and strips CR, skipping empty lines") {
  auto out = frame({"{\"a\":1}\n\n{\"b\":2}\r\n\r\n{\"c\":3}\n"}, 100);
  REQUIRE_FALSE(out.failed);
  REQUIRE(out.lines == std::vector<std::string>{"{\"a\":1}", "{\"b\":2}", "{\"c\":3}"});
}

TEST_CASE("framer holds a partial line across feeds") {
  LineFramer f(100);
  std::vector<std::string> lines;
  auto on_line = [&](std::string_view l) { lines.emplace_back(l); };
  REQUIRE(f.feed("{\"type\":\"ADD", on_line));
  REQUIRE(lines.empty());
  REQUIRE(f.buffered_bytes() == 12);
  REQUIRE(f.feed("ED\"}\n{\"x", on_line));
  REQUIRE(lines == std::vector<std::string>{"{\"type\":\"ADDED\"}"});
  REQUIRE(f.buffered_bytes() == 3);
}

TEST_CASE("framer delivers an unterminated tail at finish") {
  auto out = frame({"a\nb"}, 100);
  REQUIRE(out.lines == std::vector<std::string>{"a", "b"});
  auto unfinished = frame({"a\nb"}, 100, false);
  REQUIRE(unfinished.lines == std::vector<std::string>{"a"});
}

TEST_CASE("framer enforces the line cap and stays failed") {
  LineFramer f(4);
  std::vector<std::string> lines;
  auto on_line = [&](std::string_view l) { lines.emplace_back(l); };
  REQUIRE(f.feed("abcd\n", on_line));    // exactly the cap
  REQUIRE(f.feed("abcd\r\n", on_line));  // CR does not count
  auto s = f.feed("abcde\n", on_line);
  REQUIRE_FALSE(s);
  REQUIRE(s.message().find("limit of 4 bytes") != std::string::npos);
  REQUIRE(f.failed());
  REQUIRE_FALSE(f.feed("a\n", on_line));
  REQUIRE(lines == std::vector<std::string>{"abcd", "abcd"});
}

TEST_CASE("framer fails on an over-long line without a newline, without buffering it all") {
  LineFramer f(8);
  auto on_line = [](std::string_view) {};
  REQUIRE(f.feed("12345678", on_line));
  REQUIRE_FALSE(f.feed("9ab", on_line));
  REQUIRE(f.buffered_bytes() == 0);
}

TEST_CASE("framer output does not depend on split points") {
  const std::string stream =
      "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"resourceVersion\":\"1\"}}}\n"
      "\r\n"
      "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"resourceVersion\":\"2\"}}}\r\n"
      "\n\n"
      "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"3\"}}}\n"
      "tail-without-newline";
  for (std::size_t cap : {std::size_t{20}, std::size_t{66}, std::size_t{67}, std::size_t{1000}}) {
    const Outcome whole = frame({stream}, cap);
    // Every single split point.
    for (std::size_t i = 0; i <= stream.size(); ++i) {
      INFO("cap " << cap << " split at " << i);
      REQUIRE(frame({stream.substr(0, i), stream.substr(i)}, cap) == whole);
    }
    // Byte by byte.
    std::vector<std::string> bytes;
    for (char c : stream) {
      bytes.emplace_back(1, c);
    }
    REQUIRE(frame(bytes, cap) == whole);
    // Random multi-way splits.
    std::mt19937 rng(static_cast<unsigned>(cap));
    for (int round = 0; round < 200; ++round) {
      std::vector<std::string> pieces;
      std::size_t pos = 0;
      while (pos < stream.size()) {
        std::size_t n = std::uniform_int_distribution<std::size_t>(0, 9)(rng);
        pieces.push_back(stream.substr(pos, n));
        pos += n;
      }
      REQUIRE(frame(pieces, cap) == whole);
    }
  }
  // Sanity: with a generous cap all four lines come out, with cap 20 it fails.
  REQUIRE(frame({stream}, 1000).lines.size() == 4);
  REQUIRE(frame({stream}, 20).failed);
}
