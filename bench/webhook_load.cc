// webhook_load: a small HTTPS/1.1 keep-alive load client for the webhook (Beast + OpenSSL).
//
//   webhook_load --port P --ca ca.crt --body review.json --connections 32 --duration 10      (closed loop)
//   webhook_load --port P --ca ca.crt --body review.json --connections 8 --rate 1000 --duration 10
//   ... --server-pid PID     also reports that process's VmRSS/VmHWM after the run, and its CPU per review
//   webhook_load ... --reconnect 1 --tls 1.2|1.3 [--resume 1] [--close-notify 1]   a new connection per request
//
// --reconnect measures what an API server that reconnects costs: each request opens a connection, does the
// handshake (TLS 1.2 or 1.3 by --tls), sends one review and closes. --resume offers the session of the
// previous connection (TLS 1.2 session ID or 1.3 ticket) and counts how many the server resumed. --close-notify
// ends each connection with a TLS close_notify exchange (as Go's tls.Conn.Close does) instead of just closing the
// socket: OpenSSL drops a session from the server's cache when its connection ends without one, so resumption is
// measured with --close-notify 1.
//
// Closed loop: each connection keeps one request in flight (fixed concurrency = --connections).
// The schedule starts once every connection has done its handshake (t0), then a warm-up.
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
#include <functional>
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
  bool reconnect = false;
  bool resume = false;
  bool close_notify = false;
  int tls = 0;  // 12 or 13; 0: OpenSSL's default (1.3)
};

/// The run's clock, set once every connection has finished its first handshake (so opening 1,000 connections
/// is not measured as queueing of the first requests): t0 + warm-up = measure_from, + duration = end.
struct Schedule {
  clock_type::time_point t0, measure_from, end;
  int pending = 0;  // connections still opening their first handshake
  std::vector<std::function<void()>> ready;
  std::function<void()> on_start;  // after t0 is set
  void connected(std::function<void()> go, const Options& o);
};

struct Stats {
  std::vector<uint32_t> latencies_us;
  uint64_t ok = 0, errors = 0, total = 0;  // total: every 200, warm-up included (for CPU per review)
  uint64_t handshakes = 0, resumed = 0;    // --reconnect: completed handshakes, of which resumed
};

/// Server CPU and reviews counted over the measured window only (the warm-up's handshakes excluded).
struct Window {
  double server_cpu0 = 0, client_cpu0 = 0;
  uint64_t total0 = 0, handshakes0 = 0;
  bool taken = false;
};

class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(net::io_context& ioc, ssl::context& ctx, const Options& o, const std::string& body, Stats& stats,
       Schedule& schedule, int index)
      : o_(o),
        stats_(stats),
        ctx_(ctx),
        strand_(net::make_strand(ioc)),
        stream_(std::in_place, strand_, ctx),
        timer_(strand_),
        sched_(schedule),
        index_(index) {
    req_ = {http::verb::post, o.target, 11};
    req_.set(http::field::host, "127.0.0.1");
    req_.set(http::field::content_type, "application/json");
    req_.body() = body;
    req_.keep_alive(true);
    req_.prepare_payload();
  }

  ~Conn() {
    if (session_ != nullptr) {
      SSL_SESSION_free(session_);
    }
  }

  void start() {
    connect([self = shared_from_this()] { self->sched_.connected([self] { self->next(); }, self->o_); });
  }

 private:
  /// TCP connect + TLS handshake (offering the saved session with --resume), then `then`.
  template <class F>
  void connect(F then) {
    if (o_.resume && session_ != nullptr) {
      SSL_set_session(stream_->native_handle(), session_);
    }
    beast::get_lowest_layer(*stream_).expires_after(std::chrono::seconds(10));
    beast::get_lowest_layer(*stream_).async_connect(
        tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(o_.port)),
        [self = shared_from_this(), then](error_code ec) {
          if (ec) {
            return self->fail("connect", ec);
          }
          self->stream_->async_handshake(ssl::stream_base::client, [self, then](error_code e) {
            if (e) {
              return self->fail("handshake", e);
            }
            ++self->stats_.handshakes;
            if (SSL_session_reused(self->stream_->native_handle()) == 1) {
              ++self->stats_.resumed;
            }
            then();
          });
        });
  }

  /// --reconnect: keep the session (a TLS 1.3 ticket arrives after the handshake, so after the response),
  /// drop the connection (without close_notify unless --close-notify), open a new one.
  void reconnect_then_send() {
    if (o_.close_notify) {
      beast::get_lowest_layer(*stream_).expires_after(std::chrono::seconds(10));
      stream_->async_shutdown([self = shared_from_this()](error_code) { self->reopen_then_send(); });
      return;
    }
    reopen_then_send();
  }

  void reopen_then_send() {
    if (o_.resume) {
      if (SSL_SESSION* s = SSL_get1_session(stream_->native_handle()); s != nullptr) {
        if (session_ != nullptr) {
          SSL_SESSION_free(session_);
        }
        session_ = s;
      }
    }
    error_code ignored;
    beast::get_lowest_layer(*stream_).socket().close(ignored);
    stream_.emplace(strand_, ctx_);
    buffer_.clear();
    connect([self = shared_from_this()] { self->send(); });
  }

  void fail(const char* what, error_code ec) {
    ++stats_.errors;
    std::fprintf(stderr, "connection %d: %s: %s\n", index_, what, ec.message().c_str());
  }

  void next() {
    if (o_.rate <= 0) {
      due_ = clock_type::now();
      if (due_ >= sched_.end) {
        return;
      }
      return send_next();
    }
    // Fixed rate: this connection's k-th request is global request k*connections + index.
    const double interval = 1.0 / o_.rate;
    due_ = sched_.t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(
                           (static_cast<double>(k_) * o_.connections + index_) * interval));
    ++k_;
    if (due_ >= sched_.end) {
      return;
    }
    if (due_ <= clock_type::now()) {
      return send_next();  // late (previous response slow): send at once, latency still counted from due_
    }
    timer_.expires_at(due_);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) {
        self->send_next();
      }
    });
  }

  void send_next() {
    if (o_.reconnect && sent_ > 0) {
      return reconnect_then_send();
    }
    send();
  }

  void send() {
    ++sent_;
    beast::get_lowest_layer(*stream_).expires_after(std::chrono::seconds(10));
    http::async_write(*stream_, req_, [self = shared_from_this()](error_code ec, std::size_t) {
      if (ec) {
        return self->fail("write", ec);
      }
      self->res_.emplace();
      self->res_->body_limit(1 << 20);
      http::async_read(*self->stream_, self->buffer_, *self->res_, [self](error_code e, std::size_t) {
        if (e) {
          return self->fail("read", e);
        }
        auto now = clock_type::now();
        if (self->res_->get().result_int() != 200) {
          ++self->stats_.errors;
          return self->next();
        }
        ++self->stats_.total;
        if (self->due_ >= self->sched_.measure_from) {
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
  ssl::context& ctx_;
  net::strand<net::io_context::executor_type> strand_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> stream_;
  net::steady_timer timer_;
  SSL_SESSION* session_ = nullptr;
  uint64_t sent_ = 0;
  http::request<http::string_body> req_;
  std::optional<http::response_parser<http::string_body>> res_;
  beast::flat_buffer buffer_;
  Schedule& sched_;
  clock_type::time_point due_;
  uint64_t k_ = 0;
  int index_;
};

void Schedule::connected(std::function<void()> go, const Options& o) {
  ready.push_back(std::move(go));
  if (--pending > 0) {
    return;
  }
  t0 = clock_type::now() + std::chrono::milliseconds(100);
  measure_from = t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(o.warmup));
  end = measure_from + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(o.duration));
  if (on_start) {
    on_start();
  }
  for (auto& f : ready) {
    f();
  }
  ready.clear();
}

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
    else if (k == "--reconnect")
      o.reconnect = v == "1" || v == "true";
    else if (k == "--resume")
      o.resume = v == "1" || v == "true";
    else if (k == "--close-notify")
      o.close_notify = v == "1" || v == "true";
    else if (k == "--tls")
      o.tls = v == "1.2" ? 12 : v == "1.3" ? 13 : -1;
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (o.port == 0 || o.ca.empty() || o.body_file.empty()) {
    std::fprintf(stderr,
                 "usage: webhook_load --port P --ca FILE --body FILE [--connections N] [--rate R] "
                 "[--duration S] [--warmup S] [--threads T] [--server-pid PID] [--reconnect 1] [--resume 1] "
                 "[--tls 1.2|1.3] [--close-notify 1]\n");
    return 2;
  }
  if (o.tls < 0) {
    std::fprintf(stderr, "--tls: want 1.2 or 1.3\n");
    return 2;
  }
  const std::string body = read_all(o.body_file);
  ssl::context ctx(ssl::context::tls_client);
  const std::string ca = read_all(o.ca);
  ctx.add_certificate_authority(net::buffer(ca));
  ctx.set_verify_mode(ssl::verify_peer);
  ctx.set_verify_callback(ssl::host_name_verification("127.0.0.1"));
  if (o.tls != 0) {
    const int v = o.tls == 12 ? TLS1_2_VERSION : TLS1_3_VERSION;
    SSL_CTX_set_min_proto_version(ctx.native_handle(), v);
    SSL_CTX_set_max_proto_version(ctx.native_handle(), v);
  }

  const double server_cpu0 = o.server_pid > 0 ? proc_cpu_seconds(o.server_pid) : 0;
  const double client_cpu0 = self_cpu_seconds();
  net::io_context ioc;
  Schedule schedule;
  schedule.pending = o.connections;
  std::vector<Stats> stats(static_cast<size_t>(o.connections));
  const auto open_start = clock_type::now();
  for (int i = 0; i < o.connections; ++i) {
    std::make_shared<Conn>(ioc, ctx, o, body, stats[static_cast<size_t>(i)], schedule, i)->start();
  }
  auto sum = [&](uint64_t Stats::*field) {
    uint64_t n = 0;
    for (auto& st : stats) {
      n += st.*field;
    }
    return n;
  };
  // The measured window's CPU: snapshot at measure_from (after the warm-up and its handshakes) and at the end.
  Window window;
  net::steady_timer window_timer(ioc);
  schedule.on_start = [&] {
    std::printf("opened %d connections in %.2fs\n", o.connections,
                std::chrono::duration<double>(clock_type::now() - open_start).count());
    window_timer.expires_at(schedule.measure_from);
    window_timer.async_wait([&](error_code ec) {
      if (ec) {
        return;
      }
      window.server_cpu0 = o.server_pid > 0 ? proc_cpu_seconds(o.server_pid) : 0;
      window.client_cpu0 = self_cpu_seconds();
      window.total0 = sum(&Stats::total);
      window.handshakes0 = sum(&Stats::handshakes);
      window.taken = true;
    });
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < o.threads; ++i) {
    threads.emplace_back([&] { ioc.run(); });
  }
  ioc.run();
  for (auto& t : threads) {
    t.join();
  }
  const double server_cpu_end = o.server_pid > 0 ? proc_cpu_seconds(o.server_pid) : 0;
  const double client_cpu_end = self_cpu_seconds();
  const double server_cpu = server_cpu_end - server_cpu0;
  const double client_cpu = client_cpu_end - client_cpu0;
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
    if (window.taken) {
      // The same over the measured window alone: no connection set-up, no warm-up.
      const uint64_t n = sum(&Stats::total) - window.total0;
      const double wper = n > 0 ? (server_cpu_end - window.server_cpu0) / static_cast<double>(n) * 1e6 : 0;
      const double wcper = n > 0 ? (client_cpu_end - window.client_cpu0) / static_cast<double>(n) * 1e6 : 0;
      std::printf("cpu per review (measured window): server=%.1fus client=%.1fus (%llu reviews)\n", wper, wcper,
                  static_cast<unsigned long long>(n));
      if (o.reconnect) {
        const uint64_t h = sum(&Stats::handshakes) - window.handshakes0;
        std::printf(
            "handshakes: %llu in the window (%.0f/s), %llu resumed in all of %llu; server cpu per "
            "connection (handshake + 1 review) %.1fus\n",
            static_cast<unsigned long long>(h), static_cast<double>(h) / o.duration,
            static_cast<unsigned long long>(sum(&Stats::resumed)),
            static_cast<unsigned long long>(sum(&Stats::handshakes)),
            h > 0 ? (server_cpu_end - window.server_cpu0) / static_cast<double>(h) * 1e6 : 0.0);
      }
    }
  }
  return errors == 0 ? 0 : 1;
}
