#pragma once
// RFC 3339 timestamps, the one codec: as Kubernetes writes them (metav1.Time: whole seconds, "Z";
// metav1.MicroTime: 6 fraction digits), as exec credential plugins write expirationTimestamp, and as HAMi writes
// its node lock (Go time.RFC3339, any offset). It lives in common/ because both kube (objects, auth) and the
// scheduler (node lock, through kube::Lease the leader elector) read and write it, and the node lock is HAMi's
// format rather than a Kubernetes API type. Pure: the time is a parameter, no clock, no time zone database.

#include "common/result.h"

#include <chrono>
#include <string>
#include <string_view>

namespace gpuslice {

/// A point in wall-clock (UTC) time; the clock itself is injected where time is read.
using WallTime = std::chrono::system_clock::time_point;

/// Formats `t` in UTC as "2026-11-30T07:48:24Z", or with `fraction_digits` (1..9) sub-second digits, truncated
/// ("2026-11-30T07:48:24.123456Z" for a MicroTime). Times before 1970 are written as such ("1969-12-31T...").
std::string format_rfc3339(WallTime t, int fraction_digits = 0);

/// Parses RFC 3339 as Go's time.RFC3339 does: "YYYY-MM-DDTHH:MM:SS" ("T" or "t"), an optional fraction of any
/// length (nanoseconds kept), then "Z"/"z" or a "+hh:mm"/"-hh:mm" offset. The day must exist in its month. A
/// leap second (":60") reads as :59. Errors quote the text (its first 64 bytes, unprintable bytes as spaces).
Result<WallTime> parse_rfc3339(std::string_view text);

}  // namespace gpuslice
