#include "simulate/manifest.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <string_view>

namespace gpuslice::simulate {
namespace json = boost::json;

namespace {

constexpr int kMaxDepth = 128;  // manifests are shallow; this bounds recursion on hostile input

bool is_null_word(const std::string& s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

// The YAML 1.2 core schema's patterns, by hand: std::regex recurses per character and overflows the stack on long
// scalars.
bool digits(std::string_view s, size_t& i, bool (*ok)(char)) {
  size_t start = i;
  while (i < s.size() && ok(s[i])) {
    ++i;
  }
  return i > start;
}
bool dec(char c) {
  return c >= '0' && c <= '9';
}
bool oct(char c) {
  return c >= '0' && c <= '7';
}
bool hex(char c) {
  return dec(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// [-+]?[0-9]+
bool is_int(std::string_view s) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  return digits(s, i, dec) && i == s.size();
}
// 0o[0-7]+ | 0x[0-9a-fA-F]+
bool is_radix(std::string_view s, char kind) {
  if (s.size() < 3 || s[0] != '0' || s[1] != kind) {
    return false;
  }
  size_t i = 2;
  return digits(s, i, kind == 'o' ? oct : hex) && i == s.size();
}
// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool is_float(std::string_view s) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits(s, i, dec)) {
      return false;
    }
  } else {
    if (!digits(s, i, dec)) {
      return false;
    }
    if (i < s.size() && s[i] == '.') {
      ++i;
      digits(s, i, dec);
    }
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) {
      ++i;
    }
    if (!digits(s, i, dec)) {
      return false;
    }
  }
  return i == s.size();
}

// YAML 1.2 core schema resolution of a plain (unquoted, untagged) scalar.
json::value resolve_plain(const std::string& s) {
  if (is_null_word(s)) {
    return nullptr;
  }
  if (s == "true" || s == "True" || s == "TRUE") {
    return true;
  }
  if (s == "false" || s == "False" || s == "FALSE") {
    return false;
  }
  if (is_int(s)) {
    const char* b = s.data() + (s[0] == '+' ? 1 : 0);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(b, s.data() + s.size(), v);
    if (ec == std::errc() && p == s.data() + s.size()) {
      return v;
    }
    uint64_t u = 0;
    auto [p2, ec2] = std::from_chars(b, s.data() + s.size(), u);
    if (ec2 == std::errc() && p2 == s.data() + s.size()) {
      return u;
    }
    return json::string(s);  // too large for any integer type: keep the text rather than lose digits
  }
  if (is_radix(s, 'o') || is_radix(s, 'x')) {
    uint64_t u = 0;
    int base = s[1] == 'o' ? 8 : 16;
    auto [p, ec] = std::from_chars(s.data() + 2, s.data() + s.size(), u, base);
    if (ec == std::errc() && p == s.data() + s.size() && u <= uint64_t(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(u);
    }
    return json::string(s);
  }
  if (is_float(s)) {
    double d = std::strtod(s.c_str(), nullptr);
    if (std::isfinite(d)) {
      return d;
    }
    return json::string(s);
  }
  // .inf/.nan have no JSON form; keep them as text.
  return json::string(s);
}

Result<json::value> convert(const YAML::Node& n, int depth) {
  if (depth > kMaxDepth) {
    return make_error("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  switch (n.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return json::value(nullptr);
    case YAML::NodeType::Scalar: {
      const std::string& tag = n.Tag();
      const std::string& s = n.Scalar();
      if (tag == "?") {
        return resolve_plain(s);
      }
      if (tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" || tag == "tag:yaml.org,2002:bool" ||
          tag == "tag:yaml.org,2002:null") {
        return resolve_plain(s);
      }
      return json::value(s);  // quoted ("!") or !!str or any other tag: a string
    }
    case YAML::NodeType::Sequence: {
      json::array a;
      a.reserve(n.size());
      for (const YAML::Node& e : n) {
        auto v = convert(e, depth + 1);
        if (!v.ok()) {
          return v;
        }
        a.push_back(std::move(v.value()));
      }
      return json::value(std::move(a));
    }
    case YAML::NodeType::Map: {
      json::object o;
      for (const auto& kv : n) {
        if (!kv.first.IsScalar()) {
          return make_error("line " + std::to_string(kv.first.Mark().line + 1) + ": mapping keys must be scalars");
        }
        auto v = convert(kv.second, depth + 1);
        if (!v.ok()) {
          return v;
        }
        o[kv.first.Scalar()] = std::move(v.value());
      }
      return json::value(std::move(o));
    }
  }
  return json::value(nullptr);
}

}  // namespace

Result<json::value> yaml_to_json(std::string_view yaml_text) {
  try {
    YAML::Node n = YAML::Load(std::string(yaml_text));
    return convert(n, 0);
  } catch (const YAML::Exception& e) {
    // yaml-cpp reports parse errors by exception; this is the boundary where they become a Result.
    return make_error(std::string("invalid YAML at line ") + std::to_string(e.mark.line + 1) + ", column " +
                      std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
}

Result<std::vector<Manifest>> parse_manifests(std::string_view text, std::string_view source) {
  std::string src(source);
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(std::string(text));
  } catch (const YAML::Exception& e) {
    return make_error(src + ": invalid YAML at line " + std::to_string(e.mark.line + 1) + ", column " +
                      std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  std::vector<Manifest> out;
  for (size_t i = 0; i < docs.size(); ++i) {
    std::string at = src + ": document " + std::to_string(i);
    if (docs[i].IsNull()) {
      continue;
    }
    Result<json::value> v = make_error("");
    try {
      v = convert(docs[i], 0);
    } catch (const YAML::Exception& e) {
      return make_error(at + ": " + e.msg);
    }
    if (!v.ok()) {
      return make_error(at + ": " + v.message());
    }
    if (!v->is_object()) {
      return make_error(at + ": must be a mapping (a Kubernetes object)");
    }
    json::object& o = v->get_object();
    const json::value* kind = o.if_contains("kind");
    if (kind == nullptr) {
      return make_error(at + ": kind: missing");
    }
    if (!kind->is_string() || kind->get_string().empty()) {
      return make_error(at + ": kind: must be a non-empty string");
    }
    std::string_view k = kind->get_string();
    if (k.size() >= 4 && k.substr(k.size() - 4) == "List" && o.contains("items")) {
      const json::value& items = o.at("items");
      if (!items.is_array()) {
        return make_error(at + ": items: must be a list");
      }
      size_t j = 0;
      for (const json::value& item : items.get_array()) {
        std::string iat = at + ": items[" + std::to_string(j++) + "]";
        if (!item.is_object()) {
          return make_error(iat + ": must be a mapping");
        }
        const json::value* ik = item.get_object().if_contains("kind");
        if (ik == nullptr || !ik->is_string() || ik->get_string().empty()) {
          return make_error(iat + ".kind: missing");
        }
        out.push_back(Manifest{i, item.get_object()});
      }
      continue;
    }
    out.push_back(Manifest{i, std::move(o)});
  }
  return out;
}

}  // namespace gpuslice::simulate
