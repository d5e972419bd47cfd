// Typed, path-naming access to request JSON (json_fields.h).
#include "json_fields.h"

#include <cmath>
#include <cstdio>

namespace phi4mm::server {

void Fail(std::string param, std::string message, std::string code) {
  throw FieldError{InvalidRequest(std::move(param), std::move(message), std::move(code))};
}

std::string TypeName(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return "a number";
    default: return "an unsupported value";
  }
}

std::string Join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string Index(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

const Json* Member(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

namespace {
std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

[[noreturn]] void WrongType(const std::string& param, const char* want, const Json& got) {
  Fail(param, param + " must be " + want + ", got " + TypeName(got), "invalid_type");
}
}  // namespace

std::optional<std::string> OptString(const Json& obj, std::string_view key, const std::string& path) {
  const Json* v = Member(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) WrongType(Join(path, key), "a string", *v);
  return v->get<std::string>();
}

std::string ReqString(const Json& obj, std::string_view key, const std::string& path) {
  auto s = OptString(obj, key, path);
  if (!s) Fail(Join(path, key), Join(path, key) + " is required", "missing_field");
  return *s;
}

std::optional<bool> OptBool(const Json& obj, std::string_view key, const std::string& path) {
  const Json* v = Member(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) WrongType(Join(path, key), "a boolean", *v);
  return v->get<bool>();
}

std::optional<double> OptNumber(const Json& obj, std::string_view key, const std::string& path, double lo, double hi) {
  const Json* v = Member(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) WrongType(Join(path, key), "a number", *v);
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi))
    Fail(Join(path, key), Join(path, key) + " must be between " + Num(lo) + " and " + Num(hi) +
                              ", got " + v->dump(),
         "out_of_range");
  return d;
}

std::optional<int64_t> OptInt(const Json& obj, std::string_view key, const std::string& path, int64_t lo, int64_t hi) {
  const Json* v = Member(obj, key);
  if (!v) return std::nullopt;
  const std::string p = Join(path, key);
  int64_t n = 0;
  if (v->is_number_integer()) {
    n = v->get<int64_t>();
  } else if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    n = u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18) WrongType(p, "an integer", *v);
    n = static_cast<int64_t>(d);
  } else {
    WrongType(p, "an integer", *v);
  }
  if (n < lo || n > hi)
    Fail(p, p + " must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + v->dump(),
         "out_of_range");
  return n;
}

const Json* OptObject(const Json& obj, std::string_view key, const std::string& path) {
  const Json* v = Member(obj, key);
  if (v && !v->is_object()) WrongType(Join(path, key), "an object", *v);
  return v;
}

const Json* OptArray(const Json& obj, std::string_view key, const std::string& path) {
  const Json* v = Member(obj, key);
  if (v && !v->is_array()) WrongType(Join(path, key), "an array", *v);
  return v;
}

ApiError ParseBody(std::string_view body, int max_depth, Json* out) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth)
        return InvalidRequest("", "the request body nests deeper than " + std::to_string(max_depth) + " levels",
                              "invalid_json");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  Json j;
  try {
    j = Json::parse(body.begin(), body.end());
  } catch (const Json::exception& e) {
    return InvalidRequest("", std::string("the request body is not valid JSON: ") + e.what(), "invalid_json");
  }
  if (!j.is_object()) return InvalidRequest("", "the request body must be a JSON object, got " + TypeName(j), "invalid_json");
  *out = std::move(j);
  return {};
}

}  // namespace phi4mm::server
