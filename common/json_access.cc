#include "common/json_access.h"

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

}  // namespace gpuslice
