// The text /metrics is written in: Prometheus text format 0.0.4, or OpenMetrics 1.0 for a scraper
// that asks for it (a counter family is then named without its samples' "_total", and the page
// ends with "# EOF"). Numbers in their shortest form, label values escaped.
#pragma once

#include <string>

namespace phi4mm::server {

// The shortest text that reads back as `v` ("0.01", not "0.010000000000000000208").
std::string MetricNumber(double v);
// A label value with backslash, double quote and newline escaped.
std::string EscapeLabel(const std::string& s);

class MetricsText {
 public:
  explicit MetricsText(bool openmetrics) : openmetrics_(openmetrics) {}
  void Header(const std::string& name, const char* type, const std::string& help);
  // One sample; `labels` is the text between the braces (empty: none).
  void Line(const std::string& name, const std::string& labels, double v);
  void Single(const std::string& name, const char* type, const std::string& help, double v);
  // The page (with "# EOF" in OpenMetrics).
  std::string Finish();

 private:
  bool openmetrics_;
  std::string out_;
};

}  // namespace phi4mm::server
