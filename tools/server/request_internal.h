// Pieces shared by the request parsers (request_fields.cc, request_chat.cc); not a public API.
#pragma once

#include <span>
#include <mutex>
#include <string_view>

#include "json_fields.h"
#include "request.h"

namespace phi4mm::server {

// The generation fields of a chat (`chat` true) or legacy completion request; throws FieldError.
void ParseGeneration(const Json& body, const ServerLimits& limits, const ModelFacts& facts, bool chat,
                     ParsedRequest* out);
// response_format (text, json_object, json_schema) into out->output; throws FieldError.
void ParseResponseFormat(const Json& body, ParsedRequest* out);
// tool_choice and parallel_tool_calls with the request's `tools` (validated): clears *render_tools
// for "none", else builds the tool-call list's schema into out->output; throws FieldError.
void ParseToolChoice(const Json& body, const Json* tools, bool* render_tools, ParsedRequest* out);
// Adds every top-level key of `body` not in `known` to out->ignored_fields.
void CollectIgnored(const Json& body, std::span<const std::string_view> known, ParsedRequest* out);

}  // namespace phi4mm::server
