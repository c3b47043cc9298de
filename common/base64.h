#pragma once
// RFC 4648 base64 (standard alphabet, padded). Pure; no OpenSSL (EVP_DecodeBlock miscounts padding).

#include <optional>
#include <string>
#include <string_view>

namespace gpuslice {

std::string base64_encode(std::string_view data);

/// Decodes standard base64. Whitespace (CR, LF, space, tab) is ignored, as PEM and kubeconfig data may be
/// wrapped. Returns nullopt on any other invalid character, bad padding or a truncated quantum.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace gpuslice
