#pragma once
// A small Prometheus registry (text exposition format 0.0.4): counters, gauges and histograms with bounded
// label sets, plus collectors that render values computed at scrape time. Thread-safe; the hot path (inc,
// observe) is lock-free once a child has been looked up.

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace gpuslice::metrics {

using Labels = std::vector<std::string>;

class Counter {
 public:
  void inc(double v = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void inc(double v = 1.0);
  void dec(double v = 1.0) { inc(-v); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(const std::vector<double>* bounds);
  void observe(double v);
  /// Cumulative counts per bound (then +Inf), count and sum, read consistently enough for scraping.
  void snapshot(std::vector<uint64_t>& cumulative, uint64_t& count, double& sum) const;

 private:
  const std::vector<double>* bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // one per bound plus +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

template <class T>
class Family {
 public:
  virtual ~Family() = default;
  Family(std::string name, std::string help, Labels label_names)
      : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {}
  /// Returns the child for these label values (created on first use; the reference stays valid).
  T& with(const Labels& values);
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const Labels& label_names() const { return label_names_; }
  template <class F>
  void for_each(F&& f) const {
    std::lock_guard lock(mutex_);
    for (const auto& [labels, index] : index_) f(labels, *children_[index]);
  }

 protected:
  virtual std::unique_ptr<T> make() {
    if constexpr (std::is_default_constructible_v<T>) {
      return std::make_unique<T>();
    } else {
      return nullptr;
    }
  }

 private:
  std::string name_;
  std::string help_;
  Labels label_names_;
  mutable std::mutex mutex_;
  std::map<Labels, size_t> index_;
  std::vector<std::unique_ptr<T>> children_;
};

class HistogramFamily : public Family<Histogram> {
 public:
  HistogramFamily(std::string name, std::string help, Labels label_names, std::vector<double> bounds)
      : Family(std::move(name), std::move(help), std::move(label_names)), bounds_(std::move(bounds)) {}
  const std::vector<double>& bounds() const { return bounds_; }

 protected:
  std::unique_ptr<Histogram> make() override { return std::make_unique<Histogram>(&bounds_); }

 private:
  std::vector<double> bounds_;
};

class Registry {
 public:
  Family<Counter>& counter(const std::string& name, const std::string& help, Labels label_names = {});
  Family<Gauge>& gauge(const std::string& name, const std::string& help, Labels label_names = {});
  HistogramFamily& histogram(const std::string& name, const std::string& help, Labels label_names,
                             std::vector<double> bounds);
  /// A collector appends complete exposition text (HELP, TYPE and samples) at scrape time.
  void add_collector(std::function<void(std::string&)> collector);
  std::string serialize() const;

 private:
  mutable std::mutex mutex_;
  std::deque<Family<Counter>> counters_;
  std::deque<Family<Gauge>> gauges_;
  std::deque<HistogramFamily> histograms_;
  std::vector<std::function<void(std::string&)>> collectors_;
};

/// Exponential bucket bounds: start, start*factor, ... (count bounds).
std::vector<double> exponential_buckets(double start, double factor, int count);

/// Escapes a label value for the text format (backslash, quote, newline).
std::string escape_label_value(const std::string& v);
/// Formats a sample value as Prometheus expects (integers without exponent, +Inf/-Inf/NaN spelled out).
std::string format_value(double v);

/// Equal label values shared by pointer: rows that repeat a value (the node name of each of a node's cards, the
/// card type of a whole fleet) hold one immutable copy instead of a string each. One owner interns (not
/// thread-safe); the values it hands out may be read and released on any thread.
class LabelInterner {
 public:
  using Value = std::shared_ptr<const std::string>;
  /// The shared copy of `v` (made on first use).
  Value intern(std::string_view v);
  /// Forgets the values nothing but the interner holds any more (a node gone, a type no card has).
  void prune();
  size_t size() const { return values_.size(); }

 private:
  std::unordered_map<std::string_view, Value> values_;  ///< each key views its own value's characters
};

/// The process-wide registry served on /metrics.
Registry& default_registry();

}  // namespace gpuslice::metrics
