#include "kube/url.h"

#include <fmt/format.h>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <cctype>

namespace gpuslice::kube {

namespace resources {
Resource pods() {
  return {"", "v1", "pods", true};
}
Resource nodes() {
  return {"", "v1", "nodes", false};
}
Resource namespaces() {
  return {"", "v1", "namespaces", false};
}
Resource config_maps() {
  return {"", "v1", "configmaps", true};
}
Resource events() {
  return {"events.k8s.io", "v1", "events", true};
}
Resource leases() {
  return {"coordination.k8s.io", "v1", "leases", true};
}
}  // namespace resources

namespace {
bool unreserved(unsigned char c) {
  return std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_' || c == '~';
}

std::string escape(std::string_view s, bool allow_extra) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    // Sub-delims that are harmless in a path segment (',', '=', ':', '@') keep selectors readable in logs.
    if (unreserved(c) || (allow_extra && (c == ':' || c == '@'))) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

std::string prefix(const Resource& r) {
  if (r.group.empty()) {
    return "/api/" + r.version;
  }
  return "/apis/" + r.group + "/" + r.version;
}
}  // namespace

std::string query_escape(std::string_view s) {
  return escape(s, false);
}
std::string path_escape(std::string_view s) {
  return escape(s, true);
}

std::string collection_path(const Resource& r, std::string_view ns) {
  std::string p = prefix(r);
  if (r.namespaced && !ns.empty()) {
    p += "/namespaces/";
    p += path_escape(ns);
  }
  p += "/";
  p += r.plural;
  return p;
}

std::string object_path(const Resource& r, std::string_view ns, std::string_view name, std::string_view subresource) {
  std::string p = collection_path(r, ns);
  p += "/";
  p += path_escape(name);
  if (!subresource.empty()) {
    p += "/";
    p += path_escape(subresource);
  }
  return p;
}

std::string build_query(const QueryParams& params) {
  std::string q;
  for (const auto& [k, v] : params) {
    q += q.empty() ? "?" : "&";
    q += query_escape(k);
    q += "=";
    q += query_escape(v);
  }
  return q;
}

QueryParams list_query(const ListOptions& o) {
  QueryParams q;
  if (!o.label_selector.empty()) {
    q.emplace_back("labelSelector", o.label_selector);
  }
  if (!o.field_selector.empty()) {
    q.emplace_back("fieldSelector", o.field_selector);
  }
  if (o.limit > 0) {
    q.emplace_back("limit", std::to_string(o.limit));
  }
  if (!o.continue_token.empty()) {
    q.emplace_back("continue", o.continue_token);
  }
  if (!o.resource_version.empty()) {
    q.emplace_back("resourceVersion", o.resource_version);
  }
  if (!o.resource_version_match.empty()) {
    q.emplace_back("resourceVersionMatch", o.resource_version_match);
  }
  if (o.timeout_seconds > 0) {
    q.emplace_back("timeoutSeconds", std::to_string(o.timeout_seconds));
  }
  return q;
}

QueryParams watch_query(const WatchOptions& o) {
  QueryParams q;
  q.emplace_back("watch", "1");
  if (!o.label_selector.empty()) {
    q.emplace_back("labelSelector", o.label_selector);
  }
  if (!o.field_selector.empty()) {
    q.emplace_back("fieldSelector", o.field_selector);
  }
  if (!o.resource_version.empty()) {
    q.emplace_back("resourceVersion", o.resource_version);
  }
  if (o.allow_bookmarks) {
    q.emplace_back("allowWatchBookmarks", "true");
  }
  if (o.timeout_seconds > 0) {
    q.emplace_back("timeoutSeconds", std::to_string(o.timeout_seconds));
  }
  return q;
}

std::string delete_options_body(const DeleteOptions& o) {
  boost::json::object body;
  if (o.grace_period_seconds) {
    body["gracePeriodSeconds"] = *o.grace_period_seconds;
  }
  switch (o.propagation) {
    case DeletePropagation::unset:
      break;
    case DeletePropagation::orphan:
      body["propagationPolicy"] = "Orphan";
      break;
    case DeletePropagation::background:
      body["propagationPolicy"] = "Background";
      break;
    case DeletePropagation::foreground:
      body["propagationPolicy"] = "Foreground";
      break;
  }
  if (!o.precondition_uid.empty() || !o.precondition_resource_version.empty()) {
    boost::json::object pre;
    if (!o.precondition_uid.empty()) {
      pre["uid"] = o.precondition_uid;
    }
    if (!o.precondition_resource_version.empty()) {
      pre["resourceVersion"] = o.precondition_resource_version;
    }
    body["preconditions"] = std::move(pre);
  }
  if (body.empty()) {
    return {};
  }
  body["apiVersion"] = "v1";
  body["kind"] = "DeleteOptions";
  return boost::json::serialize(body);
}

std::string ServerUrl::host_header() const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  const bool default_port = (scheme == "https" && port == "443") || (scheme == "http" && port == "80");
  if (!default_port) {
    h += ":" + port;
  }
  return h;
}

Result<ServerUrl> parse_server_url(std::string_view url, bool allow_http) {
  ServerUrl out;
  std::string_view rest = url;
  if (rest.rfind("https://", 0) == 0) {
    out.scheme = "https";
    rest.remove_prefix(8);
  } else if (rest.rfind("http://", 0) == 0) {
    if (!allow_http) {
      return make_error(fmt::format("server \"{}\": plain http is not supported; use https", url));
    }
    out.scheme = "http";
    rest.remove_prefix(7);
  } else {
    return make_error(fmt::format("server \"{}\": must start with https://", url));
  }
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view path = rest.substr(slash);
    if (path.find_first_of("?#") != std::string_view::npos) {
      return make_error(fmt::format("server \"{}\": query and fragment are not allowed", url));
    }
    while (!path.empty() && path.back() == '/') {
      path.remove_suffix(1);
    }
    out.base_path = std::string(path);
  }
  if (authority.find('@') != std::string_view::npos) {
    return make_error(fmt::format("server \"{}\": user info in the URL is not supported", url));
  }
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) {
      return make_error(fmt::format("server \"{}\": unterminated IPv6 literal", url));
    }
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        return make_error(fmt::format("server \"{}\": unexpected text after the IPv6 literal", url));
      }
      port = after.substr(1);
    }
    out.host_is_ip = true;
  } else {
    const auto colon = authority.find(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
    }
    bool dotted = !out.host.empty();
    for (char c : out.host) {
      if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.')) {
        dotted = false;
      }
    }
    out.host_is_ip = dotted;
  }
  if (out.host.empty()) {
    return make_error(fmt::format("server \"{}\": no host", url));
  }
  if (port.empty()) {
    out.port = out.scheme == "https" ? "443" : "80";
  } else {
    if (port.size() > 5) {
      return make_error(fmt::format("server \"{}\": port \"{}\" is not a number in 1..65535", url, port));
    }
    int value = 0;
    for (char c : port) {
      if (!std::isdigit(static_cast<unsigned char>(c))) {
        return make_error(fmt::format("server \"{}\": port \"{}\" is not a number in 1..65535", url, port));
      }
      value = value * 10 + (c - '0');
    }
    if (value < 1 || value > 65535) {
      return make_error(fmt::format("server \"{}\": port \"{}\" is not a number in 1..65535", url, port));
    }
    out.port = std::string(port);
  }
  return out;
}

}  // namespace gpuslice::kube
