// The framing checks of http_framing.h: pure functions over the header text and fields.
#include "server/http_framing.h"

#include <cctype>

namespace s4kv::server::http_internal {
namespace {

// RFC 9110 tchar.
bool is_tchar(char c) {
  if (std::isalnum(static_cast<unsigned char>(c))) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!is_tchar(c)) return false;
  }
  return true;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// At most this much of an offending value is quoted in an error message.
constexpr size_t kMaxQuoted = 64;

std::string quoted(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, kMaxQuoted)) {
    out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  }
  return "\"" + out + (s.size() > kMaxQuoted ? "...\"" : "\"");
}

}  // namespace

bool has_obs_fold(std::string_view header) {
  // A line start after the request line that begins with whitespace; the empty line that
  // ends the header is not followed by anything of the header.
  for (size_t pos = header.find('\n'); pos != std::string_view::npos;
       pos = header.find('\n', pos + 1)) {
    if (pos + 1 < header.size() && (header[pos + 1] == ' ' || header[pos + 1] == '\t')) {
      return true;
    }
  }
  return false;
}

std::optional<FramingError> check_transfer_encoding(
    const std::vector<std::string_view>& transfer_encodings, bool has_content_length,
    unsigned version) {
  if (transfer_encodings.empty()) return std::nullopt;
  if (version < 11) {
    return FramingError{400, "Transfer-Encoding is not allowed in an HTTP/1.0 request"};
  }
  if (has_content_length) {
    return FramingError{400, "a request must not carry both Transfer-Encoding and Content-Length"};
  }
  int num_chunked = 0;
  std::optional<std::string_view> unsupported;
  for (std::string_view value : transfer_encodings) {
    size_t start = 0;
    while (true) {
      const size_t comma = value.find(',', start);
      const std::string_view coding = trim_ows(value.substr(start, comma - start));
      if (!is_token(coding)) {
        return FramingError{400, "malformed Transfer-Encoding " + quoted(value)};
      }
      if (iequals(coding, "chunked")) {
        ++num_chunked;
      } else if (!unsupported) {
        unsupported = coding;
      }
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }
  if (unsupported) {
    return FramingError{
        501, "Transfer-Encoding " + quoted(*unsupported) + " is not supported (only chunked)"};
  }
  if (num_chunked > 1) {
    return FramingError{400, "Transfer-Encoding applies chunked more than once"};
  }
  return std::nullopt;
}

}  // namespace s4kv::server::http_internal
