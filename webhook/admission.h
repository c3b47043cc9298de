#pragma once
// AdmissionReview codec and the review entry point the TLS server calls: bytes in, HTTP status and bytes
// out. Pure (no Beast, no clock): decode -> policy -> encode. Accepts admission.k8s.io/v1 and v1beta1 and
// answers in the request's version.

#include "common/config.h"
#include "common/result.h"
#include "webhook/policy.h"

#include <string>
#include <string_view>

namespace gpuslice::webhook {

struct AdmissionRequest {
  std::string api_version;  ///< admission.k8s.io/v1 or admission.k8s.io/v1beta1
  std::string uid;
  std::string kind;  ///< request.kind.kind, e.g. "Pod"
  std::string namespace_;
  std::string operation;  ///< CREATE, UPDATE, ...
  bool dry_run = false;
  boost::json::value object;
};

/// Decodes an AdmissionReview request. Errors say what is wrong (malformed JSON, not an AdmissionReview,
/// missing request, uid or object, unsupported apiVersion).
Result<AdmissionRequest> decode_admission_review(std::string_view body);

/// Encodes the AdmissionReview response for `req` with the policy's result.
std::string encode_admission_response(const AdmissionRequest& req, const MutationResult& result);

enum class ReviewOutcome { patched, allowed, skipped, denied, rejected };
const char* outcome_name(ReviewOutcome o);

struct ReviewReply {
  int http_status = 200;  ///< 200 with an AdmissionReview, or 400 with a plain-text reason for a bad body
  std::string content_type = "application/json";
  std::string body;
  ReviewOutcome outcome = ReviewOutcome::allowed;
};

/// The whole webhook decision for one HTTP body: one parse (bounded depth, into a stack monotonic buffer),
/// the policy for a Pod on CREATE, any other kind or operation allowed unchanged. A body that cannot be
/// decoded gets 400 with a plain-text reason (outcome `rejected`); an internal error (out of memory) gets 500.
/// Never throws.
ReviewReply review(std::string_view body, const Configuration& config);

}  // namespace gpuslice::webhook
