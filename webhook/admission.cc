#include "webhook/admission.h"

#include "common/base64.h"
#include "common/json_access.h"

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/monotonic_resource.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value_stack.hpp>

#include <algorithm>
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

// json::parser's handler (boost/json/detail/handler.hpp, Boost 1.81) plus the keys of the review's own two objects,
// the root and `request`: Boost.JSON keeps the last of duplicate keys without a word, so an AdmissionReview with two
// `request`s (or two `request.uid`s) would be answered for whichever came last. It is refused instead, naming the key.
struct ReviewParseHandler {
  static constexpr std::size_t max_object_size = json::object::max_size();
  static constexpr std::size_t max_array_size = json::array::max_size();
  static constexpr std::size_t max_key_size = json::string::max_size();
  static constexpr std::size_t max_string_size = json::string::max_size();

  json::value_stack st;
  int depth = 0;            // containers open
  bool in_request = false;  // inside the root's "request" object (depth 2)
  std::string key;          // the parts of a key at depth <= 2
  std::string last_root_key;
  std::vector<std::string> root_keys, request_keys;
  std::string duplicate;  // the first duplicated key, as a path

  ReviewParseHandler(json::storage_ptr sp, unsigned char* temp, std::size_t size) : st(std::move(sp), temp, size) {}

  bool seen(std::vector<std::string>& keys, std::string k, const std::string& prefix) {
    if (std::find(keys.begin(), keys.end(), k) != keys.end()) {
      if (duplicate.empty()) duplicate = prefix + k;
      return true;
    }
    keys.push_back(std::move(k));
    return false;
  }

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_object_begin(json::error_code&) {
    if (++depth == 2) in_request = last_root_key == "request";
    return true;
  }
  bool on_object_end(std::size_t n, json::error_code&) {
    if (depth == 2) in_request = false;
    --depth;
    st.push_object(n);
    return true;
  }
  bool on_array_begin(json::error_code&) {
    ++depth;
    return true;
  }
  bool on_array_end(std::size_t n, json::error_code&) {
    --depth;
    st.push_array(n);
    return true;
  }
  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    if (depth <= 2) key.append(s.data(), s.size());
    st.push_chars(s);
    return true;
  }
  bool on_key(json::string_view s, std::size_t, json::error_code&) {
    if (depth == 1 || (depth == 2 && in_request)) {
      key.append(s.data(), s.size());
      if (depth == 1) {
        last_root_key = key;
        seen(root_keys, std::move(key), "");
      } else {
        seen(request_keys, std::move(key), "request.");
      }
    }
    key.clear();
    st.push_key(s);
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t, json::error_code&) {
    st.push_chars(s);
    return true;
  }
  bool on_string(json::string_view s, std::size_t, json::error_code&) {
    st.push_string(s);
    return true;
  }
  bool on_number_part(json::string_view, json::error_code&) { return true; }
  bool on_int64(std::int64_t i, json::string_view, json::error_code&) {
    st.push_int64(i);
    return true;
  }
  bool on_uint64(std::uint64_t u, json::string_view, json::error_code&) {
    st.push_uint64(u);
    return true;
  }
  bool on_double(double d, json::string_view, json::error_code&) {
    st.push_double(d);
    return true;
  }
  bool on_bool(bool b, json::error_code&) {
    st.push_bool(b);
    return true;
  }
  bool on_null(json::error_code&) {
    st.push_null();
    return true;
  }
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }
};

// Decodes into values owned by `sp`, so review() can parse into a stack buffer and drop it at once.
Result<AdmissionRequest> decode(std::string_view body, json::storage_ptr sp) {
  json::parse_options opt;
  opt.max_depth = kMaxDepth;
  // As json::parser::write(), to report where the text goes wrong, with the duplicate-key check above.
  unsigned char temp[1024];
  json::basic_parser<ReviewParseHandler> parser(opt, json::storage_ptr(), temp, sizeof temp);
  parser.handler().st.reset(std::move(sp));
  boost::system::error_code ec;
  size_t consumed = parser.write_some(false, body.data(), body.size(), ec);
  if (!ec && consumed < body.size()) ec = json::error::extra_data;
  if (ec) return make_error("malformed JSON at byte " + std::to_string(consumed) + ": " + ec.message());
  if (!parser.handler().duplicate.empty()) {
    return make_error("not an AdmissionReview: duplicate key \"" + parser.handler().duplicate + "\"");
  }
  json::value doc = parser.handler().st.release();
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

  std::string_view kind_kind;
  if (const json::value* k = request->if_contains("kind"); k != nullptr && k->is_object()) {
    kind_kind = string_view_at(k->get_object(), "kind");
  }
  const json::value* dry = request->if_contains("dryRun");
  // Aggregate initialisation move-constructs `object`, which keeps its storage: no copy of the pod.
  return AdmissionRequest{std::string(api->get_string()),
                          std::string(uid->get_string()),
                          std::string(kind_kind),
                          std::string(string_view_at(*request, "namespace")),
                          std::string(string_view_at(*request, "operation")),
                          dry != nullptr && dry->is_bool() && dry->get_bool(),
                          json::value(std::move(*object))};
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
  return decode(body, json::make_shared_resource<json::monotonic_resource>());
}

std::string encode_admission_response(const AdmissionRequest& req, const MutationResult& result) {
  unsigned char buf[2048];
  json::monotonic_resource mr(buf, sizeof buf);
  json::object response(&mr);
  response.reserve(5);
  response["uid"] = req.uid;
  response["allowed"] = result.allowed;
  if (!result.allowed) {
    json::object status(&mr);
    status["code"] = result.code;
    status["reason"] = result.reason;
    status["message"] = result.message;
    response["status"] = std::move(status);
  } else if (!result.message.empty()) {
    json::object status(&mr);
    status["code"] = 200;
    status["message"] = result.message;
    response["status"] = std::move(status);
  }
  if (result.allowed && !result.patch.empty()) {
    response["patchType"] = "JSONPatch";
    response["patch"] = base64_encode(serialize_patch(result.patch));
  }
  json::object root(&mr);
  root.reserve(3);
  root["apiVersion"] = req.api_version;
  root["kind"] = kKind;
  root["response"] = std::move(response);
  return json::serialize(root);
}

ReviewReply review(std::string_view body, const Configuration& config) {
  try {
    // Typical pod reviews are a few KiB of JSON; their tree fits here, larger ones spill to the heap.
    unsigned char buf[16384];
    json::monotonic_resource mr(buf, sizeof buf);
    auto decoded = decode(body, &mr);
    if (!decoded.ok()) return plain(400, decoded.message(), ReviewOutcome::rejected);
    const AdmissionRequest& req = decoded.value();

    MutationResult result;
    ReviewOutcome outcome = ReviewOutcome::allowed;
    if (req.kind != "Pod") {
      result.message = "not a Pod (request.kind.kind \"" + req.kind + "\"): allowed unchanged";
    } else if (!req.operation.empty() && req.operation != "CREATE") {
      // A pod's spec is immutable after creation (and a bound pod has spec.nodeName, which the policy would
      // deny): only CREATE is mutated, so a configuration that also sends UPDATE cannot block pod updates.
      result.message = "operation " + req.operation + ": only CREATE is mutated; allowed unchanged";
    } else if (!req.object.is_object()) {
      return plain(400, std::string("request.object is a JSON ") + json_kind(req.object) + ", not a Pod object",
                   ReviewOutcome::rejected);
    } else {
      result = mutate_pod(req.object.get_object(), req.namespace_, config);
      if (!result.allowed) {
        outcome = ReviewOutcome::denied;
      } else if (result.skipped) {
        outcome = ReviewOutcome::skipped;
      } else if (!result.patch.empty()) {
        outcome = ReviewOutcome::patched;
      }
    }
    ReviewReply reply;
    reply.body = encode_admission_response(req, result);
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
