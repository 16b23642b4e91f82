// chorus-board LOGDIR [--port P] [--host ADDR]: serves the scalars of every TensorBoard
// event file under LOGDIR as curves, runs side by side, refreshed as the files grow.
// See docs/dashboard.md.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "http_server.h"
#include "page.h"
#include "scalar_board.h"

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

int usage(const char* why) {
  if (why) std::fprintf(stderr, "chorus-board: %s\n", why);
  std::fputs(
      "usage: chorus-board LOGDIR [--port P] [--host ADDR]\n"
      "  serves the scalars of every event file under LOGDIR on http://ADDR:P/\n"
      "  --port P     port (default 6006; 0 picks a free one)\n"
      "  --host ADDR  address to bind (default 127.0.0.1; any other lets every host that\n"
      "               reaches it read the curves)\n",
      why ? stderr : stdout);
  return why ? 2 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace chorus::web;
  std::string logdir, host = "127.0.0.1";
  long port = 6006;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") return usage(nullptr);
    if ((a == "--port" || a == "--host") && i + 1 < argc) {
      std::string v = argv[++i];
      if (a == "--host") {
        host = v;
        continue;
      }
      char* end = nullptr;
      port = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || port < 0 || port > 65535) return usage("--port expects 0..65535");
    } else if (!a.empty() && a[0] == '-') {
      return usage(("unknown option or missing value: " + a).c_str());
    } else if (logdir.empty()) {
      logdir = a;
    } else {
      return usage("one LOGDIR only");
    }
  }
  if (logdir.empty()) return usage("no LOGDIR given");
  if (::access(logdir.c_str(), R_OK | X_OK) != 0) {
    return usage(("cannot read the directory " + logdir).c_str());
  }
  ScalarBoard board(logdir);
  const std::string page =
      page_html("chorus-board: " + logdir, "", "<div id=\"charts\" class=\"cards\"></div>",
                poll_fragment_script("charts", "charts", 2000));
  auto handler = [&](const HttpRequest& req) {
    HttpResponse r;
    if (req.path == "/") {
      r.content_type = "text/html; charset=utf-8";
      r.body = page;
    } else if (req.path == "/charts") {
      r.content_type = "text/html; charset=utf-8";
      r.body = board.charts_html();
    } else {
      r = HttpResponse::text(404, "not found\n");
    }
    return r;
  };
  try {
    HttpServer server(host, static_cast<uint16_t>(port), HttpServer::Options{}, handler);
    std::printf("chorus-board: serving %s on http://%s:%u/\n", logdir.c_str(),
                host.find(':') != std::string::npos ? ("[" + host + "]").c_str() : host.c_str(),
                server.port());
    std::fflush(stdout);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    while (!g_stop) ::usleep(100 * 1000);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chorus-board: %s\n", e.what());
    return 1;
  }
  return 0;
}
