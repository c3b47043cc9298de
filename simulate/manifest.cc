#include "simulate/manifest.h"

#include "common/yaml_json.h"

#include <string_view>

namespace gpuslice::simulate {
namespace json = boost::json;

Result<json::value> yaml_to_json(std::string_view yaml_text) {
  return yaml_to_json_first(yaml_text);
}

Result<std::vector<Manifest>> parse_manifests(std::string_view text, std::string_view source) {
  std::string src(source);
  auto docs = yaml_to_json_documents(text);
  if (!docs.ok()) {
    return make_error(src + ": " + docs.message());
  }
  std::vector<Manifest> out;
  for (size_t i = 0; i < docs->size(); ++i) {
    std::string at = src + ": document " + std::to_string(i);
    json::value* v = &docs->at(i);
    if (v->is_null()) {
      continue;
    }
    if (!v->is_object()) {
      return make_error(at + ": must be a mapping (a Kubernetes object)");
    }
    json::object& o = v->get_object();
    const json::value* kind = o.if_contains("kind");
    if (kind == nullptr) {
      return make_error(at + ": kind: missing");
    }
    if (!kind->is_string() || kind->get_string().empty()) {
      return make_error(at + ": kind: must be a non-empty string");
    }
    std::string_view k = kind->get_string();
    if (k.size() >= 4 && k.substr(k.size() - 4) == "List" && o.contains("items")) {
      const json::value& items = o.at("items");
      if (!items.is_array()) {
        return make_error(at + ": items: must be a list");
      }
      size_t j = 0;
      for (const json::value& item : items.get_array()) {
        std::string iat = at + ": items[" + std::to_string(j++) + "]";
        if (!item.is_object()) {
          return make_error(iat + ": must be a mapping");
        }
        const json::value* ik = item.get_object().if_contains("kind");
        if (ik == nullptr || !ik->is_string() || ik->get_string().empty()) {
          return make_error(iat + ".kind: missing");
        }
        out.push_back(Manifest{i, item.get_object()});
      }
      continue;
    }
    out.push_back(Manifest{i, std::move(o)});
  }
  return out;
}

}  // namespace gpuslice::simulate
