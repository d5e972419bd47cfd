"""Structured output through the official `openai` client, on the trained fixture (a 4-layer
Phi-4-mini-shaped decoder with the real tokenizer): the 216 schemas of schemas.py sampled at
temperature 1 over three seeds (each schema with one of them), every answer parsed and validated with `jsonschema` (draft 2020-12,
with its format checker), the streamed answer equal to the plain one; every schema the engine
cannot honour refused with a 400 that names the field and the JSON pointer; json_object mode;
`client.chat.completions.parse` with a Pydantic model; tool calls with tool_choice required and
named (100+ sampled requests, every call valid against its tool's schema, streamed deltas
concatenating to the plain answer's arguments), auto, and the constraint's log-probabilities.
"""
import concurrent.futures as cf
import datetime
import json
import os

import jsonschema
import openai
import pydantic
import pytest

import phi4mm_server
import schemas

# Schema i is sampled with seed SEEDS[i % len(SEEDS)], plain and streamed (PHI4MM_SCHEMA_SEEDS=1,2,3 by default).
SEEDS = [int(s) for s in os.environ.get("PHI4MM_SCHEMA_SEEDS", "1,2,3").split(",")]
ASK = [{"role": "user", "content": "Answer with JSON only."}]


@pytest.fixture(scope="module")
def trained():
    s = phi4mm_server.Server(model=phi4mm_server.fixture("trained/orig"))
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def tc(trained):
    return openai.OpenAI(base_url=trained.base_url, api_key="unused", max_retries=0, timeout=300)


FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(s):  # jsonschema checks date-time only with an extra package; the standard library will do
    datetime.datetime.fromisoformat(s)
    return "T" in s


def validate(value, schema):
    jsonschema.Draft202012Validator(schema, format_checker=FORMATS).validate(value)


def schema_format(i, schema, strict=True):
    return {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema, "strict": strict}}


def ask(tc, i, schema, seed, stream):
    kw = dict(model="m", messages=ASK, temperature=1, seed=seed, max_tokens=400,
              response_format=schema_format(i, schema))
    if not stream:
        r = tc.chat.completions.create(**kw)
        return r.choices[0].message.content, r.choices[0].finish_reason
    text, finish = "", None
    for ch in tc.chat.completions.create(stream=True, **kw):
        if ch.choices and ch.choices[0].delta.content:
            text += ch.choices[0].delta.content
        if ch.choices and ch.choices[0].finish_reason:
            finish = ch.choices[0].finish_reason
    return text, finish


def test_every_schema_of_the_suite_is_followed_streamed_or_not(tc):
    suite = schemas.suite()
    assert len(suite) >= 200
    jobs = [(i, s, SEEDS[i % len(SEEDS)], stream) for i, s in enumerate(suite) for stream in (False, True)]
    with cf.ThreadPoolExecutor(8) as ex:
        answers = dict(zip([(j[0], j[2], j[3]) for j in jobs], ex.map(lambda j: ask(tc, *j), jobs)))
    failures = []
    for (i, seed, stream), (text, finish) in answers.items():
        try:
            assert finish == "stop", f"finish {finish}"
            validate(json.loads(text), suite[i])
        except (AssertionError, ValueError, jsonschema.ValidationError) as e:
            failures.append(f"schema {i} seed {seed} stream {stream}: {str(e)[:200]} in {text[:200]!r}")
    assert not failures, f"{len(failures)} of {len(answers)} answers failed:\n" + "\n".join(failures[:10])
    for i in range(len(suite)):
        seed = SEEDS[i % len(SEEDS)]
        assert answers[(i, seed, True)] == answers[(i, seed, False)], f"schema {i}: stream != plain"
    print(f"\n[structured] {len(suite)} schemas over seeds {SEEDS}, plain and streamed: {len(answers)} answers, all valid")


@pytest.mark.parametrize("schema,pointer", schemas.UNSUPPORTED)
def test_a_schema_the_engine_cannot_honour_is_a_400_naming_where(tc, schema, pointer):
    with pytest.raises(openai.BadRequestError) as e:
        tc.chat.completions.create(model="m", messages=ASK, max_tokens=4, response_format=schema_format(0, schema))
    err = e.value.body
    assert err["param"] == "response_format.json_schema.schema"
    assert err["code"] == "invalid_schema"
    assert err["message"].startswith("response_format.json_schema.schema: ")
    if pointer:
        assert f": {pointer}: " in err["message"], err["message"]


@pytest.mark.parametrize("schema", schemas.COMPILE_ONLY)
def test_unbounded_formats_compile(tc, schema):
    r = tc.chat.completions.create(model="m", messages=ASK, max_tokens=8, temperature=0,
                                   response_format=schema_format(0, schema))
    assert r.choices[0].message.content.startswith('{"mail"')


def test_json_object_mode(tc):
    ended = 0
    for seed in range(1, 7):
        r = tc.chat.completions.create(model="m", messages=ASK, temperature=1, seed=seed, max_tokens=300,
                                       response_format={"type": "json_object"})
        if r.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(r.choices[0].message.content), dict)
            ended += 1
    assert ended > 0


class Event(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=12)
    day: int = pydantic.Field(ge=1, le=31)
    kind: str = pydantic.Field(pattern="^(talk|demo)$")
    confirmed: bool


def test_parse_with_a_pydantic_model(tc):
    for seed in (1, 2, 3):
        r = tc.chat.completions.parse(model="m", messages=ASK, temperature=1, seed=seed, max_tokens=200,
                                      response_format=Event)
        ev = r.choices[0].message.parsed
        assert isinstance(ev, Event) and 1 <= ev.day <= 31 and ev.kind in ("talk", "demo")


def test_the_constraint_composes_with_sampler_settings_and_logprobs(tc):
    schema = {"type": "object", "properties": {"v": {"enum": ["alpha", "beta", "gamma"]}, "n": {"type": "integer",
              "minimum": 0, "maximum": 9}}, "required": ["v", "n"], "additionalProperties": False}
    for kw in ({"top_p": 0.5}, {"frequency_penalty": 1.5, "presence_penalty": 1.0}, {"logit_bias": {"15": 50}},
               {"extra_body": {"top_k": 3, "min_p": 0.1, "repetition_penalty": 1.3}}):
        r = tc.chat.completions.create(model="m", messages=ASK, temperature=1, seed=4, max_tokens=60,
                                       response_format=schema_format(0, schema), **kw)
        validate(json.loads(r.choices[0].message.content), schema)
    r = tc.chat.completions.create(model="m", messages=ASK, temperature=1, seed=4, max_tokens=60, logprobs=True,
                                   top_logprobs=5, response_format=schema_format(0, schema))
    validate(json.loads(r.choices[0].message.content), schema)
    content = r.choices[0].logprobs.content
    assert content and all(t.logprob <= 0 and t.logprob > -1e4 for t in content)
    # Over the allowed tokens only: the first token opens the object, and so does every alternative
    # listed (the rest of the vocabulary has probability 0 and is never listed).
    assert content[0].token.startswith("{")
    assert content[0].top_logprobs and all(t.token.startswith("{") for t in content[0].top_logprobs)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city", "strict": True,
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]},
                                                    "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
FLIGHT = {"type": "function", "function": {
    "name": "book_flight", "description": "Books a flight",
    "parameters": {"$defs": {"airport": {"type": "string", "pattern": "^[A-Z]{3}$"}}, "type": "object",
                   "properties": {"from": {"$ref": "#/$defs/airport"}, "to": {"$ref": "#/$defs/airport"},
                                  "seats": {"type": "integer", "minimum": 1, "maximum": 4}},
                   "required": ["from", "to"], "additionalProperties": False}}}
TOOLS = [WEATHER, FLIGHT]
SCHEMA = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def call_once(tc, seed, choice, stream, parallel=False):
    kw = dict(model="m", messages=[{"role": "user", "content": "Plan my trip."}], tools=TOOLS, tool_choice=choice,
              temperature=1, seed=seed, max_tokens=200, parallel_tool_calls=parallel)
    if not stream:
        r = tc.chat.completions.create(**kw)
        calls = [(c.id, c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls or []]
        return calls, r.choices[0].finish_reason
    calls, finish = {}, None
    for ch in tc.chat.completions.create(stream=True, **kw):
        if not ch.choices:
            continue
        for d in ch.choices[0].delta.tool_calls or []:
            if d.index not in calls:
                assert d.id and d.function.name, "a call's first delta carries its id and name"
                calls[d.index] = [d.id, d.function.name, d.function.arguments or ""]
            else:
                assert d.id is None and d.function.name is None
                calls[d.index][2] += d.function.arguments or ""
        finish = ch.choices[0].finish_reason or finish
    return [tuple(calls[k]) for k in sorted(calls)], finish


def test_forced_tool_calls_are_always_valid(tc):
    jobs = [(seed, choice) for seed in range(1, 61)
            for choice in ("required", {"type": "function", "function": {"name": "book_flight"}})]
    with cf.ThreadPoolExecutor(8) as ex:
        plain = list(ex.map(lambda j: call_once(tc, j[0], j[1], False), jobs))
        streamed = list(ex.map(lambda j: call_once(tc, j[0], j[1], True), jobs[::4]))
    n = 0
    for (seed, choice), (calls, finish) in zip(jobs, plain):
        assert finish == "tool_calls" and len(calls) == 1, (seed, choice, calls, finish)
        for _, name, args in calls:
            if isinstance(choice, dict):
                assert name == "book_flight"
            validate(json.loads(args), SCHEMA[name])
            n += 1
    for (seed, choice), (calls, _) in zip(jobs[::4], streamed):
        want = plain[jobs.index((seed, choice))][0]
        assert [(c[1], c[2]) for c in calls] == [(c[1], c[2]) for c in want], "streamed deltas != plain answer"
    print(f"\n[structured] {len(jobs)} forced tool-call requests, {n} calls, all valid")


def test_parallel_calls_are_valid_up_to_max_tokens(tc):
    # The 4-layer fixture at temperature 1 rarely closes a list it may extend: the calls before the
    # cut are complete and valid, and the answer says "length" when max_tokens cut it.
    for seed in range(1, 9):
        calls, finish = call_once(tc, seed, "required", False, parallel=True)
        assert calls and finish in ("tool_calls", "length")
        complete = calls if finish == "tool_calls" else calls[:-1]
        for _, name, args in complete:
            validate(json.loads(args), SCHEMA[name])


def test_auto_engages_the_grammar_only_at_the_tool_call_token(tc):
    # Free text: the answer without a call is the one the model writes without any grammar.
    kw = dict(model="m", messages=[{"role": "user", "content": "Say hi."}], tools=TOOLS, temperature=0, max_tokens=12)
    free = tc.chat.completions.create(tool_choice="auto", **kw)
    assert free.choices[0].message.tool_calls is None and free.choices[0].message.content
    # A <|tool_call|> pushed by logit_bias (which keeps pushing one after the call, until
    # max_tokens): what follows it is a valid call all the same.
    # (Only the strict tool: a non-strict one's arguments are any object, whose keys the fixture
    # can write on past any max_tokens.)
    forced_open = tc.chat.completions.create(tool_choice="auto", logit_bias={"200025": 100}, parallel_tool_calls=False,
                                             **{**kw, "tools": [WEATHER], "max_tokens": 120, "temperature": 1, "seed": 3})
    calls = forced_open.choices[0].message.tool_calls
    assert calls and len(calls) == 1
    validate(json.loads(calls[0].function.arguments), SCHEMA[calls[0].function.name])


@pytest.mark.parametrize("body,param", [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice.function.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "bad name!", "schema": {}}}},
     "response_format.json_schema.name"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": True, "parameters": {
        "type": "object", "properties": {"x": {"not": {}}}}}}]}, "tools[0].function.parameters"),
])
def test_structured_request_errors_name_the_field(trained, body, param):
    status, _, err = trained.post_json("/v1/chat/completions", {"model": "m", "messages": ASK, **body})
    assert status == 400 and err["error"]["param"] == param, err
