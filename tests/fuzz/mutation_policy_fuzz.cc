// Fuzz target: JSON pod -> mutate_pod, under the default configuration and one with every knob changed.
// Oracle (webhook_fuzz_oracle.h): denials are well-formed, the patch applies with nlohmann-json and with
// apply_patch identically, a second pass on the patched pod is empty, the annotation decodes to the request.
#include "webhook_fuzz_oracle.h"

#include <boost/json/parse.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuslice;
  using namespace gpuslice::webhook;
  static const Configuration defaults;
  static const Configuration knobs = fuzzing::knobs_config();
  boost::json::parse_options opt;
  opt.max_depth = 64;
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(std::string_view(reinterpret_cast<const char*>(data), size), ec, {}, opt);
  if (ec || !v.is_object()) return 0;
  const boost::json::object& pod = v.get_object();
  for (const Configuration* c : {&defaults, &knobs}) {
    for (std::string_view ns : {std::string_view("team-a"), std::string_view()}) {
      fuzzing::check_mutation(pod, ns, *c, mutate_pod(pod, ns, *c));
    }
  }
  return 0;
}
