#pragma once
// review() as it was written before its fast path (main at cbf6a77, 2026-12-06): the whole document decoded
// (decode_admission_review), the policy over the whole pod, and the reply built as a Boost.JSON tree and
// serialized by boost::json::serialize, the patch by patch_to_json. review() parses only what the policy reads
// and writes its reply by hand; the unit tests and the admission_review fuzz target require the same bytes.

#include "common/base64.h"
#include "common/config.h"
#include "common/json_patch.h"
#include "webhook/admission.h"
#include "webhook/policy.h"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <string>
#include <string_view>

namespace gpuslice::webhook::reference {

inline std::string encode(const AdmissionRequest& req, const MutationResult& result) {
  namespace json = boost::json;
  json::object response;
  response["uid"] = req.uid;
  response["allowed"] = result.allowed;
  if (!result.allowed) {
    json::object status;
    status["code"] = result.code;
    status["reason"] = result.reason;
    status["message"] = result.message;
    response["status"] = std::move(status);
  } else if (!result.message.empty()) {
    json::object status;
    status["code"] = 200;
    status["message"] = result.message;
    response["status"] = std::move(status);
  }
  if (result.allowed && !result.patch.empty()) {
    response["patchType"] = "JSONPatch";
    response["patch"] = base64_encode(json::serialize(patch_to_json(result.patch)));
  }
  json::object root;
  root["apiVersion"] = req.api_version;
  root["kind"] = "AdmissionReview";
  root["response"] = std::move(response);
  return json::serialize(root);
}

/// The reply review() must give for `body`; a 400's reason is decode_admission_review's message.
inline ReviewReply review(std::string_view body, const Configuration& config) {
  ReviewReply reply;
  auto decoded = decode_admission_review(body);
  auto plain = [&](std::string text) {
    reply.http_status = 400;
    reply.content_type = "text/plain; charset=utf-8";
    reply.body = std::move(text) + "\n";
    reply.outcome = ReviewOutcome::rejected;
    return reply;
  };
  if (!decoded.ok()) return plain(decoded.message());
  const AdmissionRequest& req = decoded.value();
  MutationResult result;
  if (req.kind != "Pod") {
    result.message = "not a Pod (request.kind.kind \"" + req.kind + "\"): allowed unchanged";
  } else if (!req.operation.empty() && req.operation != "CREATE") {
    result.message = "operation " + req.operation + ": only CREATE is mutated; allowed unchanged";
  } else if (!req.object.is_object()) {
    const char* kind = req.object.is_array()    ? "array"
                       : req.object.is_string() ? "string"
                       : req.object.is_bool()   ? "boolean"
                                                : "number";
    return plain(std::string("request.object is a JSON ") + kind + ", not a Pod object");
  } else {
    result = mutate_pod(req.object.get_object(), req.namespace_, config);
    if (!result.allowed) {
      reply.outcome = ReviewOutcome::denied;
    } else if (result.skipped) {
      reply.outcome = ReviewOutcome::skipped;
    } else if (!result.patch.empty()) {
      reply.outcome = ReviewOutcome::patched;
    }
  }
  reply.body = encode(req, result);
  return reply;
}

}  // namespace gpuslice::webhook::reference
