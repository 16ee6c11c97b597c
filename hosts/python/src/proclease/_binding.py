"""The proclease component in Python through PyPI's `wasmtime` (`wasmtime.component`), public API only.

`Proclease` compiles the component, binds every import it declares to a Python host object
and calls its exports. The host is looked up at call time (`instance.host = other`), so one
instance can serve many in-memory worlds, one per conformance vector.

How values cross the boundary in wasmtime-py's dynamic API (what this module relies on):

* record: a `wasmtime.component.Record` whose attributes are the WIT field names, kebab-case
  (`boot-id`). Values coming out of the component are turned into `Rec`, which also answers
  snake_case names (`owner.boot_id`); `rec(...)` builds one to pass in.
* enum: `str`. option: `None` or the value. list<u8>: `bytes`. u64/s64: `int`. f64: `float`.
* variant: `Variant(tag, payload)` when its cases' Python types overlap (every variant of the
  contract that crosses here does), else the bare payload, wasmtime choosing the case by type.
* result: the same rule. An export's `result<T, error>` therefore comes back as `T` or as the
  `error` variant (`Variant('lease' | 'storage' | 'system', record)`), and a
  `result<string, string>` as `Variant('ok' | 'err', text)`; `Proclease.call` returns the ok
  value and raises the err case as `ComponentError`. A host function returns its ok value or
  raises `HostError(payload)`; the binding lowers both the way `result_shape` says.
* resource: an imported (host) resource is any Python object deriving from `HostResource`;
  its `release()` runs when the component drops it. An exported (guest) resource is a
  `ResourceAny`, wrapped here in `GuestResource`.
"""

from __future__ import annotations

from ._errors import Error

import hashlib
import threading
import weakref
from pathlib import Path
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Optional

import wasmtime
from wasmtime import Engine, Store, WasmtimeError
from wasmtime.component import (
    Component,
    FuncType,
    Linker,
    Record,
    ResourceAny,
    ResourceHost,
    ResourceType,
    ResultType,
    Variant,
)

from ._wit import HostError, Rec, kebab, rec, snake

PACKAGE = "proclease:lease"
VERSION = "0.3.0"
ERROR_TAGS = ("lease", "storage", "system")


def interface_name(import_name: str) -> str:
    """`proclease:lease/state-store@0.3.0` -> `state-store`."""
    return import_name.split("/", 1)[1].split("@", 1)[0]


def adopt(value: Any) -> Any:
    """Turns lifted records (also inside lists, tuples and variants) into `Rec`."""
    if isinstance(value, Record) and not isinstance(value, Rec):
        out = Rec()
        out.__dict__.update({k: adopt(v) for k, v in value.__dict__.items()})
        return out
    if isinstance(value, list):
        return [adopt(v) for v in value]
    if isinstance(value, tuple):
        return tuple(adopt(v) for v in value)
    if isinstance(value, Variant):
        return Variant(value.tag, adopt(value.payload))
    return value


def error_message(payload: Any) -> str:
    """The message of an `error` variant's payload: a lease error's `message` (it also carries
    its `code`), or a storage / system `failure`'s."""
    return payload.message if isinstance(payload, Rec) else payload


class ComponentError(Error):
    """The err case of an export's result: `kind` is the `error` variant's case (`lease`,
    `storage`, `system`), or None where the contract's error is a plain string; `code` is a
    lease error's code (`another-export-is-active`, …)."""

    #: When a wait for another process's kernel lock reached the host's bound in the call that
    #: failed: that wait's words (`waited N ms for …, held by pid N (…): …`), the failure being
    #: its consequence (the native `Error::LockTimeout`; the CLI exits 5); else None.
    lock_timeout: Optional[str] = None

    def __init__(self, kind: Optional[str], payload: Any) -> None:
        message = error_message(payload)
        #: A storage or system failure's record (kind, message, errno, path, operation), or a
        #: lease error's cause; None otherwise.
        failure = payload if kind in ("storage", "system") else getattr(payload, "cause", None) if isinstance(payload, Rec) else None
        code = getattr(payload, "code", None) if isinstance(payload, Rec) else None
        super().__init__(message, kind=kind, code=code, failure=failure)
        self.args = (message if kind is None else f"{kind}: {message}",)


class HostResource:
    """Base of imported resources handed to the component; `release` runs on its drop."""

    #: The WIT resource name, e.g. `catalog-lock`.
    wit_name = ""

    def release(self) -> None:
        pass


# --- Results of host functions ----------------------------------------------------------------
#
# wasmtime-py (public API) lowers a host function's `result` in one of two ways. When its ok and
# err cases lift to overlapping Python classes it is "tagged": the host returns
# `Variant('ok' | 'err', payload)`. Otherwise the host returns the bare payload and wasmtime-py
# picks the first case whose classes the value is an instance of, ok first. A case holding an
# `option` (or no payload) accepts `object`, so an error could never be returned through such a
# result: the contract (since 0.2.0) wraps every "maybe nothing" answer of an import in a record
# (`stored-file`, `collection-listing`, `directory-lookup`, `finished-run-entry`, `installation`)
# so that each import's error case can be returned. `result_shape` checks that at bind time.


def _classes(valtype: Any) -> set:
    """The Python classes wasmtime-py lifts `valtype` to (`object` for no payload)."""
    out: set = set()
    if valtype is None:
        out.add(object)
    else:
        valtype.add_classes(out)
    return out


def result_shape(result: Any) -> str:
    """How a host function returns `result`: `tagged` (`Variant('ok' | 'err', payload)`),
    `untagged` (the bare payload; the error's classes are disjoint from the ok case's), or
    `cannot-fail` (the ok case accepts any value, so its error case cannot be returned)."""
    ok, err = _classes(result.ok), _classes(result.err)
    if ok & err:
        return "tagged"
    if object in ok:
        return "cannot-fail"
    return "untagged"


# --- Loading ---------------------------------------------------------------------------------

_compiled: Dict[str, Component] = {}
_engine: Optional[Engine] = None


#: Guards the process's one engine and its compiled components: `Host`s made at once in several
#: threads would otherwise make two engines, and one's component would not instantiate in the
#: other's store ("cross-Engine instantiation").
_loading = threading.Lock()


def engine() -> Engine:
    global _engine
    with _loading:
        if _engine is None:
            _engine = Engine()
        return _engine


def compile_component(wasm: Path) -> Component:
    """Compiles the component at `wasm` once per process (keyed by its sha256)."""
    data = Path(wasm).read_bytes()
    key = hashlib.sha256(data).hexdigest()
    eng = engine()
    with _loading:
        if key not in _compiled:
            _compiled[key] = Component(eng, data)
        return _compiled[key]


class GuestResource:
    """A resource the component exports (`admission`, `directory-lease`,
    `containment-controller`): its methods are called as Python methods, snake_case."""

    def __init__(self, owner: "Proclease", interface: str, name: str, handle: ResourceAny) -> None:
        self._owner = owner
        self._interface = interface
        self._name = name
        self.handle = handle
        #: The instance it belongs to (`Proclease.generation`): a trapped one's are gone with it.
        self._generation = owner.generation

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)
        export = f"[method]{self._name}.{kebab(method)}"
        return lambda *args: self._owner.call(self._interface, export, self.handle, *args)

    def drop(self) -> None:
        # Under the instance's call lock: a drop enters the component's store as a call does,
        # and traps as a call does (an import that fails inside the resource's destructor).
        with self._owner.calling():
            if self.handle is not None:
                handle, self.handle = self.handle, None
                if self._owner.generation != self._generation or self._owner.trapped:
                    return  # its instance trapped: the resource went with it
                self._owner.entered(lambda: handle.drop(self._owner.store))


class Exports:
    """`instance.records.canonicalize(text)`: the functions of one exported interface."""

    def __init__(self, owner: "Proclease", interface: str) -> None:
        self._owner = owner
        self._interface = interface

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args: self._owner.call(self._interface, kebab(name), *args)

    def static(self, resource: str, name: str, *args: Any) -> Any:
        """A static function of an exported resource, e.g. `admission.resume`."""
        return self._owner.call(self._interface, f"[static]{resource}.{name}", *args)


class Proclease:
    """One instance of the component in its own wasmtime Store."""

    def __init__(self, wasm: Path, host: Any, operation: Optional[Callable[[], ContextManager[None]]] = None, timed_out: Optional[Callable[[], Optional[str]]] = None) -> None:
        self.component = compile_component(wasm)
        self.host = host
        #: Each entry runs inside `operation()` (`SysKernel.operation`: its lock waits share one
        #: bound); none when the host has no such bound.
        self._operation = operation if operation is not None else nullcontext
        #: The last operation's lock timeout (`SysKernel.timed_out`), given to its failure.
        self._timed_out = timed_out if timed_out is not None else (lambda: None)
        self._resource_ids: Dict[str, int] = {}
        self._live: Dict[int, HostResource] = {}
        self._next_rep = 1
        self.bound: Dict[str, list] = {}
        # One thread in the instance at a time; and the thread inside, while it is (a finalizer
        # that runs on it then must not enter again: `defer`).
        self._calling = threading.RLock()
        self._inside: Optional[int] = None
        self._deferred: List[Callable[[], None]] = []
        self._interrupted: Optional[BaseException] = None
        self._trapped = False
        #: Counts renewals: which instance a guest resource's handle belongs to.
        self.generation = 0
        self.store = Store(engine())
        self.linker = Linker(engine())
        # An instance that is collected releases what it still holds (descriptors, locks).
        weakref.finalize(self, _release_all, self._live)
        self._bind_imports()
        self.instance = self.linker.instantiate(self.store, self.component)
        self._funcs: Dict[tuple, Any] = {}

    # Imports: every function and resource of every interface the component imports is bound
    # to the host's attribute of the same (snake_case) name, looked up at call time.

    def _bind_imports(self) -> None:
        eng = engine()
        with self.linker.root() as root:
            for import_name, extern in self.component.type.imports(eng).items():
                interface = interface_name(import_name)
                names = []
                with root.add_instance(import_name) as instance:
                    for item_name, item in extern.ty.exports(eng).items():
                        kind = item.ty
                        if isinstance(kind, FuncType):
                            if not item_name.startswith("[method]"):
                                self._require(interface, item_name)
                            instance.add_func(item_name, self._forwarder(interface, item_name, kind.result))
                            names.append(item_name)
                        elif isinstance(kind, ResourceType):
                            type_id = len(self._resource_ids) + 1
                            self._resource_ids[item_name] = type_id
                            instance.add_resource(item_name, ResourceType.host(type_id), self._dropped)
                            names.append(item_name)
                self.bound[interface] = names

    def _renew(self) -> None:
        """A new store and instance of the same component and imports (the trapped instance's
        host resources were released at its trap, in `call`)."""
        self.store = Store(engine())
        self.instance = self.linker.instantiate(self.store, self.component)
        self._funcs = {}
        self._trapped = False
        self.generation += 1

    @property
    def trapped(self) -> bool:
        """Whether the instance trapped (the next call renews it)."""
        return self._trapped

    def _require(self, interface: str, function: str) -> None:
        part = getattr(self.host, snake(interface), None)
        if part is None or not callable(getattr(part, snake(function), None)):
            raise TypeError(f"the host provides no {interface}.{function} (expected {snake(interface)}.{snake(function)})")

    def _forwarder(self, interface: str, function: str, result_type: Any) -> Callable[..., Any]:
        """The host function of `interface.function`: the host's `snake_case` method, or for a
        resource's method (`[method]directory.open-dir`) the method of the Python object the
        handle stands for (`open_dir`), its resource arguments also given as those objects."""
        resource_method = function.startswith("[method]")
        part_name, method_name = snake(interface), snake(function.split(".", 1)[1] if resource_method else function)
        shape = result_shape(result_type) if isinstance(result_type, ResultType) else None
        if shape == "cannot-fail":
            raise TypeError(f"{interface}.{function}: wasmtime-py cannot return the error case of its result (an option or empty ok case); see component.result_shape")

        def forward(_store: Any, *args: Any) -> Any:
            try:
                return outcome(_store, *args)
            except Exception:
                raise  # wasmtime-py turns it into a trap of the export call
            except BaseException as interrupt:
                # KeyboardInterrupt, SystemExit: wasmtime-py catches only Exception, and one
                # escaping its ctypes callback crashes the interpreter. The call traps instead,
                # and `call` raises the interrupt once the component has returned.
                self._interrupted = interrupt
                raise RuntimeError(f"{interface}.{function} was interrupted") from None

        def outcome(store: Any, *args: Any) -> Any:
            if resource_method:
                args = tuple(self._host_object(store, a) for a in args)
                method = getattr(args[0], method_name)
                args = args[1:]
            else:
                method = getattr(getattr(self.host, part_name), method_name)
            args = tuple(adopt(a) for a in args)
            if shape is None:
                return self._lower(method(*args))
            try:
                value = self._lower(method(*args))
            except HostError as error:
                payload = self._lower(error.payload)
                return Variant("err", payload) if shape == "tagged" else payload
            return Variant("ok", value) if shape == "tagged" else value

        return forward

    def _lower(self, value: Any) -> Any:
        """Host resources (also inside tuples, lists and variants) become owned handles."""
        if isinstance(value, HostResource):
            rep = self._next_rep
            self._next_rep += 1
            self._live[rep] = value
            return ResourceHost.own(rep, self._resource_ids[value.wit_name])
        if isinstance(value, list):
            return [self._lower(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self._lower(v) for v in value)
        if isinstance(value, Variant):
            return Variant(value.tag, self._lower(value.payload))
        return value

    def _host_object(self, store: Any, value: Any) -> Any:
        """A handle of a resource this host made (`borrow<directory>`) as the Python object it
        stands for (`store`: the calling store's context); any other value as it is."""
        if isinstance(value, ResourceAny):
            return self._live[value.to_host(store).rep]
        return value

    def _dropped(self, _store: Any, rep: int) -> None:
        # Absent: released already, with the rest of a trapped instance's (`_renew`).
        resource = self._live.pop(rep, None)
        if resource is not None:
            resource.release()

    @property
    def live_host_resources(self) -> int:
        return len(self._live)

    # Exports.

    def _func(self, interface: str, name: str) -> tuple:
        key = (interface, name)
        if key not in self._funcs:
            outer = self.instance.get_export_index(self.store, f"{PACKAGE}/{interface}@{VERSION}")
            if outer is None:
                raise LookupError(f"the component exports no {interface}")
            index = self.instance.get_export_index(self.store, name, outer)
            func = self.instance.get_func(self.store, index) if index is not None else None
            if func is None:
                raise LookupError(f"{interface} exports no function {name}")
            result = func.type(self.store).result
            is_result = isinstance(result, ResultType)
            # Untagged, a value of a class only the err case lifts to is the error: a `failure`
            # record beside a `bool` (the store's and the workspace's exports).
            err_only = tuple(_classes(result.err) - _classes(result.ok) - {object}) if is_result else ()
            self._funcs[key] = (func, is_result, _is_tagged(result), err_only)
        return self._funcs[key]

    @contextmanager
    def calling(self) -> Iterator[None]:
        """Holds the instance for one entry into its store: other threads wait (a `Host` shared
        by threads queues its calls). Work `defer`red meanwhile runs once the outermost entry
        ends."""
        outer = False
        try:
            with self._calling:
                outer = self._inside is None
                self._inside = threading.get_ident()
                try:
                    yield
                finally:
                    if outer:
                        self._inside = None
        finally:
            # Also after a call that failed: the work was handed over by a finalizer that will
            # not run again.
            if outer:
                self._run_deferred()

    def defer(self, work: Callable[[], None]) -> None:
        """Runs `work` (which calls into this instance) now, or — when this thread is inside a
        call of the instance already (a finalizer the garbage collector ran in the middle of an
        import) — once that call has ended: an instance cannot be entered twice."""
        if self._inside == threading.get_ident():
            self._deferred.append(work)
        else:
            work()

    def _run_deferred(self) -> None:
        while self._inside is None:
            try:
                work = self._deferred.pop(0)
            except IndexError:  # empty, or another thread took the last one
                return
            try:
                work()
            except Exception:  # noqa: BLE001 (deferred finalizer work says why itself)
                pass

    def entered(self, enter: Callable[[], Any]) -> Any:
        """Runs `enter` (a call of an export, or a drop of one of its resources), the caller
        holding `calling()`. On a trap the instance is dead: what it held is released now, as
        its crash would release it (a kernel lock must not wait for its next call, or for this
        process's exit), the next call renews it, and an interrupt (Ctrl-C) an import took is
        raised again."""
        self._interrupted = None
        try:
            # One operation: its lock waits share one bound (`SysKernel.operation`).
            with self._operation():
                return enter()
        except Exception:  # a trap: wasmtime.Trap or WasmtimeError
            self._trapped = True
            _release_all(self._live)
            interrupted, self._interrupted = self._interrupted, None
            if interrupted is not None:
                raise interrupted from None
            raise

    def call(self, interface: str, name: str, *args: Any) -> Any:
        """Calls an export and returns its value; the err case of a `result` is raised as
        `ComponentError` (the `error` variant's kind and message, or kind None for a plain
        string error)."""
        # One call at a time: an instance cannot be entered twice (threads sharing a host queue).
        with self.calling():
            func, is_result, tagged, err_only = self._func(interface, name)
            if self._trapped:
                # A trapped instance cannot be entered again: a fresh one (the native host never
                # reuses one either). Handles of the old one's resources are gone with it.
                self._renew()
                func, is_result, tagged, err_only = self._func(interface, name)
            value = self.entered(lambda: func(self.store, *args))
            func.post_return(self.store)
        try:
            return self._returned(value, is_result, tagged, err_only)
        except ComponentError as error:
            error.lock_timeout = self._timed_out()
            raise

    @staticmethod
    def _returned(value: Any, is_result: bool, tagged: bool, err_only: Any) -> Any:
        """An export's value, or its err case raised as `ComponentError`."""
        failed = is_result and not tagged and bool(err_only) and isinstance(value, err_only) and not isinstance(value, Variant)
        value = adopt(value)
        if failed:
            # A `failure` record (kind, message, errno, path, operation) is a storage failure; a
            # plain string error has no kind.
            raise ComponentError("storage" if isinstance(value, Rec) else None, value)
        if not is_result:
            return value
        if tagged:
            # Both cases map to the same Python types, so wasmtime kept the tag.
            if value.tag == "ok":
                return value.payload
            value = value.payload
            if isinstance(value, Rec):  # a `failure` record: a storage failure
                raise ComponentError("storage", value)
            if not (isinstance(value, Variant) and value.tag in ERROR_TAGS):
                raise ComponentError(None, value)
        # Untagged: the ok type never lifts to a Variant (else the cases would overlap and
        # wasmtime would have tagged them), so a Variant is the err case.
        if isinstance(value, Variant):
            raise ComponentError(value.tag, value.payload)
        return value

    def exports(self, interface: str) -> Exports:
        return Exports(self, interface)

    @property
    def records(self) -> Exports:
        return self.exports("records")

    @property
    def dispositions(self) -> Exports:
        return self.exports("dispositions")

    @property
    def export_admission(self) -> Exports:
        return self.exports("export-admission")

    @property
    def directory_leases(self) -> Exports:
        return self.exports("directory-leases")

    @property
    def invocation_leases(self) -> Exports:
        return self.exports("invocation-leases")

    @property
    def run_refusals(self) -> Exports:
        """The words of a run refused before its command started (proclease-core's
        `run_refusals`), as every host's supervisor words them."""
        return self.exports("run-refusals")

    @property
    def recovery_advice(self) -> Exports:
        """The words of a `recover` that stopped or whose wait reached its bound
        (proclease-core's `recovery_advice`), as every host's command line words them."""
        return self.exports("recovery-advice")

    @property
    def recovery_turn(self) -> Exports:
        """The portable artifact's recovery turn (`take`, `end`): the kernel lock every host's
        `recover` holds while it recovers (`proclease-portable.wasm` only)."""
        return self.exports("recovery-turn")

    @property
    def workspace(self) -> Exports:
        """The portable artifact's own workspace protocol (`proclease-portable.wasm` only)."""
        return self.exports("workspace")

    @property
    def state_store(self) -> Exports:
        """The portable artifact's own state store (`proclease-portable.wasm` only)."""
        return self.exports("state-store")

    @property
    def plugin_catalog(self) -> Exports:
        """The portable artifact's own plugin catalog: the state home's catalog file and the §5
        catalog mutation lock (`proclease-portable.wasm` only)."""
        return self.exports("plugin-catalog")

    def resource(self, interface: str, name: str, handle: ResourceAny) -> GuestResource:
        return GuestResource(self, interface, name, handle)


def _release_all(live: Dict[int, HostResource]) -> None:
    """Releases every host resource in `live` (an instance that is gone holds none)."""
    while live:
        _, resource = live.popitem()
        try:
            resource.release()
        except Exception:  # noqa: BLE001 (the others are still released)
            pass


def _is_tagged(valtype: Any) -> bool:
    """Whether wasmtime-py lifts this result as `Variant(tag, payload)`."""
    return isinstance(valtype, ResultType) and result_shape(valtype) == "tagged"


__all__ = [
    "ComponentError",
    "error_message",
    "Exports",
    "GuestResource",
    "HostError",
    "HostResource",
    "Proclease",
    "Rec",
    "Variant",
    "WasmtimeError",
    "adopt",
    "compile_component",
    "rec",
    "result_shape",
    "wasmtime",
]
