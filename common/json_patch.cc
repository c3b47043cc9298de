#include "common/json_patch.h"

#include "common/json_access.h"

#include <boost/json/serialize.hpp>

#include <charconv>
#include <vector>

namespace gpuslice {

std::string json_pointer_escape(std::string_view token) {
  std::string out;
  out.reserve(token.size() + 4);
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

bool json_pointer_unescape(std::string_view token, std::string& out) {
  out.clear();
  out.reserve(token.size());
  for (size_t i = 0; i < token.size(); ++i) {
    char c = token[i];
    if (c != '~') {
      out.push_back(c);
      continue;
    }
    if (i + 1 >= token.size()) return false;
    char n = token[++i];
    if (n == '0') {
      out.push_back('~');
    } else if (n == '1') {
      out.push_back('/');
    } else {
      return false;
    }
  }
  return true;
}

boost::json::array patch_to_json(const Patch& patch) {
  boost::json::array arr;
  arr.reserve(patch.size());
  for (const auto& op : patch) {
    boost::json::object o;
    switch (op.kind) {
      case PatchOp::Kind::add:
        o["op"] = "add";
        break;
      case PatchOp::Kind::replace:
        o["op"] = "replace";
        break;
      case PatchOp::Kind::remove:
        o["op"] = "remove";
        break;
      case PatchOp::Kind::test:
        o["op"] = "test";
        break;
    }
    o["path"] = op.path;
    if (op.kind != PatchOp::Kind::remove) o["value"] = op.value;
    arr.emplace_back(std::move(o));
  }
  return arr;
}

void append_patch(std::string& out, const Patch& patch) {
  // The bytes of boost::json::serialize(patch_to_json(patch)): members op, path, value in that order.
  out.push_back('[');
  for (std::size_t i = 0; i < patch.size(); ++i) {
    const PatchOp& op = patch[i];
    if (i > 0) out.push_back(',');
    out.append("{\"op\":\"", 7);
    switch (op.kind) {
      case PatchOp::Kind::add:
        out.append("add", 3);
        break;
      case PatchOp::Kind::replace:
        out.append("replace", 7);
        break;
      case PatchOp::Kind::remove:
        out.append("remove", 6);
        break;
      case PatchOp::Kind::test:
        out.append("test", 4);
        break;
    }
    out.append("\",\"path\":", 9);
    append_json_string(out, op.path);
    if (op.kind != PatchOp::Kind::remove) {
      out.append(",\"value\":", 9);
      append_json(out, op.value);
    }
    out.push_back('}');
  }
  out.push_back(']');
}

std::string serialize_patch(const Patch& patch) {
  std::string out;
  append_patch(out, patch);
  return out;
}

namespace {

const char* op_name(PatchOp::Kind k) {
  switch (k) {
    case PatchOp::Kind::add:
      return "add";
    case PatchOp::Kind::replace:
      return "replace";
    case PatchOp::Kind::remove:
      return "remove";
    case PatchOp::Kind::test:
      return "test";
  }
  return "?";
}

// Splits an RFC 6901 pointer into unescaped reference tokens; "" is the whole document.
Status split_pointer(std::string_view path, std::vector<std::string>& tokens) {
  tokens.clear();
  if (path.empty()) return Status::Ok();
  if (path.front() != '/') return make_error("pointer does not start with \"/\"");
  size_t start = 1;
  while (true) {
    size_t end = path.find('/', start);
    std::string_view raw = path.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    std::string token;
    if (!json_pointer_unescape(raw, token)) return make_error("invalid escape in \"" + std::string(raw) + "\"");
    tokens.push_back(std::move(token));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return Status::Ok();
}

// RFC 6901 array index: "0" or digits without a leading zero.
bool parse_index(const std::string& token, size_t& out) {
  if (token.empty() || (token.size() > 1 && token[0] == '0')) return false;
  for (char c : token) {
    if (c < '0' || c > '9') return false;
  }
  auto [p, ec] = std::from_chars(token.data(), token.data() + token.size(), out);
  return ec == std::errc() && p == token.data() + token.size();
}

Status apply_one(boost::json::value& doc, const PatchOp& op) {
  std::vector<std::string> tokens;
  if (auto st = split_pointer(op.path, tokens); !st.ok()) return st;
  if (tokens.empty()) {
    if (op.kind == PatchOp::Kind::remove) return make_error("cannot remove the whole document");
    if (op.kind == PatchOp::Kind::test) {
      return doc == op.value ? Status::Ok() : make_error("test failed: the document differs");
    }
    doc = op.value;
    return Status::Ok();
  }
  boost::json::value* parent = &doc;
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    if (auto* o = parent->if_object()) {
      auto* next = o->if_contains(t);
      if (next == nullptr) return make_error("\"" + t + "\" does not exist");
      parent = next;
    } else if (auto* a = parent->if_array()) {
      size_t idx = 0;
      if (!parse_index(t, idx) || idx >= a->size()) return make_error("\"" + t + "\" is not an index of the array");
      parent = &(*a)[idx];
    } else {
      return make_error("\"" + t + "\" is inside a value that is neither an object nor an array");
    }
  }
  const std::string& last = tokens.back();
  if (auto* o = parent->if_object()) {
    auto it = o->find(last);
    switch (op.kind) {
      case PatchOp::Kind::add:
        (*o)[last] = op.value;
        return Status::Ok();
      case PatchOp::Kind::replace:
        if (it == o->end()) return make_error("\"" + last + "\" does not exist");
        it->value() = op.value;
        return Status::Ok();
      case PatchOp::Kind::remove:
        if (it == o->end()) return make_error("\"" + last + "\" does not exist");
        o->erase(it);
        return Status::Ok();
      case PatchOp::Kind::test:
        if (it == o->end()) {
          // evanphx/json-patch v4: an absent member tests equal to null.
          return op.value.is_null() ? Status::Ok() : make_error("test failed: \"" + last + "\" does not exist");
        }
        return it->value() == op.value ? Status::Ok() : make_error("test failed: \"" + last + "\" differs");
    }
  }
  if (auto* a = parent->if_array()) {
    if (op.kind == PatchOp::Kind::add && last == "-") {
      a->push_back(op.value);
      return Status::Ok();
    }
    size_t idx = 0;
    if (!parse_index(last, idx)) return make_error("\"" + last + "\" is not an array index");
    switch (op.kind) {
      case PatchOp::Kind::add:
        if (idx > a->size()) return make_error("index " + last + " is past the end of the array");
        a->insert(a->begin() + static_cast<std::ptrdiff_t>(idx), op.value);
        return Status::Ok();
      case PatchOp::Kind::replace:
        if (idx >= a->size()) return make_error("index " + last + " is past the end of the array");
        (*a)[idx] = op.value;
        return Status::Ok();
      case PatchOp::Kind::remove:
        if (idx >= a->size()) return make_error("index " + last + " is past the end of the array");
        a->erase(a->begin() + static_cast<std::ptrdiff_t>(idx));
        return Status::Ok();
      case PatchOp::Kind::test:
        if (idx >= a->size()) return make_error("index " + last + " is past the end of the array");
        return (*a)[idx] == op.value ? Status::Ok() : make_error("test failed: index " + last + " differs");
    }
  }
  return make_error("the parent of \"" + last + "\" is neither an object nor an array");
}

}  // namespace

Result<boost::json::value> apply_patch(const boost::json::value& doc, const Patch& patch) {
  boost::json::value out = doc;
  for (size_t i = 0; i < patch.size(); ++i) {
    if (auto st = apply_one(out, patch[i]); !st.ok()) {
      return make_error("patch op " + std::to_string(i) + " (" + op_name(patch[i].kind) + " " + patch[i].path +
                        "): " + st.message());
    }
  }
  return out;
}

}  // namespace gpuslice
