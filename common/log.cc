#include "common/log.h"

#include <unistd.h>
#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>

namespace gpuslice::log {
namespace {

std::atomic<int> g_verbosity{0};
std::atomic<Format> g_format{Format::text};
std::FILE* g_sink = stderr;
std::mutex g_mutex;

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

void append_value(std::string& out, const Field::Value& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string_view> || std::is_same_v<T, std::string>) {
          append_json_string(out, x);
        } else if constexpr (std::is_same_v<T, bool>) {
          out += x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, int64_t>) {
          out += std::to_string(x);
        } else {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%.6g", x);
          out += buf;
        }
      },
      v);
}

}  // namespace

void configure(Format format, int verbosity, std::FILE* sink) {
  std::lock_guard lock(g_mutex);
  g_format = format;
  g_verbosity = verbosity;
  g_sink = sink;
}

bool parse_format(std::string_view name, Format& out) {
  if (name == "text") {
    out = Format::text;
    return true;
  }
  if (name == "json") {
    out = Format::json;
    return true;
  }
  return false;
}

bool enabled(int verbosity) {
  return verbosity <= g_verbosity.load(std::memory_order_relaxed);
}

std::string format_line(Format format, Severity severity, int verbosity, int64_t unix_micros, std::string_view msg,
                        Fields fields) {
  std::string out;
  out.reserve(128);
  if (format == Format::json) {
    char ts[48];
    std::snprintf(ts, sizeof ts, "%lld.%06lld", static_cast<long long>(unix_micros / 1000000),
                  static_cast<long long>(unix_micros % 1000000));
    out += "{\"ts\":";
    out += ts;
    out += ",\"v\":";
    out += std::to_string(verbosity);
    if (severity != Severity::info)
      out += severity == Severity::error ? ",\"level\":\"error\"" : ",\"level\":\"warning\"";
    out += ",\"msg\":";
    append_json_string(out, msg);
    for (const auto& f : fields) {
      out.push_back(',');
      append_json_string(out, f.key);
      out.push_back(':');
      append_value(out, f.value);
    }
    out += "}\n";
    return out;
  }
  // klog header: Lmmdd hh:mm:ss.uuuuuu pid] "msg" key="value" ...
  std::time_t secs = static_cast<std::time_t>(unix_micros / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char head[64];
  char sev = severity == Severity::info ? 'I' : severity == Severity::warning ? 'W' : 'E';
  std::snprintf(head, sizeof head, "%c%02d%02d %02d:%02d:%02d.%06lld %7d] ", sev, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, static_cast<long long>(unix_micros % 1000000), static_cast<int>(::getpid()));
  out += head;
  append_json_string(out, msg);
  for (const auto& f : fields) {
    out.push_back(' ');
    out += f.key;
    out.push_back('=');
    append_value(out, f.value);
  }
  out.push_back('\n');
  return out;
}

void write(Severity severity, int verbosity, std::string_view msg, Fields fields) {
  auto now = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch());
  std::string line = format_line(g_format.load(), severity, verbosity, now.count(), msg, fields);
  std::lock_guard lock(g_mutex);
  std::fwrite(line.data(), 1, line.size(), g_sink);
  std::fflush(g_sink);
}

}  // namespace gpuslice::log
