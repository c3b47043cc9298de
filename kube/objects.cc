#include "kube/objects.h"

#include "common/rfc3339.h"

#include <fmt/format.h>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <cctype>

namespace gpuslice::kube {

namespace json = boost::json;

std::string ApiError::to_string() const {
  std::string s = code != 0 ? fmt::format("{} ", code) : std::string();
  s += reason.empty() ? "Error" : reason;
  if (!message.empty()) {
    s += ": " + message;
  }
  return s;
}

// ---- small accessors ----------------------------------------------------------------------------------------

std::string resource_version_of(const json::object& o) {
  return string_at_pointer(o, "/metadata/resourceVersion");
}
std::string name_of(const json::object& o) {
  return string_at_pointer(o, "/metadata/name");
}
std::string namespace_of(const json::object& o) {
  return string_at_pointer(o, "/metadata/namespace");
}
std::string uid_of(const json::object& o) {
  return string_at_pointer(o, "/metadata/uid");
}

// ---- metav1.Status ------------------------------------------------------------------------------------------

const char* reason_for_http_status(int s) {
  switch (s) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 406:
      return "NotAcceptable";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 413:
      return "RequestEntityTooLarge";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return s >= 500 ? "InternalError" : "Unknown";
  }
}

namespace {
std::string printable_prefix(std::string_view body, std::size_t max) {
  std::string out;
  for (char c : body.substr(0, max)) {
    out.push_back(std::isprint(static_cast<unsigned char>(c)) != 0 ? c : ' ');
  }
  if (body.size() > max) {
    out += "...";
  }
  return out;
}

ApiError status_from_object(int fallback_code, const json::object& o) {
  ApiError e;
  e.code = fallback_code;
  if (const auto* c = o.if_contains("code");
      c != nullptr && c->is_int64() && c->get_int64() > 0 && c->get_int64() < 1000) {
    e.code = static_cast<int>(c->get_int64());
  }
  if (const auto* r = o.if_contains("reason"); r != nullptr && r->is_string()) {
    e.reason = std::string(r->get_string());
  }
  if (const auto* m = o.if_contains("message"); m != nullptr && m->is_string()) {
    e.message = std::string(m->get_string());
  }
  if (e.reason.empty()) {
    e.reason = reason_for_http_status(e.code);
  }
  return e;
}
}  // namespace

ApiError decode_status_error(int http_status, std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (!ec && v.is_object()) {
    const auto& o = v.get_object();
    const auto* kind = o.if_contains("kind");
    if (kind != nullptr && kind->is_string() && kind->get_string() == "Status") {
      ApiError e = status_from_object(http_status, o);
      e.code = http_status;  // the HTTP status is authoritative for the response
      if (e.message.empty()) {
        e.message = printable_prefix(body, 512);
      }
      return e;
    }
  }
  ApiError e;
  e.code = http_status;
  e.reason = reason_for_http_status(http_status);
  e.message = body.empty() ? fmt::format("HTTP {}", http_status) : printable_prefix(body, 512);
  return e;
}

// ---- watch events -------------------------------------------------------------------------------------------

const char* watch_event_type_name(WatchEventType t) {
  switch (t) {
    case WatchEventType::added:
      return "ADDED";
    case WatchEventType::modified:
      return "MODIFIED";
    case WatchEventType::deleted:
      return "DELETED";
    case WatchEventType::bookmark:
      return "BOOKMARK";
    case WatchEventType::error:
      return "ERROR";
  }
  return "?";
}

Result<WatchEvent> decode_watch_event(std::string_view line) {
  boost::system::error_code ec;
  json::value v = json::parse(line, ec);
  if (ec) {
    return make_error(fmt::format("watch event: invalid JSON ({}): {}", ec.message(), printable_prefix(line, 120)));
  }
  if (!v.is_object()) {
    return make_error(fmt::format("watch event: not a JSON object: {}", printable_prefix(line, 120)));
  }
  auto& o = v.get_object();
  const auto* type = o.if_contains("type");
  if (type == nullptr || !type->is_string()) {
    return make_error("watch event: missing string field \"type\"");
  }
  WatchEvent ev;
  const std::string_view t = type->get_string();
  if (t == "ADDED") {
    ev.type = WatchEventType::added;
  } else if (t == "MODIFIED") {
    ev.type = WatchEventType::modified;
  } else if (t == "DELETED") {
    ev.type = WatchEventType::deleted;
  } else if (t == "BOOKMARK") {
    ev.type = WatchEventType::bookmark;
  } else if (t == "ERROR") {
    ev.type = WatchEventType::error;
  } else {
    return make_error(fmt::format("watch event: type \"{}\" is not ADDED, MODIFIED, DELETED, BOOKMARK or ERROR",
                                  printable_prefix(t, 64)));
  }
  auto* object = o.if_contains("object");
  if (object == nullptr || !object->is_object()) {
    return make_error(fmt::format("watch event {}: field \"object\" is missing or not an object", t));
  }
  ev.object = std::move(object->get_object());
  if (ev.type == WatchEventType::error) {
    ev.error = status_from_object(500, ev.object);
    if (ev.error.message.empty()) {
      ev.error.message = "watch ERROR event";
    }
  } else {
    ev.resource_version = resource_version_of(ev.object);
  }
  return ev;
}

// ---- lists --------------------------------------------------------------------------------------------------

Result<ListPage> decode_list(std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) {
    return make_error(fmt::format("list: invalid JSON ({})", ec.message()));
  }
  if (!v.is_object()) {
    return make_error("list: body is not a JSON object");
  }
  auto& o = v.get_object();
  ListPage page;
  if (const auto* k = o.if_contains("kind"); k != nullptr && k->is_string()) {
    page.kind = std::string(k->get_string());
  }
  page.resource_version = string_at_pointer(o, "/metadata/resourceVersion");
  page.continue_token = string_at_pointer(o, "/metadata/continue");
  auto* items = o.if_contains("items");
  if (items == nullptr || items->is_null()) {
    return page;  // an empty list may omit items
  }
  if (!items->is_array()) {
    return make_error("list: field \"items\" is not an array");
  }
  auto& arr = items->get_array();
  page.items.reserve(arr.size());
  for (std::size_t i = 0; i < arr.size(); ++i) {
    if (!arr[i].is_object()) {
      return make_error(fmt::format("list: items[{}] is not an object", i));
    }
    page.items.push_back(std::move(arr[i].get_object()));
  }
  return page;
}

// ---- binding, status, events --------------------------------------------------------------------------------

json::object make_binding(std::string_view ns, std::string_view pod, std::string_view node, std::string_view uid,
                          const BindingMetadata& metadata) {
  json::object meta{{"name", pod}, {"namespace", ns}};
  if (!uid.empty()) {
    meta["uid"] = uid;
  }
  auto as_object = [](const std::map<std::string, std::string>& m) {
    json::object o;
    for (const auto& [k, v] : m) {
      o[k] = v;
    }
    return o;
  };
  if (!metadata.annotations.empty()) {
    meta["annotations"] = as_object(metadata.annotations);
  }
  if (!metadata.labels.empty()) {
    meta["labels"] = as_object(metadata.labels);
  }
  return json::object{{"apiVersion", "v1"},
                      {"kind", "Binding"},
                      {"metadata", std::move(meta)},
                      {"target", json::object{{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
}

json::object make_pod_condition_patch(const PodCondition& c) {
  json::object cond{{"type", c.type}, {"status", c.status}};
  if (!c.reason.empty()) {
    cond["reason"] = c.reason;
  }
  if (!c.message.empty()) {
    cond["message"] = c.message;
  }
  if (c.last_transition_time) {
    cond["lastTransitionTime"] = format_time(*c.last_transition_time);
  }
  if (c.last_probe_time) {
    cond["lastProbeTime"] = format_time(*c.last_probe_time);
  }
  return json::object{{"status", json::object{{"conditions", json::array{std::move(cond)}}}}};
}

std::string truncate_utf8(std::string_view s, std::size_t max_bytes) {
  if (s.size() <= max_bytes) {
    return std::string(s);
  }
  std::size_t end = max_bytes;
  // Step back over continuation bytes (10xxxxxx) so a multi-byte sequence is never cut.
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) {
    --end;
  }
  return std::string(s.substr(0, end));
}

json::object make_event(const EventRecord& e) {
  using namespace std::chrono;
  std::string ns =
      e.namespace_.empty() ? (e.regarding.namespace_.empty() ? "default" : e.regarding.namespace_) : e.namespace_;
  std::string name = e.name;
  if (name.empty()) {
    const auto nanos = duration_cast<nanoseconds>(e.event_time.time_since_epoch()).count();
    name =
        fmt::format("{}.{:x}", e.regarding.name.empty() ? "gpuslice" : e.regarding.name, static_cast<uint64_t>(nanos));
  }
  json::object regarding{{"apiVersion", e.regarding.api_version}, {"kind", e.regarding.kind}};
  if (!e.regarding.namespace_.empty()) {
    regarding["namespace"] = e.regarding.namespace_;
  }
  regarding["name"] = e.regarding.name;
  if (!e.regarding.uid.empty()) {
    regarding["uid"] = e.regarding.uid;
  }
  if (!e.regarding.resource_version.empty()) {
    regarding["resourceVersion"] = e.regarding.resource_version;
  }
  if (!e.regarding.field_path.empty()) {
    regarding["fieldPath"] = e.regarding.field_path;
  }
  return json::object{{"apiVersion", "events.k8s.io/v1"},
                      {"kind", "Event"},
                      {"metadata", json::object{{"name", name}, {"namespace", ns}}},
                      {"eventTime", format_micro_time(e.event_time)},
                      {"reportingController", e.reporting_controller},
                      {"reportingInstance", e.reporting_instance},
                      {"action", truncate_utf8(e.action, 128)},
                      {"reason", truncate_utf8(e.reason, 128)},
                      {"type", e.type},
                      {"note", truncate_utf8(e.note, 1024)},
                      {"regarding", std::move(regarding)}};
}

// ---- Lease --------------------------------------------------------------------------------------------------

json::object encode_lease(const Lease& l) {
  json::object meta{{"name", l.name}, {"namespace", l.namespace_}};
  if (!l.resource_version.empty()) {
    meta["resourceVersion"] = l.resource_version;
  }
  if (!l.uid.empty()) {
    meta["uid"] = l.uid;
  }
  json::object spec;
  // holderIdentity is written even when empty: a release must clear it (PUT replaces the object).
  spec["holderIdentity"] = l.spec.holder_identity;
  spec["leaseDurationSeconds"] = l.spec.lease_duration_seconds;
  if (l.spec.acquire_time) {
    spec["acquireTime"] = format_micro_time(*l.spec.acquire_time);
  }
  if (l.spec.renew_time) {
    spec["renewTime"] = format_micro_time(*l.spec.renew_time);
  }
  spec["leaseTransitions"] = l.spec.lease_transitions;
  return json::object{{"apiVersion", "coordination.k8s.io/v1"},
                      {"kind", "Lease"},
                      {"metadata", std::move(meta)},
                      {"spec", std::move(spec)}};
}

Result<Lease> decode_lease(const json::object& o) {
  Lease l;
  l.name = name_of(o);
  l.namespace_ = namespace_of(o);
  l.resource_version = resource_version_of(o);
  l.uid = uid_of(o);
  if (l.name.empty()) {
    return make_error("lease: metadata.name is missing");
  }
  const auto* spec_v = o.if_contains("spec");
  if (spec_v == nullptr || spec_v->is_null()) {
    return l;
  }
  if (!spec_v->is_object()) {
    return make_error(fmt::format("lease {}: spec is not an object", l.name));
  }
  const auto& spec = spec_v->get_object();
  l.spec.holder_identity = string_at(spec, "holderIdentity");
  auto int_field = [&](const char* key, int32_t& out) -> Status {
    const auto* v = spec.if_contains(key);
    if (v == nullptr || v->is_null()) {
      return Status::Ok();
    }
    if (!v->is_int64() || v->get_int64() < 0 || v->get_int64() > INT32_MAX) {
      return make_error(
          fmt::format("lease {}: spec.{} = {} is not a non-negative int32", l.name, key, json::serialize(*v)));
    }
    out = static_cast<int32_t>(v->get_int64());
    return Status::Ok();
  };
  auto time_field = [&](const char* key, std::optional<std::chrono::system_clock::time_point>& out) -> Status {
    const auto* v = spec.if_contains(key);
    if (v == nullptr || v->is_null()) {
      return Status::Ok();
    }
    if (!v->is_string()) {
      return make_error(fmt::format("lease {}: spec.{} is not a string", l.name, key));
    }
    auto t = parse_rfc3339(v->get_string());
    if (!t) {
      return make_error(fmt::format("lease {}: spec.{}: {}", l.name, key, t.message()));
    }
    out = *t;
    return Status::Ok();
  };
  for (Status s : {int_field("leaseDurationSeconds", l.spec.lease_duration_seconds),
                   int_field("leaseTransitions", l.spec.lease_transitions),
                   time_field("acquireTime", l.spec.acquire_time), time_field("renewTime", l.spec.renew_time)}) {
    if (!s) {
      return s.error();
    }
  }
  return l;
}

}  // namespace gpuslice::kube
