// A small HTTP/1.1 server for chorus's web pages (chorusrun --dashboard, chorus-board):
// GET and HEAD only, one request per connection (the response says Connection: close), no
// request bodies. Built for a hostile or careless network rather than for speed:
//
// - a request's head (request line and headers) is at most Options::max_request_bytes
//   (431 beyond) and must arrive within Options::request_timeout from the connection's
//   first moment (a slow or silent client is dropped, 408 when something was sent);
// - a response must be taken by the client within Options::response_timeout;
// - at most Options::max_clients connections at once (one thread each, through
//   rendezvous::ConnectionServer); further ones are refused (closed at once);
// - anything that is not a well-formed GET or HEAD gets 400 or 405 and the connection is
//   closed; nothing a client sends is echoed unescaped into a page;
// - with Options::token set, every request must carry `token=<token>` in its query string
//   (compared in constant time) or it gets 403.
//
// Thread safety: the handler runs on the connection's thread, several at once; it must be
// thread-safe. start() and stop() are called by the owner.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace chorus::web {

struct HttpRequest {
  std::string method;                        // "GET" or "HEAD"
  std::string path;                          // percent-decoded, without the query: "/state.json"
  std::map<std::string, std::string> query;  // decoded; a repeated key keeps its last value
  std::string peer;

  // The query value of `key`, or `fallback`.
  std::string param(const std::string& key, const std::string& fallback = "") const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::map<std::string, std::string> headers;  // extra headers (Content-Disposition, ...)

  static HttpResponse text(int status, std::string body);
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  struct Options {
    int max_clients = 128;
    size_t max_request_bytes = 8192;
    std::chrono::milliseconds request_timeout{5000};
    std::chrono::milliseconds response_timeout{10000};
    std::string token;  // empty: no token needed
  };

  // Throws IoError when host:port cannot be bound. The server runs until stop() or
  // destruction.
  HttpServer(const std::string& host, uint16_t port, Options options, Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;
  void stop();
  // Requests answered, and connections dropped for a bad, slow or unauthorised request.
  uint64_t served() const;
  uint64_t rejected() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// "%41b+c" -> "Ab c" (in a query, '+' is a space). Malformed escapes are kept as they are.
std::string url_decode(const std::string& text, bool plus_is_space);
// Every byte outside [A-Za-z0-9-._~] as %XX.
std::string url_encode(const std::string& text);
// &, <, >, ", ' as entities, for text put into HTML or SVG.
std::string html_escape(const std::string& text);
// A JSON string literal with its quotes; control characters and non-ASCII bytes escaped
// as \u00XX (bytes, not code points: the text chorus handles is ASCII or passed through).
std::string json_string(const std::string& text);
// A number for JSON: finite values as %.6g, NaN and infinities as null.
std::string json_number(double value);
// Whether `host` is a loopback address or name (127.0.0.0/8, ::1, localhost).
bool is_loopback_host(const std::string& host);

}  // namespace chorus::web
