#pragma once
// Kubernetes resource quantities (resource.Quantity: "500m", "4", "1.5", "16Gi", "1e3"), the one parser: the
// scheduler reads node-level cpu/memory/pods/ephemeral-storage as milli-units, the webhook and the scheduler read
// the GPU resources (counts, MiB, percent) as whole numbers. It lives in common/ because the normalized GPU
// request (common/gpu_request.h) needs it and common/ may not include the components. Pure.

#include "common/result.h"

#include <cstdint>
#include <string_view>

namespace gpuslice {

/// Parses a quantity into milli-units (cpu "500m" -> 500, memory "1Ki" -> 1024000), rounding fractions of a
/// milli-unit up as Kubernetes does. Negative values, unknown suffixes and values above ~9.2e15 units are errors
/// quoting the text: `quantity "1X" has an unknown suffix`.
Result<int64_t> parse_quantity_milli(std::string_view text);

/// Parses a quantity that must be a whole number of units written as digits and an optional suffix k, M, G, T,
/// Ki, Mi, Gi, Ti or m ("3", "20000", "2k", "1Gi", "3000m"), as the GPU resources are. Fractions, milli units
/// that do not divide evenly, exponents, other suffixes and negatives are rejected: `"1.5" is not a whole number`.
Result<int64_t> parse_whole_quantity(std::string_view text);

}  // namespace gpuslice
