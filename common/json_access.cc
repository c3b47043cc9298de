#include "common/json_access.h"

#include <boost/json/serialize.hpp>

#include <array>
#include <charconv>

namespace gpuslice {
namespace json = boost::json;

const json::object* object_at(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr ? v->if_object() : nullptr;
}

const json::array* array_at(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr ? v->if_array() : nullptr;
}

std::string_view string_view_at(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string_view(v->get_string()) : std::string_view();
}

std::string string_at(const json::object& o, std::string_view key) {
  return std::string(string_view_at(o, key));
}

std::string string_at_pointer(const json::object& o, std::string_view pointer) {
  // Walked by hand: at_pointer needs a json::value, and wrapping the object would copy it.
  if (pointer.empty() || pointer.front() != '/') {
    return {};
  }
  const json::value* cur = nullptr;
  const json::object* obj = &o;
  std::string_view rest = pointer;
  std::string key;
  while (!rest.empty()) {
    rest.remove_prefix(1);
    const auto next = rest.find('/');
    const std::string_view token = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view{} : rest.substr(next);
    // JSON Pointer unescaping: ~1 -> '/', ~0 -> '~'.
    key.clear();
    for (std::size_t i = 0; i < token.size(); ++i) {
      if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
        key.push_back(token[i + 1] == '1' ? '/' : '~');
        ++i;
      } else {
        key.push_back(token[i]);
      }
    }
    if (obj == nullptr) {
      return {};
    }
    cur = obj->if_contains(key);
    if (cur == nullptr) {
      return {};
    }
    obj = cur->if_object();
  }
  return cur != nullptr && cur->is_string() ? std::string(cur->get_string()) : std::string();
}

const json::object* annotations_of(const json::object& object) {
  const json::object* meta = object_at(object, "metadata");
  return meta != nullptr ? object_at(*meta, "annotations") : nullptr;
}

std::optional<std::string> annotation(const json::object& object, std::string_view key) {
  const json::object* ann = annotations_of(object);
  if (ann == nullptr) {
    return std::nullopt;
  }
  const json::value* v = ann->if_contains(key);
  if (v == nullptr || !v->is_string()) {
    return std::nullopt;
  }
  return std::string(v->get_string());
}

namespace {
bool ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}
char ascii_lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}
}  // namespace

std::string_view trim(std::string_view s) {
  while (!s.empty() && ascii_space(s.front())) {
    s.remove_prefix(1);
  }
  while (!s.empty() && ascii_space(s.back())) {
    s.remove_suffix(1);
  }
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) {
      return false;
    }
  }
  return true;
}

namespace {

// boost/json/impl/serializer.ipp (Boost 1.81), write_string: its escape table ('u': \u00xx in lower-case hex).
constexpr std::array<char, 256> make_escapes() {
  std::array<char, 256> t{};
  for (int c = 0; c < 0x20; ++c) t[c] = 'u';
  t['\b'] = 'b';
  t['\t'] = 't';
  t['\n'] = 'n';
  t['\f'] = 'f';
  t['\r'] = 'r';
  t['"'] = '"';
  t['\\'] = '\\';
  return t;
}
constexpr std::array<char, 256> kEscapes = make_escapes();

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  const char* p = s.data();
  const char* const end = p + s.size();
  while (p != end) {
    const char* run = p;
    while (p != end && kEscapes[static_cast<unsigned char>(*p)] == 0) ++p;
    out.append(run, static_cast<std::size_t>(p - run));
    if (p == end) break;
    const auto c = static_cast<unsigned char>(*p++);
    const char e = kEscapes[c];
    if (e != 'u') {
      const char two[2] = {'\\', e};
      out.append(two, 2);
    } else {
      const char six[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
      out.append(six, 6);
    }
  }
  out.push_back('"');
}

void append_json(std::string& out, const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      out.append("null", 4);
      return;
    case json::kind::bool_:
      if (v.get_bool()) {
        out.append("true", 4);
      } else {
        out.append("false", 5);
      }
      return;
    case json::kind::int64:
    case json::kind::uint64: {
      char buf[24];
      auto r = v.is_int64() ? std::to_chars(buf, buf + sizeof buf, v.get_int64())
                            : std::to_chars(buf, buf + sizeof buf, v.get_uint64());
      out.append(buf, r.ptr);
      return;
    }
    case json::kind::double_:
      out += json::serialize(v);  // Boost's own shortest form ("5E-1"): not worth copying
      return;
    case json::kind::string:
      append_json_string(out, v.get_string());
      return;
    case json::kind::array: {
      out.push_back('[');
      bool first = true;
      for (const json::value& e : v.get_array()) {
        if (!first) out.push_back(',');
        first = false;
        append_json(out, e);
      }
      out.push_back(']');
      return;
    }
    case json::kind::object: {
      out.push_back('{');
      bool first = true;
      for (const json::key_value_pair& kv : v.get_object()) {
        if (!first) out.push_back(',');
        first = false;
        append_json_string(out, kv.key());
        out.push_back(':');
        append_json(out, kv.value());
      }
      out.push_back('}');
      return;
    }
  }
}

}  // namespace gpuslice
