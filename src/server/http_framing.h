// Strict HTTP/1.1 request framing (RFC 9112, sections 5.2 and 6), checked once a request's
// header has been parsed and before its body is read. Beast alone treats a Transfer-Encoding
// it does not know (gzip, identity, "chunked, chunked") as no body and lets a request carry
// both a non-chunked Transfer-Encoding and a Content-Length; a front proxy that frames the
// same bytes differently would then smuggle the body in as a request of its own. So the only
// transfer coding taken is exactly one "chunked", and every other shape is refused (the
// connection is closed after the answer, see http_connection.cc):
//   - obsolete line folding in the header -> 400 (Beast would unfold it);
//   - Transfer-Encoding in an HTTP/1.0 request, or together with Content-Length -> 400;
//   - an element that is not a token (empty, parameters, spaces) -> 400;
//   - a coding other than chunked (gzip, identity, xchunked, "gzip, chunked") -> 501;
//   - chunked more than once -> 400.
// Two differing Content-Length values, bare LF line ends and a Content-Length after a
// chunked Transfer-Encoding are refused by Beast's parser itself (400).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace s4kv::server::http_internal {

struct FramingError {
  int status = 400;
  std::string message;
};

// The request header as received (request line to the empty line, CRLF line ends): true
// when a field line is continued on the next (a line that starts with SP or HTAB).
bool has_obs_fold(std::string_view header);

// transfer_encodings: the values of every Transfer-Encoding field, in order. nullopt when
// the request's framing is acceptable.
std::optional<FramingError> check_transfer_encoding(
    const std::vector<std::string_view>& transfer_encodings, bool has_content_length,
    unsigned version);

}  // namespace s4kv::server::http_internal
