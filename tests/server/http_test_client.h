// A blocking raw-socket HTTP/1.1 client for HttpServer tests: sends bytes as given and
// parses responses (Content-Length or chunked; a HEAD response's head only), so limits,
// framing, keep-alive, streaming and disconnects are observed exactly as a client sees them.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace s4kv::server::http_test {

using namespace std::chrono_literals;

// Polls pred every 5 ms until it holds or `limit` passes.
inline bool wait_for(const std::function<bool()>& pred, std::chrono::milliseconds limit = 5000ms) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // decoded
  std::vector<std::string> chunks;             // chunked bodies: each chunk as sent
};

// A blocking client on one TCP connection; every receive gives up after 5 s.
class Client {
 public:
  explicit Client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Client() { close(); }
  bool connected() const { return connected_; }

  void send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // True when the server closed the connection (EOF or reset) without sending anything more.
  bool closed_by_server() {
    if (!buf_.empty()) return false;
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, 0);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }
  // Reads until `text` has arrived; returns everything up to and including it.
  std::optional<std::string> read_until(const std::string& text) {
    size_t pos;
    while ((pos = buf_.find(text)) == std::string::npos) {
      if (!fill()) return std::nullopt;
    }
    std::string out = buf_.substr(0, pos + text.size());
    buf_.erase(0, pos + text.size());
    return out;
  }
  std::optional<std::string> read_exactly(size_t n) {
    while (buf_.size() < n) {
      if (!fill()) return std::nullopt;
    }
    std::string out = buf_.substr(0, n);
    buf_.erase(0, n);
    return out;
  }
  // One response; nullopt when the connection ends first. head_only: the response to a HEAD
  // request, whose framing headers describe a body that is not sent.
  std::optional<Response> read_response(bool head_only = false) {
    auto head = read_until("\r\n\r\n");
    if (!head || head->rfind("HTTP/1.", 0) != 0) return std::nullopt;
    Response r;
    r.status = std::stoi(head->substr(9, 3));
    size_t pos = head->find("\r\n") + 2;
    while (pos < head->size() - 2) {
      const size_t end = head->find("\r\n", pos);
      const std::string line = head->substr(pos, end - pos);
      const size_t colon = line.find(':');
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
      pos = end + 2;
    }
    if (head_only) return r;
    if (r.headers["transfer-encoding"] == "chunked") {
      for (;;) {
        auto size_line = read_until("\r\n");
        if (!size_line) return std::nullopt;
        const size_t size = std::stoul(*size_line, nullptr, 16);
        auto data = read_exactly(size + 2);
        if (!data) return std::nullopt;
        if (size == 0) break;
        r.chunks.push_back(data->substr(0, size));
        r.body += r.chunks.back();
      }
    } else if (r.headers.count("content-length")) {
      auto data = read_exactly(std::stoul(r.headers["content-length"]));
      if (!data) return std::nullopt;
      r.body = *data;
    }
    return r;
  }

 private:
  bool fill() {
    char tmp[4096];
    const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

inline std::string get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: test\r\n" + extra + "\r\n";
}

inline std::string post(const std::string& path, const std::string& body,
                        const std::string& extra = "") {
  return "POST " + path +
         " HTTP/1.1\r\nHost: test\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
         extra + "\r\n" + body;
}

// Checks the OpenAI error shape and returns the error object.
inline nlohmann::json expect_api_error(const Response& r, int status, const std::string& type) {
  EXPECT_EQ(r.status, status);
  EXPECT_EQ(r.headers.at("content-type"), "application/json");
  const auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["error"]["type"], type);
  EXPECT_EQ(j["error"]["code"], status);
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"].contains("param"));
  return j["error"];
}

}  // namespace s4kv::server::http_test
