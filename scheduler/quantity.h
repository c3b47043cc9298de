#pragma once
// Kubernetes resource quantities ("500m", "4", "1.5", "16Gi", "1e3") as integer milli-units, for the node-level
// cpu/memory/pods/ephemeral-storage fit. Pure.

#include "common/result.h"

#include <cstdint>
#include <string_view>

namespace gpuslice::scheduler {

/// Parses a quantity into milli-units (cpu "500m" -> 500, memory "1Ki" -> 1024000), rounding fractions of a
/// milli-unit up as Kubernetes does. Negative values, unknown suffixes and values above ~9.2e15 units are errors
/// quoting the text.
Result<int64_t> parse_quantity_milli(std::string_view text);

}  // namespace gpuslice::scheduler
