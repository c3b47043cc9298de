#pragma once
// The error model of the Kubernetes client: every request ends in a value or an ApiError. An ApiError
// carries the HTTP status (0 when no response was received), the Status `reason` decoded from the body
// (NotFound, AlreadyExists, Conflict, Expired, Gone, ...) or a client-side reason (Timeout, Transport,
// TooLarge, Decode, Config, Cancelled, Auth), and a message naming what failed. Nothing is thrown.

#include "common/result.h"

#include <string>
#include <utility>

namespace gpuslice::kube {

/// Client-side reasons (code == 0): no usable HTTP response was received.
inline constexpr const char* kReasonTimeout = "Timeout";      ///< the request's deadline expired
inline constexpr const char* kReasonTransport = "Transport";  ///< resolve/connect/TLS/read/write failed
inline constexpr const char* kReasonTooLarge = "TooLarge";    ///< body or watch line over the configured limit
inline constexpr const char* kReasonDecode = "Decode";        ///< a 2xx body that is not the expected JSON
inline constexpr const char* kReasonConfig = "Config";        ///< bad client configuration (PEM, URL)
inline constexpr const char* kReasonCancelled = "Cancelled";  ///< cancelled by the caller
inline constexpr const char* kReasonAuth = "Auth";            ///< credentials unavailable (token file, exec plugin)

struct ApiError {
  int code = 0;         ///< HTTP status; 0 when no response was received (see the kReason* constants)
  std::string reason;   ///< metav1.Status.reason, or a client-side reason when code == 0
  std::string message;  ///< metav1.Status.message or a description naming the request and the failure

  bool is_not_found() const { return code == 404; }
  /// 409, both Conflict (resourceVersion precondition failed) and AlreadyExists (create of an existing name).
  bool is_conflict() const { return code == 409; }
  bool is_already_exists() const { return code == 409 && reason == "AlreadyExists"; }
  bool is_gone() const { return code == 410; }  ///< resourceVersion too old: relist
  bool is_unauthorized() const { return code == 401; }
  bool is_forbidden() const { return code == 403; }
  bool is_too_many_requests() const { return code == 429; }
  bool is_timeout() const { return code == 0 && reason == kReasonTimeout; }
  bool is_transport() const { return code == 0 && reason == kReasonTransport; }
  bool is_cancelled() const { return code == 0 && reason == kReasonCancelled; }
  /// Worth retrying later with backoff (transport, timeout, 429, 5xx).
  bool is_retriable() const {
    return (code == 0 && (reason == kReasonTimeout || reason == kReasonTransport)) || code == 429 || code >= 500;
  }
  /// "409 AlreadyExists: leases.coordination.k8s.io \"x\" already exists" or "Timeout: GET /api/v1/pods ..."
  /// ("Error" stands for an empty reason; an empty message drops the ": ").
  std::string to_string() const;
};

inline ApiError client_error(const char* reason, std::string message) {
  return ApiError{0, reason, std::move(message)};
}

/// A value or an ApiError: the common Result template over the client's error type.
template <class T>
using ApiResult = Result<T, ApiError>;

/// Success without a value (e.g. DELETE) or an ApiError.
using ApiStatus = BasicStatus<ApiError>;

}  // namespace gpuslice::kube
