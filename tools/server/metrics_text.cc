// MetricsText (metrics_text.h).
#include "metrics_text.h"

#include <charconv>
#include <string_view>

namespace phi4mm::server {

std::string MetricNumber(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string EscapeLabel(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

void MetricsText::Header(const std::string& name, const char* type, const std::string& help) {
  std::string family = name;
  if (openmetrics_ && std::string_view(type) == "counter" && family.size() > 6 &&
      family.compare(family.size() - 6, 6, "_total") == 0)
    family.resize(family.size() - 6);
  out_ += "# HELP " + family + " " + help + "\n# TYPE " + family + " " + type + "\n";
}

void MetricsText::Line(const std::string& name, const std::string& labels, double v) {
  out_ += name + (labels.empty() ? "" : "{" + labels + "}") + " " + MetricNumber(v) + "\n";
}

void MetricsText::Single(const std::string& name, const char* type, const std::string& help, double v) {
  Header(name, type, help);
  Line(name, "", v);
}

std::string MetricsText::Finish() {
  if (openmetrics_) out_ += "# EOF\n";
  return std::move(out_);
}

}  // namespace phi4mm::server
