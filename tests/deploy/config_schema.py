"""Checks TOML configs against the JSON Schema `switchyard schema` prints, with the jsonschema
package (Draft 7, what the schema declares), as an editor's TOML support would: each file is
read with Python's own TOML reader, and every error is reported with the path to its key.

    python config_schema.py <schema.json> <config.toml>...

Prints one JSON object: for each file, the list of errors (empty when it is valid).
"""

import json
import sys
import tomllib

import jsonschema


def main():
    with open(sys.argv[1]) as f:
        schema = json.load(f)
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    out = {}
    for path in sys.argv[2:]:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
        out[path] = [
            "/".join(str(p) for p in e.absolute_path) + ": " + e.message
            for e in validator.iter_errors(doc)
        ]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
