#include "server/cors.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "common/json.h"

namespace s4kv::server {
namespace {

constexpr const char* kAllMethods[] = {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"};
// Request headers a browser may send cross-origin without asking (Fetch standard).
constexpr const char* kSafelistedHeaders[] = {"accept", "accept-language", "content-language",
                                              "content-type"};
constexpr const char* kMaxAgeSeconds = "600";

bool contains(const std::vector<std::string>& list, std::string_view s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

std::string lower_trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Forwards everything to the wrapped exchange; the response or stream head gets `extra_`.
class ExtraHeadersExchange final : public HttpExchange {
 public:
  ExtraHeadersExchange(std::shared_ptr<HttpExchange> inner, Headers extra)
      : inner_(std::move(inner)), extra_(std::move(extra)) {}

  void respond(HttpResponse response) override {
    response.headers.insert(response.headers.end(), extra_.begin(), extra_.end());
    inner_->respond(std::move(response));
  }
  void begin_stream(int status, std::string content_type, Headers headers) override {
    headers.insert(headers.end(), extra_.begin(), extra_.end());
    inner_->begin_stream(status, std::move(content_type), std::move(headers));
  }
  void write(std::string data) override { inner_->write(std::move(data)); }
  void end_stream() override { inner_->end_stream(); }
  void post(std::function<void()> fn) override { inner_->post(std::move(fn)); }
  void on_disconnect(std::function<void()> fn) override { inner_->on_disconnect(std::move(fn)); }
  bool disconnected() const override { return inner_->disconnected(); }

 private:
  std::shared_ptr<HttpExchange> inner_;
  Headers extra_;
};

}  // namespace

CorsPolicy::CorsPolicy(CorsOptions options) : options_(std::move(options)) {
  any_origin_ = contains(options_.allowed_origins, "*");
  any_header_ = contains(options_.allowed_headers, "*");
  if (contains(options_.allowed_methods, "*")) {
    methods_.assign(std::begin(kAllMethods), std::end(kAllMethods));
  } else {
    methods_ = options_.allowed_methods;
  }
  for (const char* h : kSafelistedHeaders) headers_.emplace_back(h);
  for (const std::string& h : options_.allowed_headers) {
    std::string name = lower_trimmed(h);
    if (name != "*" && !contains(headers_, name)) headers_.push_back(std::move(name));
  }
  std::sort(headers_.begin(), headers_.end());
}

bool CorsPolicy::origin_allowed(std::string_view origin) const {
  return any_origin_ || contains(options_.allowed_origins, origin);
}

std::optional<HttpResponse> CorsPolicy::preflight(const HttpRequest& request) const {
  if (request.method != "OPTIONS") return std::nullopt;
  const std::optional<std::string_view> origin = request.header("origin");
  const std::optional<std::string_view> method = request.header("access-control-request-method");
  if (!origin || !method) return std::nullopt;

  HttpResponse r;
  r.content_type = "text/plain; charset=utf-8";
  std::vector<std::string> refused;
  if (!origin_allowed(*origin)) refused.emplace_back("origin");
  if (!contains(methods_, *method)) refused.emplace_back("method");
  const std::string requested_headers(
      request.header("access-control-request-headers").value_or(""));
  if (!any_header_) {
    std::string_view rest = requested_headers;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string name = lower_trimmed(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      if (!name.empty() && !contains(headers_, name)) {
        refused.emplace_back("headers");
        break;
      }
    }
  }
  if (!refused.empty()) {
    r.status = 400;
    r.body = "Disallowed CORS " + join(refused);
    return r;
  }
  r.body = "OK";
  add_allow_origin(*origin, r.headers);
  r.headers.emplace_back("Access-Control-Allow-Methods", join(methods_));
  if (any_header_) {
    if (!requested_headers.empty()) {
      r.headers.emplace_back("Access-Control-Allow-Headers", requested_headers);
    }
  } else {
    r.headers.emplace_back("Access-Control-Allow-Headers", join(headers_));
  }
  r.headers.emplace_back("Access-Control-Max-Age", kMaxAgeSeconds);
  add_allow_credentials(r.headers);
  return r;
}

Headers CorsPolicy::response_headers(const HttpRequest& request) const {
  Headers h;
  const std::optional<std::string_view> origin = request.header("origin");
  if (!origin || !origin_allowed(*origin)) return h;
  add_allow_origin(*origin, h);
  add_allow_credentials(h);
  return h;
}

void CorsPolicy::add_allow_origin(std::string_view origin, Headers& h) const {
  if (echo_origin()) {
    h.emplace_back("Access-Control-Allow-Origin", std::string(origin));
    h.emplace_back("Vary", "Origin");
  } else {
    h.emplace_back("Access-Control-Allow-Origin", "*");
  }
}

void CorsPolicy::add_allow_credentials(Headers& h) const {
  if (options_.allow_credentials) h.emplace_back("Access-Control-Allow-Credentials", "true");
}

Result<std::vector<std::string>> parse_cors_list(std::string_view text, std::string_view flag) {
  const std::string what = std::string(flag) + "=" + std::string(text);
  auto parsed = parse_json(text, flag);
  if (!parsed.is_ok() || !parsed->is_array()) {
    return invalid_argument(what + ": expected a JSON array of strings, e.g. '[\"*\"]'");
  }
  std::vector<std::string> out;
  for (const Json& item : *parsed) {
    if (!item.is_string() || item.get<std::string>().empty()) {
      return invalid_argument(what + ": every item must be a non-empty string");
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::shared_ptr<HttpExchange> with_extra_headers(std::shared_ptr<HttpExchange> inner,
                                                 Headers extra) {
  return std::make_shared<ExtraHeadersExchange>(std::move(inner), std::move(extra));
}

}  // namespace s4kv::server
