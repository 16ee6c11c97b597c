"""The `process-identity` import of the Python host (`proclease.process_identity`,
`proclease.witness`) with real processes, real witness files and, where it is built, the native
`proclease` binary.

Ports the behaviour of `host/src/imports/process_identity/{mod,witness,run_journal}.rs` (spec §2,
`docs/witness.md`, `docs/deviations.md`). Where the component is at hand, the facts a probe
reports are also judged by it (`dispositions.judge-owner`): the host observes, the component
decides.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from wasmtime.component import Variant

from proclease import witness as witness_module
from proclease._wit import HostError, Rec
from proclease.process_identity import (
    BOOT_ID_MALFORMED,
    NOT_LIVE,
    PID_MALFORMED,
    RECORD_BYTES,
    ProcessIdentity,
    ProcView,
    identity_digest,
    linux_boot_id,
    parse_proc_stat,
    process_start_id,
    start_id,
)

REPO = Path(__file__).resolve().parents[3]
VECTORS = Path(os.environ.get("PROCLEASE_VECTORS", REPO.parent / "shared" / "vectors" / "public"))
WASM = Path(os.environ.get("PROCLEASE_WASM", REPO / "host" / "component" / "proclease.wasm"))
NATIVE = Path(os.environ.get("PROCLEASE_BIN", REPO / "target" / "debug" / "proclease"))
SPEC_BOOT = "2e428f285ab5c7529544f882ab5704fda290111df77d659381ffdf07d68f8572"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def identity(home: Path):
    pi = ProcessIdentity(str(home))
    assert pi.witnesses is not None, pi.witness_error
    yield pi
    pi.close()


@pytest.fixture(scope="module")
def judge() -> Callable[[Rec, Rec], Optional[Rec]]:
    """`dispositions.judge-owner` of the component, or a judge answering None when the component
    (with that export) is not at hand."""
    if not WASM.is_file() or b"judge-owner" not in WASM.read_bytes():
        return lambda owner, facts: None
    from proclease._binding import Proclease

    class Unused:
        def __getattr__(self, name: str) -> Any:
            def refuse(*args: Any) -> Any:
                raise AssertionError(f"judge-owner imported {name}")

            return refuse

    class Host:
        def __getattr__(self, name: str) -> Any:
            return Unused()

    instance = Proclease(WASM, Host())
    return lambda owner, facts: instance.exports("dispositions").judge_owner(owner, facts)


def wait_until(condition: Callable[[], bool], seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def vectors(suite: str):
    path = VECTORS / f"{suite}.jsonl"
    if not path.is_file():
        pytest.skip(f"{path}: no conformance vectors")
    with open(path, encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


def witness_dir(home: Path, boot_id: str) -> Path:
    return home / ".proclease" / "witnesses" / boot_id


# --- §2.2, §2.3: the digests and the stat parser ------------------------------------------------


def test_the_boot_id_digest_is_the_specs(identity: ProcessIdentity) -> None:
    assert linux_boot_id("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0") == SPEC_BOOT
    raw = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    expected = hashlib.sha256(b"io-boot\0" + raw.encode()).hexdigest()
    assert identity.current_boot_id() == expected
    for v in vectors("identity-digest"):
        if v["op"] == "linux-boot":
            if v["expect"]["ok"]:
                assert linux_boot_id(v["raw"]) == v["expect"]["bootId"], v["name"]
            else:
                with pytest.raises(ValueError, match=BOOT_ID_MALFORMED):
                    linux_boot_id(v["raw"])
        elif v["op"] == "process-start":
            assert process_start_id(v["bootId"], v["rawStart"]) == v["expect"]["processStartId"], v["name"]
        elif v["op"] == "digest":
            assert identity_digest(v["kind"], v["value"]) == v["expect"]["hex"], v["name"]


def test_the_stat_parser_passes_the_conformance_vectors() -> None:
    for v in vectors("proc-stat"):
        status, raw_start, start = parse_proc_stat(v["input"], v["boot_id"])
        expect = v["expect"]
        assert status == expect["status"], v["name"]
        if status == "alive":
            assert (raw_start, start) == (expect["rawStart"], expect["processStartId"]), v["name"]


def test_the_start_id_corrections_of_the_deviations() -> None:
    line = "42 (w) {} 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 {}"
    initial = ProcView(0xEFFFFFFC, 0, 100)
    assert start_id(line.format("S", 424242), 1, initial, SPEC_BOOT) == "1ff6d3c4b880467f02b3aa0cb9c4445150c501b47f5619cf383edc23f4af801f"
    # Deviation 4: an exited leader whose threads run is alive; alone it is dead.
    assert start_id(line.format("Z", 424242), 2, initial, SPEC_BOOT) == process_start_id(SPEC_BOOT, "424242")
    assert start_id(line.format("Z", 424242), 1, initial, SPEC_BOOT) is None
    # Deviation 3: a reader in a time namespace shifted by a day sees 8 640 000 ticks more.
    shifted = ProcView(0xEFFFFFFC, 86_400 * 10**9, 100)
    assert start_id(line.format("S", 424242 + 8_640_000), 1, shifted, SPEC_BOOT) == process_start_id(SPEC_BOOT, "424242")
    assert start_id(line.format("S", 424242), 1, ProcView(0xEFFFFFFC, 5, 100), SPEC_BOOT) is None, "not whole ticks"


# --- capture and self-identity -----------------------------------------------------------------


def test_capture_of_the_own_pid_equals_the_self_identity(identity: ProcessIdentity) -> None:
    own = identity.self_identity()
    assert own.pid == os.getpid()
    assert identity.capture(os.getpid()).fields() == own.fields()
    view = identity.probe(own).view
    assert view.pid_namespace == os.stat("/proc/self/ns/pid").st_ino
    assert view.clock_ticks_per_second == os.sysconf("SC_CLK_TCK")


def test_capture_refusals(identity: ProcessIdentity) -> None:
    for pid in (0, 2**53, -1):
        with pytest.raises(HostError) as info:
            identity.capture(pid)
        assert info.value.payload == PID_MALFORMED
    dead = subprocess.Popen(["true"])
    dead.wait()
    for pid in (dead.pid, 2**53 - 1, 2**31):
        with pytest.raises(HostError) as info:
            identity.capture(pid)
        assert info.value.payload == NOT_LIVE


def test_a_zombie_is_not_live(identity: ProcessIdentity, judge) -> None:
    zombie = subprocess.Popen(["sleep", "60"])
    try:
        owner = identity.capture(zombie.pid)
        zombie.kill()
        assert wait_until(lambda: Path(f"/proc/{zombie.pid}/stat").read_text().split(")")[-1].split()[0] == "Z")
        with pytest.raises(HostError) as info:
            identity.capture(zombie.pid)
        assert info.value.payload == NOT_LIVE
        facts = identity.probe(owner)
        assert facts.stat.tag == "stat" and " Z " in facts.stat.payload and facts.witness == "absent"
        verdict = judge(owner, facts)
        assert verdict is None or verdict.status == "different-or-dead"
    finally:
        zombie.kill()
        zombie.wait()


def test_capture_agrees_with_the_native_host(identity: ProcessIdentity, home: Path) -> None:
    if not os.access(NATIVE, os.X_OK):
        pytest.skip(f"{NATIVE}: the native proclease binary is not built")
    child = subprocess.Popen(["sleep", "60"])
    try:
        ours = identity.capture(child.pid)
        shown = subprocess.run([str(NATIVE), "--state-home", str(home), "identity", str(child.pid)], capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        lines = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in shown.stdout.splitlines() if line.strip())
        assert lines["boot id"] == ours.boot_id and lines["process start id"] == ours.process_start_id
        assert lines["owner status"] == "exact-live-owner"
    finally:
        child.kill()
        child.wait()


# --- probe --------------------------------------------------------------------------------------


def test_the_own_witness_is_held_and_is_the_native_hosts_file(identity: ProcessIdentity, home: Path, judge) -> None:
    own = identity.self_identity()
    path = witness_dir(home, own.boot_id) / f"{own.pid}-{own.process_start_id}.witness"
    namespace = os.stat("/proc/self/ns/pid").st_ino
    st = path.stat()
    assert path.read_text() == (
        f'{{"bootId":"{own.boot_id}","boottimeOffsetNs":0,"device":"{st.st_dev}","inode":"{st.st_ino}","kind":"proclease-witness","pid":{own.pid},'
        f'"pidNamespace":"{namespace}","processStartId":"{own.process_start_id}","role":"owner","schemaVersion":1,'
        f'"timeNamespace":"{os.stat("/proc/self/ns/time").st_ino}"}}\n'
    )
    assert path.stat().st_mode & 0o777 == 0o600
    facts = identity.probe(own)
    assert (facts.witness, facts.recorded_pid_namespace, facts.spawned, facts.spawned_uncontained, facts.remote, facts.tree) == ("held", namespace, "absent", False, "not-clustered", "absent")
    assert isinstance(facts.stat, Variant) and facts.stat.tag == "stat"
    # Another process sees it held too (a shared-lock test from another open file).
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, str(Path(witness_module.__file__).parents[1]), str(home), json.dumps(own.fields())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.stdout.strip() == "held", probe.stderr
    verdict = judge(own, facts)
    assert verdict is None or verdict.status == "exact-live-owner"
    # Retired: the name is gone, the /proc proof alone remains.
    identity.retire()
    assert not path.exists()
    assert identity.probe(own).witness == "absent"
    identity.self_identity()
    assert identity.probe(own).witness == "held", "taken again after a retirement"


PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from proclease.process_identity import ProcessIdentity
from proclease._wit import Rec
owner = json.loads(sys.argv[3])
print(ProcessIdentity(sys.argv[2]).probe(Rec(pid=owner["pid"], boot_id=owner["boot-id"], process_start_id=owner["process-start-id"])).witness)
"""


def test_a_free_witness_left_under_the_own_name_is_replaced(identity: ProcessIdentity, home: Path) -> None:
    bare = ProcessIdentity(None).self_identity()
    directory = witness_dir(home, bare.boot_id)
    directory.mkdir(mode=0o700, parents=True)
    stale = directory / f"{bare.pid}-{bare.process_start_id}.witness"
    stale.write_text("left by an earlier holder of this name\n")
    own = identity.self_identity()
    assert own.fields() == bare.fields()
    assert stale.read_text().startswith('{"bootId"') and identity.probe(own).witness == "held"


def test_probe_of_a_dead_pid_is_missing(identity: ProcessIdentity, judge) -> None:
    child = subprocess.Popen(["sleep", "60"])
    owner = identity.capture(child.pid)
    child.kill()
    child.wait()
    facts = identity.probe(owner)
    assert facts.stat == Variant("missing")
    assert (facts.witness, facts.spawned, facts.tasks, facts.tree) == ("absent", "absent", 0, "absent")
    verdict = judge(owner, facts)
    assert verdict is None or (verdict.status, verdict.lineage_gone) == ("different-or-dead", False)
    # No process can have a pid beyond i32.
    assert identity.probe(owner.replace(pid=2**40)).stat.tag == "missing"


def test_probe_of_another_boot_reads_nothing(identity: ProcessIdentity, judge) -> None:
    owner = identity.self_identity().replace(boot_id="0" * 64)
    facts = identity.probe(owner)
    assert facts.boot_id == identity.current_boot_id()
    assert (facts.witness, facts.stat.tag, facts.tasks, facts.spawned, facts.tree, facts.remote) == ("absent", "unreadable", 0, "absent", "absent", "not-clustered")
    verdict = judge(owner, facts)
    assert verdict is None or (verdict.status, verdict.lineage_gone) == ("different-or-dead", True)


def test_a_child_holding_an_inherited_spawn_witness_is_held_until_it_and_its_children_die(identity: ProcessIdentity, home: Path, judge) -> None:
    own = identity.self_identity()
    spawn = identity.prepare_spawn()
    assert spawn.name.startswith(f"{own.pid}-{own.process_start_id}.spawn-")
    # The command starts a grandchild, which inherits the witness too.
    child = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], pass_fds=[spawn.fd], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        grandchild = int(child.stdout.readline())
        # This host's commands run uncontained: the witness says so before the parent lets go.
        spawn.record_uncontained()
        spawn.started(child.pid)
        assert spawn.fd is None, "the parent's copy is closed"
        child_owner = identity.capture(child.pid)  # binds the spawn witness under the child's identity
        linked = witness_dir(home, own.boot_id) / f"{child.pid}-{child_owner.process_start_id}.witness"
        assert os.stat(linked).st_ino == os.stat(witness_dir(home, own.boot_id) / spawn.name).st_ino
        facts = identity.probe(child_owner)
        assert facts.witness == "held" and facts.stat.tag == "stat"
        assert (identity.probe(own).spawned, identity.probe(own).spawned_uncontained) == ("held", True)
        verdict = judge(child_owner, facts)
        assert verdict is None or verdict.status == "exact-live-owner"
        # The child dies; what it started still holds the witness.
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        facts = identity.probe(child_owner)
        assert facts.stat.tag == "missing" and facts.witness == "held"
        verdict = judge(child_owner, facts)
        assert verdict is None or verdict.status == "exact-live-owner"
        # Everything that inherited it is gone: free.
        os.kill(grandchild, signal.SIGKILL)
        assert wait_until(lambda: identity.probe(child_owner).witness == "free")
        facts = identity.probe(child_owner)
        assert (identity.probe(own).spawned, identity.probe(own).spawned_uncontained) == ("free", True)
        verdict = judge(child_owner, facts)
        assert verdict is None or (verdict.status, verdict.lineage_gone) == ("different-or-dead", True)
        # A cgroup recorded with that spawn witness that cannot be read here (recorded in another
        # cgroup namespace): a process it started that closed the witness may run there, so what
        # it started is not proven gone (`Witnesses::test_spawned`).
        record = witness_dir(home, own.boot_id) / spawn.name.replace(".spawn-", ".cgroup-")
        record.write_text('{"cgroupId":1,"cgroupNamespace":1,"kind":"proclease-cgroup","path":"/x","schemaVersion":1}\n')
        os.chmod(record, 0o600)
        assert identity.probe(own).spawned == "untestable"
        record.unlink()
        assert identity.probe(own).spawned == "free"
        # Retirement removes the own witness and the free spawn witness with its identity link
        # and its uncontained record.
        identity.retire()
        assert os.listdir(witness_dir(home, own.boot_id)) == []
    finally:
        for pid in (child.pid, grandchild if "grandchild" in locals() else None):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        child.wait()


def test_bound_by_hand_the_parent_copy_holds_until_closed(identity: ProcessIdentity, home: Path) -> None:
    identity.self_identity()
    spawn = identity.prepare_spawn()
    child = subprocess.Popen(["sleep", "60"], pass_fds=[spawn.fd])
    try:
        child_owner = identity.capture(child.pid)
        assert identity.probe(child_owner).witness == "absent", "not started(): capture binds nothing"
        spawn.bind(child_owner)
        spawn.bind(child_owner)  # idempotent
        assert identity.probe(child_owner).witness == "held"
        child.kill()
        child.wait()
        assert identity.probe(child_owner).witness == "held", "this process's copy still holds it"
        spawn.close_parent_copy()
        assert identity.probe(child_owner).witness == "free"
    finally:
        child.kill()
        child.wait()


def test_a_discarded_spawn_witness_is_removed(identity: ProcessIdentity, home: Path) -> None:
    own = identity.self_identity()
    with pytest.raises(FileNotFoundError):
        with identity.prepare_spawn() as spawn:
            name = spawn.name
            assert (witness_dir(home, own.boot_id) / name).exists()
            subprocess.Popen(["/nonexistent/command"], pass_fds=[spawn.fd])
    assert not (witness_dir(home, own.boot_id) / name).exists()
    spawn = identity.prepare_spawn()
    spawn.discard()
    assert sorted(os.listdir(witness_dir(home, own.boot_id))) == [f"{own.pid}-{own.process_start_id}.witness"]


def test_a_home_without_a_witness_directory_probes_without_witnesses(tmp_path: Path) -> None:
    missing = ProcessIdentity(str(tmp_path / "missing"))
    assert missing.witnesses is None and "No such file or directory" in missing.witness_error
    own = missing.self_identity()
    assert missing.probe(own).witness == "absent"
    # Nothing is started without a witness (nothing would prove it alive once this is gone).
    with pytest.raises(HostError, match="a witness for the command cannot be taken: .*missing: open failed"):
        missing.prepare_spawn()
    assert missing.finished_run("0b8f5a3e-2f4c-4b7e-9d2a-7c1e5f3a9b10").outcome is None
    # Created later (by the state store): looked for again at each use.
    (tmp_path / "missing").mkdir(mode=0o700)
    assert missing.probe(own).witness == "absent"
    assert missing.witnesses is not None and missing.witness_error is None
    assert missing.self_identity().fields() == own.fields() and missing.probe(own).witness == "held"
    missing.retire()
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    (shared / ".proclease").mkdir(mode=0o755)
    unsafe = ProcessIdentity(str(shared))
    assert unsafe.witnesses is None
    assert unsafe.witness_error == ".proclease: check failed: must be a directory owned by you with mode 0700 (chmod 700 it)"
    with pytest.raises(HostError, match="must be a directory owned by you with mode 0700"):
        unsafe.prepare_spawn()
    # No journal there: nothing finished is recorded. One there but not private proves nothing.
    lease = "0b8f5a3e-2f4c-4b7e-9d2a-7c1e5f3a9b10"
    assert unsafe.finished_run(lease).outcome is None
    (shared / ".proclease").chmod(0o700)
    (shared / ".proclease" / "runs").mkdir(mode=0o755)
    runs_unsafe = ProcessIdentity(str(shared))
    with pytest.raises(HostError, match="the run journal cannot be opened: .proclease/runs: check failed: must be a directory owned by you"):
        runs_unsafe.finished_run(lease)
    with pytest.raises(OSError, match="must be a directory owned by you"):
        runs_unsafe.begin_run(lease, Rec(device="2049", inode="1234567", birthtime_ns="1700000000000000001"))
    # A witness directory there but not usable proves nothing: a probe of this boot fails, so
    # that no caller takes a process it cannot see for dead (`ProcessIdentity::probe`).
    (shared / ".proclease" / "witnesses").chmod(0o755)
    witnesses_unsafe = ProcessIdentity(str(shared))
    with pytest.raises(HostError, match="whether pid .* is alive cannot be told: the state home's witnesses cannot be read"):
        witnesses_unsafe.probe(own)


# --- the run journal ------------------------------------------------------------------------------


def test_the_run_journal_reads_a_finished_entry_and_nothing_else(identity: ProcessIdentity, home: Path) -> None:
    lease = "0b8f5a3e-2f4c-4b7e-9d2a-7c1e5f3a9b10"
    directory = Rec(device="2049", inode="1234567", birthtime_ns="1700000000000000001")
    entry = identity.begin_run(lease, directory)
    path = home / ".proclease" / "runs" / f"{lease}.run"
    text = path.read_bytes()
    assert len(text) == RECORD_BYTES and text.endswith(b"\n") and path.stat().st_mode & 0o777 == 0o600
    assert text.rstrip() == (
        b'{"directory":{"birthtimeNs":"1700000000000000001","device":"2049","inode":"1234567"},'
        b'"leaseId":"0b8f5a3e-2f4c-4b7e-9d2a-7c1e5f3a9b10","state":"running","version":1}'
    )
    assert identity.finished_run(lease).outcome is None, "a running entry proves nothing"
    entry.finished(0, None)
    assert path.stat().st_size == RECORD_BYTES, "overwritten in place"
    outcome = identity.finished_run(lease).outcome
    assert outcome.directory_identity.fields() == directory.fields()
    assert (outcome.exit_code, outcome.signal) == (0, None)
    entry.finished(None, 9)
    assert (identity.finished_run(lease).outcome.exit_code, identity.finished_run(lease).outcome.signal) == (None, 9)
    assert identity.finished_run("0b8f5a3e-2f4c-4b7e-9d2a-7c1e5f3a9b11").outcome is None
    # A torn write is nothing finished.
    torn = bytearray(path.read_bytes())
    torn[10:40] = b"x" * 30
    path.write_bytes(bytes(torn))
    assert identity.finished_run(lease).outcome is None
    with pytest.raises(FileExistsError):
        identity.begin_run(lease, directory)
    with pytest.raises(OSError):
        identity.begin_run("../escape", directory)
    os.chmod(path, 0o644)
    with pytest.raises(HostError) as info:
        identity.finished_run(lease)
    assert info.value.payload == f".proclease/runs/{lease}.run: not a private regular file of yours"
    identity.forget_run(lease)
    assert not path.exists()
    identity.forget_run(lease)  # best effort
    entry.close()


def test_the_run_journal_is_made_durable_at_its_finish_and_only_then(identity: ProcessIdentity, home: Path, monkeypatch) -> None:
    # `docs/durability.md` steps 5 and 8: `begin` syncs nothing (a `running` entry that a power
    # loss takes is no loss); `finished` syncs the entry's data, then the journal's directory,
    # which holds its name.
    synced: list = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def named(fd: int) -> str:
        return os.readlink(f"/proc/self/fd/{fd}")

    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(("fsync", named(fd))), real_fsync(fd))[1])
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(("fdatasync", named(fd))), real_fdatasync(fd))[1])
    lease = "0b8f5a3e-2f4c-4b7e-9d2a-7c1e5f3a9b12"
    directory = Rec(device="2049", inode="1234567", birthtime_ns="1700000000000000001")
    runs = home / ".proclease" / "runs"
    assert identity.journal is not None  # its directories are made durable once, when first opened
    synced.clear()
    entry = identity.begin_run(lease, directory)
    assert synced == [], "begin syncs nothing"
    entry.finished(0, None)
    assert synced == [("fdatasync", str(runs / f"{lease}.run")), ("fsync", str(runs))]
    entry.close()


# --- interoperation with the native host ----------------------------------------------------------


def owner_of(record: dict) -> Rec:
    return Rec(pid=record["pid"], boot_id=record["bootId"], process_start_id=record["processStartId"])


def test_a_native_supervisors_owners_are_held_while_it_runs_and_free_once_killed(tmp_path: Path, judge) -> None:
    if not os.access(NATIVE, os.X_OK):
        pytest.skip(f"{NATIVE}: the native proclease binary is not built (cargo build -p proclease)")
    home, work = tmp_path / "home", tmp_path / "work"
    leases = home / "recovery" / "beeper-message-like-me-directory-leases"
    supervisor = subprocess.Popen(
        [str(NATIVE), "--state-home", str(home), "run", "--workdir", str(work), "--", "sleep", "120"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    child = None
    try:

        def running() -> Optional[dict]:
            for path in leases.glob("*.json") if leases.is_dir() else []:
                try:
                    record = json.loads(path.read_text())
                except (OSError, ValueError):
                    continue
                if record.get("phase") == "running":
                    return record
            return None

        assert wait_until(lambda: running() is not None or supervisor.poll() is not None, 60), "no running lease"
        record = running()
        assert record is not None, supervisor.stderr.read().decode()
        owner, child = owner_of(record["owner"]), owner_of(record["childOwner"])
        assert owner.pid == supervisor.pid
        identity = ProcessIdentity(str(home))
        assert owner.boot_id == identity.current_boot_id()
        for recorded in (owner, child):
            facts = identity.probe(recorded)
            assert facts.witness == "held", (recorded, facts)
            verdict = judge(recorded, facts)
            assert verdict is None or verdict.status == "exact-live-owner"
        assert identity.probe(owner).spawned == "held"
        # The native witness is byte for byte what this port writes for the same holder.
        native_path = witness_dir(home, owner.boot_id) / f"{owner.pid}-{owner.process_start_id}.witness"
        native = native_path.read_text()
        st = native_path.stat()
        assert native == witness_module.content(owner, "owner", identity.host().namespaces(), (st.st_dev, st.st_ino))
        # And the native run journal's entry is this port's format.
        journal = (home / ".proclease" / "runs" / f"{record['id']}.run").read_bytes()
        from proclease.process_identity import _journal_record

        value = {"version": 1, "leaseId": record["id"], "directory": record["directoryIdentity"], "state": "running"}
        assert journal == _journal_record(value)
        assert identity.finished_run(record["id"]).outcome is None

        os.kill(supervisor.pid, signal.SIGKILL)
        os.kill(child.pid, signal.SIGKILL)
        supervisor.wait(timeout=30)
        # The box's init closes its files (the witness) before it waits, in its exit, for its
        # namespace to empty: its cgroup stays populated a moment longer, and /proc shows it
        # running until its exit ends (judged alive, rightly, until then).
        def gone(recorded: Rec) -> bool:
            facts = identity.probe(recorded)
            if facts.witness != "free" or facts.tree == "populated":
                return False
            verdict = judge(recorded, facts)
            return verdict is None or verdict.status == "different-or-dead"

        assert wait_until(lambda: gone(owner) and gone(child), 60), (identity.probe(owner), identity.probe(child))
        for recorded in (owner, child):
            facts = identity.probe(recorded)
            assert facts.tree in ("empty", "absent", "unreadable")
            verdict = judge(recorded, facts)
            assert verdict is None or (verdict.status, verdict.lineage_gone) == ("different-or-dead", True)
        assert identity.probe(owner).spawned == "free"
    finally:
        for pid in (supervisor.pid, child.pid if child is not None else None):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        supervisor.wait(timeout=30)
        remove_recorded_cgroups(home)


def remove_recorded_cgroups(home: Path) -> None:
    """Removes the (empty) cgroups the killed native supervisor left (the next native supervisor
    would sweep them)."""
    hierarchy = witness_module._hierarchy()
    for record in (home / ".proclease" / "witnesses").glob("*/*.cgroup*"):
        try:
            path = json.loads(record.read_text())["path"]
            directory = hierarchy.dir_of(path) if hierarchy else None
            if directory:
                os.rmdir(directory)
        except (OSError, ValueError, KeyError):
            pass


def test_the_component_judges_what_the_probe_observed(identity: ProcessIdentity, judge) -> None:
    """The other tests judge their facts with the component when it is at hand: say so when it
    is not (and check the `proc-read` variant crosses as `wasmtime.component.Variant`)."""
    own = identity.self_identity()
    verdict = judge(own, identity.probe(own))
    if verdict is None:
        pytest.skip(f"{WASM}: no component exporting dispositions.judge-owner; facts were not judged")
    assert (verdict.status, verdict.lineage_gone) == ("exact-live-owner", False)
    with pytest.raises(TypeError, match="expected Variant type"):
        judge(own, identity.probe(own).replace(stat=None))
