#pragma once
// The web page `perseus serve` answers GET / with: every job with its phase, saving and slowdown,
// and one job in detail (saving over rounds, frontier, the deployed plan's timeline, stragglers,
// decisions), refreshed from the JSON routes. One HTML document with its style and script inline,
// embedded in the binary at build time from src/server/web/index.html: it needs no file beside the
// binary and nothing from elsewhere (clusters are offline). It holds no job data, so it is the one
// route the bearer token does not guard; the page asks for the token when a JSON route answers 401.
#include <string_view>

namespace perseus::server {

std::string_view web_page();

inline constexpr const char* kWebPageContentType = "text/html; charset=utf-8";
// The page may run only its own inline script and style, read this server and show images it made:
// nothing is loaded from elsewhere.
inline constexpr const char* kWebPagePolicy =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' blob:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
// The timeline's SVG opened on its own: drawn, never scripted.
inline constexpr const char* kSvgPolicy = "default-src 'none'; style-src 'unsafe-inline'";

}  // namespace perseus::server
