// Phi-4 tool rendering and lenient tool-call parsing (tool_calls.h).
#include "tool_calls.h"

#include <mutex>
#include <random>

namespace phi4mm::server {

using Json = nlohmann::ordered_json;
using OrderedJson = nlohmann::ordered_json;

namespace {

template <typename J>
void AppendPython(const J& v, std::string* out) {
  if (v.is_object()) {
    out->push_back('{');
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) *out += ", ";
      first = false;
      *out += J(it.key()).dump(-1, ' ', false, J::error_handler_t::replace);
      *out += ": ";
      AppendPython(it.value(), out);
    }
    out->push_back('}');
  } else if (v.is_array()) {
    out->push_back('[');
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) *out += ", ";
      AppendPython(v[i], out);
    }
    out->push_back(']');
  } else {
    *out += v.dump(-1, ' ', false, J::error_handler_t::replace);
  }
}

// The top-level JSON values in `text`, one after another (whitespace, commas or other text
// between them are skipped); stops at the first value that does not parse.
std::vector<Json> ScanValues(std::string_view text) {
  std::vector<Json> out;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c != '{' && c != '[') {
      ++i;
      continue;
    }
    // Find the matching close, respecting strings.
    int depth = 0;
    bool in_string = false, escaped = false;
    size_t j = i;
    for (; j < text.size(); ++j) {
      const char d = text[j];
      if (in_string) {
        if (escaped) escaped = false;
        else if (d == '\\') escaped = true;
        else if (d == '"') in_string = false;
      } else if (d == '"') {
        in_string = true;
      } else if (d == '{' || d == '[') {
        ++depth;
      } else if ((d == '}' || d == ']') && --depth == 0) {
        break;
      }
    }
    if (j >= text.size()) break;  // unbalanced: the answer was cut off
    Json v = Json::parse(text.substr(i, j - i + 1), nullptr, false);
    if (v.is_discarded()) break;
    out.push_back(std::move(v));
    i = j + 1;
  }
  return out;
}

void AddCall(const Json& item, std::vector<ToolCall>* out) {
  if (!item.is_object()) return;
  auto name = item.find("name");
  if (name == item.end() || !name->is_string() || name->get<std::string>().empty()) return;
  ToolCall call;
  call.id = RandomId("call_", 24);
  call.name = name->get<std::string>();
  auto args = item.find("arguments");
  if (args == item.end()) args = item.find("parameters");
  if (args == item.end() || args->is_null()) {
    call.arguments = "{}";
  } else if (args->is_string()) {
    call.arguments = args->get<std::string>();
  } else {
    call.arguments = args->dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  out->push_back(std::move(call));
}

}  // namespace

std::string PythonStyleJson(const Json& v) {
  std::string out;
  AppendPython(v, &out);
  return out;
}

// Items keep the model card's key order (name, description, parameters / name, arguments).
std::string RenderToolList(const OrderedJson& tools) {
  OrderedJson list = OrderedJson::array();
  for (const Json& t : tools) {
    const Json& f = t.at("function");
    OrderedJson item = OrderedJson::object();
    item["name"] = OrderedJson::parse(f.at("name").dump());
    if (auto d = f.find("description"); d != f.end() && !d->is_null()) item["description"] = OrderedJson::parse(d->dump());
    if (auto p = f.find("parameters"); p != f.end() && !p->is_null()) item["parameters"] = OrderedJson::parse(p->dump());
    list.push_back(std::move(item));
  }
  std::string out;
  AppendPython(list, &out);
  return out;
}

std::string RenderToolCalls(const OrderedJson& tool_calls) {
  OrderedJson list = OrderedJson::array();
  for (const Json& c : tool_calls) {
    const Json& f = c.at("function");
    OrderedJson item = OrderedJson::object();
    item["name"] = OrderedJson::parse(f.at("name").dump());
    OrderedJson args = OrderedJson::object();
    if (auto a = f.find("arguments"); a != f.end() && a->is_string()) {
      args = OrderedJson::parse(a->get<std::string>(), nullptr, false);  // the client's key order
      if (args.is_discarded()) args = a->get<std::string>();
    }
    item["arguments"] = std::move(args);
    list.push_back(std::move(item));
  }
  std::string out;
  AppendPython(list, &out);
  return std::string(kToolCallOpen) + out + std::string(kToolCallClose);
}

std::vector<ToolCall> ParseToolCalls(std::string_view text) {
  if (text.substr(0, kToolCallOpen.size()) == kToolCallOpen) text.remove_prefix(kToolCallOpen.size());
  if (size_t close = text.find(kToolCallClose); close != std::string_view::npos) text = text.substr(0, close);
  std::vector<ToolCall> out;
  for (const Json& v : ScanValues(text)) {
    if (v.is_array()) {
      for (const Json& item : v) AddCall(item, &out);
    } else {
      AddCall(v, &out);
    }
  }
  return out;
}

std::string RandomId(std::string_view prefix, size_t n) {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::string out(prefix);
  std::lock_guard<std::mutex> l(mu);
  std::uniform_int_distribution<int> d(0, 61);
  for (size_t i = 0; i < n; ++i) out.push_back(kAlnum[d(rng)]);
  return out;
}

}  // namespace phi4mm::server
