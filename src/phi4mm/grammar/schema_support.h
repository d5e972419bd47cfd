// Which JSON Schemas the grammar engine honours, checked before compiling: every keyword of the
// schema is either one the engine enforces (the types, enum, const, local $ref with $defs or
// definitions, anyOf, oneOf, allOf, the object, array, string and number keywords it implements,
// and the formats it has patterns for), an annotation (title, description, default, examples, ...),
// or an extension (x-*); anything else (not, if/then/else, dependentRequired, uniqueItems,
// contains, an unknown format, a remote $ref, a misspelt keyword) is refused with the JSON pointer
// of where it is, so a schema is never silently enforced only in part.
#pragma once

#include <string_view>

#include "phi4mm/base/status.h"

namespace phi4mm::grammar {

// Ok, or InvalidArgument "<pointer>: <what is wrong and what to do>" for the first part of
// `schema_json` (JSON text) that is malformed or unsupported.
Status CheckSchemaSupported(std::string_view schema_json);

// The schema as the grammar engine is given it (after CheckSchemaSupported passed): the formats
// whose built-in patterns are looser than the standards they name become stricter patterns of
// their own, and so do length-bounded strings (XGrammar 0.2.9 lets raw control characters into
// those): "date" (and the date of "date-time") only with days its month has (29 February
// never, as the year is not known while the month is written) in the years 0001-9999, "ipv4" without leading zeros (which
// RFC 3986 and Python's ipaddress refuse).
std::string SchemaForEngine(std::string_view schema_json);

}  // namespace phi4mm::grammar
