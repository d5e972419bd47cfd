// The wire format of answers (status line, headers, chunks, the Date header), reason phrases, and
// Request's header lookups.
#include <algorithm>
#include <ctime>

#include "server_impl.h"

namespace phi4mm::server::http {

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] + 32) : a[i];
    const char y = b[i] >= 'A' && b[i] <= 'Z' ? static_cast<char>(b[i] + 32) : b[i];
    if (x != y) return false;
  }
  return true;
}

namespace {

bool SafeHeader(const Header& h) {
  auto bad = [](char c) { return c == '\r' || c == '\n' || c == '\0'; };
  return !h.name.empty() && std::none_of(h.name.begin(), h.name.end(), bad) &&
         std::none_of(h.value.begin(), h.value.end(), bad) &&
         h.name.find(':') == std::string::npos;
}

std::string HttpDate() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

}  // namespace

// The status line and headers of a response; `length` < 0: chunked. 204 and 304 have no body and
// say nothing of one (RFC 9110 15.3.5, 15.4.5).
std::string Head(int status, const std::string& content_type, const std::vector<Header>& headers, int64_t length,
                 bool close) {
  const bool bodiless = status == 204 || status == 304;
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + std::string(ReasonPhrase(status)) + "\r\n";
  h += "Date: " + HttpDate() + "\r\n";
  if (!content_type.empty() && !bodiless) h += "Content-Type: " + content_type + "\r\n";
  for (const Header& x : headers) {
    if (!SafeHeader(x) || IEquals(x.name, "content-length") || IEquals(x.name, "transfer-encoding") ||
        IEquals(x.name, "connection"))
      continue;
    h += x.name + ": " + x.value + "\r\n";
  }
  if (bodiless) {
  } else if (length >= 0) {
    h += "Content-Length: " + std::to_string(length) + "\r\n";
  } else {
    h += "Transfer-Encoding: chunked\r\n";
  }
  if (close) h += "Connection: close\r\n";
  h += "\r\n";
  return h;
}

std::string Chunk(std::string_view data) {
  char len[24];
  const int n = std::snprintf(len, sizeof len, "%zx\r\n", data.size());
  std::string c(len, static_cast<size_t>(n));
  c.append(data);
  c.append("\r\n");
  return c;
}

std::string_view ReasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

std::string_view Request::header(std::string_view name) const {
  for (const Header& h : headers)
    if (IEquals(h.name, name)) return h.value;
  return {};
}

Request Request::Head() const {
  Request r;
  r.method = method;
  r.target = target;
  r.path = path;
  r.query = query;
  r.headers = headers;
  r.client = client;
  return r;
}

bool Request::has_header(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(), [&](const Header& h) { return IEquals(h.name, name); });
}

}  // namespace phi4mm::server::http
