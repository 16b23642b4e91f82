// The HTML shell shared by chorus's pages: inline style and script only (no asset is ever
// fetched from elsewhere), a header, and a body that a script refreshes by polling.
#pragma once

#include <string>

namespace chorus::web {

// A complete page titled `title` (escaped). `notice` is shown under the title when not
// empty (escaped); `body` and `script` are put in as they are (the callers' own constants).
std::string page_html(const std::string& title, const std::string& notice, const std::string& body,
                      const std::string& script);

// The script that fetches `url` (same origin, the page's own query string appended, so a
// token travels along) every `period_ms` and puts the answer into the element `target_id`;
// links in it marked data-keep-query get the page's query string too.
std::string poll_fragment_script(const std::string& url, const std::string& target_id,
                                 int period_ms);

}  // namespace chorus::web
