// CORS as `vllm serve` does it (--allowed-origins, --allowed-methods, --allowed-headers,
// --allow-credentials; every origin, method and header allowed by default), so that browser
// front ends that talk to vLLM today keep working.
//
// A preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered here, before
// authentication (browsers never send credentials on it): 200 with the Access-Control-Allow-*
// headers, or 400 naming what is disallowed. Any other request that carries an allowed Origin
// gets Access-Control-Allow-Origin (and Allow-Credentials) on its response, error or stream.
// Without an Origin header nothing changes. Plain data after construction; thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "server/http_server.h"

namespace s4kv::server {

struct CorsOptions {
  std::vector<std::string> allowed_origins{"*"};  // "*": any origin
  std::vector<std::string> allowed_methods{"*"};  // "*": DELETE GET HEAD OPTIONS PATCH POST PUT
  std::vector<std::string> allowed_headers{"*"};  // "*": whatever the preflight asks for
  bool allow_credentials = false;
};

class CorsPolicy {
 public:
  explicit CorsPolicy(CorsOptions options);

  // The whole answer to a preflight request; nullopt when `request` is not one.
  std::optional<HttpResponse> preflight(const HttpRequest& request) const;
  // Headers for the response to an actual request; empty without an allowed Origin.
  Headers response_headers(const HttpRequest& request) const;

 private:
  bool origin_allowed(std::string_view origin) const;
  // "*", or the request's origin when origins are listed or credentials are allowed (a
  // browser refuses "*" on a credentialed request).
  bool echo_origin() const { return !any_origin_ || options_.allow_credentials; }
  // Access-Control-Allow-Origin (and Vary when echoed) for an allowed origin.
  void add_allow_origin(std::string_view origin, Headers& h) const;
  void add_allow_credentials(Headers& h) const;

  CorsOptions options_;
  bool any_origin_ = false;
  bool any_header_ = false;
  std::vector<std::string> methods_;  // "*" expanded
  std::vector<std::string> headers_;  // lower-cased, with the CORS-safelisted ones
};

// A flag value such as --allowed-origins '["https://a.example", "https://b.example"]': a JSON
// array of strings. kInvalidArgument naming the flag otherwise.
Result<std::vector<std::string>> parse_cors_list(std::string_view text, std::string_view flag);

// `inner` with `extra` appended to the headers of its response or stream head.
std::shared_ptr<HttpExchange> with_extra_headers(std::shared_ptr<HttpExchange> inner,
                                                 Headers extra);

}  // namespace s4kv::server
