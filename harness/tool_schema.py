"""Checking a tool's schema and a call's arguments against it, as the OpenAI docs write a
schema: an object of named properties, each with a JSON type (string, integer, number, boolean,
array, object) or an enum, and an optional list of the required ones."""

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
JSON_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
              list: "an array", dict: "an object", type(None): "null"}  # fmt: skip


def schema_mistake(tool: object) -> str | None:
    """What makes a TOOLS entry unusable, in words that finish "the schema of the tool X in
    TOOLS ...", or None."""
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
        kinds = prop.get("type") if isinstance(prop, dict) else None
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if not (isinstance(prop, dict) and ("enum" in prop or all(k in TYPES for k in kinds))):
            return (
                f"gives the parameter {name!r} no type the agent knows: write "
                f'"type": one of {", ".join(TYPES)} (or an "enum")'
            )
    for name in parameters.get("required", []):
        if name not in properties:
            return f"lists {name!r} as required, but it is not one of its properties"
    return None


def signature_mistake(function, schema: dict) -> str | None:
    """Whether the Python function can take a call made by the schema: the workspace first,
    then every property by name (each required one at least)."""
    import inspect

    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        return None
    properties = schema.get("properties", {})
    try:
        signature.bind(None, **{name: None for name in properties})
    except TypeError as error:
        return (
            f"cannot take what its schema lists ({error}): it takes the workspace first, then "
            f"the parameters {', '.join(properties) or '(none)'} by name"
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
    if "enum" in spec and value not in spec["enum"]:
        return f"is {value!r}, not one of {spec['enum']}"
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
    return None


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
    kinds = spec.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds] if kinds else []
    names = {k: JSON_NAMES[TYPES[k][-1]] for k in TYPES}
    return " or ".join(names.get(k, k) for k in kinds) or "any value"
