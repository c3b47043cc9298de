#include "scheduler/inventory.h"
#include "common/json_access.h"
#include "scheduler/text.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <charconv>
#include <limits>
#include <set>

namespace gpuslice::scheduler {
namespace json = boost::json;

namespace {

using detail::split;

bool parse_int(std::string_view s, int64_t& out) {
  s = trim(s);
  if (s.empty()) {
    return false;
  }
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// Long values are cut so an error line stays readable.
std::string quoted(std::string_view v) {
  constexpr size_t kMax = 64;
  if (v.size() > kMax) {
    return "\"" + std::string(v.substr(0, kMax)) + "...\"";
  }
  return "\"" + std::string(v) + "\"";
}

// A JSON value as it appears in the annotation (strings keep their quotes), cut to a readable length.
std::string show(const json::value& v) {
  std::string s = json::serialize(v);
  constexpr size_t kMax = 66;
  return s.size() > kMax ? s.substr(0, kMax) + "..." : s;
}

struct Where {
  std::string_view node;
  std::string prefix() const {
    return "node \"" + std::string(node) + "\": " + std::string(kNodeRegisterAnnotation) + ": ";
  }
};

Status validate(const Where& w, const std::vector<DeviceInfo>& devs) {
  std::set<std::string_view> seen;
  for (size_t i = 0; i < devs.size(); ++i) {
    const DeviceInfo& d = devs[i];
    std::string at = w.prefix() + "devices[" + std::to_string(i) + "].";
    if (d.id.empty()) {
      return make_error(at + "id: \"\" must not be empty");
    }
    if (!seen.insert(d.id).second) {
      return make_error(at + "id: " + quoted(d.id) + " is listed twice");
    }
    if (d.count < 0) {
      return make_error(at + "count: " + std::to_string(d.count) + " is negative");
    }
    if (d.devmem < 0) {
      return make_error(at + "devmem: " + std::to_string(d.devmem) + " is negative");
    }
    if (d.devcore < 0) {
      return make_error(at + "devcore: " + std::to_string(d.devcore) + " is negative");
    }
  }
  return Status::Ok();
}

Result<std::vector<DeviceInfo>> decode_json(const Where& w, std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) {
    return make_error(w.prefix() + "invalid JSON (" + ec.message() + ")");
  }
  if (!v.is_array()) {
    return make_error(w.prefix() + "must be a JSON array");
  }
  std::vector<DeviceInfo> out;
  size_t i = 0;
  for (const json::value& e : v.get_array()) {
    std::string at = w.prefix() + "devices[" + std::to_string(i) + "]";
    if (!e.is_object()) {
      return make_error(at + ": " + show(e) + " is not an object");
    }
    const json::object& o = e.get_object();
    DeviceInfo d;
    auto int_field = [&](std::string_view key, int64_t lo, int64_t hi, int64_t& dst) -> Status {
      const json::value* f = o.if_contains(key);
      if (f == nullptr || f->is_null()) {
        return Status::Ok();
      }
      int64_t x = 0;
      if (f->is_int64()) {
        x = f->get_int64();
      } else if (f->is_uint64() && f->get_uint64() <= uint64_t(hi)) {
        x = static_cast<int64_t>(f->get_uint64());
      } else {
        return make_error(at + "." + std::string(key) + ": " + show(*f) + " is not an integer");
      }
      if (x < lo || x > hi) {
        return make_error(at + "." + std::string(key) + ": " + std::to_string(x) + " is out of range");
      }
      dst = x;
      return Status::Ok();
    };
    auto str_field = [&](std::string_view key, std::string& dst) -> Status {
      const json::value* f = o.if_contains(key);
      if (f == nullptr || f->is_null()) {
        return Status::Ok();
      }
      if (!f->is_string()) {
        return make_error(at + "." + std::string(key) + ": " + show(*f) + " is not a string");
      }
      dst = std::string(f->get_string());
      return Status::Ok();
    };
    int64_t index = 0;
    int64_t numa = 0;
    constexpr int64_t kI32 = std::numeric_limits<int32_t>::max();
    constexpr int64_t kBig = int64_t(1) << 40;  // MiB or slots beyond this are nonsense, and safe to sum
    for (Status st : {str_field("id", d.id), int_field("index", 0, kI32, index), int_field("count", 0, kBig, d.count),
                      int_field("devmem", 0, kBig, d.devmem), int_field("devcore", 0, kBig, d.devcore),
                      str_field("type", d.type), int_field("numa", -1, kI32, numa), str_field("mode", d.mode)}) {
      if (!st.ok()) {
        return st.error();
      }
    }
    if (const json::value* h = o.if_contains("health"); h != nullptr && !h->is_null()) {
      if (!h->is_bool()) {
        return make_error(at + ".health: " + show(*h) + " is not a boolean");
      }
      d.health = h->get_bool();
    }
    d.index = static_cast<int32_t>(index);
    d.numa = static_cast<int32_t>(numa);
    out.push_back(std::move(d));
    ++i;
  }
  return out;
}

Result<std::vector<DeviceInfo>> decode_legacy(const Where& w, std::string_view text) {
  std::vector<DeviceInfo> out;
  size_t i = 0;
  for (std::string_view seg : split(text, ':')) {
    // HAMi skips segments without a comma (the trailing empty one, stray separators).
    if (seg.find(',') == std::string_view::npos) {
      continue;
    }
    std::string at = w.prefix() + "devices[" + std::to_string(i) + "]";
    auto f = split(seg, ',');
    if (f.size() != 7 && f.size() != 9) {
      return make_error(at + ": " + quoted(seg) + " has " + std::to_string(f.size()) + " fields, want 7 or 9");
    }
    DeviceInfo d;
    d.id = std::string(trim(f[0]));
    static constexpr const char* kNames[] = {"id",   "count",  "devmem", "devcore", "type",
                                             "numa", "health", "index",  "mode"};
    auto num = [&](size_t k, int64_t lo, int64_t hi, int64_t& dst) -> Status {
      int64_t x = 0;
      if (!parse_int(f[k], x)) {
        return make_error(at + "." + kNames[k] + ": " + quoted(f[k]) + " is not an integer");
      }
      if (x < lo || x > hi) {
        return make_error(at + "." + kNames[k] + ": " + quoted(f[k]) + " is out of range");
      }
      dst = x;
      return Status::Ok();
    };
    constexpr int64_t kI32 = std::numeric_limits<int32_t>::max();
    constexpr int64_t kBig = int64_t(1) << 40;
    int64_t numa = 0;
    int64_t index = 0;
    for (Status st :
         {num(1, 0, kBig, d.count), num(2, 0, kBig, d.devmem), num(3, 0, kBig, d.devcore), num(5, -1, kI32, numa)}) {
      if (!st.ok()) {
        return st.error();
      }
    }
    d.type = std::string(trim(f[4]));
    std::string_view h = trim(f[6]);
    if (h == "true" || h == "True" || h == "TRUE" || h == "1" || h == "t" || h == "T") {
      d.health = true;
    } else if (h == "false" || h == "False" || h == "FALSE" || h == "0" || h == "f" || h == "F") {
      d.health = false;
    } else {
      return make_error(at + ".health: " + quoted(f[6]) + " is not a boolean");
    }
    if (f.size() == 9) {
      if (Status st = num(7, 0, kI32, index); !st.ok()) {
        return st.error();
      }
      d.mode = std::string(trim(f[8]));
    }
    d.numa = static_cast<int32_t>(numa);
    d.index = static_cast<int32_t>(index);
    out.push_back(std::move(d));
    ++i;
  }
  return out;
}

}  // namespace

Result<std::vector<DeviceInfo>> decode_node_devices(std::string_view node_name, std::string_view text) {
  Where w{node_name};
  std::string_view t = trim(text);
  // JSON since HAMi v2.8; an object is a malformed JSON registration, not a legacy string.
  bool is_json = !t.empty() && (t.front() == '[' || t.front() == '{');
  auto r = is_json ? decode_json(w, t) : decode_legacy(w, t);
  if (!r.ok()) {
    return r;
  }
  if (Status st = validate(w, r.value()); !st.ok()) {
    return st.error();
  }
  return r;
}

std::string encode_node_devices_json(const std::vector<DeviceInfo>& devices) {
  json::array arr;
  for (const DeviceInfo& d : devices) {
    json::object o;
    // Same key order and omitempty rules as HAMi's DeviceInfo struct tags.
    if (!d.id.empty()) o["id"] = d.id;
    if (d.index != 0) o["index"] = d.index;
    if (d.count != 0) o["count"] = d.count;
    if (d.devmem != 0) o["devmem"] = d.devmem;
    if (d.devcore != 0) o["devcore"] = d.devcore;
    if (!d.type.empty()) o["type"] = d.type;
    if (d.numa != 0) o["numa"] = d.numa;
    if (!d.mode.empty()) o["mode"] = d.mode;
    if (d.health) o["health"] = true;
    arr.emplace_back(std::move(o));
  }
  return json::serialize(arr);
}

std::string encode_node_devices_legacy(const std::vector<DeviceInfo>& devices) {
  std::string out;
  for (const DeviceInfo& d : devices) {
    out += d.id + "," + std::to_string(d.count) + "," + std::to_string(d.devmem) + "," + std::to_string(d.devcore) +
           "," + d.type + "," + std::to_string(d.numa) + "," + (d.health ? "true" : "false") + "," +
           std::to_string(d.index) + "," + d.mode + ":";
  }
  return out;
}

std::vector<std::string> decode_cordon(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view s : split(text, ',')) {
    s = trim(s);
    if (!s.empty()) {
      out.emplace_back(s);
    }
  }
  return out;
}

bool is_nvidia_type(std::string_view type) {
  static constexpr std::string_view kWord = "nvidia";
  if (type.size() < kWord.size()) {
    return false;
  }
  for (size_t i = 0; i + kWord.size() <= type.size(); ++i) {
    bool match = true;
    for (size_t k = 0; k < kWord.size(); ++k) {
      char c = type[i + k];
      if (c >= 'A' && c <= 'Z') {
        c = static_cast<char>(c - 'A' + 'a');
      }
      if (c != kWord[k]) {
        match = false;
        break;
      }
    }
    if (match) {
      return true;
    }
  }
  return false;
}

}  // namespace gpuslice::scheduler
