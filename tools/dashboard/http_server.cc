#include "http_server.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "chorus/error.h"
#include "rendezvous/connection_server.h"
#include "util/log.h"
#include "util/net.h"

namespace chorus::web {
namespace {

const char* reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::string& other = a.size() == b.size() ? b : a;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ other[i]);
  return diff == 0;
}

std::map<std::string, std::string> parse_query(const std::string& query) {
  std::map<std::string, std::string> out;
  size_t start = 0;
  while (start <= query.size()) {
    size_t end = query.find('&', start);
    if (end == std::string::npos) end = query.size();
    std::string part = query.substr(start, end - start);
    if (!part.empty()) {
      size_t eq = part.find('=');
      std::string key = url_decode(part.substr(0, eq), true);
      out[key] = eq == std::string::npos ? "" : url_decode(part.substr(eq + 1), true);
    }
    start = end + 1;
  }
  return out;
}

// The request line "GET /path?query HTTP/1.1" into `req`; the status to answer otherwise.
int parse_request_line(const std::string& line, HttpRequest& req) {
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos || line.find(' ', sp2 + 1) != std::string::npos) return 400;
  req.method = line.substr(0, sp1);
  std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string version = line.substr(sp2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return 400;
  if (target.empty() || target[0] != '/') return 400;
  for (char c : line) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) == 0x7f) return 400;
  }
  size_t q = target.find('?');
  req.path = url_decode(target.substr(0, q), false);
  if (q != std::string::npos) req.query = parse_query(target.substr(q + 1));
  if (req.method != "GET" && req.method != "HEAD") return 405;
  return 0;
}

}  // namespace

std::string HttpRequest::param(const std::string& key, const std::string& fallback) const {
  auto it = query.find(key);
  return it == query.end() ? fallback : it->second;
}

HttpResponse HttpResponse::text(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

struct HttpServer::Impl {
  Impl(Options o, Handler h)
      : options(std::move(o)),
        handler(std::move(h)),
        server(server_options(options), [this](rendezvous::Connection& c) { serve(c); }) {}

  static rendezvous::ConnectionServer::Options server_options(const Options& o) {
    rendezvous::ConnectionServer::Options so;
    so.log_tag = "http";
    so.max_clients = o.max_clients;
    return so;
  }

  void serve(rendezvous::Connection& conn);
  // Reads the request head; returns 0 with `head` filled, or a status to answer (-1: none).
  int read_head(int fd, Deadline deadline, std::string& head);
  HttpResponse respond(const std::string& head, const std::string& peer, bool& head_only);
  void send(int fd, const HttpResponse& r, bool head_only);

  Options options;
  Handler handler;
  std::atomic<uint64_t> served{0}, rejected{0};
  rendezvous::ConnectionServer server;
};

int HttpServer::Impl::read_head(int fd, Deadline deadline, std::string& head) {
  char buf[2048];
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (head.size() > options.max_request_bytes) return 431;
    size_t n = 0;
    try {
      if (!net::wait_fd(fd, POLLIN, deadline)) return head.empty() ? -1 : 408;
      n = net::recv_some(fd, buf, sizeof(buf), deadline, "http request");
    } catch (const Error&) {
      return -1;  // reset, or closed mid-way
    }
    if (n == 0) return head.empty() ? -1 : 400;
    head.append(buf, n);
  }
  if (head.find("\r\n\r\n") > options.max_request_bytes) return 431;
  return 0;
}

HttpResponse HttpServer::Impl::respond(const std::string& head, const std::string& peer,
                                       bool& head_only) {
  HttpRequest req;
  req.peer = peer;
  int status = parse_request_line(head.substr(0, head.find("\r\n")), req);
  if (status == 405) return HttpResponse::text(405, "only GET and HEAD are served\n");
  if (status != 0) return HttpResponse::text(status, "bad request\n");
  head_only = req.method == "HEAD";
  if (!options.token.empty() && !constant_time_equal(req.param("token"), options.token)) {
    return HttpResponse::text(403,
                              "this page is served beyond loopback: add ?token=<the job secret> "
                              "to the address\n");
  }
  try {
    return handler(req);
  } catch (const std::exception& e) {
    CHORUS_LOG(kWarning, "http") << "handler failed for " << req.path << ": " << e.what();
    return HttpResponse::text(500, "internal error\n");
  }
}

void HttpServer::Impl::send(int fd, const HttpResponse& r, bool head_only) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + reason(r.status) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  out += "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n";
  out += "Connection: close\r\n";
  for (const auto& [k, v] : r.headers) out += k + ": " + v + "\r\n";
  out += "\r\n";
  if (!head_only) out += r.body;
  net::send_all(fd, out.data(), out.size(), Deadline::after(options.response_timeout),
                "http response");
}

void HttpServer::Impl::serve(rendezvous::Connection& conn) {
  const int fd = conn.fd.get();
  std::string head;
  int status = read_head(fd, Deadline::after(options.request_timeout), head);
  HttpResponse response;
  bool head_only = false;
  if (status == 0) {
    response = respond(head, conn.peer, head_only);
  } else if (status > 0) {
    response = HttpResponse::text(status, "bad request\n");
  }
  if (status != 0 || response.status == 400 || response.status == 403) rejected.fetch_add(1);
  if (status < 0 || server.stopping()) return;
  try {
    send(fd, response, head_only);
    if (status == 0) served.fetch_add(1);
  } catch (const Error& e) {  // the client left or did not read in time
    CHORUS_LOG(kInfo, "http") << "client " << conn.peer << " left: " << e.what();
  }
}

HttpServer::HttpServer(const std::string& host, uint16_t port, Options options, Handler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {
  CHORUS_CHECK_ARG(impl_->options.max_clients > 0, "HttpServer needs max_clients > 0");
  impl_->server.start(host, port);
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::stop() { impl_->server.stop(); }
uint16_t HttpServer::port() const { return impl_->server.port(); }
uint64_t HttpServer::served() const { return impl_->served.load(); }
uint64_t HttpServer::rejected() const { return impl_->rejected.load(); }

std::string url_decode(const std::string& text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%' && i + 2 < text.size() && hex_value(text[i + 1]) >= 0 &&
        hex_value(text[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2])));
      i += 2;
    } else {
      out.push_back(plus_is_space && c == '+' ? ' ' : c);
    }
  }
  return out;
}

std::string url_encode(const std::string& text) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += {'%', kHex[c >> 4], kHex[c & 15]};
    }
  }
  return out;
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20 || c >= 0x7f || c == '<' || c == '>' || c == '&') {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out + "\"";
}

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", value);
  return buf;
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

}  // namespace chorus::web
