// chorusrun --dashboard [ADDR:]PORT: a web page of the running job (docs/dashboard.md).
// Serves web::JobBoard's page over web::HttpServer, and polls the ranks' reports
// (chorus/report.h) from the launcher's own store once per report period on a thread of
// its own. The supervising thread feeds the launcher's events through board().
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "chorus/store.h"
#include "http_server.h"
#include "job_board.h"
#include "util/net.h"

namespace chorus::run {

struct DashboardConfig {
  net::Endpoint bind;         // --dashboard's address (127.0.0.1 when only a port is given)
  double report_seconds = 1;  // CHORUS_REPORT_SECONDS given to the ranks
  double stall_seconds = 10;  // --dashboard-stall
  std::string timeline_path;  // CHORUS_TIMELINE of the job, "" if none
  std::string title;
};

// "8080", "0.0.0.0:8080", "[::1]:8080" -> where to bind. UsageError when malformed.
net::Endpoint parse_dashboard_address(const std::string& text);

class Dashboard {
 public:
  // Binds the page (UsageError when it cannot). Beyond loopback, the page needs
  // ?token=<the job secret> (the HTTP server answers 403 otherwise), and says so.
  Dashboard(const DashboardConfig& config, int np, const Secret& secret);
  ~Dashboard();

  // The launcher's store, once it exists: the poller starts reading reports.
  void watch_store(const std::string& host, uint16_t port);
  web::JobBoard& board() { return board_; }
  // "http://127.0.0.1:8080/" (with "?token=..." left for the user to add).
  std::string url() const;

 private:
  void poll_loop();
  web::HttpResponse handle(const web::HttpRequest& req);

  DashboardConfig config_;
  int np_;
  Secret secret_;
  web::JobBoard board_;
  std::string page_;
  std::unique_ptr<web::HttpServer> server_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::string store_host_;
  uint16_t store_port_ = 0;
  std::thread poller_;
};

}  // namespace chorus::run
