"""Embedding the proclease component in Python with PyPI's wasmtime (docs/embedding.md).

    python example_embedding.py proclease.wasm

Loads the component, gives it a clock written in Python (every other import traps: the
exports called here need no other), and calls exports of `records` and `directory-leases`.
"""

import json
import sys

from wasmtime import Engine, Store
from wasmtime.component import Component, Linker, Record

engine = Engine()
component = Component.from_file(engine, sys.argv[1])
store = Store(engine)
linker = Linker(engine)

# Imports are defined per interface, by their WIT names.
with linker.root() as root:
    with root.add_instance("proclease:lease/clock@0.3.0") as clock:
        clock.add_func("now-ms", lambda _store: 1_700_000_000_000)
linker.define_unknown_imports_as_traps(component)
instance = linker.instantiate(store, component)


def export(interface, name):
    """A function of an exported interface, e.g. export("records", "sha256")."""
    index = instance.get_export_index(store, f"proclease:lease/{interface}@0.3.0")
    func = instance.get_func(store, instance.get_export_index(store, name, index))

    def call(*args):
        result = func(store, *args)
        func.post_return(store)
        return result

    return call


def record(**fields):
    """A WIT record: its attributes are the WIT field names (kebab-case)."""
    value = Record()
    for name, field in fields.items():
        setattr(value, name.replace("_", "-"), field)
    return value


# result<string, string>: both cases are strings, so wasmtime-py keeps the tag.
canonical = export("records", "canonicalize")('{"b": 1, "a": [true, null]}')
print(canonical.tag, canonical.payload)

# result<tuple<admission-claim, canonical-form>, error>: the tuple, or the error variant:
# Variant("lease", lease-error{code, message, cause}) or Variant("storage" | "system", failure),
# failure{kind, message, errno, path, operation}.
parse_export_admission = export("records", "parse-export-admission")
claim = {
    "schemaVersion": 1,
    "kind": "beeper-message-like-me-export-admission",
    "id": "11111111-1111-4111-8111-111111111111",
    "owner": {"pid": 4242, "bootId": "a" * 64, "processStartId": "b" * 64},
}
parsed, form = parse_export_admission(json.dumps(claim), "value")
print(parsed.schema, getattr(parsed.owner, "pid"), form.sha256)
refused = parse_export_admission(json.dumps({**claim, "id": "not-a-uuid"}), "value")
print(refused.tag, getattr(refused.payload, "code"), getattr(refused.payload, "message"))

# A lease request without now-ms is checked against the clock import above: a launch window
# that ends before its clock reading is refused.
check_request = export("directory-leases", "check-request")
request = record(role="raw-working", path="/home/me/job", output_root=None, recover_after_ms=1_700_000_060_000.0, now_ms=None)
print(check_request(request))
late = check_request(record(role="raw-working", path="/home/me/job", output_root=None, recover_after_ms=5.0, now_ms=None))
print(late.tag, getattr(late.payload, "code"), getattr(late.payload, "message"))
