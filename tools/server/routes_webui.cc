// GET / and /ui/<file>: the chat page (tools/server/webui/, embedded at build time), answered on
// the HTTP layer's I/O thread from memory. Every file carries a Content-Security-Policy that allows
// scripts, styles and connections from this origin only (no inline script, no remote source), an
// ETag (a reload revalidates with If-None-Match and gets 304), and nosniff. The page is public
// even on a server with API keys: it asks for the key and sends it as a Bearer token itself.
#include <algorithm>

#include "server_internal.h"
#include "webui_assets.h"

namespace phi4mm::server {

namespace {

// data: and blob: images and audio are the user's own attachments and recordings.
constexpr std::string_view kPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "media-src 'self' data: blob:; connect-src 'self'; manifest-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'; object-src 'none'";

std::string_view ContentType(std::string_view name) {
  const auto ends = [&](std::string_view ext) {
    return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".json")) return "application/json";
  return "application/octet-stream";
}

// True when an If-None-Match header lists `etag` (quoted) or is "*".
bool Matches(std::string_view if_none_match, std::string_view quoted) {
  size_t pos = 0;
  while (pos < if_none_match.size()) {
    size_t end = if_none_match.find(',', pos);
    if (end == std::string_view::npos) end = if_none_match.size();
    std::string_view tag = if_none_match.substr(pos, end - pos);
    while (!tag.empty() && tag.front() == ' ') tag.remove_prefix(1);
    while (!tag.empty() && tag.back() == ' ') tag.remove_suffix(1);
    if (tag.substr(0, 2) == "W/") tag.remove_prefix(2);
    if (tag == quoted || tag == "*") return true;
    pos = end + 1;
  }
  return false;
}

void ServeAsset(const WebAsset& a, const http::Request& req, const http::Exchange& ex) {
  std::string etag(1, '"');  // (built by appends: GCC 12 warns falsely on "\"" + string)
  etag.append(a.etag).push_back('"');
  http::Response r;
  r.content_type = std::string(ContentType(a.name));
  r.headers = {{"Content-Security-Policy", std::string(kPolicy)},
               {"X-Content-Type-Options", "nosniff"},
               {"Referrer-Policy", "no-referrer"},
               {"Cache-Control", "no-cache"},
               {"ETag", etag}};
  if (Matches(req.header("if-none-match"), etag)) {
    r.status = 304;
  } else {
    r.body = std::string(a.bytes);
  }
  ex.Send(std::move(r));
}

}  // namespace

bool WebUiPath(const std::string& path) { return path == "/" || path.rfind("/ui/", 0) == 0; }

void InstallWebUiRoutes(Server::Impl& s) {
  if (!s.opts.webui) return;
  using Run = http::Server::Run;
  for (const WebAsset& a : WebAssets()) {
    const std::string path = a.name == "index.html" ? "/" : "/ui/" + std::string(a.name);
    s.http.Route("GET", path, Run::kInline, [&a](http::Request& req, http::Exchange ex) { ServeAsset(a, req, ex); });
  }
}

}  // namespace phi4mm::server
