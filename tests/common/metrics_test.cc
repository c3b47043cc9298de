#include "common/metrics.h"

#include <catch2/catch.hpp>

using namespace gpuslice::metrics;

TEST_CASE("registry renders counters, gauges and histograms in the text format") {
  Registry r;
  auto& reviews = r.counter("gpuslice_webhook_reviews_total", "Reviews by outcome.", {"outcome"});
  reviews.with({"allowed"}).inc();
  reviews.with({"allowed"}).inc(2);
  reviews.with({"denied"}).inc();
  r.gauge("gpuslice_build_info", "Build information.", {"version"}).with({"0.1.0"}).set(1);
  auto& h = r.histogram("gpuslice_webhook_duration_seconds", "Latency.", {}, {0.001, 0.01});
  h.with({}).observe(0.0005);
  h.with({}).observe(0.005);
  h.with({}).observe(1);
  std::string text = r.serialize();
  CHECK(text.find("# TYPE gpuslice_webhook_reviews_total counter\n") != std::string::npos);
  CHECK(text.find("gpuslice_webhook_reviews_total{outcome=\"allowed\"} 3\n") != std::string::npos);
  CHECK(text.find("gpuslice_webhook_reviews_total{outcome=\"denied\"} 1\n") != std::string::npos);
  CHECK(text.find("gpuslice_build_info{version=\"0.1.0\"} 1\n") != std::string::npos);
  CHECK(text.find("gpuslice_webhook_duration_seconds_bucket{le=\"0.001\"} 1\n") != std::string::npos);
  CHECK(text.find("gpuslice_webhook_duration_seconds_bucket{le=\"0.01\"} 2\n") != std::string::npos);
  CHECK(text.find("gpuslice_webhook_duration_seconds_bucket{le=\"+Inf\"} 3\n") != std::string::npos);
  CHECK(text.find("gpuslice_webhook_duration_seconds_count 3\n") != std::string::npos);
}

TEST_CASE("label values are escaped") {
  CHECK(escape_label_value("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
  CHECK(format_value(1) == "1");
  CHECK(format_value(0.25) == "0.25");
}

TEST_CASE("label interner: equal values share one copy; prune forgets what no row holds") {
  LabelInterner in;
  LabelInterner::Value a = in.intern("node-a");
  LabelInterner::Value a2 = in.intern(std::string("node-a"));
  LabelInterner::Value type = in.intern("NVIDIA A100-SXM4-80GB (longer than the short-string buffer)");
  CHECK(a.get() == a2.get());
  CHECK(*a == "node-a");
  CHECK(*type == "NVIDIA A100-SXM4-80GB (longer than the short-string buffer)");
  CHECK(in.size() == 2);
  CHECK(in.intern("").get() != a.get());
  CHECK(in.size() == 3);  // "" too: nothing else holds it, so prune drops it
  in.prune();
  CHECK(in.size() == 2);
  a.reset();
  in.prune();
  CHECK(in.size() == 2);  // a2 still holds node-a
  a2.reset();
  in.prune();
  CHECK(in.size() == 1);
  // A value pruned and interned again is a new copy with the same text; one held outlives the interner.
  LabelInterner::Value again = in.intern("node-a");
  CHECK(*again == "node-a");
  {
    LabelInterner gone;
    again = gone.intern("kept");
  }
  CHECK(*again == "kept");
  CHECK(*type == "NVIDIA A100-SXM4-80GB (longer than the short-string buffer)");
}
