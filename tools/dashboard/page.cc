#include "page.h"

#include "http_server.h"

namespace chorus::web {

namespace {

const char kStyle[] = R"(
body{font-family:sans-serif;margin:0;background:#f6f7f9;color:#222;font-size:14px}
header{background:#243447;color:#fff;padding:8px 16px}
header h1{font-size:18px;margin:0;display:inline-block}
header .sub{margin-left:12px;color:#cfd8e3;font-size:13px}
.notice{background:#fff3cd;border-bottom:1px solid #e0c97a;padding:6px 16px;font-size:13px}
main{padding:8px 16px}
.cards{display:flex;flex-wrap:wrap;gap:8px}
.card{background:#fff;border:1px solid #dde;border-radius:4px;padding:6px}
table{border-collapse:collapse;background:#fff;font-size:13px}
th,td{border:1px solid #dde;padding:3px 7px;text-align:right;white-space:nowrap}
th{background:#eef1f5}
td.l{text-align:left}
.state-live{color:#1a7f37;font-weight:bold}.state-stalled{color:#b58100;font-weight:bold}
.state-dead{color:#c62828;font-weight:bold}.state-restarting,.state-starting{color:#555}
.state-exited{color:#555}
.bar{display:inline-block;height:10px;vertical-align:middle}
.events{background:#fff;border:1px solid #dde;padding:4px 8px;max-height:180px;overflow:auto;
font-family:monospace;font-size:12px;white-space:pre-wrap}
h2{font-size:15px;margin:12px 0 6px}
.error{color:#c62828}.empty{color:#888}
)";

}  // namespace

std::string page_html(const std::string& title, const std::string& notice, const std::string& body,
                      const std::string& script) {
  std::string out =
      "<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
      "<title>" +
      html_escape(title) + "</title><style>" + kStyle + "</style></head><body><header><h1>" +
      html_escape(title) + "</h1><span class=\"sub\" id=\"sub\"></span></header>";
  if (!notice.empty()) out += "<div class=\"notice\">" + html_escape(notice) + "</div>";
  out += "<main>" + body + "</main><script>" + script + "</script></body></html>";
  return out;
}

std::string poll_fragment_script(const std::string& url, const std::string& target_id,
                                 int period_ms) {
  return "(function(){var q=location.search;function tick(){fetch(" + json_string(url) +
         "+q,{cache:'no-store'}).then(function(r){return r.ok?r.text():Promise.reject(r.status)})"
         ".then(function(t){document.getElementById(" +
         json_string(target_id) +
         ").innerHTML=t;document.querySelectorAll('a[data-keep-query]').forEach(function(a){"
         "a.href=a.getAttribute('href').split('?')[0]+q});"
         "document.getElementById('sub').textContent='updated '+"
         "new Date().toLocaleTimeString()}).catch(function(e){document.getElementById('sub')"
         ".textContent='not reachable ('+e+')'}).finally(function(){setTimeout(tick," +
         std::to_string(period_ms) + ")})}tick()})();";
}

}  // namespace chorus::web
