// multipart/form-data parsing (multipart.h): the boundary parameter, the delimiter lines, each
// part's headers (Content-Disposition's name and filename, Content-Type) and its bytes up to the
// next delimiter.
#include "multipart.h"

#include <cctype>

namespace phi4mm::server::http {

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The value of parameter `key` in a header value such as `form-data; name="file"` ("" when
// absent); quoted values may escape a quote or backslash with a backslash.
bool Param(std::string_view header, std::string_view key, std::string* out) {
  size_t pos = header.find(';');
  while (pos != std::string_view::npos) {
    std::string_view rest = header.substr(pos + 1);
    const size_t eq = rest.find('=');
    const size_t semi = rest.find(';');
    if (eq == std::string_view::npos) return false;
    if (semi != std::string_view::npos && semi < eq) {
      pos = pos + 1 + semi;
      continue;
    }
    const std::string name = Lower(Trim(rest.substr(0, eq)));
    std::string_view v = rest.substr(eq + 1);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    std::string value;
    size_t used = 0;
    if (!v.empty() && v.front() == '"') {
      size_t i = 1;
      for (; i < v.size() && v[i] != '"'; ++i) {
        if (v[i] == '\\' && i + 1 < v.size()) ++i;
        value.push_back(v[i]);
      }
      if (i >= v.size()) return false;  // unterminated quote
      used = i + 1;
    } else {
      const size_t end = v.find(';');
      value = std::string(Trim(v.substr(0, end)));
      used = end == std::string_view::npos ? v.size() : end;
    }
    if (name == key) {
      *out = std::move(value);
      return true;
    }
    const size_t next = v.substr(used).find(';');
    if (next == std::string_view::npos) return false;
    pos = static_cast<size_t>(v.data() - header.data()) + used + next;
  }
  return false;
}

}  // namespace

bool IsMultipartFormData(std::string_view content_type) {
  const std::string t = Lower(Trim(content_type.substr(0, content_type.find(';'))));
  return t == "multipart/form-data";
}

Result<std::vector<FormPart>> ParseMultipart(std::string_view body, std::string_view content_type, size_t max_parts) {
  if (!IsMultipartFormData(content_type)) return InvalidArgument("the body is not multipart/form-data");
  std::string boundary;
  if (!Param(content_type, "boundary", &boundary) || boundary.empty() || boundary.size() > 200)
    return InvalidArgument("the multipart/form-data Content-Type has no usable boundary parameter");
  const std::string delim = "--" + boundary;
  // The first delimiter: at the start, or after a preamble ending in CRLF.
  size_t pos = 0;
  if (body.substr(0, delim.size()) != delim) {
    pos = body.find("\r\n" + delim);
    if (pos == std::string_view::npos) return InvalidArgument("the multipart body does not contain its boundary");
    pos += 2;
  }
  std::vector<FormPart> parts;
  for (;;) {
    pos += delim.size();
    if (body.substr(pos, 2) == "--") return parts;  // the closing delimiter
    // Transport padding, then CRLF.
    while (pos < body.size() && (body[pos] == ' ' || body[pos] == '\t')) ++pos;
    if (body.substr(pos, 2) != "\r\n") return InvalidArgument("a multipart delimiter line is malformed");
    pos += 2;
    if (parts.size() >= max_parts)
      return InvalidArgument("the multipart body has more than " + std::to_string(max_parts) + " parts");
    const size_t head_end = body.find("\r\n\r\n", pos);
    const size_t empty_head = body.substr(pos, 2) == "\r\n" ? pos : std::string_view::npos;
    size_t data_start = 0;
    std::string_view head;
    if (empty_head == pos) {
      data_start = pos + 2;
    } else {
      if (head_end == std::string_view::npos) return InvalidArgument("a multipart part's headers do not end");
      head = body.substr(pos, head_end - pos);
      data_start = head_end + 4;
    }
    FormPart part;
    bool disposition = false;
    while (!head.empty()) {
      const size_t eol = head.find("\r\n");
      const std::string_view line = head.substr(0, eol);
      head = eol == std::string_view::npos ? std::string_view() : head.substr(eol + 2);
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) return InvalidArgument("a multipart part has a malformed header line");
      const std::string name = Lower(Trim(line.substr(0, colon)));
      const std::string_view value = Trim(line.substr(colon + 1));
      if (name == "content-disposition") {
        if (Lower(Trim(value.substr(0, value.find(';')))) != "form-data")
          return InvalidArgument("a multipart part's Content-Disposition is not form-data");
        if (!Param(value, "name", &part.name))
          return InvalidArgument("a multipart part's Content-Disposition has no name");
        Param(value, "filename", &part.filename);
        disposition = true;
      } else if (name == "content-type") {
        part.content_type = std::string(value);
      }
    }
    if (!disposition) return InvalidArgument("a multipart part has no Content-Disposition header");
    const size_t end = body.find("\r\n" + delim, data_start);
    if (end == std::string_view::npos) return InvalidArgument("the multipart body ends inside a part (no closing boundary)");
    part.data = body.substr(data_start, end - data_start);
    parts.push_back(std::move(part));
    pos = end + 2;
  }
}

const FormPart* FindPart(const std::vector<FormPart>& parts, std::string_view name) {
  for (const FormPart& p : parts)
    if (p.name == name) return &p;
  return nullptr;
}

std::string PercentDecode(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int a = hex(s[i + 1]), b = hex(s[i + 2]);
      if (a >= 0 && b >= 0) {
        out.push_back(static_cast<char>(a * 16 + b));
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace phi4mm::server::http
