"""An independent referee of Fundament definitions: Python's own YAML and JSON Schema.

PyYAML reads the files as plain data and `jsonschema` checks them against
schema/plugin-definition.schema.json (draft 2020-12), which was written from
Fundament's facts, not from our Rust types.

usage:
  schema_referee.py check SCHEMA FILE...
      Prints {"FILE": ["error", ...]} for each file: an empty list when the schema
      accepts it. A file that is not YAML gets its parser's error.
  schema_referee.py compare YAML_FILE DEFINITION_JSON_FILE
      Compares the YAML, read as plain data, with the `definition` message of
      organization.v1's GetPluginDefinitionResponse in proto3 JSON (which leaves out
      empty values): metadata and every spec field, field for field. Prints
      {"differences": ["path: yaml X, definition Y", ...]}. The two fields the contract
      has no place for (a rule's `resourceNames`, a status mapping's `default`) are
      left out of the YAML side, and named in "not_in_contract".
"""

import json
import sys

import jsonschema
import yaml


def check(schema_path, files):
    with open(schema_path) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    report = {}
    for path in files:
        try:
            with open(path, "rb") as f:
                data = yaml.safe_load(f)
        except yaml.YAMLError as e:
            report[path] = [f"not YAML: {e}"]
            continue
        report[path] = [
            f"{'/'.join(str(p) for p in err.absolute_path) or '(root)'}: {err.message}"
            for err in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.path)))
        ]
    print(json.dumps(report, indent=2))


def empty(value):
    return value in (None, "", False, [], {})


def normalized(value):
    """proto3 JSON leaves out empty values: so does the comparison, on both sides."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            v = normalized(v)
            if not empty(v):
                out[str(k)] = v
        return out
    if isinstance(value, list):
        return [normalized(v) for v in value]
    return value


def without_contract_gaps(spec, gaps):
    for i, rule in enumerate((spec.get("permissions") or {}).get("rbac") or []):
        if rule.pop("resourceNames", None) is not None:
            gaps.append(f"permissions.rbac[{i}].resourceNames")
    for crd, hint in (spec.get("uiHints") or {}).items():
        mapping = (hint or {}).get("statusMapping") or {}
        if mapping.pop("default", None) is not None:
            gaps.append(f"uiHints.{crd}.statusMapping.default")


def differences(a, b, path, out):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            differences(a.get(k), b.get(k), f"{path}.{k}" if path else k, out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            differences(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: yaml {json.dumps(a)}, definition {json.dumps(b)}")


def compare(yaml_path, definition_path):
    with open(yaml_path, "rb") as f:
        doc = yaml.safe_load(f)
    with open(definition_path) as f:
        definition = json.load(f)
    spec = dict(doc.get("spec") or {})
    gaps = []
    without_contract_gaps(spec, gaps)
    expected = normalized({"metadata": doc.get("metadata"), **spec})
    got = normalized(definition)
    out = []
    differences(expected, got, "", out)
    print(json.dumps({"differences": out, "not_in_contract": gaps}, indent=2))


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "check":
        check(args[0], args[1:])
    elif command == "compare":
        compare(*args)
    else:
        sys.exit(f"unknown command {command}")
