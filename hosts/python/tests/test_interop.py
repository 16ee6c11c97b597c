"""The Python host and the native binary on one state home (issue #31): a lease either takes is
judged active by the other while its command runs and recovered by the other once its
supervisor and command are killed; their `doctor --json` and `recover --json` agree; the
export admission held by one blocks the other with exit status 3.

The native binary is `$PROCLEASE_BIN` (`cargo test` sets it); without it these tests fail
rather than skip, so that CI cannot pass without them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

NATIVE = os.environ.get("PROCLEASE_BIN", "")


@pytest.fixture(autouse=True)
def native_binary() -> None:
    if not NATIVE or not os.access(NATIVE, os.X_OK):
        pytest.fail("PROCLEASE_BIN must name the native proclease binary (cargo test sets it; by hand: PROCLEASE_BIN=target/debug/proclease)")


def python_command() -> List[str]:
    """The installed console command when this runs in the package's venv, else the module."""
    script = Path(sys.executable).parent / "proclease"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "proclease.cli"]


class Place:
    """A private state home and a workspace root in a fresh temporary directory."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="proclease-interop-"))
        os.chmod(self.dir, 0o700)
        self.home = self.dir / "state"
        self.ws = self.dir / "ws"
        self.ws.mkdir(mode=0o700)
        self.job = self.ws / "job"

    def args(self) -> List[str]:
        return ["--state-home", str(self.home), "--workspace-root", str(self.ws)]

    def native(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([NATIVE, *self.args(), *args], capture_output=True, text=True, timeout=120)

    def python(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*python_command(), *self.args(), *args], capture_output=True, text=True, timeout=120)

    def start_native(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([NATIVE, *self.args(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def start_python(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([*python_command(), *self.args(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def leases(self) -> List[str]:
        collection = self.home / "recovery" / "beeper-message-like-me-directory-leases"
        return sorted(p.name for p in collection.iterdir()) if collection.is_dir() else []


@pytest.fixture
def place() -> Iterator[Place]:
    made = Place()
    yield made
    shutil.rmtree(made.dir, ignore_errors=True)


def doctor(run: Callable[..., subprocess.CompletedProcess]) -> Dict[str, Any]:
    out = run("doctor", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def await_entry(run: Callable[..., subprocess.CompletedProcess], target: str, want: Callable[[Dict[str, Any]], bool], what: str, seconds: float = 30.0) -> Dict[str, Any]:
    deadline = time.monotonic() + seconds
    last: Optional[Dict[str, Any]] = None
    while time.monotonic() < deadline:
        last = doctor(run)
        for entry in last["entries"]:
            if entry["target"] == target and want(entry):
                return entry
        time.sleep(0.1)
    raise AssertionError(f"no {what} entry for {target} within {seconds} s; last doctor: {json.dumps(last, indent=1)}")


def kill_and_await(pids: List[int]) -> None:
    """SIGKILLs each pid and waits (bounded) until none exists or each is a zombie."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError):
                break
            if state in ("Z", "X"):
                break
            time.sleep(0.02)


def running(entry: Dict[str, Any]) -> bool:
    return entry["disposition"] == "active" and entry["phase"] == "running" and entry["childPid"] is not None


def test_a_python_lease_is_active_natively_and_removed_by_the_native_recover_once_killed(place: Place) -> None:
    supervisor = place.start_python("run", "--workdir", str(place.job), "--", "sleep", "60")
    try:
        entry = await_entry(place.native, str(place.job), running, "active running")
        assert entry["ownerPid"] == supervisor.pid, entry
        assert "its witness lock is held" in entry["reason"], entry
        # While it runs, the native recovery keeps it and its directory.
        kept = place.native("recover", "--json")
        assert kept.returncode == 0, kept.stderr
        assert [e["action"] for e in json.loads(kept.stdout)["directoryLeases"]["entries"]] == ["keep"]
        assert place.job.is_dir()
        kill_and_await([supervisor.pid, entry["childPid"]])
    finally:
        supervisor.kill()
        supervisor.wait()
    recovered = place.native("recover", "--json")
    assert recovered.returncode == 0, recovered.stderr
    entries = json.loads(recovered.stdout)["directoryLeases"]["entries"]
    assert [(e["action"], e["done"], e["path"]) for e in entries] == [("remove directory", True, str(place.job))], entries
    assert not place.job.exists(), "the native recover removed the dead run's directory"
    assert place.leases() == []


def test_a_native_lease_is_active_in_python_and_removed_by_the_python_recover_once_killed(place: Place) -> None:
    supervisor = place.start_native("run", "--workdir", str(place.job), "--", "sleep", "60")
    try:
        entry = await_entry(place.python, str(place.job), running, "active running")
        assert entry["ownerPid"] == supervisor.pid, entry
        kept = place.python("recover")
        assert kept.returncode == 0, kept.stderr
        assert kept.stdout.startswith(f"kept {place.job}: active ("), kept.stdout
        # The native supervisor boxes its command: the recorded child is the box's init, whose
        # death ends the command too.
        kill_and_await([supervisor.pid, entry["childPid"]])
    finally:
        supervisor.kill()
        supervisor.wait()
    # The box's processes die with its init; the recovery proves them gone by their witness.
    deadline = time.monotonic() + 10
    while True:
        recovered = place.python("recover", "--json")
        entries = json.loads(recovered.stdout)["directoryLeases"]["entries"]
        if entries and entries[0]["action"] != "keep" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert recovered.returncode == 0, recovered.stderr
    assert [(e["action"], e["done"]) for e in entries] == [("remove directory", True)], entries
    assert not place.job.exists()
    assert place.leases() == []


def test_doctor_and_recover_documents_match_the_native_binary_on_one_state_home(place: Place) -> None:
    supervisor = place.start_native("run", "--workdir", str(place.job), "--", "sleep", "60")
    try:
        await_entry(place.native, str(place.job), running, "active running")
        native, python = doctor(place.native), doctor(place.python)
        for document in (native, python):
            for entry in document["entries"]:
                entry.pop("age")  # seconds apart
            # This machine's containment is the native supervisor's; the Python host has none.
            document.pop("containment")
            document.pop("cgroup")
        assert python == native
        for args in (["recover", "--dry-run", "--json"], ["recover", "--dry-run"], ["doctor"]):
            n, p = place.native(*args), place.python(*args)
            assert p.returncode == n.returncode, (args, p.stderr, n.stderr)
            if args[-1] != "doctor":
                assert p.stdout == n.stdout, args
    finally:
        kill_and_await([supervisor.pid])
        supervisor.wait()


def test_the_admission_held_by_one_host_blocks_the_other_with_exit_status_3(place: Place) -> None:
    holder = place.start_python("run", "--exclusive", "--workdir", str(place.job), "--", "sleep", "60")
    try:
        await_entry(place.native, str(place.job), running, "active running")
        blocked = place.native("run", "--exclusive", "--workdir", str(place.ws / "other"), "--", "true")
        assert blocked.returncode == 3, blocked.stderr
        assert "another export is active" in blocked.stderr
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.wait(timeout=30)
    # SIGTERM reached the command through its supervisor, which released everything.
    assert place.leases() == []
    assert not (place.home / "recovery" / "beeper-message-like-me-export-admission" / "active.json").exists()
    holder = place.start_native("run", "--exclusive", "--workdir", str(place.job), "--", "sleep", "60")
    try:
        await_entry(place.python, str(place.job), running, "active running")
        blocked = place.python("run", "--exclusive", "--workdir", str(place.ws / "other"), "--", "true")
        assert blocked.returncode == 3, blocked.stderr
        assert "another export is active" in blocked.stderr
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.wait(timeout=30)


def write_intent(place: Place, intent_id: str, owner: Any, made: Path, *, canonical: bool = True) -> Path:
    """A directory-creation intent (`recovery/proclease-directory-creations/<id>.json`) naming
    `made` as created by `owner`: what a creator that crashed before leasing leaves."""
    intent = {
        "created": [{"identity": None, "path": str(made)}],
        "id": intent_id,
        "kind": "proclease-directory-creation",
        "owner": {"bootId": owner.boot_id, "pid": owner.pid, "processStartId": owner.process_start_id},
        "path": str(made),
        "schemaVersion": 1,
    }
    intents = place.home / "recovery" / "proclease-directory-creations"
    intents.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(place.home / "recovery", 0o700)
    file = intents / f"{intent_id}.json"
    file.write_text((json.dumps(intent, separators=(",", ":"), sort_keys=True) if canonical else json.dumps(intent, indent=1)) + "\n")
    os.chmod(file, 0o600)
    return file


def test_recover_reports_what_a_crashed_creator_left_as_the_native_binary_does(place: Place) -> None:
    """#43 case 6: Python's `recover` crashed (`AttributeError … 'payload'`) on a creation intent
    and its `--json` said the reason as the action. Each of the three outcomes — finish (a dead
    creator's empty directory removed), keep (a live creator's), skip (an intent that is not
    canonical) — reads the same from both hosts, in JSON and in text, and is carried out the same."""
    from proclease.process_identity import ProcessIdentity

    assert place.native("doctor").returncode == 0
    identity = ProcessIdentity(str(place.home))
    gone = subprocess.Popen(["sleep", "600"])
    dead_owner = identity.capture(gone.pid)
    gone.kill()
    gone.wait()
    alive = subprocess.Popen(["sleep", "600"])
    try:
        live_owner = identity.capture(alive.pid)
        made = {name: place.ws / name for name in ("dead", "live", "odd")}
        for path in made.values():
            path.mkdir(mode=0o700)
        write_intent(place, "11111111-1111-4111-8111-111111111111", dead_owner, made["dead"])
        write_intent(place, "22222222-2222-4222-8222-222222222222", live_owner, made["live"])
        write_intent(place, "33333333-3333-4333-8333-333333333333", dead_owner, made["odd"], canonical=False)

        documents = []
        for run in (place.python, place.native):
            out = run("recover", "--dry-run", "--json")
            assert out.returncode == 0, out.stderr
            documents.append(json.loads(out.stdout)["directoryCreations"])
        assert documents[0] == documents[1], documents
        rows = {row["file"][:8]: row for row in documents[0]}
        assert (rows["11111111"]["action"], rows["11111111"]["removed"]) == ("finish", [str(made["dead"])]), rows
        assert rows["22222222"]["action"] == "keep", rows
        assert rows["33333333"]["action"] == "skip" and "not canonical" in rows["33333333"]["error"], rows

        texts = []
        for run in (place.python, place.native):
            out = run("recover", "--dry-run")
            assert out.returncode == 0, out.stderr
            texts.append([line for line in out.stdout.splitlines() if "creation" in line or "would remove" in line])
        assert texts[0] == texts[1] and len(texts[0]) == 3, texts

        out = place.python("recover")
        assert out.returncode == 0, out.stderr
        assert f"removed {made['dead']} (" in out.stdout, out.stdout
        assert not made["dead"].exists() and made["live"].is_dir() and made["odd"].is_dir()
    finally:
        alive.kill()
        alive.wait()


def test_a_recover_stopped_at_the_invocation_leases_reports_what_it_did_as_the_native_binary_does(place: Place) -> None:
    """A plugin mutation under way (another proclease holding the plugin catalog's guard) fails
    the invocation-lease repair with the reference's `already locked`. What recovery did before
    it — here, a crashed creator's empty directory removed — is reported, then the failure in
    proclease-core's words, exit 1, in both hosts alike; once the holder is gone, it finishes."""
    from proclease.process_identity import ProcessIdentity

    assert place.native("doctor").returncode == 0
    gone = subprocess.Popen(["sleep", "600"])
    dead_owner = ProcessIdentity(str(place.home)).capture(gone.pid)
    gone.kill()
    gone.wait()
    guard = place.home / ".proclease" / "locks" / "catalog-mutation.lock"
    guard.touch()
    holder = subprocess.Popen(["flock", "-o", "-x", str(guard), "-c", "echo locked; exec sleep 300"], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        said = []
        for n, run in enumerate((place.python, place.native)):
            made = place.ws / f"made-{n}"
            made.mkdir(mode=0o700)
            write_intent(place, f"{n}{n}{n}{n}{n}{n}{n}{n}-1111-4111-8111-111111111111", dead_owner, made)
            out = run("recover")
            assert out.returncode == 1, out.stderr
            assert not made.exists(), "the crashed creator's directory was removed"
            assert f"removed {made} (" in out.stdout, out.stdout
            said.append(out.stderr)
        assert said[0] == said[1] == (
            "proclease: recovery stopped at the invocation leases, which are left as they are: portable plugin catalog mutation is already locked; "
            "the rest of the recovery, listed above, was done\n"
        ), said
        # An earlier wait that left a crashed run's lease as it is (the lease-creation lock held
        # too) is said on a line of its own, exit 5, and not as the catalog failure's cause.
        creation = place.home / ".proclease" / "locks" / "directory-lease-creation.lock"
        creation.touch()
        said = []
        for n, run in enumerate((place.python, place.native)):
            job = place.ws / f"job-{n}"
            crashed = place.native("run", "--containment", "none", "--workdir", str(job), "--", "sh", "-c", "kill -9 $PPID; sleep 1")
            assert crashed.returncode == -signal.SIGKILL, crashed.stderr
            waiter = subprocess.Popen(["flock", "-o", "-x", str(creation), "-c", "echo locked; exec sleep 300"], stdout=subprocess.PIPE, text=True, start_new_session=True)
            try:
                assert waiter.stdout is not None and waiter.stdout.readline() == "locked\n"
                out = run("--lock-timeout", "300ms", "recover", "--skip-invalid")
            finally:
                os.killpg(waiter.pid, signal.SIGKILL)
                waiter.wait()
            assert out.returncode == 5, out.stderr
            assert job.is_dir(), "left as it is"
            lines = out.stderr.splitlines()
            assert lines[-2].startswith("proclease: recovery stopped at the invocation leases, which are left as they are: portable plugin catalog mutation is already locked;"), out.stderr
            assert lines[-1].startswith("proclease: recovery left a lease as it is because a wait reached its bound: waited "), out.stderr
            assert f"directory-lease-creation.lock, held by pid {waiter.pid} (flock, sleeping)" in lines[-1], out.stderr
            said.append(lines[-2])
        assert said[0] == said[1], said
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    out = place.python("recover")
    assert out.returncode == 0, out.stderr


HOLDER_SCRIPT = """
import subprocess, sys, warnings
from proclease import Host
host = Host(state_home=sys.argv[1], workspace_roots=[sys.argv[2]])
warnings.simplefilter("ignore")
with host.admission() as admission:
    helper = admission.launch_helper(["sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(helper.pid, flush=True)
    raise SystemExit(0)  # the holder ends while its helper runs
"""


def test_a_helper_launched_under_a_witness_frees_the_admission_once_it_and_its_holder_are_gone(place: Place) -> None:
    """#43 case 5: a helper recorded without a witness (`bind_helper`) left an admission every
    `run --exclusive` refused with exit 4 until a reboot, once its holder died. `launch_helper`
    starts it holding a witness: while it runs, the native binary is refused (exit 3, another
    export is active); once it is killed, the native binary proves it gone and takes over."""
    assert place.native("doctor").returncode == 0
    holder = subprocess.run([sys.executable, "-c", HOLDER_SCRIPT, str(place.home), str(place.ws)], capture_output=True, text=True, timeout=120)
    assert holder.returncode == 0, holder.stderr
    helper = int(holder.stdout.strip())
    try:
        blocked = place.native("run", "--exclusive", "--workdir", str(place.ws / "first"), "--", "true")
        assert blocked.returncode == 3, f"{blocked.returncode}: {blocked.stderr}"
    finally:
        kill_and_await([helper])
    taken = place.native("run", "--exclusive", "--workdir", str(place.ws / "second"), "--", "true")
    assert taken.returncode == 0, f"{taken.returncode}: {taken.stderr}"
    assert not (place.home / "recovery" / "beeper-message-like-me-export-admission" / "active.json").exists()


def test_a_refused_run_says_what_to_do_in_the_native_binary_s_words(place: Place) -> None:
    """A `run` refused because its directory does not qualify (§6A.4) says which condition it
    misses and what to do, on a line of its own after the error: the same bytes from both hosts
    (the artifact's `workspace-advice` runs the native host's protocol)."""
    wide = place.ws / "wide"
    wide.mkdir(mode=0o700)
    os.chmod(wide, 0o755)
    shared = place.ws / "shared"
    shared.mkdir(mode=0o700)
    os.chmod(shared, 0o777)
    for workdir, hint in (
        (wide, f"{wide} has mode 0755; a leased directory must have mode 0700: chmod 700 {wide}"),
        (shared / "job", f"its parent {shared} must be a directory you own that group and others cannot write; a shared directory such as /tmp cannot hold leased directories: use a private one, e.g. mkdir -m 700 /tmp/$USER-jobs"),
    ):
        native = place.native("run", "--workdir", str(workdir), "--", "true")
        python = place.python("run", "--workdir", str(workdir), "--", "true")
        assert (python.returncode, python.stderr) == (native.returncode, native.stderr)
        assert python.returncode == 1
        assert python.stderr == f"proclease: Beeper Message Like Me recovery: directory lease target is not an owned physical directory\n{hint}\n"
    assert not (shared / "job").exists(), "nothing was created"


def test_a_run_refused_at_the_lease_bound_says_what_frees_a_place_as_natively(place: Place) -> None:
    """With the reference's 64 directory leases held (here by this process, alive), a 65th
    `run` is refused before it creates anything, with the native binary's hint (the
    component's `run-refusals`)."""
    from proclease import Host

    host = Host(state_home=place.home, workspace_roots=[str(place.ws)])
    leases = []
    try:
        for n in range(64):
            held = place.ws / f"held-{n}"
            held.mkdir(mode=0o700)
            leases.append(host.take_directory_lease(held))
        workdir = place.ws / "new" / "job"
        native = place.native("run", "--workdir", str(workdir), "--", "true")
        python = place.python("run", "--workdir", str(workdir), "--", "true")
    finally:
        for lease in leases:
            lease.release()
    assert (python.returncode, python.stderr) == (native.returncode, native.stderr)
    assert python.returncode == 1
    assert python.stderr.endswith(
        "directory lease collection exceeded its reviewed bound\n"
        "the state home holds 64 directory leases, the reference's bound (ghostget's recovery refuses a collection over it), "
        "so no new lease is taken and nothing was created; `proclease recover` releases the leases of runs that are gone "
        "(`proclease doctor` lists them), or give another state home (--state-home)\n"
    ), python.stderr
    assert not (place.ws / "new").exists(), "nothing was created"


#: Durations as users write them: every host's `--lock-timeout` must take what the native one
#: takes (humantime's grammar), and refuse what it refuses.
DURATIONS = ["0", "0s", "1.5s", "1s500ms", "1m30s", "250ms", "10 s", "2 minutes", "1h", "3d", "1w", "x", "1x", "-1", "inf", "nan", "", "1s x", "1,5s"]


@pytest.mark.parametrize("text", DURATIONS)
def test_a_duration_means_to_this_cli_what_it_means_to_the_native_binary(text: str, tmp_path: Path) -> None:
    """`--lock-timeout 0` and `1.5s` were refused by the Node CLI, `1s500ms` by this one (found
    by review, 2026-12-07). Both now read humantime's grammar, as the native binary does; this
    CLI takes plain seconds (`2`) too, as it always did."""
    import argparse

    from proclease.cli import duration

    native = subprocess.run([NATIVE, "--state-home", str(tmp_path / "state"), "--lock-timeout", text, "--version"], capture_output=True, text=True, timeout=60)
    try:
        duration(text)
        taken = True
    except argparse.ArgumentTypeError:
        taken = False
    assert taken == (native.returncode == 0), (text, native.stderr)
