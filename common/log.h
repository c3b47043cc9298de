#pragma once
// Structured logging in the style of klog/component-base: a message plus key/value pairs, verbosity levels,
// text (klog header) or JSON lines (--logging-format=json). Thread-safe; one line per call.
//
//   log::info("webhook serving", {{"address", addr}, {"threads", 2}});
//   if (log::enabled(4)) log::info("review", {{"uid", uid}}, 4);

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <string_view>
#include <variant>

namespace gpuslice::log {

enum class Format { text, json };
enum class Severity { info, warning, error };

struct Field {
  using Value = std::variant<std::string_view, std::string, int64_t, double, bool>;
  std::string_view key;
  Value value;
  Field(std::string_view k, std::string_view v) : key(k), value(v) {}
  Field(std::string_view k, const char* v) : key(k), value(std::string_view(v)) {}
  Field(std::string_view k, const std::string& v) : key(k), value(std::string_view(v)) {}
  Field(std::string_view k, std::string&& v) : key(k), value(std::move(v)) {}
  Field(std::string_view k, bool v) : key(k), value(v) {}
  Field(std::string_view k, double v) : key(k), value(v) {}
  template <class I, class = std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>>>
  Field(std::string_view k, I v) : key(k), value(static_cast<int64_t>(v)) {}
};

using Fields = std::initializer_list<Field>;

/// Sets the process-wide format, verbosity (-v) and sink (stderr by default). Call at start-up.
void configure(Format format, int verbosity, std::FILE* sink = stderr);
bool parse_format(std::string_view name, Format& out);
bool enabled(int verbosity);

void write(Severity severity, int verbosity, std::string_view msg, Fields fields);

inline void info(std::string_view msg, Fields fields = {}, int verbosity = 0) {
  if (enabled(verbosity)) write(Severity::info, verbosity, msg, fields);
}
inline void warning(std::string_view msg, Fields fields = {}) {
  write(Severity::warning, 0, msg, fields);
}
inline void error(std::string_view msg, Fields fields = {}) {
  write(Severity::error, 0, msg, fields);
}

/// Formats one line without writing it (used by write(); exposed for tests). `unix_micros` is the timestamp.
std::string format_line(Format format, Severity severity, int verbosity, int64_t unix_micros, std::string_view msg,
                        Fields fields);

}  // namespace gpuslice::log
