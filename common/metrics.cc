#include "common/metrics.h"

#include <cmath>
#include <cstdio>

namespace gpuslice::metrics {
namespace {

void atomic_add(std::atomic<double>& a, double v) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

void append_labels(std::string& out, const Labels& names, const Labels& values, const char* extra_name = nullptr,
                   const std::string* extra_value = nullptr) {
  if (names.empty() && extra_name == nullptr) return;
  out.push_back('{');
  bool first = true;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    if (!first) out.push_back(',');
    first = false;
    out += names[i];
    out += "=\"";
    out += escape_label_value(values[i]);
    out.push_back('"');
  }
  if (extra_name != nullptr) {
    if (!first) out.push_back(',');
    out += extra_name;
    out += "=\"";
    out += *extra_value;
    out.push_back('"');
  }
  out.push_back('}');
}

void append_header(std::string& out, const std::string& name, const std::string& help, const char* type) {
  out += "# HELP " + name + " " + help + "\n";
  out += "# TYPE " + name + " " + type + "\n";
}

}  // namespace

void Counter::inc(double v) {
  atomic_add(value_, v);
}
void Gauge::inc(double v) {
  atomic_add(value_, v);
}

Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), buckets_(new std::atomic<uint64_t>[bounds->size() + 1]) {
  for (size_t i = 0; i <= bounds_->size(); ++i) buckets_[i].store(0);
}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_->size() && v > (*bounds_)[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  atomic_add(sum_, v);
}

void Histogram::snapshot(std::vector<uint64_t>& cumulative, uint64_t& count, double& sum) const {
  cumulative.assign(bounds_->size() + 1, 0);
  uint64_t acc = 0;
  for (size_t i = 0; i <= bounds_->size(); ++i) {
    acc += buckets_[i].load(std::memory_order_relaxed);
    cumulative[i] = acc;
  }
  count = acc;  // consistent with the buckets even while observations race
  sum = sum_.load(std::memory_order_relaxed);
}

template <class T>
T& Family<T>::with(const Labels& values) {
  std::lock_guard lock(mutex_);
  auto it = index_.find(values);
  if (it != index_.end()) return *children_[it->second];
  children_.push_back(make());
  index_.emplace(values, children_.size() - 1);
  return *children_.back();
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

Family<Counter>& Registry::counter(const std::string& name, const std::string& help, Labels label_names) {
  std::lock_guard lock(mutex_);
  return counters_.emplace_back(name, help, std::move(label_names));
}

Family<Gauge>& Registry::gauge(const std::string& name, const std::string& help, Labels label_names) {
  std::lock_guard lock(mutex_);
  return gauges_.emplace_back(name, help, std::move(label_names));
}

HistogramFamily& Registry::histogram(const std::string& name, const std::string& help, Labels label_names,
                                     std::vector<double> bounds) {
  std::lock_guard lock(mutex_);
  return histograms_.emplace_back(name, help, std::move(label_names), std::move(bounds));
}

void Registry::add_collector(std::function<void(std::string&)> collector) {
  std::lock_guard lock(mutex_);
  collectors_.push_back(std::move(collector));
}

std::string Registry::serialize() const {
  std::lock_guard lock(mutex_);
  std::string out;
  out.reserve(4096);
  for (const auto& f : counters_) {
    append_header(out, f.name(), f.help(), "counter");
    f.for_each([&](const Labels& values, const Counter& c) {
      out += f.name();
      append_labels(out, f.label_names(), values);
      out += " " + format_value(c.value()) + "\n";
    });
  }
  for (const auto& f : gauges_) {
    append_header(out, f.name(), f.help(), "gauge");
    f.for_each([&](const Labels& values, const Gauge& g) {
      out += f.name();
      append_labels(out, f.label_names(), values);
      out += " " + format_value(g.value()) + "\n";
    });
  }
  std::vector<uint64_t> cumulative;
  for (const auto& f : histograms_) {
    append_header(out, f.name(), f.help(), "histogram");
    f.for_each([&](const Labels& values, const Histogram& h) {
      uint64_t count = 0;
      double sum = 0;
      h.snapshot(cumulative, count, sum);
      for (size_t i = 0; i <= f.bounds().size(); ++i) {
        std::string le = i < f.bounds().size() ? format_value(f.bounds()[i]) : "+Inf";
        out += f.name() + "_bucket";
        append_labels(out, f.label_names(), values, "le", &le);
        out += " " + std::to_string(cumulative[i]) + "\n";
      }
      out += f.name() + "_sum";
      append_labels(out, f.label_names(), values);
      out += " " + format_value(sum) + "\n";
      out += f.name() + "_count";
      append_labels(out, f.label_names(), values);
      out += " " + std::to_string(count) + "\n";
    });
  }
  for (const auto& c : collectors_) c(out);
  return out;
}

std::vector<double> exponential_buckets(double start, double factor, int count) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

LabelInterner::Value LabelInterner::intern(std::string_view v) {
  auto it = values_.find(v);
  if (it != values_.end()) {
    return it->second;
  }
  auto value = std::make_shared<const std::string>(v);
  values_.emplace(std::string_view(*value), value);
  return value;
}

void LabelInterner::prune() {
  std::erase_if(values_, [](const auto& kv) { return kv.second.use_count() == 1; });
}

std::string escape_label_value(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    return buf;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

Registry& default_registry() {
  static Registry r;
  return r;
}

}  // namespace gpuslice::metrics
