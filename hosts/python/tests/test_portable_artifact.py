"""The portable artifact (`host/component/proclease-portable.wasm`: the component with the
store's, claims' and workspace's protocols inside, issue #41) run from Python over this
package's implementation of the system-call contract (`proclease._sys`), beside the native
binary on one state home: each keeps the other's live lease and recovers it once its owner is
SIGKILLed. Nothing of the store is ported here: the artifact does the file work through
`sys-fs`.

The native binary is `$PROCLEASE_BIN`, as in `test_interop.py`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, List

import pytest

from proclease._binding import ComponentError, Proclease
from proclease._sys import Directory
from proclease._wit import Rec, rec
from proclease.host import Clock

import test_interop
from conftest import ArtifactGrants
from test_interop import Place, await_entry, doctor, kill_and_await, running

# The interop suite's fixtures: `$PROCLEASE_BIN` required, and a fresh state home and workspace.
native_binary = test_interop.native_binary
place = test_interop.place

ARTIFACT = Path(__file__).resolve().parents[3] / "host" / "component" / "proclease-portable.wasm"


def grants(place: Place) -> ArtifactGrants:
    return ArtifactGrants(str(place.home), [str(place.ws)])


def artifact(place: Place) -> Proclease:
    assert place.native("doctor", "--json").returncode == 0  # makes and claims the state home
    return Proclease(ARTIFACT, grants(place))


def counts(report: Rec) -> tuple[int, int]:
    return (report.recovered, report.active)


def test_a_native_run_is_kept_by_the_artifact_while_it_lives_and_recovered_once_killed(place: Place) -> None:
    component = artifact(place)
    supervisor = place.start_native("run", "--workdir", str(place.job), "--", "sleep", "60")
    try:
        entry = await_entry(place.native, str(place.job), running, "active running")
        assert counts(component.directory_leases.recover(None)) == (0, 1)
        assert place.job.is_dir(), "a live run's directory is kept"
        kill_and_await([supervisor.pid, entry["childPid"]])
    finally:
        supervisor.kill()
        supervisor.wait()
    # The box's processes die with its init; the recovery proves them gone by their witness.
    deadline = time.monotonic() + 10
    while counts(report := component.directory_leases.recover(None)) != (1, 0) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert counts(report) == (1, 0)
    assert not place.job.exists(), "the dead run's directory is removed"
    assert place.leases() == []
    assert doctor(place.native)["entries"] == []


def test_a_lease_taken_through_the_artifact_is_active_natively_until_released(place: Place) -> None:
    component = artifact(place)
    now = Clock().now_ms()
    request = rec(role="raw-working", path=str(place.job), output_root=None, recover_after_ms=float(now + 60_000), now_ms=float(now))
    lease = component.resource("directory-leases", "directory-lease", component.directory_leases.create_with_directory(request))
    assert place.job.is_dir() and (place.job.stat().st_mode & 0o777) == 0o700
    [entry] = doctor(place.native)["entries"]
    assert (entry["target"], entry["disposition"], entry["ownerPid"]) == (str(place.job), "active", os.getpid()), entry
    kept = place.native("recover", "--json")
    assert kept.returncode == 0, kept.stderr
    assert [e["action"] for e in json.loads(kept.stdout)["directoryLeases"]["entries"]] == ["keep"]
    refused = place.native("run", "--workdir", str(place.job), "--", "touch", "ran")
    assert refused.returncode == 1 and f"{place.job}: refused: already leased by pid {os.getpid()}" in refused.stderr, refused.stderr
    assert not (place.job / "ran").exists(), "the native run never started beside the lease"
    lease.release()
    lease.drop()
    assert place.job.is_dir(), "a release never removes the directory"
    assert doctor(place.native)["entries"] == []
    # The artifact keeps the state home and the workspace roots open for its life; no file and
    # no kernel lock (the lease-creation lock) outlives the calls that took them.
    assert {type(r).__name__ for r in component._live.values()} <= {"Directory"}, component._live


def test_a_trap_inside_a_call_leaves_no_kernel_lock_held(place: Place, monkeypatch: pytest.MonkeyPatch) -> None:
    component = artifact(place)

    def broken(self: Directory, prefix: bytes, bound: int) -> List[bytes]:
        raise RuntimeError("a bug of the host")  # no errno: the call traps

    monkeypatch.setattr(Directory, "read_names", broken)
    now = Clock().now_ms()
    request = rec(role="raw-working", path=str(place.job), output_root=None, recover_after_ms=float(now + 60_000), now_ms=float(now))
    with pytest.raises(Exception, match="a bug of the host|wasm"):
        component.directory_leases.create_with_directory(request)
    locks = sorted((place.home / ".proclease" / "locks").iterdir())
    assert locks, "the call took the lease-creation lock before it trapped"
    for lock in locks:
        fd = os.open(lock, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError while held
        finally:
            os.close(fd)
    assert component.live_host_resources == 0


ADMISSION = Path("recovery") / "beeper-message-like-me-export-admission"


def claims_in(collection: Path) -> List[str]:
    return sorted(p.name for p in collection.iterdir() if p.name.startswith(".io-mutation-"))


def test_a_claim_abandoned_by_a_trap_does_not_hold_up_other_hosts(place: Place, monkeypatch: pytest.MonkeyPatch) -> None:
    """An instance that traps between publishing a mutation claim and releasing it leaves the
    claim behind, owned by this live process. The next holder of the collection's lock (here
    the native binary, in another process) knows it abandoned from the claim id noted in the
    lock, removes it and goes on — where it used to wait out its bound and fail."""
    component = artifact(place)
    original = Directory.rename

    def trapping(self: Directory, source: bytes, target_dir: Directory, target: bytes, replace: bool) -> Any:
        if target.startswith(b".io-mutation-") and b"-held-" in target:
            raise RuntimeError("a bug of the host")  # no errno: the call traps
        return original(self, source, target_dir, target, replace)

    monkeypatch.setattr(Directory, "rename", trapping)
    with pytest.raises(Exception, match="a bug of the host|wasm"):
        component.export_admission.acquire()
    monkeypatch.setattr(Directory, "rename", original)
    collection = place.home / ADMISSION
    left = claims_in(collection)
    assert len(left) == 1 and "-candidate-" in left[0], left
    assert json.loads((collection / left[0]).read_text())["pid"] == os.getpid(), "the claim is this live process's"

    ran = place.native("run", "--exclusive", "--workdir", str(place.job), "--", "touch", "ran")
    assert ran.returncode == 0, ran.stderr
    assert (place.job / "ran").is_file()
    assert claims_in(collection) == [], "the abandoned claim was removed"


def test_a_live_claim_that_no_lock_notes_is_still_waited_for(place: Place) -> None:
    """The other side: a claim of a live process that no proclease noted (a running ghostget's,
    here stopped for good) is never removed; the native binary waits for it and gives up."""
    assert place.native("doctor", "--json").returncode == 0
    owner = subprocess.Popen(["sleep", "60"])
    try:
        identity = json.loads(place.native("identity", "--json", str(owner.pid)).stdout)
        collection = place.home / ADMISSION
        collection.mkdir(mode=0o700, parents=True, exist_ok=True)
        for directory in (place.home / "recovery", collection):
            os.chmod(directory, 0o700)
        target = "7090835e861362df23825dadcaeccaa91ec32490e69ec9f97b7f74b3c43a797e"  # active.json
        claim_id = "3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d"
        text = (
            f'{{"kind":"io-state-mutation-claim","schemaVersion":1,"targetSha256":"{target}","claimId":"{claim_id}",'
            f'"pid":{owner.pid},"bootId":"{identity["bootId"]}","processStartId":"{identity["processStartId"]}"}}\n'
        )
        name = f".io-mutation-{target}-held-{claim_id}.lock"
        fd = os.open(collection / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, text.encode())
        os.close(fd)
        refused = place.native("run", "--exclusive", "--lock-timeout", "1s", "--workdir", str(place.job), "--", "touch", "ran")
        assert refused.returncode != 0, refused.stdout
        assert not (place.job / "ran").exists()
        assert claims_in(collection) == [name], "a live owner's claim stays"
    finally:
        owner.kill()
        owner.wait()


def test_the_artifact_gives_its_host_the_workspace_and_store_protocols(place: Place) -> None:
    """A host that loads the artifact inspects, creates and removes directories, and takes the
    lease-creation lock, through the artifact's own `workspace` and `state-store` exports: the
    protocols written once, not a port of them."""
    component = artifact(place)
    job = place.job / "deep" / "er"
    assert component.workspace.inspect(str(job)).facts is None
    created = component.workspace.create_private_directory(str(job))
    assert created == [str(place.job), str(place.job / "deep"), str(job)] or created == [str(place.job / "deep"), str(job)], created
    assert job.stat().st_mode & 0o777 == 0o700
    facts = component.workspace.inspect(str(job)).facts
    st = os.lstat(job)
    assert (facts.canonical, facts.is_directory, facts.owned, facts.mode) == (True, True, True, 0o700)
    assert (facts.identity.device, facts.identity.inode) == (str(st.st_dev), str(st.st_ino))
    with pytest.raises(ComponentError, match="/etc/ssl: refused: outside the granted workspace roots") as refused:
        component.workspace.inspect("/etc/ssl")
    assert refused.value.failure.kind == "refused"
    (job / "result.txt").write_text("built\n")
    wrong = rec(device=facts.identity.device, inode=str(int(facts.identity.inode) + 1), birthtime_ns=facts.identity.birthtime_ns)
    with pytest.raises(ComponentError, match="recursive removal target changed identity") as changed:
        component.workspace.remove_tree(str(job), wrong)
    assert changed.value.failure.kind == "identity-changed"
    assert (job / "result.txt").read_text() == "built\n", "another identity: nothing removed"
    assert component.workspace.remove_tree(str(job), facts.identity) is True
    assert not job.exists()

    held = component.state_store.lock_leasing()
    lock_file = place.home / ".proclease" / "locks" / "directory-lease-creation.lock"
    fd = os.open(lock_file, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        component.state_store.unlock_leasing()
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again
    finally:
        os.close(fd)
    assert held is not None


def test_writers_whose_instances_trap_mid_claim_lose_no_update_and_hold_up_no_one(tmp_path: Path) -> None:
    """Three processes increment one record through the artifact's store; two of them trap on
    every third advance of a mutation claim to `held` (their claim left behind, owned by a live
    process) and go on with a fresh instance. Every increment lands exactly once, no writer
    runs out of its bound, and no claim is left once they are done."""
    home = tmp_path / "state"
    worker = Path(__file__).resolve().parent / "worker.py"
    path, count = "recovery/counter/value.json", 25
    children = [
        subprocess.Popen([sys.executable, str(worker), "increment", str(home), path, str(count), *trap], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for trap in (["3"], ["3"], [])
    ]
    reports = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["successes"] == count for r in reports), reports
    assert sum(r["traps"] for r in reports) >= 10, reports
    assert (home / path).read_text() == f'{{"value":{3 * count}}}\n'
    assert os.listdir(home / "recovery" / "counter") == ["value.json"], "no claim left behind"


def test_a_child_forked_while_a_write_holds_the_lock_does_not_keep_it(place: Place, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread forks at the instant a write holds the collection's kernel lock (here:
    as it notes its claim); the child lives on with a copy of the descriptor. The write's
    release unlocks explicitly, so the admission is taken and released as usual — closing
    alone left the lock held for the child's life, and every later write of that collection,
    by any host, failed."""
    from proclease import Host
    from proclease._sys import Lock

    host = Host(state_home=place.home, workspace_roots=[place.ws])
    children: List[int] = []
    note = Lock.note

    def forking(self: Lock, text: bytes) -> Any:
        if not children:
            pid = os.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            children.append(pid)
        return note(self, text)

    monkeypatch.setattr(Lock, "note", forking)
    try:
        with host.admission():
            pass
        assert children, "the fork happened while a write held the lock"
        assert not (place.home / ADMISSION / "active.json").exists(), "released"
        ran = place.native("run", "--exclusive", "--lock-timeout", "2s", "--workdir", str(place.job), "--", "touch", "ran")
        assert ran.returncode == 0, ran.stderr
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def test_without_kernel_locks_two_instances_of_one_process_lose_no_update(place: Place, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host whose `try-lock` answers `unsupported` (Node's plan) relies on the reference's
    mutation claims alone. Two instances of one process, in two threads, increment one record:
    a claim of this very process is then another instance's write in progress, not a stale
    claim of its own to remove (which let both write: 24 of 400 increments were lost)."""
    from proclease import Host
    from proclease._binding import Variant

    monkeypatch.setattr(Directory, "try_lock", lambda self, name: Variant("unsupported", None))
    hosts = [Host(state_home=place.home, workspace_roots=[place.ws]) for _ in range(2)]
    path, count = "recovery/counter/value.json", 150
    hosts[0].component.state_store.create_if_absent(path, "0\n")
    done = [0, 0]
    problems: List[str] = []

    def work(i: int) -> None:
        store = hosts[i].component.state_store
        while done[i] < count and len(problems) < 20:
            try:
                text = store.read_if_present(path, 4096).text
                if store.replace_if_unchanged(path, hashlib.sha256(text.encode()).hexdigest(), f"{int(text) + 1}\n"):
                    done[i] += 1
            except ComponentError as error:
                if error.failure is None or error.failure.kind != "contended":
                    problems.append(str(error))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert problems == [], problems
    assert done == [count, count]
    assert (place.home / path).read_text() == f"{2 * count}\n", "every increment landed once"


def test_host_given_the_component_instead_of_the_artifact_says_which_file_it_needs(tmp_path: Path) -> None:
    from proclease import Error, Host

    component = ARTIFACT.parent / "proclease.wasm"
    with pytest.raises(Error) as refused:
        Host(state_home=tmp_path / "state", workspace_roots=[tmp_path], wasm=component)
    assert refused.value.kind == "system"
    assert refused.value.message.startswith(f"{component}: the proclease portable artifact cannot be loaded: ")
    assert "Host loads `proclease-portable.wasm` (`proclease component --portable -o FILE`)" in refused.value.message


@contextmanager
def held_by_flock(lock: Path) -> Iterator[subprocess.Popen]:
    """`lock` held by flock(1) (`-o`: flock's alone, not the shell's it runs) for the block,
    once it holds it; then it is killed with its group."""
    holder = subprocess.Popen(["flock", "-o", "-x", str(lock), "-c", "echo locked; exec sleep 60"], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        yield holder
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def test_an_operation_s_lock_waits_share_one_lock_timeout(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The export admission's acquire makes eight attempts; behind a collection lock another
    process keeps, they share the host's one `lock_timeout` (as the native host's operation
    does), so the timeout is said once, not once per attempt with the whole bound waited again
    (which made `run --exclusive` wait eight times `--lock-timeout`)."""
    import logging

    from proclease import Error, Host
    from proclease.process_identity import identity_digest

    home = tmp_path / "state"
    host = Host(state_home=home, workspace_roots=[str(tmp_path)], lock_timeout=0.5)
    with host.admission():
        pass
    lock = home / ".proclease" / "locks" / f"{identity_digest('proclease-collection-lock', 'recovery/beeper-message-like-me-export-admission')}.lock"
    assert lock.is_file(), sorted(os.listdir(lock.parent))
    caplog.set_level(logging.WARNING, logger="proclease")
    # With a bound, and with none (`lock_timeout=0`: every wait tries once): said once either way.
    for timeout in (0.5, 0.0):
        host.lock_timeout = timeout
        caplog.clear()
        with held_by_flock(lock) as holder:
            with pytest.raises(Error) as refused:
                with host.admission():
                    pytest.fail("acquired behind a held lock")
        assert "export admission could not be acquired after bounded contention" in str(refused.value), refused.value
        timed_out = [record.getMessage() for record in caplog.records if record.name.startswith("proclease") and record.getMessage().startswith("waited ")]
        assert len(timed_out) == 1, (timeout, timed_out)
        assert f"ms for .proclease/locks/{lock.name}, held by pid {holder.pid} (flock, sleeping)" in timed_out[0], timed_out
    # No bound at all is a bound too (it used to raise OverflowError on every call).
    host.lock_timeout = float("inf")
    with host.admission():
        pass


def test_a_wait_for_another_process_s_lock_is_bounded_by_lock_timeout_and_names_the_holder(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A write behind a collection lock another process keeps (here `flock(1)`, as a stopped
    or stuck writer would) waits at most `Host(lock_timeout)`, says after a second who holds
    the lock (read from `/proc/locks` through the system-call contract), and gives up naming
    that process, with what to do: the native host's behaviour, worded by the same protocol."""
    import logging

    from proclease import Host
    from proclease.process_identity import identity_digest

    home = tmp_path / "state"
    host = Host(state_home=home, workspace_roots=[str(tmp_path)])
    host.lock_timeout = 1.5  # settable after construction too
    store = host.component.state_store
    assert store.create_if_absent("recovery/things/a.json", "{}\n")
    lock = home / ".proclease" / "locks" / f"{identity_digest('proclease-collection-lock', 'recovery/things')}.lock"
    assert lock.is_file(), sorted(os.listdir(lock.parent))
    with held_by_flock(lock) as holder:
        caplog.set_level(logging.WARNING, logger="proclease")
        begun = time.monotonic()
        with pytest.raises(ComponentError) as caught:
            store.replace_if_unchanged("recovery/things/a.json", hashlib.sha256(b"{}\n").hexdigest(), '{"n":1}\n')
        assert time.monotonic() - begun < 8.0, "the host's 1.5 s bound, not the default 10 s"
    assert caught.value.failure is not None and caught.value.failure.kind == "contended", caught.value
    label = f".proclease/locks/{lock.name}"
    warnings = [record.getMessage() for record in caplog.records if record.name.startswith("proclease")]
    # flock(1) took the lock itself and runs the shell (then sleep) as its child.
    named = f"pid {holder.pid} (flock, sleeping)"
    assert any(w.startswith(f"waiting for {named} holding {label} (for at most 0.") for w in warnings), warnings
    timeout = [w for w in warnings if w.startswith("waited ")]
    assert len(timeout) == 1 and f"ms for {label}, held by {named}: continue a stopped holder" in timeout[0], warnings
    assert (home / "recovery/things/a.json").read_text() == "{}\n", "nothing changed"
    assert store.replace_if_unchanged("recovery/things/a.json", hashlib.sha256(b"{}\n").hexdigest(), '{"n":1}\n'), "free again"
