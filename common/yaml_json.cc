#include "common/yaml_json.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/string.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <utility>

namespace gpuslice {
namespace json = boost::json;

namespace {

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

std::string at_mark(const YAML::Mark& m) {
  return "line " + std::to_string(m.line + 1) + ", column " + std::to_string(m.column + 1);
}

// Thrown from inside the event handler to stop yaml-cpp's parser at the first error; caught at the boundary below,
// where it becomes a Result (as the parser's own YAML::Exception does).
struct Stop {
  std::string message;
};

// Builds one JSON value per document from the events. Open collections are on `stack_`; a finished node goes
// into its parent (or becomes the document). Each finished node carries its size (nodes, scalar bytes) and its
// height, so an alias knows what copying its anchor costs and how deep it reaches.
class Builder final : public YAML::EventHandler {
 public:
  explicit Builder(const YamlReadOptions& options) : options_(options) {}

  std::vector<json::value> documents;

  void OnDocumentStart(const YAML::Mark& mark) override {
    // yaml-cpp 0.7 answers a token no node starts with (a stray `,` at the top level, as in `[],` or `"a",`) with a
    // null document without consuming the token, so the next document starts at the same place, forever, each one
    // pushed here (jbeder/yaml-cpp#1040; fixed upstream after 0.8 by #1318/#1319). A document that starts where
    // the previous one did made no progress: stop with a syntax error at that place.
    if (last_start_ && *last_start_ == mark.pos) {
      throw YAML::ParserException(mark, "unexpected token where a node was expected");
    }
    last_start_ = mark.pos;
    stack_.clear();
    anchors_.clear();
    names_.clear();
    root_.reset();
  }
  void OnDocumentEnd() override {
    documents.push_back(root_ ? std::move(*root_) : json::value(nullptr));
    root_.reset();
    anchors_.clear();
    names_.clear();
  }

  void OnAnchor(const YAML::Mark&, const std::string& name) override { pending_name_ = name; }

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    start(mark, anchor, 0);
    finish(Done{json::value(nullptr), std::nullopt, 1, 0, 0, anchor, mark});
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    start(mark, anchor, 0);
    json::value v;
    if (options_.scalars == YamlScalars::kText) {
      v = json::string(value);
    } else if (tag == "?" || tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
               tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null") {
      v = yaml_resolve_plain(value);
    } else {
      v = json::string(value);  // quoted ("!"), !!str or any other tag: a string
    }
    // The text is kept only where it can be needed: as a mapping key, or for an alias to use as one.
    std::optional<std::string> key;
    if (anchor != YAML::NullAnchor || expecting_key()) {
      key = value;
    }
    finish(Done{std::move(v), std::move(key), 1, value.size(), 0, anchor, mark});
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) {
      // Registered but not finished: the alias is inside its own anchor's node.
      std::string name = names_.count(anchor) != 0 ? names_[anchor] : std::string("?");
      throw Stop{at_mark(mark) + ": alias *" + name + " is inside the node anchored &" + name + " (an alias cycle)"};
    }
    const Anchored& a = it->second;
    start(mark, YAML::NullAnchor, a.height);
    charge(mark, a.nodes, a.bytes, "alias *" + names_[anchor]);
    finish(Done{a.value, a.key, a.nodes, a.bytes, a.height, YAML::NullAnchor, mark});
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    start(mark, anchor, 0);
    stack_.push_back(Frame{json::value(json::array()), {}, false, anchor, mark, 1, 0, 0});
  }
  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    start(mark, anchor, 0);
    stack_.push_back(Frame{json::value(json::object()), {}, false, anchor, mark, 1, 0, 0});
  }
  void OnMapEnd() override { close(); }

 private:
  struct Frame {
    json::value value;     // an array or an object
    std::string key;       // maps: the key waiting for its value
    bool has_key = false;  // maps: `key` is set
    YAML::anchor_t anchor;
    YAML::Mark mark;
    size_t nodes;  // this node and everything under it (keys included)
    size_t bytes;  // scalar bytes under it (keys included)
    int height;    // levels of values under it (0: none)
  };
  struct Done {
    json::value value;
    std::optional<std::string> key;  // a scalar's text (what it is as a mapping key)
    size_t nodes;
    size_t bytes;
    int height;
    YAML::anchor_t anchor;
    YAML::Mark mark;
  };
  struct Anchored {
    json::value value;
    std::optional<std::string> key;
    size_t nodes;
    size_t bytes;
    int height;
  };

  bool expecting_key() const { return !stack_.empty() && stack_.back().value.is_object() && !stack_.back().has_key; }

  // A node begins at the current depth: the names of anchors, and the depth check (keys are not values: their
  // depth is not counted, as they must be scalars anyway).
  void start(const YAML::Mark& mark, YAML::anchor_t anchor, int height) {
    if (anchor != YAML::NullAnchor) {
      names_[anchor] = pending_name_;
    }
    if (expecting_key()) {
      return;
    }
    size_t depth = stack_.size() + static_cast<size_t>(height);
    if (depth > static_cast<size_t>(options_.max_depth)) {
      throw Stop{"line " + std::to_string(mark.line + 1) + ": nesting deeper than " +
                 std::to_string(options_.max_depth) + " levels (depth " + std::to_string(depth) + ")"};
    }
  }

  void charge(const YAML::Mark& mark, size_t nodes, size_t bytes, const std::string& what) {
    alias_nodes_ += nodes;
    alias_bytes_ += bytes;
    if (alias_nodes_ > options_.max_alias_nodes) {
      throw Stop{at_mark(mark) + ": aliases expand to more than " + std::to_string(options_.max_alias_nodes) +
                 " nodes (at " + what + ")"};
    }
    if (alias_bytes_ > options_.max_alias_bytes) {
      throw Stop{at_mark(mark) + ": aliases expand to more than " + std::to_string(options_.max_alias_bytes) +
                 " bytes of scalars (at " + what + ")"};
    }
  }

  void close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    finish(Done{std::move(f.value), std::nullopt, f.nodes, f.bytes, f.height, f.anchor, f.mark});
  }

  void finish(Done d) {
    if (d.anchor != YAML::NullAnchor) {
      // The copy an alias will take: it costs as much as an expansion (nested anchors would otherwise copy the
      // same subtree once per level).
      charge(d.mark, d.nodes, d.bytes, "the copy of &" + names_[d.anchor]);
      anchors_[d.anchor] = Anchored{d.value, d.key, d.nodes, d.bytes, d.height};
    }
    if (stack_.empty()) {
      root_ = std::move(d.value);
      return;
    }
    Frame& parent = stack_.back();
    parent.nodes += d.nodes;
    parent.bytes += d.bytes;
    if (parent.value.is_array()) {
      parent.height = std::max(parent.height, d.height + 1);
      parent.value.get_array().push_back(std::move(d.value));
      return;
    }
    if (!parent.has_key) {
      if (!d.key) {
        throw Stop{"line " + std::to_string(d.mark.line + 1) + ": mapping keys must be scalars"};
      }
      parent.key = std::move(*d.key);
      parent.has_key = true;
      return;
    }
    parent.height = std::max(parent.height, d.height + 1);
    parent.value.get_object().insert_or_assign(parent.key, std::move(d.value));
    parent.has_key = false;
  }

  const YamlReadOptions& options_;
  std::vector<Frame> stack_;
  std::optional<json::value> root_;
  std::unordered_map<YAML::anchor_t, Anchored> anchors_;
  std::unordered_map<YAML::anchor_t, std::string> names_;
  std::string pending_name_;
  size_t alias_nodes_ = 0;  // over the whole input: documents do not reset the budget
  size_t alias_bytes_ = 0;
  std::optional<int> last_start_;  // where the previous document started (YAML::Mark::pos)
};

// The anchor an undefined alias names, read from the text at the alias's mark (`*name`): yaml-cpp's message does
// not always carry it.
std::string alias_name_at(std::string_view text, const YAML::Mark& mark) {
  if (mark.pos < 0 || static_cast<size_t>(mark.pos) >= text.size() || text[static_cast<size_t>(mark.pos)] != '*') {
    return "";
  }
  size_t b = static_cast<size_t>(mark.pos) + 1;
  size_t e = b;
  while (e < text.size() && e - b < 256 && std::string_view(" \t\r\n,[]{}").find(text[e]) == std::string_view::npos) {
    ++e;
  }
  return std::string(text.substr(b, e - b));
}

}  // namespace

json::value yaml_resolve_plain(const std::string& s) {
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

Result<std::vector<json::value>> yaml_to_json_documents(std::string_view text, const YamlReadOptions& options) {
  std::istringstream in{std::string(text)};
  Builder builder(options);
  try {
    YAML::Parser parser(in);
    while (parser.HandleNextDocument(builder)) {
      if (options.first_document_only) {
        break;
      }
    }
  } catch (const Stop& s) {
    return make_error("document " + std::to_string(builder.documents.size()) + ": " + s.message);
  } catch (const YAML::Exception& e) {
    // yaml-cpp reports parse errors by exception; this is the boundary where they become a Result.
    std::string msg = e.msg;
    if (msg.rfind(YAML::ErrorMsg::UNKNOWN_ANCHOR, 0) == 0) {
      std::string name = alias_name_at(text, e.mark);
      return make_error("document " + std::to_string(builder.documents.size()) + ": " + at_mark(e.mark) + ": alias *" +
                        name + " has no anchor &" + name + " before it in its document");
    }
    return make_error("invalid YAML at " + at_mark(e.mark) + ": " + msg);
  }
  return std::move(builder.documents);
}

Result<json::value> yaml_to_json_first(std::string_view text, YamlReadOptions options) {
  options.first_document_only = true;
  auto docs = yaml_to_json_documents(text, options);
  if (!docs.ok()) {
    return docs.error();
  }
  if (docs->empty()) {
    return json::value(nullptr);
  }
  return std::move(docs->front());
}

}  // namespace gpuslice
