#pragma once
// Pure codecs for the objects the scheduling loop reads and writes: watch events, metav1.Status errors,
// Binding, the PodScheduled condition patch, events.k8s.io/v1 Events, coordination.k8s.io/v1 Leases and
// MicroTime. No I/O; time enters as a parameter.

#include "common/json_access.h"
#include "common/result.h"
#include "common/rfc3339.h"
#include "kube/error.h"

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::kube {

// ---- metav1.Status ---------------------------------------------------------------------------------------

/// Decodes an error response: a metav1.Status body gives reason/message/code; any other body keeps the HTTP
/// status, a reason from the status (NotFound, Conflict, ...) and the body's first 512 bytes as message.
ApiError decode_status_error(int http_status, std::string_view body);
/// The canonical reason for an HTTP status without a Status body ("NotFound", "Gone", "InternalError"...).
const char* reason_for_http_status(int http_status);

// ---- watch events -----------------------------------------------------------------------------------------

enum class WatchEventType { added, modified, deleted, bookmark, error };
const char* watch_event_type_name(WatchEventType t);

struct WatchEvent {
  WatchEventType type = WatchEventType::added;
  boost::json::object object;    ///< the object (a Status for ERROR)
  std::string resource_version;  ///< object.metadata.resourceVersion ("" for ERROR)
  ApiError error;                ///< for ERROR: the Status decoded (code 410 reason Expired -> relist)
};

/// Decodes one watch line {"type":...,"object":{...}}. Errors name the problem (bad JSON, unknown type,
/// object not an object).
Result<WatchEvent> decode_watch_event(std::string_view line);

// ---- lists ------------------------------------------------------------------------------------------------

struct ListPage {
  std::vector<boost::json::object> items;
  std::string resource_version;  ///< metadata.resourceVersion of the list
  std::string continue_token;    ///< metadata.continue ("" on the last page)
  std::string kind;              ///< e.g. "PodList"
};
Result<ListPage> decode_list(std::string_view body);

// ---- MicroTime --------------------------------------------------------------------------------------------

// Both are common/rfc3339.h's format_rfc3339 (the one RFC 3339 codec; parse_rfc3339 reads both), named for the
// Kubernetes types they write.

/// RFC 3339 UTC with exactly 6 fraction digits: "2026-11-30T08:00:00.123456Z" (metav1.MicroTime).
inline std::string format_micro_time(std::chrono::system_clock::time_point t) {
  return format_rfc3339(t, 6);
}
/// RFC 3339 UTC with whole seconds: "2026-11-30T08:00:00Z" (metav1.Time).
inline std::string format_time(std::chrono::system_clock::time_point t) {
  return format_rfc3339(t, 0);
}

// ---- pods/binding and pods/status -------------------------------------------------------------------------

/// What a Binding writes onto the pod besides spec.nodeName. kube-apiserver's BindingREST (v1.34.3
/// pkg/registry/core/pod/storage/storage.go, setPodNodeAndMetadata) copies the Binding's metadata.annotations, and
/// its metadata.labels, onto the pod inside the same guaranteed update that sets spec.nodeName and PodScheduled=True,
/// with the Binding's metadata.uid as a storage precondition: one atomic write.
struct BindingMetadata {
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> labels;
};

/// {"apiVersion":"v1","kind":"Binding","metadata":{"name","namespace"[,"uid"][,"annotations"][,"labels"]},
/// "target":{"apiVersion":"v1","kind":"Node","name":node}}. A non-empty pod_uid makes the API server check it is
/// the same pod; empty maps are left out.
boost::json::object make_binding(std::string_view ns, std::string_view pod, std::string_view node,
                                 std::string_view pod_uid = {}, const BindingMetadata& metadata = {});

struct PodCondition {
  std::string type = "PodScheduled";
  std::string status = "False";  ///< "True" | "False" | "Unknown"
  std::string reason;            ///< e.g. "Unschedulable"
  std::string message;
  std::optional<std::chrono::system_clock::time_point> last_transition_time;
  std::optional<std::chrono::system_clock::time_point> last_probe_time;
};
/// Strategic-merge patch for pods/status: {"status":{"conditions":[{...}]}} (conditions merge by type).
boost::json::object make_pod_condition_patch(const PodCondition& c);

// ---- events.k8s.io/v1 -------------------------------------------------------------------------------------

struct ObjectReference {
  std::string api_version = "v1";
  std::string kind = "Pod";
  std::string namespace_;
  std::string name;
  std::string uid;
  std::string resource_version;
  std::string field_path;
};

struct EventRecord {
  std::string namespace_;  ///< the Event's namespace (usually the regarding object's; "default" if empty)
  std::string name;        ///< empty: "<regarding.name>.<hex unix nanos>" as client-go names them
  std::chrono::system_clock::time_point event_time;
  std::string reporting_controller = "gpuslice.io/scheduler";
  std::string reporting_instance;     ///< e.g. the holder identity / pod name
  std::string action = "Scheduling";  ///< <= 128 bytes
  std::string reason;                 ///< <= 128 bytes, e.g. "Scheduled", "FailedScheduling"
  std::string type = "Normal";        ///< "Normal" | "Warning"
  std::string note;                   ///< truncated to 1024 bytes on a UTF-8 boundary
  ObjectReference regarding;
};
/// The events.k8s.io/v1 Event object (eventTime as MicroTime; action/reason truncated to 128, note to 1 kB).
boost::json::object make_event(const EventRecord& e);
/// Truncates to at most `max_bytes` without splitting a UTF-8 sequence.
std::string truncate_utf8(std::string_view s, std::size_t max_bytes);

// ---- coordination.k8s.io/v1 Lease -------------------------------------------------------------------------

/// LeaseSpec, the fields leader election reads and writes (client-go's LeaderElectionRecord).
struct LeaseSpec {
  std::string holder_identity;  ///< empty: released (written even when empty, so a PUT clears it)
  int32_t lease_duration_seconds = 0;
  std::optional<std::chrono::system_clock::time_point> acquire_time;  ///< MicroTime on the wire
  std::optional<std::chrono::system_clock::time_point> renew_time;    ///< MicroTime on the wire
  int32_t lease_transitions = 0;
  bool operator==(const LeaseSpec&) const = default;
};

/// The Lease object: the metadata the client sends back, and the spec.
struct Lease {
  std::string namespace_;
  std::string name;
  std::string resource_version;  ///< from the server; sent back on update as the precondition (empty on create)
  std::string uid;
  LeaseSpec spec;
};
/// The Lease as JSON for create (no resourceVersion) or update (with it); times as MicroTime.
boost::json::object encode_lease(const Lease& l);
/// Reads a Lease object; metadata.name is required, a missing or null spec and missing spec fields take their
/// zero value; errors name the lease and the field ("lease x: spec.leaseDurationSeconds = "15" is not ...").
Result<Lease> decode_lease(const boost::json::object& o);

// ---- small accessors (generic JSON access, string_at_pointer among it, is common/json_access.h) -----------

/// metadata.resourceVersion, metadata.name, metadata.namespace, metadata.uid.
std::string resource_version_of(const boost::json::object& o);
std::string name_of(const boost::json::object& o);
std::string namespace_of(const boost::json::object& o);
std::string uid_of(const boost::json::object& o);

}  // namespace gpuslice::kube
