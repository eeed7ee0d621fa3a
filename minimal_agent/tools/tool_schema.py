"""Checking a tool's schema, its function and a call's arguments, as the OpenAI docs write a
schema: an object of named properties, each with a JSON type (string, integer, number, boolean,
array, object, null, or a list of them), an enum, or "anyOf" alternatives; array items checked
against "items"; an optional list of the required ones. The function takes the workspace, then
the properties by name; one the schema does not require needs a default, since a call may
leave it out (it is then left out of the call, not passed as None)."""

from __future__ import annotations

TYPES = {  # JSON schema type -> the Python types json.loads gives for it
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}
# The keys the README's "Add a tool" names. A key a letter or two away from one of them is a
# typo ("propertes") that JSON Schema would silently ignore, so it is named at start-up.
README_KEYS = ("properties", "required", "description", "parameters", "type")
# JSON Schema's (and the Chat Completions API's) other keys, some close to those by spelling.
SCHEMA_KEYS = frozenset(
    "$schema $id $ref $defs $comment $anchor definitions title default examples deprecated "
    "readOnly writeOnly enum const multipleOf maximum exclusiveMaximum minimum exclusiveMinimum "
    "maxLength minLength pattern format contentEncoding contentMediaType maxItems minItems "
    "uniqueItems maxContains minContains items prefixItems contains additionalItems "
    "unevaluatedItems maxProperties minProperties dependentRequired patternProperties "
    "additionalProperties unevaluatedProperties propertyNames dependentSchemas dependencies "
    "allOf anyOf oneOf not if then else nullable strict name function".split()
)
JSON_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
              list: "an array", dict: "an object", type(None): "null"}  # fmt: skip


def tool_label(tool: object, number: int) -> str:
    """How an error names a TOOLS entry: by its tool's name where it has one, else its place."""
    function = tool.get("function") if isinstance(tool, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    name = name or (tool.get("name") if isinstance(tool, dict) else None)
    return f"the schema of the tool {name!r}" if isinstance(name, str) else f"entry {number}"


def schema_mistake(tool: object) -> str | None:
    """What makes a TOOLS entry unusable, in words that finish "the schema of the tool X in
    TOOLS ...", or None."""
    misspelled = misspelled_key(tool)
    if misspelled:
        return misspelled
    if isinstance(tool, dict) and "name" in tool and "function" not in tool:
        return (
            'is in the Responses API\'s flat form ("name" beside "type"): the Chat Completions '
            'API wants {"type": "function", "function": {"name": ..., "description": ..., '
            '"parameters": ...}}'
        )
    if not isinstance(tool, dict) or tool.get("type") != "function":
        return 'is not {"type": "function", "function": {...}}'
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return 'has no "function" object with a "name"'
    parameters = function.get("parameters", {"type": "object", "properties": {}})
    properties = parameters.get("properties", {}) if isinstance(parameters, dict) else None
    if not isinstance(properties, dict) or parameters.get("type") != "object":
        return 'needs "parameters": {"type": "object", "properties": {...}}'
    for name, prop in properties.items():
        if not known_type(prop):
            return (
                f"gives the parameter {name!r} no type the agent knows: write "
                f'"type": one of {", ".join(TYPES)} (or an "enum")'
            )
    required = parameters.get("required", [])
    if not (isinstance(required, list) and all(isinstance(name, str) for name in required)):
        return f'has "required": {required!r}; it must be a list of parameter names'
    for name in required:
        if name not in properties:
            return f"lists {name!r} as required, but it is not one of its properties"
    return None


def misspelled_key(tool: object) -> str | None:
    """The first key of a TOOLS entry that looks like a misspelling of one the README names
    ("propertes" for "properties"), in words that finish "the schema of the tool X in TOOLS
    ...", or None. Parameter names are the learner's own, never checked."""
    for key, place in keys_of(tool):
        if not isinstance(key, str) or key in README_KEYS or key in SCHEMA_KEYS:
            continue
        if key.startswith("x-"):  # a vendor's extension
            continue
        import difflib  # here: only an unknown key needs it, and every start checks the tools

        meant = difflib.get_close_matches(key, README_KEYS, n=1, cutoff=0.75)
        if meant:
            where = f" in {place}" if place else ""
            return f'has the key "{key}"{where}, likely a misspelling of "{meant[0]}": correct it'
    return None


def keys_of(schema: object, place: str = "", parameter: str = ""):
    """Each key of (a part of) a TOOLS entry, with the place it is in ('"parameters"', "the
    parameter 'path'"), walking into "function", "parameters", each property (parameter is
    the property's dotted name), "items" and the alternatives of "anyOf" and the like."""
    if not isinstance(schema, dict):
        return
    for key in schema:
        yield key, place
    for part in ("function", "parameters"):
        if not parameter and isinstance(schema.get(part), dict):  # the entry's, not a property's
            yield from keys_of(schema[part], f'"{part}"')
    if isinstance(schema.get("properties"), dict):
        for name, prop in schema["properties"].items():
            path = f"{parameter}.{name}" if parameter else str(name)
            yield from keys_of(prop, f"the parameter {path!r}", path)
    if isinstance(schema.get("items"), dict):
        yield from keys_of(schema["items"], f"the items of {place}", parameter)
    for alternatives in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(alternatives), list):
            for choice in schema[alternatives]:
                yield from keys_of(choice, place, parameter)


def known_type(prop: object) -> bool:
    """Whether a property has a type the checks know: an enum, a JSON type (or a list of them),
    or "anyOf" alternatives that each have one."""
    if not isinstance(prop, dict):
        return False
    if "enum" in prop:
        return True
    if isinstance(prop.get("anyOf"), list) and "type" not in prop:
        return bool(prop["anyOf"]) and all(known_type(choice) for choice in prop["anyOf"])
    kinds = prop.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    return all(isinstance(kind, str) and kind in TYPES for kind in kinds)


def signature_mistake(function, schema: dict) -> str | None:
    """Whether the Python function can take every call the schema allows, in words that finish
    "the function of the tool X ...": the workspace first, then the properties by name, each
    one the schema does not require with a default (a call may leave it out)."""
    import inspect

    if not callable(function):
        return (
            f"in TOOL_MAP is {function!r}, not a function: map the name to the function "
            "itself, without quotes"
        )
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        return None
    properties = schema.get("properties", {})
    required = [name for name in schema.get("required", []) if name in properties]
    try:
        signature.bind(None, **{name: None for name in properties})
    except TypeError as error:
        return (
            f"cannot take what its schema lists ({error}): it takes the workspace first, then "
            f"the parameters {', '.join(properties) or '(none)'} by name"
        )
    for name in properties:
        parameter = signature.parameters.get(name)  # None: it goes into **kwargs
        if name not in required and parameter and parameter.default is parameter.empty:
            return (
                f"has no default for {name!r}, which its schema does not require, so a call "
                f'may leave it out: give it one ({name}=None) or list it in "required"'
            )
    return None


def arguments_problem(name: str, schema: dict, args: object) -> str | None:
    """What is wrong with a call's parsed arguments, checked against the tool's schema; None
    when they fit. A parameter the schema does not require may be left out."""
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    fields = ", ".join(f"{p} ({describe(spec)})" for p, spec in properties.items())
    expected = f"{name} takes a JSON object with the fields {fields or '(none)'}"
    if required:
        expected += f", of which {', '.join(required)} must be given"
    if not isinstance(args, dict):
        return f"{expected}; not {JSON_NAMES.get(type(args), type(args).__name__)}"
    problems = [f"missing {p!r}" for p in required if p not in args]
    problems += [f"unexpected {p!r}" for p in args if p not in properties]
    problems += [
        f"{p!r} {mismatch}"
        for p, value in args.items()
        if p in properties
        for mismatch in [value_mismatch(value, properties[p])]
        if mismatch
    ]
    return f"{expected}: {'; '.join(problems)}" if problems else None


def value_mismatch(value: object, spec: dict) -> str | None:
    """How value fails its property's spec ("is a string, not an integer"), or None."""
    if "enum" in spec and not any(same(value, choice) for choice in spec["enum"]):
        return f"is {value!r}, not one of {spec['enum']}"
    if isinstance(spec.get("anyOf"), list) and "type" not in spec:
        if all(value_mismatch(value, choice) for choice in spec["anyOf"]):
            return f"is {JSON_NAMES.get(type(value), type(value).__name__)}, not {describe(spec)}"
        return None
    kinds = spec.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds] if kinds else []
    if kinds and not any(fits(value, kind) for kind in kinds):
        return f"is {JSON_NAMES.get(type(value), type(value).__name__)}, not {describe(spec)}"
    items = spec.get("items")
    if isinstance(value, list) and isinstance(items, dict):
        for index, item in enumerate(value):
            mismatch = value_mismatch(item, items)
            if mismatch:
                return f"item {index} {mismatch}"
    fields = spec.get("properties")
    if isinstance(value, dict) and isinstance(fields, dict):  # a nested object, as the top level
        missing = [field for field in spec.get("required", []) if field not in value]
        if missing:
            return f"lacks the field {missing[0]!r}"
        for field, item in value.items():
            if field not in fields:
                return f"has the unexpected field {field!r}"
            mismatch = (
                value_mismatch(item, fields[field]) if isinstance(fields[field], dict) else None
            )
            if mismatch:
                return f"has the field {field!r}, which {mismatch}"
    return None


def same(value: object, choice: object) -> bool:
    """Equal as JSON values: true is not 1, though Python's True == 1."""
    return value == choice and isinstance(value, bool) == isinstance(choice, bool)


def fits(value: object, kind: str) -> bool:
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False  # JSON's true is no number, though Python's bool is an int
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()  # 2.0 is a whole number as JSON sees it
    return isinstance(value, TYPES.get(kind, ()))


def describe(spec: dict) -> str:
    """A property's type in words: "a string", "an integer or null", "one of ['a', 'b']"."""
    if "enum" in spec:
        return f"one of {spec['enum']}"
    if isinstance(spec.get("anyOf"), list) and "type" not in spec:
        return " or ".join(describe(choice) for choice in spec["anyOf"])
    kinds = spec.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds] if kinds else []
    names = {k: JSON_NAMES[TYPES[k][-1]] for k in TYPES}
    return " or ".join(names.get(k, k) for k in kinds) or "any value"
