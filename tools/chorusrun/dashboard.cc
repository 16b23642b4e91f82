#include "dashboard.h"

#include <algorithm>
#include <cstdlib>

#include "chorus/error.h"
#include "options.h"
#include "page.h"
#include "report/report_format.h"
#include "timeline_tail.h"
#include "util/log.h"

namespace chorus::run {
namespace {

web::JobBoard::Options board_options(const DashboardConfig& c, int np, bool token) {
  web::JobBoard::Options o;
  o.np = np;
  o.title = c.title;
  o.stall_seconds = c.stall_seconds;
  if (token) {
    o.notice =
        "This page is served beyond loopback: its address carries the job secret as "
        "?token=..., so anyone who has the address can read this page. Share it as you "
        "would share the secret.";
  }
  return o;
}

}  // namespace

net::Endpoint parse_dashboard_address(const std::string& text) {
  std::string host = "127.0.0.1", port = text;
  size_t colon = text.rfind(':');
  if (colon != std::string::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
  }
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535 || host.empty()) {
    throw UsageError("--dashboard expects [ADDR:]PORT (PORT 0..65535), got '" + text + "'");
  }
  return {host, static_cast<uint16_t>(p)};
}

Dashboard::Dashboard(const DashboardConfig& config, int np, const Secret& secret)
    : config_(config),
      np_(np),
      secret_(secret),
      board_(board_options(config, np, !web::is_loopback_host(config.bind.host))) {
  const bool token = !web::is_loopback_host(config.bind.host);
  std::string notice = board_options(config, np, token).notice;
  page_ =
      web::page_html("chorusrun: " + config.title, notice, "<div id=\"content\">loading...</div>",
                     web::poll_fragment_script("fragment", "content", 1000));
  web::HttpServer::Options o;
  if (token) o.token = secret.bytes();
  try {
    server_ =
        std::make_unique<web::HttpServer>(config.bind.host, config.bind.port, o,
                                          [this](const web::HttpRequest& r) { return handle(r); });
  } catch (const Error& e) {
    throw UsageError("--dashboard: cannot serve on " + config.bind.to_string() + ": " + e.what());
  }
}

Dashboard::~Dashboard() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (poller_.joinable()) poller_.join();
  server_->stop();
}

std::string Dashboard::url() const {
  net::Endpoint at{config_.bind.host, server_->port()};
  return "http://" + at.to_string() + "/";
}

void Dashboard::watch_store(const std::string& host, uint16_t port) {
  store_host_ = host;
  store_port_ = port;
  poller_ = std::thread([this] { poll_loop(); });
}

void Dashboard::poll_loop() {
  std::unique_ptr<TcpStoreClient> store;
  const auto period = std::chrono::duration<double>(config_.report_seconds);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    try {
      if (!store) {
        store = std::make_unique<TcpStoreClient>(store_host_, store_port_, secret_,
                                                 std::chrono::seconds(5));
      }
      const int restart = board_.restart();
      for (int r = 0; r < np_; ++r) {
        std::string key = report::report_key(restart, r);
        if (store->check({key})) board_.report(r, store->get(key, std::chrono::seconds(2)));
      }
    } catch (const std::exception& e) {
      CHORUS_LOG(kInfo, "dashboard") << "reading reports: " << e.what();
      store.reset();
    }
    lock.lock();
    wake_.wait_for(lock, period, [this] { return stop_; });
  }
}

web::HttpResponse Dashboard::handle(const web::HttpRequest& req) {
  web::HttpResponse r;
  if (req.path == "/") {
    r.content_type = "text/html; charset=utf-8";
    r.body = page_;
  } else if (req.path == "/fragment") {
    r.content_type = "text/html; charset=utf-8";
    r.body = board_.fragment_html();
  } else if (req.path == "/state.json") {
    r.content_type = "application/json";
    r.body = board_.state_json();
  } else if (req.path == "/timeline.json") {
    if (config_.timeline_path.empty()) {
      return web::HttpResponse::text(
          404,
          "no timeline: start chorusrun with CHORUS_TIMELINE=PATH (rank 0 writes it, "
          "docs/engine.md) to download its last seconds here\n");
    }
    double seconds = std::clamp(std::atof(req.param("seconds", "30").c_str()), 1.0, 3600.0);
    r.content_type = "application/json";
    r.headers["Content-Disposition"] = "attachment; filename=\"chorus-timeline.json\"";
    r.body = web::timeline_tail(config_.timeline_path, seconds);
  } else {
    return web::HttpResponse::text(404, "not found\n");
  }
  return r;
}

}  // namespace chorus::run
