"""The structured-output schema suite (tests/python/test_structured.py): 216 JSON Schemas written
here (no public collection is packaged on PyPI), built from a fixed seed so every run asks the
same questions. They cover nested objects and arrays, enum and const, numeric bounds, string
lengths, patterns and formats, anyOf and oneOf, $ref with $defs (one recursive), tuples with
prefixItems, additionalProperties false and required fields, at the top level and inside each
other. UNSUPPORTED lists schemas the grammar engine cannot honour, each with the JSON pointer the
server's 400 must name.
"""
import random

# Formats sampled on the trained fixture. "email", "hostname" and "uri" are left to the compile-only
# list: their text is unbounded, and the 4-layer fixture at temperature 1 can write one past any
# max_tokens (a real model stops; the grammar does not make it).
FORMATS = ["date", "ipv4", "ipv6", "uuid", "date-time", "time"]
COMPILE_ONLY = [{"type": "object", "properties": {"mail": {"type": "string", "format": f}}, "required": ["mail"]}
                for f in ("email", "hostname", "uri")]


def _leaf(rng, depth=0):
    """One scalar-ish property schema."""
    kind = rng.choice(["str", "str", "int", "num", "bool", "enum", "const", "pattern", "format", "null_or_int"])
    if kind == "str":
        return {"type": "string", "minLength": rng.choice([0, 1, 2]), "maxLength": rng.choice([4, 8, 16, 24])}
    if kind == "int":
        lo = rng.choice([-50, 0, 1, 10])
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.choice([5, 100, 1000])}
    if kind == "num":
        s = {"type": "number", "minimum": rng.choice([-10, 0, 0.5])}
        if rng.random() < 0.5:
            s["exclusiveMaximum"] = 1000
        else:
            s["maximum"] = 99.5
        return s
    if kind == "bool":
        return {"type": "boolean"}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", "blue", "amber", "violet", 1, 2, None, True], rng.randint(2, 4))}
    if kind == "const":
        return {"const": rng.choice(["v1", 42, True, None, "fixed value"])}
    if kind == "pattern":
        return {"type": "string", "pattern": rng.choice(
            ["^[A-Z]{3}-[0-9]{2}$", "^[a-z]+(_[a-z]+)?$", "^\\+?[0-9]{4,8}$", "^(yes|no|maybe)$", "^[0-9a-f]{6}$"])}
    if kind == "format":
        return {"type": "string", "format": rng.choice(FORMATS)}
    return {"type": ["integer", "null"], "minimum": 0, "maximum": 9}


def _object(rng, depth, max_props=5):
    n = rng.randint(1, max_props)
    names = rng.sample(["id", "name", "title", "count", "score", "tags", "kind", "color", "note", "level",
                        "when", "owner", "code", "size", "flag", "ratio"], n)
    props = {}
    for k in names:
        r = rng.random()
        if depth < 2 and r < 0.2:
            props[k] = _object(rng, depth + 1, 3)
        elif depth < 2 and r < 0.35:
            props[k] = _array(rng, depth + 1)
        else:
            props[k] = _leaf(rng, depth)
    s = {"type": "object", "properties": props,
         "required": [k for k in names if rng.random() < 0.7] or [names[0]]}
    if rng.random() < 0.7:
        s["additionalProperties"] = False
    return s


def _array(rng, depth):
    item = _object(rng, depth + 1, 2) if depth < 2 and rng.random() < 0.3 else _leaf(rng, depth)
    lo = rng.choice([0, 1, 2])
    return {"type": "array", "items": item, "minItems": lo, "maxItems": lo + rng.choice([1, 2, 3])}


def _union(rng, depth):
    if rng.random() < 0.5:
        return {"anyOf": [_leaf(rng, depth), _object(rng, depth + 1, 2), {"type": "null"}][: rng.randint(2, 3)]}
    # oneOf whose branches are provably disjoint: different types, or objects told apart by a const tag.
    # (XGrammar proves disjointness for arms that are bare types or finite values, or objects with a
    # required const discriminator; other oneOfs are refused, see UNSUPPORTED.)
    if rng.random() < 0.5:
        return {"oneOf": [{"enum": [1, 2, 3]}, {"enum": ["low", "high"]}, {"type": "boolean"},
                          {"type": "null"}][: rng.randint(2, 4)]}
    branches = []
    for tag in rng.sample(["circle", "square", "line"], 2):
        b = _object(rng, depth + 1, 2)
        b["properties"]["shape"] = {"const": tag}
        b["required"] = sorted(set(b["required"]) | {"shape"})
        b["additionalProperties"] = False
        branches.append(b)
    return {"oneOf": branches}


def _with_defs(rng):
    item = _object(rng, 1, 3)
    s = {"type": "object", "$defs": {"item": item, "tag": {"type": "string", "enum": ["a", "b", "c"]}},
         "properties": {"first": {"$ref": "#/$defs/item"},
                        "rest": {"type": "array", "items": {"$ref": "#/$defs/item"}, "maxItems": 2},
                        "tag": {"$ref": "#/$defs/tag"}},
         "required": ["first", "tag"], "additionalProperties": False}
    if rng.random() < 0.3:
        s["definitions"] = s.pop("$defs")
        for p in ("first", "tag"):
            s["properties"][p]["$ref"] = s["properties"][p]["$ref"].replace("$defs", "definitions")
        s["properties"]["rest"]["items"]["$ref"] = "#/definitions/item"
    return s


def _tuple(rng):
    return {"type": "array", "prefixItems": [_leaf(rng, 1) for _ in range(rng.randint(2, 3))], "items": False}


def _top_level(rng):
    return rng.choice([
        lambda: _array(rng, 0),
        lambda: _leaf(rng, 0),
        lambda: {"type": "string", "enum": ["north", "south", "east", "west"]},
        lambda: {"type": "integer", "minimum": -1000, "maximum": 1000},
        lambda: _tuple(rng),
    ])()


def suite():
    rng = random.Random(20261206)
    out = []
    for _ in range(60):
        out.append(_object(rng, 0))
    for _ in range(30):
        s = _object(rng, 0, 3)
        s["properties"]["child"] = _object(rng, 1, 3)
        s["properties"]["child"]["properties"]["grandchild"] = _object(rng, 2, 2)
        s["required"] = sorted(set(s["required"]) | {"child"})
        out.append(s)
    for _ in range(30):
        out.append({"type": "object", "properties": {"items": _array(rng, 0), "total": _leaf(rng, 0)},
                    "required": ["items"], "additionalProperties": False})
    for _ in range(30):
        out.append({"type": "object", "properties": {"value": _union(rng, 0), "label": _leaf(rng, 0)},
                    "required": ["value"], "additionalProperties": False})
    for _ in range(30):
        out.append(_with_defs(rng))
    for _ in range(20):
        out.append({"type": "object", "properties": {"pair": _tuple(rng)}, "required": ["pair"],
                    "additionalProperties": False})
    for _ in range(15):
        out.append(_top_level(rng))
    # One recursive schema: a tree whose children are optional and few.
    out.append({"$defs": {"node": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 6},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 1}},
        "required": ["name"], "additionalProperties": False}}, "$ref": "#/$defs/node"})
    return out


# (schema, the JSON pointer the refusal names)
UNSUPPORTED = [
    ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, "#/properties/a/not"),
    ({"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}}, "#/if"),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "#/uniqueItems"),
    ({"type": "array", "contains": {"const": 3}}, "#/contains"),
    ({"type": "object", "dependentRequired": {"a": ["b"]}}, "#/dependentRequired"),
    ({"type": "string", "format": "credit-card"}, "#/format"),
    ({"type": "object", "properties": {"mail": {"type": "string", "format": "duration"}}}, "#/properties/mail/format"),
    ({"type": "string", "format": "uri-reference"}, "#/format"),
    ({"type": "string", "format": "date", "pattern": "^2026-"}, "#/pattern"),
    ({"$ref": "https://example.com/other.json"}, "#/$ref"),
    ({"$ref": "#/$defs/missing"}, "#/$ref"),
    ({"type": "object", "properties": {"x": {"type": "string", "minLenght": 3}}}, "#/properties/x/minLenght"),
    ({"type": "object", "properties": {"a/b": {"type": "intger"}}}, "#/properties/a~1b/type"),
    ({"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}, "#/items"),
    ({"type": "object", "properties": {"deep": {"type": "object", "properties": {"x": {"$dynamicRef": "#meta"}}}}},
     "#/properties/deep/properties/x/$dynamicRef"),
    # Refused by the grammar engine itself (it would otherwise fall back to anyOf, or drop the
    # length): no pointer in its message, the field is named.
    ({"oneOf": [{"type": "string", "maxLength": 3}, {"type": "string", "minLength": 2}]}, None),
    ({"type": "string", "pattern": "^[a-z]+$", "maxLength": 4}, None),
]
