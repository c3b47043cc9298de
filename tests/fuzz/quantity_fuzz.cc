// Kubernetes quantities (common/quantity.h): parse_quantity_milli and parse_whole_quantity on arbitrary text.
// Oracles: a value is within 0..9.2e18 milli-units; an error quotes the text it rejects (the callers prefix the
// field); the canonical forms round-trip (v milli-units written as "<v>m", whole units written as digits, read
// back as the same value); a whole quantity is the general parser's value / 1000; a leading '+' changes nothing;
// the binary suffix Ki scales a digits-only count by exactly 1024.
#include "common/quantity.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

using gpuslice::parse_quantity_milli;
using gpuslice::parse_whole_quantity;

namespace {
constexpr int64_t kMaxMilli = 9'200'000'000'000'000'000LL;

void require(bool ok) {
  if (!ok) {
    std::abort();
  }
}

bool quotes(const std::string& message, std::string_view text) {
  return message.find("\"" + std::string(text) + "\"") != std::string::npos;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 256) {
    return 0;  // quantities are short; longer inputs only slow the search
  }
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  auto milli = parse_quantity_milli(text);
  if (milli) {
    require(*milli >= 0 && *milli <= kMaxMilli);
    auto back = parse_quantity_milli(std::to_string(*milli) + "m");
    require(back && *back == *milli);
    if (*milli % 1000 == 0) {
      auto units = parse_quantity_milli(std::to_string(*milli / 1000));
      require(units && *units == *milli);
      auto whole = parse_whole_quantity(std::to_string(*milli / 1000));
      require(whole && *whole == *milli / 1000);
    }
  } else {
    require(milli.message().rfind("quantity \"", 0) == 0 && quotes(milli.message(), text));
  }
  if (!text.empty() && text[0] != '+' && text[0] != '-') {
    auto plus = parse_quantity_milli("+" + std::string(text));
    require(plus.ok() == milli.ok() && (!plus || *plus == *milli));
  }

  auto whole = parse_whole_quantity(text);
  if (whole) {
    require(milli && *whole >= 0 && *milli == *whole * 1000);
    const bool digits_only = text.find_first_not_of("0123456789") == std::string_view::npos;
    if (digits_only && *whole <= kMaxMilli / 1000 / 1024) {
      auto ki = parse_whole_quantity(std::string(text) + "Ki");
      require(ki && *ki == *whole * 1024);
    }
  } else {
    require(whole.message().rfind("\"" + std::string(text) + "\" ", 0) == 0);
  }
  return 0;
}
