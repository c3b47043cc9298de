// Micro-benchmark of the webhook's pure core: review() (decode -> policy -> encode) on a typical GPU pod
// AdmissionReview, single-threaded and on N threads, plus its parts. No network: this is the CPU cost the
// TLS server adds on top of its own. Usage: webhook_core_bench [review.json] [seconds] [threads]
#include "common/config.h"
#include "webhook/admission.h"
#include "webhook/policy.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

template <class F>
double per_second(double seconds, F&& f) {
  uint64_t n = 0;
  auto start = clock_type::now();
  auto until = start + std::chrono::duration<double>(seconds);
  while (true) {
    for (int i = 0; i < 256; ++i) f();
    n += 256;
    if (clock_type::now() >= until) break;
  }
  return double(n) / std::chrono::duration<double>(clock_type::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = argc > 1 ? argv[1] : std::string(GPUSLICE_SOURCE_DIR) + "/bench/data/gpu_pod_review_v1.json";
  double seconds = argc > 2 ? std::atof(argv[2]) : 3.0;
  int threads = argc > 3 ? std::atoi(argv[3]) : 2;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string body = ss.str();
  const gpuslice::Configuration config;

  auto first = gpuslice::webhook::review(body, config);
  std::printf("body %zu bytes, reply %d %s, %zu bytes\n", body.size(), first.http_status,
              gpuslice::webhook::outcome_name(first.outcome), first.body.size());

  auto decoded = gpuslice::webhook::decode_admission_review(body);
  if (!decoded.ok()) {
    std::fprintf(stderr, "%s\n", decoded.message().c_str());
    return 1;
  }
  const auto& pod = decoded->object.get_object();
  volatile size_t sink = 0;
  double dec = per_second(seconds, [&] { sink = sink + gpuslice::webhook::decode_admission_review(body).ok(); });
  double mut = per_second(seconds, [&] { sink = sink + gpuslice::webhook::mutate_pod(pod, "team-a", config).patch.size(); });
  double one = per_second(seconds, [&] { sink = sink + gpuslice::webhook::review(body, config).body.size(); });
  std::printf("decode_admission_review: %.0f/s (%.2f us)\n", dec, 1e6 / dec);
  std::printf("mutate_pod:              %.0f/s (%.2f us)\n", mut, 1e6 / mut);
  std::printf("review, 1 thread:        %.0f/s (%.2f us)\n", one, 1e6 / one);

  std::vector<double> rates(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] { rates[t] = per_second(seconds, [&] { sink = sink + gpuslice::webhook::review(body, config).body.size(); }); });
  }
  for (auto& th : pool) th.join();
  double total = 0;
  for (double r : rates) total += r;
  std::printf("review, %d threads:       %.0f/s\n", threads, total);
  return 0;
}
