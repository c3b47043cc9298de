#include "webhook/admission.h"

#include "common/base64.h"
#include "common/json_access.h"

#include <boost/container/small_vector.hpp>
#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/monotonic_resource.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value_stack.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <vector>

namespace gpuslice::webhook {
namespace json = boost::json;

namespace {

constexpr std::string_view kV1 = "admission.k8s.io/v1";
constexpr std::string_view kV1beta1 = "admission.k8s.io/v1beta1";
constexpr std::string_view kKind = "AdmissionReview";
// A Pod inside an AdmissionReview nests about 12 levels deep (affinity terms); 64 leaves room for CRDs
// while bounding the parser's recursion.
constexpr unsigned kMaxDepth = 64;

const char* json_kind(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return "boolean";
    case json::kind::int64:
    case json::kind::uint64:
    case json::kind::double_:
      return "number";
    case json::kind::string:
      return "string";
    case json::kind::array:
      return "array";
    case json::kind::object:
      return "object";
  }
  return "value";
}

// The members mutate_pod reads (webhook/policy.h, kPolicyFields), by object: review() builds only these, so the
// parts of a pod no rule looks at (managedFields, volumes, tolerations, a container's image, command, probes, ...)
// are checked by the parser and never copied into a tree. The review's own fields that decode reads stay too.
enum class Ctx : unsigned char { other, root, request, pod, metadata, spec, containers, container };

struct Member {
  std::string_view key;
  Ctx value;  // the context of the member's value (objects only; `containers` for the containers arrays)
};
constexpr Member kRootKept[] = {{"kind", Ctx::other}, {"apiVersion", Ctx::other}, {"request", Ctx::request}};
constexpr Member kRequestKept[] = {{"uid", Ctx::other},       {"kind", Ctx::other},   {"namespace", Ctx::other},
                                   {"operation", Ctx::other}, {"dryRun", Ctx::other}, {"object", Ctx::pod}};
constexpr Member kPodKept[] = {{"metadata", Ctx::metadata}, {"spec", Ctx::spec}};
constexpr Member kMetadataKept[] = {{"namespace", Ctx::other}, {"labels", Ctx::other}, {"annotations", Ctx::other}};
constexpr Member kSpecKept[] = {{"containers", Ctx::containers},
                                {"initContainers", Ctx::containers},
                                {"schedulerName", Ctx::other},
                                {"nodeName", Ctx::other},
                                {"runtimeClassName", Ctx::other}};
constexpr Member kContainerKept[] = {
    {"name", Ctx::other}, {"resources", Ctx::other}, {"env", Ctx::other}, {"securityContext", Ctx::other}};

template <std::size_t N>
const Member* find_member(const Member (&kept)[N], std::string_view key) {
  for (const Member& m : kept) {
    if (m.key == key) return &m;
  }
  return nullptr;
}

// The keys of one object, for the duplicate check: a linear set, inline for the review's own two objects.
class KeySet {
 public:
  // Adds `k`; false when it was already there.
  bool insert(std::string_view k) {
    std::size_t begin = 0;
    for (std::uint32_t end : ends_) {
      if (end - begin == k.size() && std::equal(k.begin(), k.end(), text_.begin() + begin)) return false;
      begin = end;
    }
    text_.insert(text_.end(), k.begin(), k.end());
    ends_.push_back(static_cast<std::uint32_t>(text_.size()));
    return true;
  }

 private:
  boost::container::small_vector<char, 512> text_;
  boost::container::small_vector<std::uint32_t, 32> ends_;
};

// json::parser's handler (boost/json/detail/handler.hpp, Boost 1.81) plus two things:
// - the keys of the review's own two objects, the root and `request`: Boost.JSON keeps the last of duplicate keys
//   without a word, so an AdmissionReview with two `request`s (or two `request.uid`s) would be answered for
//   whichever came last. It is refused instead, naming the key.
// - with `policy_only`, the members no reader needs (above) are parsed and dropped, not built.
struct ReviewParseHandler {
  static constexpr std::size_t max_object_size = json::object::max_size();
  static constexpr std::size_t max_array_size = json::array::max_size();
  static constexpr std::size_t max_key_size = json::string::max_size();
  static constexpr std::size_t max_string_size = json::string::max_size();

  json::value_stack st;
  bool policy_only = false;
  int depth = 0;          // containers open
  Ctx next = Ctx::other;  // the context of the value after the last key
  bool dropping = false;  // inside a member that is not built
  int drop_depth = 0;     // containers open inside it
  std::string key_parts;  // a key's leading parts (the parser splits only keys with escapes)
  KeySet root_keys, request_keys;
  std::string duplicate;  // the first duplicated key, as a path
  // Per open container (index: depth): its context and how many of its members were dropped.
  std::array<Ctx, kMaxDepth + 2> ctx{};
  std::array<std::uint32_t, kMaxDepth + 2> dropped{};

  ReviewParseHandler(json::storage_ptr sp, unsigned char* temp, std::size_t size) : st(std::move(sp), temp, size) {}

  void note(KeySet& keys, std::string_view k, std::string_view prefix) {
    if (!keys.insert(k) && duplicate.empty()) duplicate = std::string(prefix) + std::string(k);
  }
  // A container opens: its context from the key before it (or, in a containers array, a container).
  void open(bool object) {
    Ctx parent = depth == 0 ? Ctx::other : ctx[depth];
    Ctx c = Ctx::other;
    if (depth == 0) {
      c = object ? Ctx::root : Ctx::other;
    } else if (parent == Ctx::containers) {
      c = object ? Ctx::container : Ctx::other;
    } else if (parent != Ctx::other) {
      c = (object == (next != Ctx::containers)) ? next : Ctx::other;
    }
    next = Ctx::other;
    ++depth;
    ctx[depth] = c;
    dropped[depth] = 0;
  }
  // A scalar value ends; true when it is dropped.
  bool drop_scalar() {
    if (!dropping) return false;
    if (drop_depth == 0) dropping = false;
    return true;
  }

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_object_begin(json::error_code&) {
    if (dropping) {
      ++depth;
      ++drop_depth;
      return true;
    }
    open(true);
    return true;
  }
  bool on_object_end(std::size_t n, json::error_code&) {
    if (dropping) {
      --depth;
      if (--drop_depth == 0) dropping = false;
      return true;
    }
    st.push_object(n - dropped[depth]);
    --depth;
    return true;
  }
  bool on_array_begin(json::error_code&) {
    if (dropping) {
      ++depth;
      ++drop_depth;
      return true;
    }
    open(false);
    return true;
  }
  bool on_array_end(std::size_t n, json::error_code&) {
    if (dropping) {
      --depth;
      if (--drop_depth == 0) dropping = false;
      return true;
    }
    st.push_array(n);
    --depth;
    return true;
  }
  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    if (!dropping) key_parts.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, std::size_t, json::error_code&) {
    if (dropping) return true;
    std::string_view k(s.data(), s.size());
    if (!key_parts.empty()) {
      key_parts.append(s.data(), s.size());
      k = key_parts;
    }
    const Member* m = nullptr;
    bool known = true;
    switch (ctx[depth]) {
      case Ctx::root:
        note(root_keys, k, "");
        m = find_member(kRootKept, k);
        break;
      case Ctx::request:
        note(request_keys, k, "request.");
        m = find_member(kRequestKept, k);
        break;
      case Ctx::pod:
        m = find_member(kPodKept, k);
        break;
      case Ctx::metadata:
        m = find_member(kMetadataKept, k);
        break;
      case Ctx::spec:
        m = find_member(kSpecKept, k);
        break;
      case Ctx::container:
        m = find_member(kContainerKept, k);
        break;
      default:
        known = false;
        break;
    }
    if (!known) {
      st.push_key(k);
    } else if (m != nullptr || !policy_only) {
      next = m != nullptr ? m->value : Ctx::other;
      st.push_key(k);
    } else {
      ++dropped[depth];
      dropping = true;
      drop_depth = 0;
    }
    key_parts.clear();
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t, json::error_code&) {
    if (!dropping) st.push_chars(s);
    return true;
  }
  bool on_string(json::string_view s, std::size_t, json::error_code&) {
    if (!drop_scalar()) st.push_string(s);
    return true;
  }
  bool on_number_part(json::string_view, json::error_code&) { return true; }
  bool on_int64(std::int64_t i, json::string_view, json::error_code&) {
    if (!drop_scalar()) st.push_int64(i);
    return true;
  }
  bool on_uint64(std::uint64_t u, json::string_view, json::error_code&) {
    if (!drop_scalar()) st.push_uint64(u);
    return true;
  }
  bool on_double(double d, json::string_view, json::error_code&) {
    if (!drop_scalar()) st.push_double(d);
    return true;
  }
  bool on_bool(bool b, json::error_code&) {
    if (!drop_scalar()) st.push_bool(b);
    return true;
  }
  bool on_null(json::error_code&) {
    if (!drop_scalar()) st.push_null();
    return true;
  }
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }
};

// The request fields, as views into the parsed document (which the caller keeps).
struct RequestView {
  std::string_view api_version, uid, kind, namespace_, operation;
  bool dry_run = false;
  json::value* object = nullptr;
};

// Parses `body` into `doc` (values owned by `sp`, so review() can parse into a stack buffer and drop it at once)
// and reads the request from it. With `policy_only` the pod holds only what mutate_pod reads.
Result<RequestView> decode(std::string_view body, json::storage_ptr sp, bool policy_only, json::value& doc) {
  json::parse_options opt;
  opt.max_depth = kMaxDepth;
  // As json::parser::write(), to report where the text goes wrong, with the duplicate-key check above.
  unsigned char temp[1024];
  json::basic_parser<ReviewParseHandler> parser(opt, json::storage_ptr(), temp, sizeof temp);
  parser.handler().st.reset(std::move(sp));
  parser.handler().policy_only = policy_only;
  boost::system::error_code ec;
  size_t consumed = parser.write_some(false, body.data(), body.size(), ec);
  if (!ec && consumed < body.size()) ec = json::error::extra_data;
  if (ec) return make_error("malformed JSON at byte " + std::to_string(consumed) + ": " + ec.message());
  if (!parser.handler().duplicate.empty()) {
    return make_error("not an AdmissionReview: duplicate key \"" + parser.handler().duplicate + "\"");
  }
  doc = parser.handler().st.release();  // same storage as `doc`: a move, not a copy
  json::object* root = doc.if_object();
  if (root == nullptr) return make_error(std::string("not an AdmissionReview: the body is a JSON ") + json_kind(doc));
  const json::value* kind = root->if_contains("kind");
  if (kind == nullptr) return make_error("not an AdmissionReview: kind is missing");
  if (!kind->is_string() || kind->get_string() != kKind) {
    return make_error("not an AdmissionReview: kind " + json::serialize(*kind));
  }
  const json::value* api = root->if_contains("apiVersion");
  if (api == nullptr) return make_error("unsupported apiVersion: apiVersion is missing");
  if (!api->is_string() || (api->get_string() != kV1 && api->get_string() != kV1beta1)) {
    return make_error("unsupported apiVersion " + json::serialize(*api) + " (want " + std::string(kV1) + " or " +
                      std::string(kV1beta1) + ")");
  }
  json::value* request_v = root->if_contains("request");
  if (request_v == nullptr || request_v->is_null()) return make_error("missing request");
  json::object* request = request_v->if_object();
  if (request == nullptr)
    return make_error(std::string("request is a JSON ") + json_kind(*request_v) + ", not an object");
  const json::value* uid = request->if_contains("uid");
  if (uid == nullptr || !uid->is_string() || uid->get_string().empty()) {
    return make_error(uid == nullptr ? "missing request.uid" : "missing request.uid: " + json::serialize(*uid));
  }
  json::value* object = request->if_contains("object");
  if (object == nullptr || object->is_null()) return make_error("missing request.object");

  RequestView out;
  out.api_version = api->get_string();
  out.uid = uid->get_string();
  if (const json::value* k = request->if_contains("kind"); k != nullptr && k->is_object()) {
    out.kind = string_view_at(k->get_object(), "kind");
  }
  out.namespace_ = string_view_at(*request, "namespace");
  out.operation = string_view_at(*request, "operation");
  const json::value* dry = request->if_contains("dryRun");
  out.dry_run = dry != nullptr && dry->is_bool() && dry->get_bool();
  out.object = object;
  return out;
}

ReviewReply plain(int status, std::string text, ReviewOutcome outcome) {
  ReviewReply r;
  r.http_status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(text);
  r.body.push_back('\n');
  r.outcome = outcome;
  return r;
}

}  // namespace

const char* outcome_name(ReviewOutcome o) {
  switch (o) {
    case ReviewOutcome::patched:
      return "patched";
    case ReviewOutcome::allowed:
      return "allowed";
    case ReviewOutcome::skipped:
      return "skipped";
    case ReviewOutcome::denied:
      return "denied";
    case ReviewOutcome::rejected:
      return "rejected";
  }
  return "unknown";
}

Result<AdmissionRequest> decode_admission_review(std::string_view body) {
  // A shared monotonic resource: the parse allocates in a few large blocks, which the returned object keeps.
  json::storage_ptr sp = json::make_shared_resource<json::monotonic_resource>();
  json::value doc(sp);
  auto view = decode(body, sp, false, doc);
  if (!view.ok()) return view.error();
  const RequestView& v = view.value();
  // Move-constructing `object` keeps its storage: no copy of the pod.
  return AdmissionRequest{std::string(v.api_version),       std::string(v.uid),       std::string(v.kind),
                          std::string(v.namespace_),        std::string(v.operation), v.dry_run,
                          json::value(std::move(*v.object))};
}

namespace {

// The AdmissionReview response, written straight into one string: the same bytes as json::serialize of
// {"apiVersion","kind","response":{"uid","allowed"[,"status":{...}][,"patchType","patch"]}} (members in that
// order), and the patch's JSON text base64-encoded in place at the end of it.
std::string encode_response(std::string_view api_version, std::string_view uid, const MutationResult& result) {
  std::string out;
  out.reserve(160 + api_version.size() + uid.size() + result.reason.size() + result.message.size() +
              (result.allowed ? result.patch.size() * 160 : 0));
  out.append("{\"apiVersion\":", 14);
  append_json_string(out, api_version);
  out.append(",\"kind\":\"AdmissionReview\",\"response\":{\"uid\":", 44);
  append_json_string(out, uid);
  if (result.allowed) {
    out.append(",\"allowed\":true", 15);
  } else {
    out.append(",\"allowed\":false", 16);
  }
  if (!result.allowed || !result.message.empty()) {
    char code[16];
    auto end = std::to_chars(code, code + sizeof code, result.allowed ? int32_t{200} : result.code).ptr;
    out.append(",\"status\":{\"code\":", 18);
    out.append(code, end);
    if (!result.allowed) {
      out.append(",\"reason\":", 10);
      append_json_string(out, result.reason);
    }
    out.append(",\"message\":", 11);
    append_json_string(out, result.message);
    out.push_back('}');
  }
  if (result.allowed && !result.patch.empty()) {
    out.append(",\"patchType\":\"JSONPatch\",\"patch\":\"", 34);
    const std::size_t from = out.size();
    append_patch(out, result.patch);
    base64_encode_tail(out, from);
    out.push_back('"');
  }
  out.append("}}", 2);
  return out;
}

}  // namespace

std::string encode_admission_response(const AdmissionRequest& req, const MutationResult& result) {
  return encode_response(req.api_version, req.uid, result);
}

ReviewReply review(std::string_view body, const Configuration& config) {
  try {
    // Typical pod reviews are a few KiB of JSON; their tree fits here, larger ones spill to the heap.
    unsigned char buf[16384];
    json::monotonic_resource mr(buf, sizeof buf);
    json::value doc(&mr);
    // Only the members the policy reads are built (policy_only).
    auto decoded = decode(body, &mr, true, doc);
    if (!decoded.ok()) return plain(400, decoded.message(), ReviewOutcome::rejected);
    const RequestView& req = decoded.value();

    MutationResult result;
    ReviewOutcome outcome = ReviewOutcome::allowed;
    if (req.kind != "Pod") {
      result.message = "not a Pod (request.kind.kind \"" + std::string(req.kind) + "\"): allowed unchanged";
    } else if (!req.operation.empty() && req.operation != "CREATE") {
      // A pod's spec is immutable after creation (and a bound pod has spec.nodeName, which the policy would
      // deny): only CREATE is mutated, so a configuration that also sends UPDATE cannot block pod updates.
      result.message = "operation " + std::string(req.operation) + ": only CREATE is mutated; allowed unchanged";
    } else if (!req.object->is_object()) {
      return plain(400, std::string("request.object is a JSON ") + json_kind(*req.object) + ", not a Pod object",
                   ReviewOutcome::rejected);
    } else {
      result = mutate_pod(req.object->get_object(), req.namespace_, config);
      if (!result.allowed) {
        outcome = ReviewOutcome::denied;
      } else if (result.skipped) {
        outcome = ReviewOutcome::skipped;
      } else if (!result.patch.empty()) {
        outcome = ReviewOutcome::patched;
      }
    }
    ReviewReply reply;
    reply.body = encode_response(req.api_version, req.uid, result);
    reply.outcome = outcome;
    return reply;
  } catch (const std::bad_alloc&) {
    return plain(500, "internal error: out of memory", ReviewOutcome::rejected);
  } catch (const std::exception& e) {
    // Nothing here should throw; if it does, answer rather than unwinding into the server's handler.
    return plain(500, std::string("internal error: ") + e.what(), ReviewOutcome::rejected);
  }
}

}  // namespace gpuslice::webhook
