#pragma once
// RFC 4648 base64 (standard alphabet, padded). Pure; no OpenSSL (EVP_DecodeBlock miscounts padding).

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace gpuslice {

std::string base64_encode(std::string_view data);

/// Replaces s[from..] with its base64 encoding, in place (s grows by a third): for text built at the end of a
/// string that must carry it encoded, without a second buffer.
void base64_encode_tail(std::string& s, std::size_t from);

/// Decodes standard base64. Whitespace (CR, LF, space, tab) is ignored, as PEM and kubeconfig data may be
/// wrapped. Returns nullopt on any other invalid character, bad padding or a truncated quantum.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace gpuslice
