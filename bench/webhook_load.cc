// webhook_load: a small HTTPS/1.1 keep-alive load client for the webhook (Beast + OpenSSL).
//
//   webhook_load --port P --ca ca.crt --body review.json --connections 32 --duration 10      (closed loop)
//   webhook_load --port P --ca ca.crt --body review.json --connections 8 --rate 1000 --duration 10
//   ... --server-pid PID     also reports that process's VmRSS/VmHWM after the run
//
// Closed loop: each connection keeps one request in flight (fixed concurrency = --connections).
// Fixed rate: request k of the run is due at t0 + k/rate, spread round-robin over the connections; latency
// is measured from the due time (not the send time), so a stalled server is not hidden by the client
// waiting for it (coordinated omission). Every response must be 200 or the run counts an error.
// Traffic goes to 127.0.0.1 only.
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using error_code = boost::system::error_code;
using clock_type = std::chrono::steady_clock;

namespace {

struct Options {
  int port = 0;
  std::string ca, body_file, target = "/mutate";
  int connections = 16;
  double rate = 0;  // 0: closed loop
  double duration = 10;
  double warmup = 1;
  int threads = 1;
  long server_pid = 0;
};

struct Stats {
  std::vector<uint32_t> latencies_us;
  uint64_t ok = 0, errors = 0, total = 0;  // total: every 200, warm-up included (for CPU per review)
};

class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(net::io_context& ioc, ssl::context& ctx, const Options& o, const std::string& body, Stats& stats,
       clock_type::time_point measure_from, clock_type::time_point end, int index)
      : o_(o),
        stats_(stats),
        stream_(net::make_strand(ioc), ctx),
        timer_(stream_.get_executor()),
        measure_from_(measure_from),
        end_(end),
        index_(index) {
    req_ = {http::verb::post, o.target, 11};
    req_.set(http::field::host, "127.0.0.1");
    req_.set(http::field::content_type, "application/json");
    req_.body() = body;
    req_.keep_alive(true);
    req_.prepare_payload();
  }

  void start(clock_type::time_point t0) {
    t0_ = t0;
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(10));
    beast::get_lowest_layer(stream_).async_connect(
        tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(o_.port)),
        [self = shared_from_this()](error_code ec) {
          if (ec) {
            return self->fail("connect", ec);
          }
          self->stream_.async_handshake(ssl::stream_base::client, [self](error_code e) {
            if (e) {
              return self->fail("handshake", e);
            }
            self->next();
          });
        });
  }

 private:
  void fail(const char* what, error_code ec) {
    ++stats_.errors;
    std::fprintf(stderr, "connection %d: %s: %s\n", index_, what, ec.message().c_str());
  }

  void next() {
    if (o_.rate <= 0) {
      due_ = clock_type::now();
      if (due_ >= end_) {
        return;
      }
      return send();
    }
    // Fixed rate: this connection's k-th request is global request k*connections + index.
    const double interval = 1.0 / o_.rate;
    due_ = t0_ + std::chrono::duration_cast<clock_type::duration>(
                     std::chrono::duration<double>((static_cast<double>(k_) * o_.connections + index_) * interval));
    ++k_;
    if (due_ >= end_) {
      return;
    }
    if (due_ <= clock_type::now()) {
      return send();  // late (previous response slow): send at once, latency still counted from due_
    }
    timer_.expires_at(due_);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) {
        self->send();
      }
    });
  }

  void send() {
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(10));
    http::async_write(stream_, req_, [self = shared_from_this()](error_code ec, std::size_t) {
      if (ec) {
        return self->fail("write", ec);
      }
      self->res_.emplace();
      self->res_->body_limit(1 << 20);
      http::async_read(self->stream_, self->buffer_, *self->res_, [self](error_code e, std::size_t) {
        if (e) {
          return self->fail("read", e);
        }
        auto now = clock_type::now();
        if (self->res_->get().result_int() != 200) {
          ++self->stats_.errors;
          return self->next();
        }
        ++self->stats_.total;
        if (self->due_ >= self->measure_from_) {
          ++self->stats_.ok;
          self->stats_.latencies_us.push_back(
              static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(now - self->due_).count()));
        }
        self->next();
      });
    });
  }

  const Options& o_;
  Stats& stats_;
  beast::ssl_stream<beast::tcp_stream> stream_;
  net::steady_timer timer_;
  http::request<http::string_body> req_;
  std::optional<http::response_parser<http::string_body>> res_;
  beast::flat_buffer buffer_;
  clock_type::time_point t0_, due_, measure_from_, end_;
  uint64_t k_ = 0;
  int index_;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(2);
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// utime + stime of a process in seconds (/proc/PID/stat fields 14 and 15).
double proc_cpu_seconds(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = text.rfind(')');
  if (close == std::string::npos) {
    return 0;
  }
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14 || i == 15) {
      ticks += std::stod(f);
    }
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double self_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

std::string proc_status(long pid, const char* key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      return line.substr(std::string(key).size() + 1);
    }
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--port")
      o.port = std::stoi(v);
    else if (k == "--ca")
      o.ca = v;
    else if (k == "--body")
      o.body_file = v;
    else if (k == "--target")
      o.target = v;
    else if (k == "--connections")
      o.connections = std::stoi(v);
    else if (k == "--rate")
      o.rate = std::stod(v);
    else if (k == "--duration")
      o.duration = std::stod(v);
    else if (k == "--warmup")
      o.warmup = std::stod(v);
    else if (k == "--threads")
      o.threads = std::stoi(v);
    else if (k == "--server-pid")
      o.server_pid = std::stol(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (o.port == 0 || o.ca.empty() || o.body_file.empty()) {
    std::fprintf(stderr,
                 "usage: webhook_load --port P --ca FILE --body FILE [--connections N] [--rate R] "
                 "[--duration S] [--warmup S] [--threads T] [--server-pid PID]\n");
    return 2;
  }
  const std::string body = read_all(o.body_file);
  ssl::context ctx(ssl::context::tls_client);
  const std::string ca = read_all(o.ca);
  ctx.add_certificate_authority(net::buffer(ca));
  ctx.set_verify_mode(ssl::verify_peer);
  ctx.set_verify_callback(ssl::host_name_verification("127.0.0.1"));

  const double server_cpu0 = o.server_pid > 0 ? proc_cpu_seconds(o.server_pid) : 0;
  const double client_cpu0 = self_cpu_seconds();
  net::io_context ioc;
  const auto t0 = clock_type::now() + std::chrono::milliseconds(200);
  const auto measure_from =
      t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(o.warmup));
  const auto end =
      measure_from + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(o.duration));
  std::vector<Stats> stats(static_cast<size_t>(o.connections));
  for (int i = 0; i < o.connections; ++i) {
    std::make_shared<Conn>(ioc, ctx, o, body, stats[static_cast<size_t>(i)], measure_from, end, i)->start(t0);
  }
  std::vector<std::thread> threads;
  for (int i = 1; i < o.threads; ++i) {
    threads.emplace_back([&] { ioc.run(); });
  }
  ioc.run();
  for (auto& t : threads) {
    t.join();
  }
  const double server_cpu = o.server_pid > 0 ? proc_cpu_seconds(o.server_pid) - server_cpu0 : 0;
  const double client_cpu = self_cpu_seconds() - client_cpu0;
  std::vector<uint32_t> all;
  uint64_t ok = 0, errors = 0, total = 0;
  for (auto& s : stats) {
    total += s.total;
    all.insert(all.end(), s.latencies_us.begin(), s.latencies_us.end());
    ok += s.ok;
    errors += s.errors;
  }
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) -> double {
    if (all.empty()) {
      return 0;
    }
    size_t idx = std::min(all.size() - 1, static_cast<size_t>(p * static_cast<double>(all.size())));
    return all[idx] / 1000.0;
  };
  std::printf("mode=%s connections=%d duration=%.1fs requests=%llu errors=%llu reviews/s=%.0f\n",
              o.rate > 0 ? "fixed-rate" : "closed-loop", o.connections, o.duration, static_cast<unsigned long long>(ok),
              static_cast<unsigned long long>(errors), static_cast<double>(ok) / o.duration);
  std::printf("latency ms: p50=%.3f p90=%.3f p99=%.3f p99.9=%.3f max=%.3f\n", pct(0.5), pct(0.9), pct(0.99), pct(0.999),
              all.empty() ? 0.0 : all.back() / 1000.0);
  if (o.server_pid > 0) {
    std::printf("server pid %ld: VmRSS=%s VmHWM=%s\n", o.server_pid, proc_status(o.server_pid, "VmRSS:").c_str(),
                proc_status(o.server_pid, "VmHWM:").c_str());
    // CPU per review is what a loaded shared machine cannot distort much: it projects the rate on idle cores.
    const double per = total > 0 ? server_cpu / static_cast<double>(total) * 1e6 : 0;
    const double cper = total > 0 ? client_cpu / static_cast<double>(total) * 1e6 : 0;
    std::printf(
        "cpu per review: server=%.1fus client=%.1fus (%llu reviews incl. warm-up); projected on 2 idle "
        "cores: server alone %.0f/s, server+this client %.0f/s\n",
        per, cper, static_cast<unsigned long long>(total), per > 0 ? 2e6 / per : 0.0,
        per + cper > 0 ? 2e6 / (per + cper) : 0.0);
  }
  return errors == 0 ? 0 : 1;
}
