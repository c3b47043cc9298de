// Micro-benchmark of the webhook's pure core: review() (decode -> policy -> encode) on a typical GPU pod
// AdmissionReview, single-threaded and on N threads, plus its parts. No network: this is the CPU cost the
// TLS server adds on top of its own. Usage: webhook_core_bench [review.json] [seconds] [threads]
#include "common/config.h"
#include "webhook/admission.h"
#include "webhook/policy.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct Rate {
  double per_wall_second = 0;  ///< operations per elapsed second (depends on what else runs)
  double cpu_us = 0;           ///< CPU microseconds per operation on this thread (robust to contention)
};

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

template <class F>
Rate measure(double seconds, F&& f) {
  uint64_t n = 0;
  double cpu0 = thread_cpu_seconds();
  auto start = clock_type::now();
  auto until = start + std::chrono::duration<double>(seconds);
  while (true) {
    for (int i = 0; i < 256; ++i) f();
    n += 256;
    if (clock_type::now() >= until) break;
  }
  double wall = std::chrono::duration<double>(clock_type::now() - start).count();
  double cpu = thread_cpu_seconds() - cpu0;
  return Rate{double(n) / wall, cpu * 1e6 / double(n)};
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
  Rate dec = measure(seconds, [&] { sink = sink + gpuslice::webhook::decode_admission_review(body).ok(); });
  Rate mut = measure(seconds, [&] { sink = sink + gpuslice::webhook::mutate_pod(pod, "team-a", config).patch.size(); });
  Rate one = measure(seconds, [&] { sink = sink + gpuslice::webhook::review(body, config).body.size(); });
  std::printf("decode_admission_review: %8.0f/s wall, %6.2f us CPU each\n", dec.per_wall_second, dec.cpu_us);
  std::printf("mutate_pod:              %8.0f/s wall, %6.2f us CPU each\n", mut.per_wall_second, mut.cpu_us);
  std::printf("review, 1 thread:        %8.0f/s wall, %6.2f us CPU each (%.0f/s per fully used core)\n",
              one.per_wall_second, one.cpu_us, 1e6 / one.cpu_us);

  std::vector<Rate> rates(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      rates[t] = measure(seconds, [&] { sink = sink + gpuslice::webhook::review(body, config).body.size(); });
    });
  }
  for (auto& th : pool) th.join();
  double total = 0;
  double cpu = 0;
  for (const Rate& r : rates) {
    total += r.per_wall_second;
    cpu += r.cpu_us / threads;
  }
  std::printf("review, %d threads:       %8.0f/s wall, %6.2f us CPU each\n", threads, total, cpu);
  return 0;
}
