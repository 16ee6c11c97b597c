"""The Python state store (`proclease.state_store`) on real files and real processes.

Ports the checks of `tests/tests/state_store.rs` and `tests/tests/state_home.rs` (and the unit
tests of `mutation_claim.rs` and `arbitration.rs`), and adds interop with the native store:
native and Python writers incrementing one record lose no update, and the native `doctor`
reads a state home the Python store wrote.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import List

import pytest
from wasmtime.component import Variant

from conftest import ProcProcesses, identity_digest, proc_judge, process_start_id
from proclease import _fsops
from proclease import _mutation_claim as mc
from proclease._wit import HostError
from proclease.state_store import (
    MARKER,
    MARKER_CONTENT,
    StateHome,
    StateHomeError,
    StateStore,
    StoreError,
    operation,
)

REPO = Path(__file__).resolve().parents[3]
SRC = REPO / "hosts" / "python" / "src"
TESTS = Path(__file__).resolve().parent
NATIVE_WORKER = REPO / "target" / "debug" / "store_worker"
NATIVE_BIN = REPO / "target" / "debug" / "proclease"
RECORD = "recovery/things/a.json"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def mode(path: Path) -> int:
    return os.lstat(path).st_mode & 0o777


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def store(home: Path, processes, judge) -> StateStore:
    opened = StateStore(str(home), processes, judge)
    yield opened
    opened.close()


def open_store(home: Path) -> StateStore:
    return StateStore(str(home), ProcProcesses(), proc_judge)


def staging_entries(home: Path) -> List[str]:
    return sorted(os.listdir(home / ".proclease" / "staging"))


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def failure_of(error: HostError):
    assert isinstance(error, StoreError), error
    return error.payload


# --- The compare-and-swap contract (§3.3) ------------------------------------------------------


def test_compare_and_swap_contract(store: StateStore, home: Path) -> None:
    """Create never overwrites; replace and remove act only on the bytes whose sha256 is given
    (a wrong hash leaves the bytes unchanged) and on an absent record do nothing
    (`store_fixtures::assert_compare_and_swap_contract`)."""

    def read():
        return store.read_if_present(RECORD, 1024).text

    on_disk = home / RECORD
    assert read() is None
    assert store.create_if_absent(RECORD, "one\n") is True
    assert store.create_if_absent(RECORD, "two\n") is False, "create never overwrites"
    assert on_disk.read_bytes() == b"one\n"

    assert store.replace_if_unchanged(RECORD, sha("something else"), "two\n") is False
    assert on_disk.read_bytes() == b"one\n", "a wrong hash leaves the bytes unchanged"
    assert store.replace_if_unchanged(RECORD, sha("one\n"), "two\n") is True
    assert on_disk.read_bytes() == b"two\n"
    assert read() == "two\n"

    assert store.remove_if_unchanged(RECORD, sha("one\n")) is False
    assert on_disk.read_bytes() == b"two\n"
    assert store.remove_if_unchanged(RECORD, sha("two\n")) is True
    assert not on_disk.exists()
    assert read() is None
    assert store.remove_if_unchanged(RECORD, sha("two\n")) is False
    assert store.replace_if_unchanged(RECORD, sha("two\n"), "x\n") is False
    assert not on_disk.exists(), "a replace of an absent record creates nothing"
    assert store.create_if_absent(RECORD, "three\n") is True
    assert on_disk.read_bytes() == b"three\n"


def test_files_are_private_and_collections_hold_only_records(store: StateStore, home: Path) -> None:
    """Modes 0700/0600, the reference's marker, no temporaries or claims left in the collection
    or the staging directory, and the collection's lock under `.proclease/locks/` named as the
    native store names it."""
    assert store.create_if_absent(RECORD, "one\n")
    assert store.replace_if_unchanged(RECORD, sha("one\n"), "two\n")
    assert mode(home) == 0o700
    assert mode(home / "recovery") == 0o700
    assert mode(home / "recovery/things") == 0o700
    assert mode(home / RECORD) == 0o600
    assert mode(home / ".proclease") == mode(home / ".proclease/staging") == mode(home / ".proclease/locks") == 0o700
    assert os.listdir(home / "recovery/things") == ["a.json"], "no temporaries or claims beside the record"
    assert staging_entries(home) == [], "no temporaries left behind"
    assert (home / MARKER).read_text() == '{"kind":"io-state","schemaVersion":1}\n'
    lock = identity_digest("proclease-collection-lock", "recovery/things") + ".lock"
    assert os.listdir(home / ".proclease/locks") == [lock]
    assert mode(home / ".proclease/locks" / lock) == 0o600


def test_writes_go_through_a_staged_fsynced_temporary_published_by_link_or_rename(store: StateStore, home: Path, monkeypatch) -> None:
    """The durable-write protocol: the content is staged in `.proclease/staging/` as
    `<pid>-<start id>-<uuid>.tmp`, then linked (create) or renamed (replace) into the collection;
    the collection directory is fsynced after; nothing stays in staging."""
    seen = []
    real_link, real_rename, real_fsync_dir = os.link, os.rename, _fsops.fsync_dir

    def link(src, dst, **kw):
        seen.append(("link", src, dst, sorted(os.listdir(home / ".proclease/staging"))))
        return real_link(src, dst, **kw)

    def rename(src, dst, **kw):
        seen.append(("rename", src, dst))
        return real_rename(src, dst, **kw)

    def fsync_dir(fd):
        seen.append(("fsync", os.fstat(fd).st_ino))
        return real_fsync_dir(fd)

    store.ensure_private_directory("recovery/things")
    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(_fsops, "fsync_dir", fsync_dir)
    own = ProcProcesses().self_identity()
    assert store.create_if_absent(RECORD, "one\n")
    assert store.replace_if_unchanged(RECORD, sha("one\n"), "two\n")
    collection = os.stat(home / "recovery/things").st_ino
    links = [s for s in seen if s[0] == "link"]
    renames = [s for s in seen if s[0] == "rename"]
    assert len(links) == 1 and links[0][2] == "a.json"
    temp = links[0][1]
    assert temp.startswith(f"{own.pid}-{own.process_start_id}-") and temp.endswith(".tmp") and mc.is_uuid_v4(temp.split("-", 2)[2][:-4])
    assert links[0][3] == [temp], "the temporary is staged before it is linked"
    assert len(renames) == 1 and renames[0][2] == "a.json" and renames[0][1].startswith(f"{own.pid}-")
    fsyncs = [s for s in seen if s[0] == "fsync"]
    assert fsyncs == [("fsync", collection), ("fsync", collection)], "the collection is fsynced after each publication"
    assert staging_entries(home) == []


@pytest.mark.parametrize("operation_name", ["create", "replace", "remove"])
def test_a_change_whose_collection_fsync_fails_is_undone(store: StateStore, home: Path, monkeypatch, operation_name: str) -> None:
    """A caller told "failed" finds the record as it was (the Rust's `restore` and `link_new`
    undo; `tests/tests/real_faults.rs` drives them with the same fault)."""
    on_disk = home / RECORD
    store.ensure_private_directory("recovery/things")
    if operation_name != "create":
        assert store.create_if_absent(RECORD, "one\n")
    failures = [1]
    real = _fsops.fsync_dir

    def failing(fd):
        if failures[0] > 0:
            failures[0] -= 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd)

    monkeypatch.setattr(_fsops, "fsync_dir", failing)
    with pytest.raises(StoreError) as caught:
        if operation_name == "create":
            store.create_if_absent(RECORD, "one\n")
        elif operation_name == "replace":
            store.replace_if_unchanged(RECORD, sha("one\n"), "two\n")
        else:
            store.remove_if_unchanged(RECORD, sha("one\n"))
    f = failure_of(caught.value)
    assert (f.kind, f.errno, f.path, f.operation) == ("io", "EIO", RECORD, "fsync of the collection")
    assert f.message == f"{RECORD}: fsync of the collection failed: Input/output error (os error 5)"
    if operation_name == "create":
        assert not on_disk.exists(), "a create reported failed is not visible"
    else:
        assert on_disk.read_bytes() == b"one\n", "the old bytes are back"
        assert mode(on_disk) == 0o600
    assert staging_entries(home) == []
    assert sorted(os.listdir(home / "recovery/things")) == ([] if operation_name == "create" else ["a.json"])


# --- Paths, symbolic links, modes, bounds -------------------------------------------------------


@pytest.mark.parametrize(
    "path, reason",
    [
        ("/etc/passwd", "absolute paths are refused: give a path relative to the state home"),
        ("../escape.json", 'unsafe path segment ".." (empty, `.`, `..`, a separator or a control character)'),
        ("recovery/../../escape.json", 'unsafe path segment ".." (empty, `.`, `..`, a separator or a control character)'),
        ("recovery//x.json", 'unsafe path segment "" (empty, `.`, `..`, a separator or a control character)'),
        ("recovery/./x.json", 'unsafe path segment "." (empty, `.`, `..`, a separator or a control character)'),
        ("recovery/a\nb/x.json", 'unsafe path segment "a\\nb" (empty, `.`, `..`, a separator or a control character)'),
        ("recovery/a\\b/x.json", 'unsafe path segment "a\\\\b" (empty, `.`, `..`, a separator or a control character)'),
        (".proclease/locks/x", 'state path is outside the owned state layout: ".proclease" is not a state directory name'),
        ("etc/x.json", 'state path is outside the owned state layout: "etc" is not a state directory name'),
        ("recovery", "a record must be nested inside a state directory"),
        ("recovery/" + "/".join(["d"] * 32), "more than 32 path segments"),
        ("recovery/" + "x" * 256, 'unsafe path segment "' + "x" * 256 + '" (empty, `.`, `..`, a separator or a control character)'),
    ],
)
def test_paths_outside_the_layout_are_refused(store: StateStore, home: Path, path: str, reason: str) -> None:
    with pytest.raises(StoreError) as caught:
        store.create_if_absent(path, "x\n")
    f = failure_of(caught.value)
    assert (f.kind, f.path, f.message, f.errno) == ("refused", path, f"{path}: refused: {reason}", None)
    for call in (
        lambda: store.read_if_present(path, 10),
        lambda: store.replace_if_unchanged(path, sha("x"), "y"),
        lambda: store.remove_if_unchanged(path, sha("x")),
    ):
        with pytest.raises(StoreError) as again:
            call()
        assert failure_of(again.value).kind == "refused"
    assert sorted(os.listdir(home)) == [".io-state.json", ".proclease"], "nothing was created"


def test_bad_hashes_sizes_and_batch_requests_are_refused(store: StateStore) -> None:
    cases = [
        (lambda: store.replace_if_unchanged(RECORD, "A" * 64, "x"), "expected private state content hash is invalid"),
        (lambda: store.remove_if_unchanged(RECORD, "0" * 63), "expected private state content hash is invalid"),
        (lambda: store.create_if_absent(RECORD, "x" * ((2 << 20) + 1)), f"content exceeds {2 << 20} bytes"),
    ]
    identity = store.ensure_private_directory("recovery/batch")
    batch = lambda names, per=64, total=64: store.read_batch("recovery/batch", names, per, total, identity)  # noqa: E731
    cases += [
        (lambda: batch(["a"], per=(2 << 20) + 1), "private state batch per-file byte bound is invalid"),
        (lambda: batch(["a"], total=(64 << 20) + 1), "private state batch aggregate byte bound is invalid"),
        (lambda: batch([str(i) for i in range(1001)]), "private state batch file count is invalid"),
        (lambda: batch(["a/b"]), "private state batch contains an invalid file name"),
        (lambda: batch(["a", "a"]), "private state batch file names must be unique"),
    ]
    for call, reason in cases:
        with pytest.raises(StoreError) as caught:
            call()
        f = failure_of(caught.value)
        assert f.kind == "refused" and f.message.endswith(f": refused: {reason}"), f.message
    # The largest record may be written.
    assert store.create_if_absent(RECORD, "x" * (2 << 20))


def test_symlinks_are_never_followed(store: StateStore, home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    os.chmod(outside, 0o600)
    store.ensure_private_directory("recovery/things")
    os.symlink(outside, home / RECORD)
    digest = sha("precious\n")
    with pytest.raises(StoreError) as caught:
        store.read_if_present(RECORD, 1024)
    f = failure_of(caught.value)
    assert (f.kind, f.path, f.message) == ("unsafe", RECORD, f"{RECORD}: unsafe: is a symbolic link; the store never follows them")
    with pytest.raises(StoreError) as caught:
        store.replace_if_unchanged(RECORD, digest, "evil\n")
    assert failure_of(caught.value).kind == "unsafe"
    with pytest.raises(StoreError) as caught:
        store.remove_if_unchanged(RECORD, digest)
    assert failure_of(caught.value).message == f"{RECORD}: unsafe: is a symbolic link; remove it by hand after checking it"
    assert store.create_if_absent(RECORD, "evil\n") is False, "create sees the name taken"
    assert outside.read_text() == "precious\n"
    assert (home / RECORD).is_symlink()

    # A symbolic link in place of a collection directory.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, home / "recovery/linked")
    with pytest.raises(StoreError) as caught:
        store.create_if_absent("recovery/linked/a.json", "x\n")
    f = failure_of(caught.value)
    assert (f.kind, f.message) == ("unsafe", "recovery/linked/a.json: unsafe: linked is a symbolic link; the store never follows them")
    with pytest.raises(StoreError):
        store.snapshot("recovery/linked", False)
    with pytest.raises(StoreError):
        store.ensure_private_directory("recovery/linked/deeper")
    assert os.listdir(elsewhere) == [], "nothing written through the link"

    # A file in place of a directory.
    (home / "recovery/file").write_text("x")
    with pytest.raises(StoreError) as caught:
        store.read_if_present("recovery/file/a.json", 10)
    assert failure_of(caught.value).message == "recovery/file/a.json: unsafe: file is not a directory"


def test_unsafe_modes_are_refused(store: StateStore, home: Path) -> None:
    assert store.create_if_absent(RECORD, "one\n")
    os.chmod(home / RECORD, 0o644)
    with pytest.raises(StoreError) as caught:
        store.read_if_present(RECORD, 1024)
    assert failure_of(caught.value).message == f"{RECORD}: unsafe: readable or writable by group or others (expected mode 0600)"
    with pytest.raises(StoreError):
        store.replace_if_unchanged(RECORD, sha("one\n"), "two\n")
    assert (home / RECORD).read_text() == "one\n"
    os.chmod(home / RECORD, 0o600)
    os.chmod(home / "recovery/things", 0o755)
    with pytest.raises(StoreError) as caught:
        store.read_if_present(RECORD, 1024)
    f = failure_of(caught.value)
    assert (f.kind, f.message) == ("unsafe", f"{RECORD}: unsafe: directory things must be owned by you with mode 0700 (chmod 700 it if it is yours)")
    with pytest.raises(StoreError):
        store.create_if_absent("recovery/things/b.json", "x")
    assert os.listdir(home / "recovery/things") == ["a.json"]
    os.chmod(home / "recovery/things", 0o700)
    os.mkfifo(home / "recovery/things/fifo.json", 0o600)
    with pytest.raises(StoreError) as caught:
        store.read_if_present("recovery/things/fifo.json", 1024)
    assert failure_of(caught.value).message == "recovery/things/fifo.json: unsafe: not a regular file"


def test_reads_are_bounded_and_utf8(store: StateStore, home: Path) -> None:
    assert store.create_if_absent(RECORD, "x" * 100)
    assert store.read_if_present(RECORD, 100).text == "x" * 100
    with pytest.raises(StoreError) as caught:
        store.read_if_present(RECORD, 99)
    assert failure_of(caught.value).message == f"{RECORD}: unsafe: larger than 99 bytes"
    assert store.read_if_present("recovery/absent/a.json", 10).text is None, "a missing parent is absence"
    (home / "recovery/things/bin.json").write_bytes(b"\xef\xbb\xbf{}\xff")
    os.chmod(home / "recovery/things/bin.json", 0o600)
    with pytest.raises(StoreError) as caught:
        store.read_if_present("recovery/things/bin.json", 10)
    assert failure_of(caught.value).message == "recovery/things/bin.json: unsafe: not valid UTF-8"
    (home / "recovery/things/bom.json").write_bytes(b"\xef\xbb\xbf{}\n")
    os.chmod(home / "recovery/things/bom.json", 0o600)
    assert store.read_if_present("recovery/things/bom.json", 10).text == "\ufeff{}\n", "a BOM is kept"


# --- Directories, listings and batches ------------------------------------------------------------


def test_ensure_private_directory_and_snapshot(store: StateStore, home: Path) -> None:
    assert store.snapshot("recovery/leases", False).snapshot is None
    identity = store.ensure_private_directory("recovery/leases")
    st = os.stat(home / "recovery/leases")
    assert (identity.device, identity.inode) == (str(st.st_dev), str(st.st_ino))
    assert st.st_mode & 0o777 == 0o700
    for name in ("b.json", "a.json"):
        assert store.create_if_absent(f"recovery/leases/{name}", "{}\n")
    sub = store.ensure_private_directory("recovery/leases/sub")
    os.symlink("/etc/passwd", home / "recovery/leases/link")
    os.mkfifo(home / "recovery/leases/pipe", 0o600)
    listing = store.snapshot("recovery/leases", True).snapshot
    assert (listing.identity.device, listing.identity.inode) == (identity.device, identity.inode)
    got = [(e.name, e.kind, None if e.identity is None else (e.identity.device, e.identity.inode)) for e in listing.entries]
    assert got == [
        ("a.json", "file", None),
        ("b.json", "file", None),
        ("link", "symbolic-link", None),
        ("pipe", "other", None),
        ("sub", "directory", (sub.device, sub.inode)),
    ]
    os.chmod(home / "recovery/leases/sub", 0o755)
    with pytest.raises(StoreError) as caught:
        store.snapshot("recovery/leases", False)
    assert failure_of(caught.value).message == "recovery/leases: unsafe: sub-directory sub must be owned by you with mode 0700"
    # ensure_private_directory verifies existing directories too.
    with pytest.raises(StoreError) as caught:
        store.ensure_private_directory("recovery/leases/sub")
    assert "directory sub must be owned by you with mode 0700" in str(caught.value)


def test_snapshot_sorts_by_utf16_code_units_and_refuses_unsafe_names(store: StateStore, home: Path) -> None:
    store.ensure_private_directory("recovery/names")
    # U+1F600 is a surrogate pair (0xD83D…) in UTF-16: before U+FF61, unlike in code points.
    names = ["\uff61.json", "\U0001f600.json", "Z.json", "a.json"]
    for name in names:
        assert store.create_if_absent(f"recovery/names/{name}", "{}\n")
    listed = [e.name for e in store.snapshot("recovery/names", False).snapshot.entries]
    assert listed == ["Z.json", "a.json", "\U0001f600.json", "\uff61.json"]
    fd = os.open(home / "recovery/names", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.close(os.open(b"bad\xffname", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
    finally:
        os.close(fd)
    with pytest.raises(StoreError) as caught:
        store.snapshot("recovery/names", False)
    assert failure_of(caught.value).message == 'recovery/names: unsafe: state directory contains an unsafe entry name ("bad\\xffname"): rename or remove it by hand'


def test_batch_read_reports_each_file(store: StateStore, home: Path) -> None:
    identity = store.ensure_private_directory("recovery/batch")
    directory = home / "recovery/batch"

    def write(name: str, data: bytes, file_mode: int) -> None:
        (directory / name).write_bytes(data)
        os.chmod(directory / name, file_mode)

    write("ok.json", b"{}\n", 0o600)
    write("big.json", b"x" * 100, 0o600)
    write("shared.json", b"{}\n", 0o644)
    write("binary.json", b"\xff\xfe\n", 0o600)
    write("fill1.json", b"y" * 40, 0o600)
    write("fill2.json", b"z" * 40, 0o600)
    os.symlink(directory / "ok.json", directory / "link.json")
    names = ["ok.json", "absent.json", "big.json", "shared.json", "binary.json", "link.json", "fill1.json", "fill2.json"]
    results = store.read_batch("recovery/batch", names, 64, 80, identity)
    assert [r.name for r in results] == names, "request order"
    assert [r.status for r in results] == [
        Variant("present", "{}\n"),
        Variant("absent"),
        Variant("invalid", "file-byte-bound"),
        Variant("invalid", "unsafe-file"),
        Variant("invalid", "invalid-utf8"),
        Variant("invalid", "unsafe-file"),
        Variant("present", "y" * 40),
        Variant("invalid", "aggregate-byte-bound"),
    ]
    other = type(identity)(device=identity.device, inode="1")
    with pytest.raises(StoreError) as caught:
        store.read_batch("recovery/batch", names, 64, 90, other)
    assert failure_of(caught.value).message == "recovery/batch: unsafe: private state batch directory changed identity"
    with pytest.raises(StoreError) as caught:
        store.read_batch("recovery/nothing", names, 64, 90, identity)
    assert failure_of(caught.value).message == "recovery/nothing: unsafe: private state batch directory is absent"


# --- Crash recovery (§3.9, §3.5) ------------------------------------------------------------------


def plant_dead_writers_temporary(home: Path, uuid_text: str) -> Path:
    """A staged temporary of a writer that is provably dead (its pid no longer exists)."""
    path = home / ".proclease" / "staging" / f"{dead_pid()}-{'5' * 64}-{uuid_text}.tmp"
    path.write_text("half a record")
    os.chmod(path, 0o600)
    return path


def test_dead_writers_temporaries_are_swept_by_a_first_write_and_by_every_recovering_listing(store: StateStore, home: Path) -> None:
    first = plant_dead_writers_temporary(home, "00000000-0000-4000-8000-000000000001")
    live = home / ".proclease" / "staging" / f"{os.getpid()}-{ProcProcesses().self_identity().process_start_id}-00000000-0000-4000-8000-00000000000a.tmp"
    live.write_text("a live writer's")
    assert store.create_if_absent(RECORD, "one\n")
    assert not first.exists(), "a store handle's first write sweeps the staging directory"
    assert live.exists(), "a live writer's temporary stays"
    # Writes sweep at most once a second; a recovering listing always does.
    second = plant_dead_writers_temporary(home, "00000000-0000-4000-8000-000000000002")
    assert store.replace_if_unchanged(RECORD, sha("one\n"), "two\n")
    assert second.exists(), "the second write in the same second does not list the staging directory again"
    store.snapshot("recovery/things", True)
    assert not second.exists(), "a recovering listing always sweeps"
    assert live.exists()
    assert (home / RECORD).read_text() == "two\n"


def claim_name(leaf: str, phase: str, claim_id: str) -> str:
    return f".io-mutation-{mc.target_sha256(leaf)}-{phase}-{claim_id}.lock"


def plant(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    os.chmod(path, 0o600)
    return path


def test_a_recovering_listing_removes_a_dead_writers_leftovers_and_nothing_else(store: StateStore, home: Path) -> None:
    """What a crashed writer (ghostget or proclease) leaves in a collection (§3.9): write
    temporaries, mutation stages and tree quarantines of gone pids, file quarantines without a
    claim — removed by every listing; claims of gone owners — removed by a recovering one."""
    collection = home / "recovery/crashed"
    store.ensure_private_directory("recovery/crashed")
    assert store.create_if_absent("recovery/crashed/a.json", "{}\n")
    gone = dead_pid()
    boot = ProcProcesses().current_boot_id()
    dead_owner = mc.Owner(gone, boot, "6" * 64)
    ids = [str(uuid.uuid4()) for _ in range(4)]
    temporary = plant(collection, f".io-write-{gone}-{ids[0]}.tmp", "half")
    stage = plant(collection, f".io-mutation-stage-{ids[1]}-{gone}.tmp", mc.claim_text(mc.target_sha256("a.json"), ids[1], dead_owner))
    torn_stage = plant(collection, f".io-mutation-stage-{ids[2]}-{gone}.tmp", '{"kind":"io-sta')
    quarantine = collection / f".io-remove-tree-{gone}-1700000000000-{uuid.uuid4().hex}.quarantine"
    (quarantine / "inner").mkdir(parents=True, mode=0o700)
    os.chmod(quarantine, 0o700)
    (quarantine / "inner" / "file").write_text("x")
    file_quarantine = plant(collection, f".io-remove-file-{uuid.uuid4()}.quarantine", "{}\n")
    claim = plant(collection, claim_name("a.json", "held", ids[3]), mc.claim_text(mc.target_sha256("a.json"), ids[3], dead_owner))
    # A temporary of a live pid (this process) stays.
    mine = plant(collection, f".io-write-{os.getpid()}-{uuid.uuid4()}.tmp", "mine")

    listed = [e.name for e in store.snapshot("recovery/crashed", False).snapshot.entries]
    for path in (temporary, stage, torn_stage, quarantine, file_quarantine):
        assert not os.path.lexists(path), path.name
    assert claim.exists(), "a plain listing leaves claims alone"
    assert mine.exists()
    assert listed == sorted(["a.json", claim.name, mine.name])
    listed = [e.name for e in store.snapshot("recovery/crashed", True).snapshot.entries]
    assert not claim.exists(), "a recovering listing removes a dead owner's claim"
    assert listed == sorted(["a.json", mine.name])


def test_a_dead_writers_claim_never_blocks_a_write(store: StateStore, home: Path) -> None:
    assert store.create_if_absent(RECORD, "one\n")
    dead_owner = mc.Owner(dead_pid(), ProcProcesses().current_boot_id(), "7" * 64)
    claim_id = str(uuid.uuid4())
    claim = plant(home / "recovery/things", claim_name("a.json", "held", claim_id), mc.claim_text(mc.target_sha256("a.json"), claim_id, dead_owner))
    assert store.replace_if_unchanged(RECORD, sha("one\n"), "two\n")
    assert not claim.exists()
    assert os.listdir(home / "recovery/things") == ["a.json"]


def test_a_claim_whose_content_an_os_crash_lost_is_removed_and_the_write_goes_on(store: StateStore, home: Path) -> None:
    """docs/deviations.md 26: a claim name with no content (empty, or zeros) was published before
    an OS crash that lost its unsynced text; its owner died with that boot."""
    assert store.create_if_absent(RECORD, "one\n")
    content = "one\n"
    for lost in ("", "\0" * 300):
        claim = plant(home / "recovery/things", claim_name("a.json", "held", str(uuid.uuid4())), lost)
        assert store.replace_if_unchanged(RECORD, sha(content), content + "x")
        content += "x"
        assert not claim.exists()
    assert os.listdir(home / "recovery/things") == ["a.json"]


def test_a_live_foreign_claim_makes_a_write_wait_then_give_up(store: StateStore, home: Path, tmp_path: Path) -> None:
    """A live ghostget holding the record's claim: the write waits CLAIM_WAIT (125 ms), then a
    create is `contended` and a replace answers False; nothing changes."""
    assert store.create_if_absent(RECORD, "one\n")
    holder = subprocess.Popen(["sleep", "60"])
    try:
        boot = ProcProcesses().current_boot_id()
        with open(f"/proc/{holder.pid}/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
        owner = mc.Owner(holder.pid, boot, process_start_id(boot, start))
        assert proc_judge(owner.to_rec()) == "exact-live-owner"
        for leaf in ("a.json", "b.json"):
            claim_id = str(uuid.uuid4())
            plant(home / "recovery/things", claim_name(leaf, "held", claim_id), mc.claim_text(mc.target_sha256(leaf), claim_id, owner))
        begun = time.monotonic()
        assert store.replace_if_unchanged(RECORD, sha("one\n"), "two\n") is False
        assert time.monotonic() - begun >= 0.12
        with pytest.raises(StoreError) as caught:
            store.create_if_absent("recovery/things/b.json", "x")
        f = failure_of(caught.value)
        assert (f.kind, f.path) == ("contended", "recovery/things/b.json")
        assert f.message == "recovery/things/b.json: state file mutation is already active (another process, proclease or ghostget, is writing this record); retry in a moment"
        assert (home / RECORD).read_text() == "one\n"
        assert not (home / "recovery/things/b.json").exists()
        assert staging_entries(home) == []
        # The live claims stay through a recovering listing; the records are listed beside them.
        names = [e.name for e in store.snapshot("recovery/things", True).snapshot.entries]
        assert len(names) == 3 and "a.json" in names
    finally:
        holder.kill()
        holder.wait()
    # Its holder gone, the claims are a dead owner's: the next write goes through.
    assert store.replace_if_unchanged(RECORD, sha("one\n"), "two\n")
    assert store.create_if_absent("recovery/things/b.json", "x")
    assert sorted(os.listdir(home / "recovery/things")) == ["a.json", "b.json"]


def test_a_claim_owner_that_cannot_be_judged_refuses_the_write(home: Path, processes) -> None:
    """§3.5: an owner whose status stays `unknown` makes the listing fail (`unsafe`), never a
    guess; the judge is probed 1 + 3 times."""
    calls = []

    def judge(owner):
        calls.append(owner.pid)
        return "unknown" if owner.pid == 4242 else proc_judge(owner)

    with StateStore(str(home), processes, judge) as store:
        assert store.create_if_absent(RECORD, "one\n")
        claim_id = str(uuid.uuid4())
        plant(home / "recovery/things", claim_name("a.json", "waiting", claim_id), mc.claim_text(mc.target_sha256("a.json"), claim_id, mc.Owner(4242, "a" * 64, "b" * 64)))
        with pytest.raises(StoreError) as caught:
            store.replace_if_unchanged(RECORD, sha("one\n"), "two\n")
        f = failure_of(caught.value)
        assert (f.kind, f.message) == ("unsafe", f"{RECORD}: state mutation claim owner cannot be inspected safely")
        assert calls.count(4242) == 4
        assert (home / RECORD).read_text() == "one\n"
        with pytest.raises(StoreError) as caught:
            store.snapshot("recovery/things", True)
        assert failure_of(caught.value).message == "recovery/things: state mutation claim owner cannot be inspected safely"


def test_a_malformed_claim_refuses_the_write(store: StateStore, home: Path) -> None:
    assert store.create_if_absent(RECORD, "one\n")
    plant(home / "recovery/things", claim_name("a.json", "held", str(uuid.uuid4())), "{}\n")
    with pytest.raises(StoreError) as caught:
        store.replace_if_unchanged(RECORD, sha("one\n"), "two\n")
    assert failure_of(caught.value).message == f"{RECORD}: state mutation claim is malformed"


# --- Waits are bounded --------------------------------------------------------------------------


def test_the_collection_lock_wait_is_bounded(store: StateStore, home: Path) -> None:
    """A writer holding the collection's kernel lock makes another wait, at most the bound
    (here an operation's 300 ms instead of the 10 s default), then `contended`."""
    assert store.create_if_absent(RECORD, "one\n")
    fd = store.lock_file(identity_digest("proclease-collection-lock", "recovery/things") + ".lock")
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)
        begun = time.monotonic()
        with operation(0.3):
            with pytest.raises(StoreError) as caught:
                store.replace_if_unchanged(RECORD, sha("one\n"), "two\n")
            with pytest.raises(StoreError):
                store.snapshot("recovery/things", False)
        waited = time.monotonic() - begun
        assert failure_of(caught.value).kind == "contended"
        assert 0.29 <= waited < 8.0, waited  # its 0.3 s bound, not the 10 s default
        assert store.read_if_present(RECORD, 100).text == "one\n", "reads take no lock"
    finally:
        os.close(fd)
    assert store.replace_if_unchanged(RECORD, sha("one\n"), "two\n")


def test_lock_file_opens_only_safe_names_in_the_store_s_lock_directory(store: StateStore, home: Path) -> None:
    fd = store.lock_file("directory-lease-recovery.lock")
    try:
        assert os.fstat(fd).st_ino == os.stat(home / ".proclease/locks/directory-lease-recovery.lock").st_ino
        assert mode(home / ".proclease/locks/directory-lease-recovery.lock") == 0o600
    finally:
        os.close(fd)
    for bad in ("../x", "a/b", "", ".."):
        with pytest.raises(OSError):
            store.lock_file(bad)


# --- The state home (§3.1) ------------------------------------------------------------------------


def test_shared_roots_are_refused(tmp_path: Path) -> None:
    roots = ["/", os.environ.get("TMPDIR", "/tmp"), os.getcwd()]
    if os.environ.get("HOME"):
        roots.append(os.environ["HOME"])
    for root in roots:
        with pytest.raises(StateHomeError) as caught:
            StateHome.open(root)
        assert caught.value.kind == "shared-root", root
        assert "a state home must be a dedicated child directory" in str(caught.value)


def test_an_absent_home_is_created_private_and_claimed(tmp_path: Path) -> None:
    home = tmp_path / "a" / "b" / "state"
    opened = StateHome.open(str(home))
    try:
        assert opened.path == os.path.realpath(home)
    finally:
        opened.close()
    for path in (tmp_path / "a", tmp_path / "a/b", home):
        assert mode(path) == 0o700, path
    assert (home / MARKER).read_text() == MARKER_CONTENT
    assert mode(home / MARKER) == 0o600
    StateHome.open(str(home)).close()


def test_a_world_writable_creation_anchor_is_refused(tmp_path: Path) -> None:
    anchor = tmp_path / "shared"
    anchor.mkdir()
    os.chmod(anchor, 0o777)
    with pytest.raises(StateHomeError) as caught:
        StateHome.open(str(anchor / "state"))
    assert "not writable by group or others" in str(caught.value)
    assert not (anchor / "state").exists()


def test_a_foreign_non_empty_directory_is_never_claimed(tmp_path: Path) -> None:
    home = tmp_path / "project"
    home.mkdir()
    (home / "Cargo.toml").write_text("x")
    with pytest.raises(StateHomeError) as caught:
        StateHome.open(str(home))
    assert str(caught.value) == f'{home}: is not empty and not a state home (it holds "Cargo.toml"); choose a dedicated directory'
    assert not (home / MARKER).exists()


def test_an_existing_ghostget_layout_is_claimed_and_modes_are_enforced(tmp_path: Path) -> None:
    home = tmp_path / "ghostget"
    (home / "recovery").mkdir(parents=True)
    os.chmod(home, 0o755)
    os.chmod(home / "recovery", 0o700)
    with pytest.raises(StateHomeError) as caught:
        StateHome.open(str(home))
    assert str(caught.value) == f"{home}: the state home must be private (mode 0700, is 755); run chmod 700 on it"
    os.chmod(home, 0o700)
    StateHome.open(str(home)).close()
    assert (home / MARKER).read_text() == MARKER_CONTENT
    os.chmod(home, 0o750)
    with pytest.raises(StateHomeError) as caught:
        StateHome.open(str(home))
    assert "run chmod 700" in str(caught.value)
    os.chmod(home, 0o700)
    (home / MARKER).write_text("{}\n")
    os.chmod(home / MARKER, 0o600)
    with pytest.raises(StateHomeError) as caught:
        StateHome.open(str(home))
    assert str(caught.value) == f"{home / MARKER}: the state home marker is not the expected private file; inspect it before going on"


def test_an_empty_world_writable_home_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "state"
    home.mkdir()
    os.chmod(home, 0o777)
    with pytest.raises(StateHomeError) as caught:
        StateHome.open(str(home))
    assert "must not be group/world-writable" in str(caught.value)
    assert not (home / MARKER).exists()


def test_a_symlinked_state_home_or_staging_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real-state"
    real.mkdir(mode=0o700)
    link = tmp_path / "state"
    os.symlink(real, link)
    with pytest.raises(StateHomeError) as caught:
        open_store(link)
    assert "symbolic link" in str(caught.value)
    assert os.listdir(real) == [], "nothing written through the link"

    home = tmp_path / "state2"
    open_store(home).close()
    staging = home / ".proclease/staging"
    os.rmdir(staging)
    os.symlink(real, staging)
    with pytest.raises(StoreError) as caught:
        open_store(home)
    assert failure_of(caught.value).message == ".proclease/staging: unsafe: is a symbolic link"


# --- The arbitration and claim formats (unit tests of arbitration.rs, mutation_claim.rs) ---------


def test_alone_a_contender_goes_through_every_phase_and_wins() -> None:
    assert mc.step("waiting", "b", []) == ("advance", "candidate")
    assert mc.step("candidate", "b", []) == ("advance", "held")
    assert mc.step("held", "b", []) == mc.WIN


def test_the_smaller_claim_id_goes_first_and_a_waiting_contender_yields_to_any_further_one() -> None:
    assert mc.step("waiting", "b", [("waiting", "a")]) == mc.LOSE
    assert mc.step("waiting", "b", [("waiting", "c")]) == ("advance", "candidate")
    assert mc.step("waiting", "b", [("candidate", "c")]) == mc.LOSE
    assert mc.step("waiting", "b", [("held", "c")]) == mc.LOSE
    assert mc.step("candidate", "b", [("waiting", "a")]) == mc.LOSE
    assert mc.step("candidate", "b", [("candidate", "c"), ("waiting", "d")]) == ("advance", "held")
    assert mc.step("candidate", "b", [("held", "c")]) == mc.LOSE


def test_a_second_held_claim_is_two_owners_whatever_the_ids() -> None:
    assert mc.step("held", "b", [("held", "c")]) == mc.TWO_OWNERS_STEP
    assert mc.step("held", "b", [("held", "a")]) == mc.TWO_OWNERS_STEP
    assert mc.step("held", "b", [("waiting", "a"), ("candidate", "a0")]) == mc.WIN


def test_of_two_contenders_that_see_each_other_at_most_one_advances() -> None:
    for a in mc.PHASES:
        for b in mc.PHASES:
            on = lambda s: s[0] in ("advance", "win")  # noqa: E731
            sa, sb = mc.step(a, "a", [(b, "b")]), mc.step(b, "b", [(a, "a")])
            assert not (on(sa) and on(sb)), (a, b, sa, sb)


def test_claim_names_and_texts_are_the_reference_s() -> None:
    assert mc.target_sha256("active.json") == "7090835e861362df23825dadcaeccaa91ec32490e69ec9f97b7f74b3c43a797e"
    claim_id = "3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d"
    target = mc.target_sha256("active.json")
    assert mc.parse_claim_name(f".io-mutation-{target}-held-{claim_id}.lock") == (target, "held", claim_id)
    assert mc.parse_claim_name(f".io-mutation-{target}-owned-{claim_id}.lock") is None
    assert mc.parse_claim_name(f".io-mutation-stage-{claim_id}-12.tmp") is None
    assert mc.stage_name(f".io-mutation-stage-{claim_id}-12.tmp") == (claim_id, 12)
    assert mc.stage_name(f".io-mutation-stage-{claim_id}-012.tmp") is None
    assert mc.write_temporary_pid(f".io-write-77-{claim_id}.tmp") == 77
    assert mc.tree_quarantine_pid(".io-remove-tree-9-1700000000000-3f1c9a528d2e4b7a9c1d2e5f6a7b8c9d.quarantine") == 9
    assert mc.file_quarantine_id(f".io-remove-file-{claim_id}.quarantine") == claim_id
    owner = mc.Owner(4242, "a" * 64, "b" * 64)
    claim = mc.MutationClaim.for_leaf("active.json")
    text = claim.content(claim_id, owner)
    assert text == (
        '{"kind":"io-state-mutation-claim","schemaVersion":1,"targetSha256":"7090835e861362df23825dadcaeccaa91ec32490e69ec9f97b7f74b3c43a797e",'
        f'"claimId":"{claim_id}","pid":4242,"bootId":"{"a" * 64}","processStartId":"{"b" * 64}"}}\n'
    )
    assert mc.owner_in(claim, claim_id, text) == owner
    assert mc.owner_in(claim, claim_id, text.rstrip()) is None
    assert mc.owner_in(claim, "3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9e", text) is None


def test_the_identity_fixtures_follow_the_spec_vectors() -> None:
    """§2.2/§2.3 examples, so that the fixtures judge claims as the native binary does."""
    boot = identity_digest("io-boot", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
    assert boot == "2e428f285ab5c7529544f882ab5704fda290111df77d659381ffdf07d68f8572"
    assert process_start_id(boot, "424242") == "1ff6d3c4b880467f02b3aa0cb9c4445150c501b47f5619cf383edc23f4af801f"


# --- Concurrency: many processes, one record ----------------------------------------------------

WORKER = textwrap.dedent(
    """
    import hashlib, json, sys
    sys.path.insert(0, {tests!r})
    from conftest import ProcProcesses, proc_judge
    from proclease.state_store import StateStore, StoreError

    mode, home = sys.argv[1], sys.argv[2]
    if mode == "increment-claims-only":
        # As ghostget writes: no collection kernel lock, only the reference's mutation claims.
        import contextlib
        StateStore._lock = lambda self, path, parent: contextlib.nullcontext()
        mode = "increment"
    store = StateStore(home, ProcProcesses(), proc_judge)
    if mode == "increment":
        path, count = sys.argv[3], int(sys.argv[4])
        successes = retries = value = 0
        while successes < count:
            try:
                text = store.read_text_if_present(path, 1 << 16)
            except StoreError as e:
                # A read that overlapped a writer's rename (§3.2 stable read): read again.
                if "changed while it was read" in str(e):
                    retries += 1
                    continue
                raise
            if text is None:
                try:
                    store.create_if_absent(path, '{{"value":0}}\\n')
                except StoreError as e:
                    if e.kind != "contended":
                        raise
                continue
            n = json.loads(text)["value"]
            if store.replace_if_unchanged(path, hashlib.sha256(text.encode()).hexdigest(), '{{"value":%d}}\\n' % (n + 1)):
                successes += 1
                value = n + 1
            else:
                retries += 1
        print(json.dumps({{"outcome": "done", "successes": successes, "retries": retries, "value": value}}, separators=(",", ":")), flush=True)
    elif mode == "churn":
        print("ready", flush=True)
        n = 0
        while True:
            for k in range(4):
                n += 1
                path = "recovery/churn/%d.json" % k
                record = '{{"k":%d,"n":%d,"pad":"%s"}}\\n' % (k, n, chr(97 + n % 26) * 12000)
                current = store.read_text_if_present(path, 1 << 20)
                if current is None:
                    store.create_if_absent(path, record)
                elif n % 7 == 0:
                    store.remove_if_unchanged(path, hashlib.sha256(current.encode()).hexdigest())
                else:
                    store.replace_if_unchanged(path, hashlib.sha256(current.encode()).hexdigest(), record)
    """
)


@pytest.fixture
def worker(tmp_path: Path):
    script = tmp_path / "py_store_worker.py"
    script.write_text(WORKER.format(tests=str(TESTS)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))

    def start(*args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    return start


def finish(child: subprocess.Popen) -> dict:
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, f"worker failed ({child.returncode}): {err}"
    return json.loads(out.strip().splitlines()[-1])


def test_python_writers_in_many_processes_lose_no_update(home: Path, worker) -> None:
    workers, count = 4, 40
    open_store(home).close()
    children = [worker("increment", str(home), "recovery/counter/value.json", str(count)) for _ in range(workers)]
    reports = [finish(child) for child in children]
    assert all(r["successes"] == count for r in reports), reports
    assert (home / "recovery/counter/value.json").read_text() == f'{{"value":{workers * count}}}\n'
    assert os.listdir(home / "recovery/counter") == ["value.json"]
    assert staging_entries(home) == []


def test_mutation_claims_alone_keep_writers_that_take_no_kernel_lock_from_losing_updates(home: Path, worker) -> None:
    """The §3.5 claims on their own (as between proclease and ghostget, which takes no kernel
    lock): writers that skip the collection lock still lose no update — some of their writes
    lose the arbitration and are retried. With the native worker built, native writers (kernel
    lock and claims) join them, so the two implementations' claims arbitrate with each other."""
    count = 40
    open_store(home).close()
    path = "recovery/counter/value.json"
    children = [worker("increment-claims-only", str(home), path, str(count)) for _ in range(3)]
    if NATIVE_WORKER.is_file():
        children += [subprocess.Popen([str(NATIVE_WORKER), "increment", str(home), path, str(count)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    reports = [finish(child) for child in children]
    assert all(r["successes"] == count for r in reports), reports
    assert (home / path).read_text() == f'{{"value":{len(children) * count}}}\n'
    assert os.listdir(home / "recovery/counter") == ["value.json"], "no claim left behind"


@pytest.mark.skipif(not NATIVE_WORKER.is_file(), reason=f"the native store worker {NATIVE_WORKER} is not built (cargo build -p proclease-tests --bin store_worker)")
def test_native_and_python_writers_on_one_record_lose_no_update(home: Path, worker) -> None:
    """Interop: the native store (Rust, `store_worker increment`) and the Python store take the
    same collection lock and the same mutation claims, so concurrent increments all land."""
    count = 40
    open_store(home).close()
    path = "recovery/counter/value.json"
    native = [subprocess.Popen([str(NATIVE_WORKER), "increment", str(home), path, str(count)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    python = [worker("increment", str(home), path, str(count)) for _ in range(2)]
    reports = [finish(child) for child in native + python]
    assert all(r["successes"] == count for r in reports), reports
    assert (home / path).read_text() == f'{{"value":{4 * count}}}\n'
    assert os.listdir(home / "recovery/counter") == ["value.json"]
    assert staging_entries(home) == []


@pytest.mark.skipif(not NATIVE_BIN.is_file(), reason=f"the native binary {NATIVE_BIN} is not built")
def test_native_doctor_reads_a_state_home_the_python_store_wrote(home: Path) -> None:
    with open_store(home) as store:
        store.ensure_private_directory("recovery/beeper-message-like-me-directory-leases")
        assert store.create_if_absent("tools/python/record.json", "{}\n")
        store.ensure_private_directory("provider-plugin-state/invocation-leases")
    result = subprocess.run([str(NATIVE_BIN), "doctor", "--state-home", str(home), "--json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["stateHome"] == str(home) and report["entries"] == [] and report["store"] == "file"
    # And the other way: a home the native binary claimed opens in Python.
    other = home.parent / "native-home"
    result = subprocess.run([str(NATIVE_BIN), "doctor", "--state-home", str(other), "--json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    with open_store(other) as store:
        assert store.create_if_absent("tools/python/record.json", "{}\n")
        assert store.read_if_present("tools/python/record.json", 10).text == "{}\n"


@pytest.mark.skipif(not NATIVE_BIN.is_file(), reason=f"the native binary {NATIVE_BIN} is not built")
def test_the_native_binary_computes_the_fixtures_identity_of_this_process(home: Path) -> None:
    """The native judge must see a Python writer's claims as the fixture does."""
    mine = ProcProcesses().self_identity()
    result = subprocess.run([str(NATIVE_BIN), "identity", "--state-home", str(home), "--json", str(os.getpid())], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    native = json.loads(result.stdout)
    assert (native["pid"], native["bootId"], native["processStartId"], native["status"]) == (mine.pid, mine.boot_id, mine.process_start_id, "exact-live-owner")


def test_a_python_writer_killed_at_random_instants_leaves_only_complete_records(home: Path, worker) -> None:
    """SIGKILL at random instants of a churning writer: every record read afterwards is complete,
    the next write succeeds, and a recovering listing leaves no temporary and no claim."""
    import random

    seed = time.time_ns()
    rng = random.Random(seed)
    trials = 15
    store = open_store(home)
    try:
        changed_trials = 0
        previous = [None] * 4
        for trial in range(trials):
            child = worker("churn", str(home))
            assert child.stdout.readline() == "ready\n", child.stderr.read()
            time.sleep(rng.uniform(0.0, 0.08))
            child.kill()
            child.wait()
            child.stdout.close()
            child.stderr.close()
            changed = False
            for k in range(4):
                current = store.read_text_if_present(f"recovery/churn/{k}.json", 1 << 20)
                if current is not None:
                    value = json.loads(current)
                    expected = '{"k":%d,"n":%d,"pad":"%s"}\n' % (k, value["n"], chr(97 + value["n"] % 26) * 12000)
                    assert current == expected, f"trial {trial} (seed {seed}): torn record {k}"
                changed |= current != previous[k]
                previous[k] = current
            changed_trials += changed
            assert store.create_if_absent(f"recovery/churn-probe/{trial}.json", "{}\n"), "a following operation succeeds"
            store.snapshot("recovery/churn", True)
            assert staging_entries(home) == [], f"trial {trial} (seed {seed}): stray temporaries"
            if (home / "recovery/churn").exists():
                stray = [n for n in os.listdir(home / "recovery/churn") if not n.endswith(".json")]
                assert stray == [], f"trial {trial} (seed {seed}): foreign entries {stray}"
        assert changed_trials >= 1, f"no trial saw a write (seed {seed})"
    finally:
        store.close()
