#pragma once
// Small pure accessors for Kubernetes JSON objects and the text in them, shared by every component: the member of
// an object as an object/array/string (absent or of another type reads as nullptr / ""), a string at a JSON
// pointer, an object's annotations, and the two text helpers their values need (trim, iequals). It lives in
// common/ because kube, webhook, scheduler, doctor and simulate all read the same objects this way; none of it
// does I/O or allocates beyond the strings it returns.

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace gpuslice {

/// The member `key` of `o` as an object / array, or nullptr when absent or of another type.
const boost::json::object* object_at(const boost::json::object& o, std::string_view key);
const boost::json::array* array_at(const boost::json::object& o, std::string_view key);
/// The member `key` of `o` as a string (a view into `o`), or "" when absent or not a string.
std::string_view string_view_at(const boost::json::object& o, std::string_view key);
/// The same, copied.
std::string string_at(const boost::json::object& o, std::string_view key);

/// The string at a JSON pointer (RFC 6901, "/metadata/annotations/hami.io~1node-lock"), or "" when the pointer is
/// malformed, a step is absent or not an object, or the value is not a string.
std::string string_at_pointer(const boost::json::object& o, std::string_view pointer);

/// metadata.annotations of a Kubernetes object, or nullptr when absent or not an object.
const boost::json::object* annotations_of(const boost::json::object& object);
/// The annotation `key` of a Kubernetes object (metadata.annotations[key]), or nullopt when absent or not a string.
std::optional<std::string> annotation(const boost::json::object& object, std::string_view key);

/// Appends `s` as a JSON string, escaped byte for byte as boost::json::serialize does (\" \\ \b \t \n \f \r, other
/// control characters as \u00xx; everything else, UTF-8 included, as is).
void append_json_string(std::string& out, std::string_view s);
/// Appends the JSON text of `v`, the same bytes as boost::json::serialize(v), without a temporary string.
void append_json(std::string& out, const boost::json::value& v);

/// `s` without leading and trailing ASCII whitespace (space, tab, CR, LF).
std::string_view trim(std::string_view s);
/// ASCII case-insensitive equality (HTTP header names and tokens, PEM labels).
bool iequals(std::string_view a, std::string_view b);

}  // namespace gpuslice
