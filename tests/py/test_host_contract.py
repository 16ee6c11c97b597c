"""The Python host against the contract: it binds exactly the imports `wit/proclease.wit`
declares, and every failure it reports reaches the component as the contract's error."""

from __future__ import annotations

import re

import pytest
from wasmtime.component import FuncType, ResultType

import component
from component import ComponentError, Proclease, Rec
from conftest import HERE
from memory_host import World, failure
from test_scenarios import PLUGIN, RUN_ID, identity

WIT = HERE.parent.parent / "wit" / "proclease.wit"


def wit_imports() -> dict:
    """`{interface: [functions and resources]}` for every interface the world imports."""
    blocks, name, depth = {}, None, 0
    for raw in WIT.read_text(encoding="utf-8").splitlines():
        line = raw.split("//", 1)[0]
        if name is None:
            m = re.match(r"\s*(interface|world)\s+([a-z][a-z0-9-]*)\s*\{", line)
            if m:
                name, depth = (m.group(1), m.group(2)), 0
                blocks[name] = []
        if name is not None:
            if depth == 1:
                item = re.match(r"\s*%?([a-z][a-z0-9-]*):\s*func", line) or re.match(r"\s*resource\s+([a-z][a-z0-9-]*)", line)
                imported = re.match(r"\s*import\s+([a-z][a-z0-9-]*);", line)
                if item:
                    blocks[name].append(item.group(1))
                if imported:
                    blocks[name].append(imported.group(1))
            depth += line.count("{") - line.count("}")
            if depth == 0:
                name = None
    world = blocks[("world", "proclease")]
    return {interface: sorted(blocks[("interface", interface)]) for interface in world}


def test_the_host_binds_exactly_the_imports_of_the_contract(harness):
    declared = wit_imports()
    assert set(declared) == {"state-store", "workspace", "process-identity", "plugin-catalog", "clock", "entropy"}
    bound = {k: sorted(v) for k, v in harness.p.bound.items() if k != "types"}
    assert bound == declared
    assert harness.p.bound["types"] == [], "types carries no functions"


def test_a_host_missing_an_import_is_refused_before_instantiation(wasm):
    world = World()
    del world.entropy
    with pytest.raises(TypeError, match=r"the host provides no entropy.random-bytes"):
        Proclease(wasm, world)


def function_results(wasm, direction: str) -> dict:
    """`{"interface.function": result type}` of every function the component imports or
    exports whose result is a `result`."""
    eng = component.engine()
    ty = component.compile_component(wasm).type
    items = ty.imports(eng) if direction == "imports" else ty.exports(eng)
    out = {}
    for name, extern in items.items():
        for function, item in extern.ty.exports(eng).items():
            if isinstance(item.ty, FuncType) and isinstance(item.ty.result, ResultType):
                out[f"{component.interface_name(name)}.{function}"] = item.ty.result
    return out


def test_every_import_can_return_its_error_through_wasmtime_pys_public_api(wasm):
    """wasmtime-py lowers an untagged `result` by trying its ok case first; an ok case holding
    an `option` accepts any value, so such an import could never fail (0.1.0's
    `read-if-present`, `snapshot`, `inspect`, `finished-run`, `installed`). The contract wraps
    those answers in records; no import may bring the shape back."""
    shapes = {name: component.result_shape(result) for name, result in function_results(wasm, "imports").items()}
    assert "cannot-fail" not in shapes.values(), shapes
    assert shapes["state-store.read-if-present"] == "tagged"
    assert shapes["plugin-catalog.installed"] == "untagged"


def test_result_shape_recognises_a_result_whose_error_cannot_be_returned(wasm):
    """The check above can fail: an export that keeps `result<option<T>, error>` (it is only
    lifted, which works) has the shape the binding refuses for an import."""
    results = function_results(wasm, "exports")
    assert component.result_shape(results["export-admission.survey"]) == "cannot-fail"


def test_a_read_over_its_bound_is_a_storage_error(harness):
    world = harness.fresh()
    world.store.put("recovery/beeper-message-like-me-export-admission/active.json", "x" * 20000)
    with pytest.raises(ComponentError) as error:
        harness.p.export_admission.survey()
    assert (error.value.kind, error.value.message) == ("storage", "recovery/beeper-message-like-me-export-admission/active.json: larger than 16384 bytes")


def test_a_failing_store_is_a_storage_error_naming_the_path(harness):
    world = harness.fresh()
    world.store.broken = failure("io", "provider-plugin-state/.invocations: read: Input/output error (os error 5)")
    for call in (harness.p.invocation_leases.list, harness.p.export_admission.survey):
        with pytest.raises(ComponentError) as error:
            call()
        assert (error.value.kind, error.value.message) == ("storage", "provider-plugin-state/.invocations: read: Input/output error (os error 5)")


def test_a_workspace_outside_the_granted_roots_is_refused(harness):
    world = harness.fresh()
    world.workspace.roots = ["/home"]
    world.workspace.add("/work", 1)
    world.workspace.add("/work/job", 2)
    request = Rec(role="raw-working", path="/work/job", output_root=None, recover_after_ms=5000.0, now_ms=None)
    with pytest.raises(ComponentError) as error:
        harness.p.directory_leases.create(request)
    assert (error.value.kind, error.value.message) == ("storage", "/work: outside every granted workspace root")
    assert not [k for k in world.store.files if "directory-leases" in k], "nothing was recorded"


def test_an_unreadable_catalog_is_a_system_error(harness):
    world = harness.fresh()
    world.plugin_catalog.install(PLUGIN["plugin_id"], PLUGIN["plugin_version"], PLUGIN["bundle_sha256"], PLUGIN["manifest_sha256"])
    world.plugin_catalog.unreadable = "provider-plugins/catalog.json: not valid JSON"
    with pytest.raises(ComponentError) as error:
        harness.p.invocation_leases.acquire(identity(), RUN_ID)
    assert (error.value.kind, error.value.message) == ("system", "provider-plugins/catalog.json: not valid JSON")
    assert (world.plugin_catalog.depth, harness.p.live_host_resources) == (0, 0), "the lock was dropped on the error path"


def test_an_unavailable_boot_id_is_a_system_error(harness):
    world = harness.fresh(boot_id=None)
    with pytest.raises(ComponentError) as error:
        harness.p.export_admission.acquire()
    assert (error.value.kind, error.value.message) == ("system", "system boot identity is unavailable")
    assert world.processes.boot_lookups == 1
