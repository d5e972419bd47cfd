// Typed access to the fields of an untrusted JSON request: each getter checks the type (and range)
// and throws FieldError naming the field's JSON path ("messages[1].content[0].text") when it is
// wrong; null counts as absent. Used only inside the request parsers, which turn FieldError into
// an ApiError at their boundary; nothing else in the server throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "api_error.h"

namespace phi4mm::server {

using Json = nlohmann::ordered_json;  // requests keep their key order (tool schemas are rendered as sent)

struct FieldError {
  ApiError error;
};

[[noreturn]] void Fail(std::string param, std::string message, std::string code = "");

// The JSON type of a value, for messages ("a string", "an array", ...).
std::string TypeName(const Json& v);

// The member `key` of `obj`, or nullptr when absent or null.
const Json* Member(const Json& obj, std::string_view key);

std::optional<std::string> OptString(const Json& obj, std::string_view key, const std::string& path);
std::string ReqString(const Json& obj, std::string_view key, const std::string& path);
std::optional<bool> OptBool(const Json& obj, std::string_view key, const std::string& path);
// A number in [lo, hi].
std::optional<double> OptNumber(const Json& obj, std::string_view key, const std::string& path, double lo, double hi);
// An integer in [lo, hi] (a float with no fractional part is accepted, as JSON does not tell them apart).
std::optional<int64_t> OptInt(const Json& obj, std::string_view key, const std::string& path, int64_t lo, int64_t hi);
const Json* OptObject(const Json& obj, std::string_view key, const std::string& path);
const Json* OptArray(const Json& obj, std::string_view key, const std::string& path);

std::string Join(const std::string& path, std::string_view key);
std::string Index(const std::string& path, size_t i);

// Parses a request body: rejects nesting deeper than `max_depth` before building the tree (so a
// hostile body cannot exhaust the stack), then requires a JSON object.
ApiError ParseBody(std::string_view body, int max_depth, Json* out);

}  // namespace phi4mm::server
