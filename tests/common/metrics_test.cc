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
