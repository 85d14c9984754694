"""Validates the deployment files no linter on PyPI covers, against their projects' own schemas:
deploy/compose.yaml against the Compose specification's JSON schema (compose-spec.json, from
compose-spec/compose-spec 170098b), and deploy/kubernetes/servicemonitor.yaml against the
Prometheus Operator's ServiceMonitor CRD (servicemonitor-v1.schema.json: the openAPIV3Schema of
jsonnet/prometheus-operator/servicemonitors-crd.json, operator 0.93.0). As `kubectl apply
--validate=strict` does, a field the CRD does not declare is an error.

    python validate.py <repository root>
"""

import json
import pathlib
import sys

import jsonschema
import yaml

HERE = pathlib.Path(__file__).parent


def strict(schema):
    """Closes every object schema that lists its properties and does not keep unknown fields."""
    if isinstance(schema, dict):
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        for v in schema.values():
            strict(v)
    elif isinstance(schema, list):
        for v in schema:
            strict(v)
    return schema


def check(name, document, schema, validator):
    errors = sorted(validator(schema).iter_errors(document), key=lambda e: list(e.path))
    for e in errors:
        print(f"{name}: {'/'.join(map(str, e.path)) or '(top)'}: {e.message}")
    if not errors:
        print(f"{name}: valid")
    return not errors


def main(root):
    root = pathlib.Path(root)
    compose = yaml.safe_load((root / "deploy/compose.yaml").read_text())
    monitor = yaml.safe_load((root / "deploy/kubernetes/servicemonitor.yaml").read_text())
    ok = check(
        "deploy/compose.yaml",
        compose,
        json.loads((HERE / "compose-spec.json").read_text()),
        jsonschema.Draft7Validator,
    )
    ok &= check(
        "deploy/kubernetes/servicemonitor.yaml",
        monitor,
        strict(json.loads((HERE / "servicemonitor-v1.schema.json").read_text())),
        jsonschema.Draft4Validator,
    )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main(sys.argv[1])
