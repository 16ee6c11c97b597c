"""The portable artifact (`host/component/proclease-portable.wasm`, world `proclease-portable`
of `wit/sys.wit`) is what this package is to load once it implements the system-call contract
instead of its own store (issue #41). These tests hold the contract to what wasmtime-py's public
API can implement: a host function must be able to return every case of its result, or a Python
host could not report a failed `fsync` or a refused rename.
"""

from __future__ import annotations

from pathlib import Path

from wasmtime.component import Component, FuncType, ResultType

from proclease._binding import engine, interface_name, result_shape

ARTIFACT = Path(__file__).resolve().parents[3] / "host" / "component" / "proclease-portable.wasm"


def _import_functions() -> dict[tuple[str, str], FuncType]:
    component = Component(engine(), ARTIFACT.read_bytes())
    functions: dict[tuple[str, str], FuncType] = {}
    for import_name, extern in component.type.imports(engine()).items():
        for item_name, item in extern.ty.exports(engine()).items():
            if isinstance(item.ty, FuncType):
                functions[(interface_name(import_name), item_name)] = item.ty
    return functions


def test_every_import_of_the_portable_artifact_can_report_its_failure_from_python() -> None:
    functions = _import_functions()
    # The system calls are there, resource methods included (what the check below covers).
    for name in ("[method]directory.rename", "[method]directory.sync", "[method]file.write-all", "[method]directory.lstat", "[method]directory.try-lock"):
        assert ("sys-fs", name) in functions, sorted(functions)
    unreportable = sorted(f"{interface}.{name}" for (interface, name), ty in functions.items() if isinstance(ty.result, ResultType) and result_shape(ty.result) == "cannot-fail")
    assert unreportable == [], f"wasmtime-py lowers any value as these results' ok case: {unreportable}"


def test_the_portable_artifact_imports_the_system_calls_instead_of_a_store() -> None:
    interfaces = {interface for interface, _ in _import_functions()}
    assert interfaces == {"sys-fs", "sys-kernel", "process-identity", "clock", "entropy"}, interfaces
