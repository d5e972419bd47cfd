// Structured output in requests (request.h, OutputRequest): `response_format` json_object and
// json_schema, and the tool-call grammar built from `tools` and `tool_choice`. The call list Phi-4
// writes after <|tool_call|> is a JSON array of {"name", "arguments"}; its schema is an array
// whose items are one object per tool, the name a const and the arguments that tool's parameters
// (enforced for strict tools and whenever a call is forced, as vLLM does; any object otherwise).
// Each tool's parameters are placed under the list schema's $defs, with their local $refs
// re-rooted there. CompileOutput turns the request's OutputRequest into the engine's constraint,
// naming the request field (and the JSON pointer inside it) of any schema that cannot be honoured.
#include "request_internal.h"

#include <functional>

#include "phi4mm/grammar/schema_support.h"
#include "tool_calls.h"

namespace phi4mm::server {

namespace {

// The schema text of `v` as JSON (the request's key order kept).
std::string SchemaText(const Json& v) { return v.dump(); }

// Prefixes every local "$ref" ("#..." ) inside `schema` with `root` ("#/$defs/tool0").
void Reroot(Json& schema, const std::string& root) {
  std::function<void(Json&)> walk = [&](Json& v) {
    if (v.is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (it.key() == "$ref" && it->is_string()) {
          const std::string ref = it->get<std::string>();
          if (!ref.empty() && ref[0] == '#') *it = root + ref.substr(1);
        } else {
          walk(*it);
        }
      }
    } else if (v.is_array()) {
      for (Json& x : v) walk(x);
    }
  };
  walk(schema);
}

void CheckSchema(const Json& schema, const std::string& param) {
  if (!schema.is_object() && !schema.is_boolean()) Fail(param, param + " must be a JSON Schema (an object)", "invalid_type");
  if (Status st = grammar::CheckSchemaSupported(SchemaText(schema)); !st.ok())
    Fail(param, param + ": " + st.message(), "invalid_schema");
}

}  // namespace

void ParseResponseFormat(const Json& b, ParsedRequest* out) {
  const Json* rf = OptObject(b, "response_format", "");
  if (!rf) return;
  const std::string type = OptString(*rf, "type", "response_format").value_or("text");
  OutputRequest& o = out->output;
  if (type == "text") return;
  if (type == "json_object") {
    o.kind = OutputRequest::Kind::kJsonObject;
    o.param = "response_format";
    return;
  }
  if (type != "json_schema")
    Fail("response_format.type", "response_format type \"" + type + "\" is not supported; use text, json_object or "
                                 "json_schema", "invalid_value");
  const Json* js = OptObject(*rf, "json_schema", "response_format");
  if (!js) Fail("response_format.json_schema", "response_format.json_schema is required for type json_schema", "missing_field");
  const std::string name = ReqString(*js, "name", "response_format.json_schema");
  if (name.empty() || name.size() > 64 ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != std::string::npos)
    Fail("response_format.json_schema.name", "the schema's name must be 1 to 64 letters, digits, _ or -", "invalid_value");
  (void)OptString(*js, "description", "response_format.json_schema");
  const Json* schema = Member(*js, "schema");
  if (!schema) Fail("response_format.json_schema.schema", "response_format.json_schema.schema is required", "missing_field");
  CheckSchema(*schema, "response_format.json_schema.schema");
  o.kind = OutputRequest::Kind::kJsonSchema;
  o.schema = SchemaText(*schema);
  o.strict = OptBool(*js, "strict", "response_format.json_schema").value_or(false);
  o.param = "response_format.json_schema.schema";
}

void ParseToolChoice(const Json& body, const Json* tools, bool* render_tools, ParsedRequest* out) {
  const bool have_tools = tools && !tools->empty();
  std::string forced_name;
  bool forced = false;
  if (const Json* tc = Member(body, "tool_choice")) {
    if (tc->is_string()) {
      const std::string c = tc->get<std::string>();
      if (c == "none") {
        *render_tools = false;
        return;
      }
      if (c == "required") forced = true;
      else if (c != "auto")
        Fail("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                            "\"function\": {\"name\": ...}}, got \"" + c + "\"", "invalid_value");
    } else if (tc->is_object()) {
      const std::string type = OptString(*tc, "type", "tool_choice").value_or("function");
      if (type != "function") Fail("tool_choice.type", "tool_choice.type must be \"function\"", "invalid_value");
      const Json* f = OptObject(*tc, "function", "tool_choice");
      if (!f) Fail("tool_choice.function", "tool_choice.function is required", "missing_field");
      forced_name = ReqString(*f, "name", "tool_choice.function");
      forced = true;
    } else {
      Fail("tool_choice", "tool_choice must be a string or an object, got " + TypeName(*tc), "invalid_type");
    }
    if (forced && !have_tools) Fail("tool_choice", "tool_choice forces a tool call, but the request has no tools", "invalid_value");
  }
  if (!have_tools) return;
  if (out->output.kind != OutputRequest::Kind::kNone)
    Fail("response_format", "response_format json_object/json_schema cannot be combined with tools; send "
                            "tool_choice \"none\" or leave out response_format", "not_supported");

  Json items = Json::array(), defs = Json::object();
  bool named_found = false;
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json& fn = (*tools)[i]["function"];
    const std::string name = fn["name"].get<std::string>();
    if (!forced_name.empty() && name != forced_name) continue;
    named_found = true;
    const std::string param = Index("tools", i) + ".function.parameters";
    const bool strict = OptBool(fn, "strict", Index("tools", i) + ".function").value_or(false);
    const Json* params = Member(fn, "parameters");
    Json args;
    if (strict || forced) {
      if (params) {
        CheckSchema(*params, param);
        Json p = *params;
        const std::string def = "tool" + std::to_string(i);
        Reroot(p, "#/$defs/" + def);
        defs[def] = std::move(p);
        args = Json{{"$ref", "#/$defs/" + def}};
      } else {
        args = Json{{"type", "object"}, {"properties", Json::object()}, {"additionalProperties", false}};
      }
    } else {
      args = Json{{"type", "object"}};
    }
    items.push_back(Json{{"type", "object"},
                         {"properties", Json{{"name", Json{{"const", name}}}, {"arguments", std::move(args)}}},
                         {"required", Json::array({"name", "arguments"})},
                         {"additionalProperties", false}});
  }
  if (!forced_name.empty() && !named_found)
    Fail("tool_choice.function.name", "tool_choice names \"" + forced_name + "\", which is not among the tools", "invalid_value");
  Json list{{"type", "array"}, {"minItems", 1}};
  list["items"] = items.size() == 1 ? items[0] : Json{{"anyOf", std::move(items)}};
  if (const Json* ptc = Member(body, "parallel_tool_calls"); ptc && ptc->is_boolean() && !ptc->get<bool>())
    list["maxItems"] = 1;
  if (!defs.empty()) list["$defs"] = std::move(defs);
  OutputRequest& o = out->output;
  o.kind = OutputRequest::Kind::kToolCalls;
  o.schema = SchemaText(list);
  o.strict = true;
  o.forced = forced;
  o.param = "tools";
}

ApiError CompileOutput(const Model& model, ParsedRequest* p) {
  const OutputRequest& o = p->output;
  if (o.kind == OutputRequest::Kind::kNone) return {};
  auto compiler = model.grammar();
  if (!compiler.ok()) return NotSupported(o.param, compiler.status().message());
  auto g = o.kind == OutputRequest::Kind::kJsonObject ? (*compiler)->JsonObject()
                                                      : (*compiler)->JsonSchema(o.schema, o.strict);
  if (!g.ok()) return InvalidRequest(o.param, o.param + ": " + g.status().message(), "invalid_schema");
  OutputConstraint& c = p->engine.generate.constraint;
  c.grammar = std::move(g).value();
  if (o.kind == OutputRequest::Kind::kToolCalls) {
    c.between_tags = true;
    c.open_id = kToolCallTokenId;
    c.close_id = kToolCallCloseTokenId;
    c.must_open = o.forced;
  }
  return {};
}

}  // namespace phi4mm::server
