// multipart/form-data request bodies (RFC 7578), as OpenAI's audio endpoints receive them: the
// parts' names, file names, content types and bytes. The parts are views into the body, which must
// outlive them. Malformed bodies are an InvalidArgument naming what is wrong.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "phi4mm/base/status.h"

namespace phi4mm::server::http {

struct FormPart {
  std::string name;
  std::string filename;      // empty for plain fields
  std::string content_type;  // as sent; empty when absent
  std::string_view data;
};

// Whether a Content-Type header names multipart/form-data.
bool IsMultipartFormData(std::string_view content_type);
// Parses a multipart/form-data body; the boundary comes from `content_type`. At most `max_parts`.
Result<std::vector<FormPart>> ParseMultipart(std::string_view body, std::string_view content_type,
                                             size_t max_parts = 64);
// The first part named `name`, or nullptr.
const FormPart* FindPart(const std::vector<FormPart>& parts, std::string_view name);

// %XX sequences decoded (an invalid one is kept as it is); '+' is left alone (paths, not forms).
std::string PercentDecode(std::string_view s);

}  // namespace phi4mm::server::http
