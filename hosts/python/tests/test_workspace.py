"""The workspace protocol as the Python host runs it: the portable artifact's own `workspace`
exports (`guest/protocols/src/workspace/`, the same code the native binary runs) over this
package's system calls (`proclease._sys`), on real directories.

What it holds (spec §6A.4, §3.3 `removePrivateDirectoryTree`): facts by statx without following
links, refusals outside the granted roots, the identity-bound removal and the completion of a
crashed one. The only fakes are the crash itself (a child process that dies right after its
quarantine rename) and a failing disk, instants a test cannot otherwise choose.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any, Callable, List

import pytest

import proclease
from proclease._binding import ComponentError, Proclease
from proclease._sys import Directory
from proclease._wit import HostError
from proclease.host import PACKAGED_ARTIFACT

from conftest import ArtifactGrants

SRC = str(Path(proclease.__file__).resolve().parent.parent)

#: A workspace quarantine: `.io-remove-<pid>-<uuid v4>.quarantine`.
QUARANTINE = re.compile(r"^\.io-remove-([1-9][0-9]*)-[0-9a-f-]{36}\.quarantine$")


class Workspace:
    """The artifact's `workspace` exports for `roots`, failures raised as `HostError(failure)`
    as the import they serve would raise them."""

    def __init__(self, home: Path, roots: List[str]) -> None:
        self.component = Proclease(PACKAGED_ARTIFACT, ArtifactGrants(str(home), roots))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        call = getattr(self.component.workspace, name)

        def failing_as_the_import(*args: Any) -> Any:
            try:
                return call(*args)
            except ComponentError as error:
                raise HostError(error.failure) from None

        return failing_as_the_import


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A private granted root (pytest's tmp dirs are 0700 and ours)."""
    path = tmp_path / "root"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def workspace(home: Path, root: Path) -> Workspace:
    return Workspace(home, [str(root)])


def identity(ws: Workspace, path: Path) -> Any:
    return ws.inspect(str(path)).facts.identity


def failure_of(info: pytest.ExceptionInfo) -> Any:
    assert isinstance(info.value, HostError)
    return info.value.payload


def private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700)
    os.chmod(path, 0o700)
    return path


# --- inspect ------------------------------------------------------------------------------------


def test_inspect_reports_the_physical_facts_of_a_real_directory(workspace: Workspace, root: Path) -> None:
    target = root / "work"
    target.mkdir()
    os.chmod(target, 0o750)
    facts = workspace.inspect(str(target)).facts
    st = os.stat(target, follow_symlinks=False)
    assert facts.canonical is True and facts.is_directory is True and facts.owned is True
    assert facts.mode == 0o750
    assert facts.identity.device == str(st.st_dev) and facts.identity.inode == str(st.st_ino)
    # ext4/xfs/btrfs/tmpfs report a birth time; it is what the records keep (§6A.4).
    assert facts.identity.birthtime_ns.isdigit()
    assert int(facts.identity.birthtime_ns) > 0, "this filesystem reports no birth time; the test machine should have one"
    # Stable while the directory stays, even when its content and mode change.
    (target / "file").write_text("x")
    os.chmod(target, 0o700)
    again = workspace.inspect(str(target)).facts
    assert again.identity.fields() == facts.identity.fields() and again.mode == 0o700
    # Another directory at the same path is another identity.
    (target / "file").unlink()
    target.rmdir()
    target.mkdir()
    assert workspace.inspect(str(target)).facts.identity.fields() != facts.identity.fields()


def test_inspect_of_the_root_itself_and_of_absent_paths(workspace: Workspace, root: Path) -> None:
    facts = workspace.inspect(str(root)).facts
    assert facts.canonical and facts.is_directory and facts.owned and facts.mode == 0o700
    assert workspace.inspect(str(root / "absent")).facts is None
    assert workspace.inspect(str(root / "absent" / "deeper")).facts is None


def test_a_symbolic_link_is_never_followed(workspace: Workspace, root: Path) -> None:
    real = private_dir(root / "real")
    private_dir(real / "inner")
    (root / "link").symlink_to(real)
    link = workspace.inspect(str(root / "link")).facts
    # The link itself (lstat): not a directory, so not canonical either.
    assert link.canonical is False and link.is_directory is False
    assert link.identity.inode == str(os.lstat(root / "link").st_ino)
    # A path through the link is not physical: every fact false / zero.
    through = workspace.inspect(str(root / "link" / "inner")).facts
    assert (through.canonical, through.is_directory, through.owned, through.mode) == (False, False, False, 0)
    assert through.identity.fields() == {"device": "0", "inode": "0", "birthtime-ns": "0"}
    # Through a regular file: the same.
    (root / "file").write_text("x")
    assert workspace.inspect(str(root / "file" / "x")).facts.is_directory is False


@pytest.mark.parametrize("suffix", ["/", "/./x", "/a/../x", "//x", "/x/"])
def test_non_normalised_paths_are_refused(workspace: Workspace, root: Path, suffix: str) -> None:
    path = str(root) + suffix
    with pytest.raises(HostError) as info:
        workspace.inspect(path)
    failure = failure_of(info)
    assert failure.kind == "refused" and failure.path == path
    assert failure.message == f"{path}: refused: not an absolute, normalised path (no trailing /, //, . or ..)"


def test_relative_paths_are_refused(workspace: Workspace) -> None:
    with pytest.raises(HostError) as info:
        workspace.inspect("relative/path")
    assert failure_of(info).kind == "refused"


def test_paths_outside_every_granted_root_are_refused(workspace: Workspace, root: Path, tmp_path: Path) -> None:
    outside = private_dir(tmp_path / "outside")
    sibling_prefix = tmp_path / "rootx"  # shares the root's text prefix, not its path
    for path in (outside, sibling_prefix, Path("/")):
        for call in (
            lambda: workspace.inspect(str(path)),
            lambda: workspace.remove_tree(str(path / "x" / "y"), identity(workspace, root)),
            lambda: workspace.create_private_directory(str(path / "x")),
            lambda: workspace.remove_empty_directory(str(path / "x"), None),
        ):
            with pytest.raises(HostError) as info:
                call()
            failure = failure_of(info)
            assert failure.kind == "refused", failure
            assert failure.path.startswith(str(path))
            assert "outside the granted workspace roots (" + str(root) + ")" in failure.message
    # The root itself can be inspected, but not created or removed through the workspace.
    with pytest.raises(HostError) as info:
        workspace.create_private_directory(str(root))
    assert failure_of(info).kind == "refused"


def test_a_root_given_through_a_symbolic_link_is_resolved(tmp_path: Path, home: Path, root: Path) -> None:
    (tmp_path / "alias").symlink_to(root)
    ws = Workspace(home, [str(tmp_path / "alias")])
    private_dir(root / "d")
    assert ws.inspect(str(root / "d")).facts.canonical
    with pytest.raises(HostError):
        ws.inspect(str(tmp_path / "alias" / "d"))


def test_a_missing_root_cannot_be_granted(tmp_path: Path) -> None:
    with pytest.raises(proclease.Error) as info:
        proclease.Host(state_home=tmp_path / "state", workspace_roots=[tmp_path / "missing"])
    assert info.value.kind == "system"
    assert info.value.message == f"{tmp_path / 'missing'}: realpath of a workspace root failed: No such file or directory (os error 2)"


# --- create-private-directory and remove-empty-directory ---------------------------------------


def test_create_private_directory_creates_missing_ancestors_private(workspace: Workspace, root: Path) -> None:
    old = os.umask(0o077 ^ 0o777)  # a umask that would leave nothing: chmod must set 0700
    try:
        created = workspace.create_private_directory(str(root / "a" / "b" / "c"))
    finally:
        os.umask(old)
    assert created == [str(root / "a"), str(root / "a" / "b"), str(root / "a" / "b" / "c")]
    for path in created:
        assert os.stat(path).st_mode & 0o7777 == 0o700
    assert workspace.create_private_directory(str(root / "a" / "b" / "c")) == []
    assert workspace.create_private_directory(str(root / "a" / "d")) == [str(root / "a" / "d")]


def test_create_private_directory_refuses_links_and_files_on_the_way(workspace: Workspace, root: Path) -> None:
    real = private_dir(root / "real")
    (root / "link").symlink_to(real)
    with pytest.raises(HostError) as info:
        workspace.create_private_directory(str(root / "link" / "x"))
    failure = failure_of(info)
    assert failure.kind == "refused" and failure.path == str(root / "link")
    assert failure.message == f"{root / 'link'}: refused: is a symbolic link; give the real path"
    assert not (real / "x").exists()
    (root / "file").write_text("x")
    with pytest.raises(HostError) as info:
        workspace.create_private_directory(str(root / "file" / "x"))
    assert failure_of(info).message == f"{root / 'file'}: refused: is not a directory"


def test_remove_empty_directory(workspace: Workspace, root: Path) -> None:
    target = private_dir(root / "t")
    expected = identity(workspace, target)
    (target / "f").write_text("x")
    assert workspace.remove_empty_directory(str(target), expected) is False, "not empty"
    (target / "f").unlink()
    other = identity(workspace, private_dir(root / "other"))
    assert workspace.remove_empty_directory(str(target), other) is False, "another directory"
    assert workspace.remove_empty_directory(str(target), expected) is True
    assert not target.exists()
    assert workspace.remove_empty_directory(str(target), expected) is False, "absent"
    assert workspace.remove_empty_directory(str(root / "missing" / "x"), None) is False
    assert workspace.remove_empty_directory(str(root / "other"), None) is True
    (root / "file").write_text("x")
    assert workspace.remove_empty_directory(str(root / "file"), None) is False, "not a directory"


# --- remove-tree ---------------------------------------------------------------------------------


def build_tree(top: Path, outside: Path) -> None:
    """Files, sub-directories, a symbolic link to a directory outside, odd names, a read-only
    directory, and a chain deeper than the deletion's 64 open descriptors."""
    (top / "file").write_text("x")
    (top / "sub").mkdir()
    (top / "sub" / "nested.txt").write_text("y")
    (top / "sub" / "link-out").symlink_to(outside)
    (top / "dangling").symlink_to(top / "nowhere")
    (top / "many").mkdir()
    for i in range(300):
        (top / "many" / f"f{i}").write_text("z")
    os.mkdir(os.path.join(os.fsencode(top), b"bytes-\xff-name"))
    (top / "readonly").mkdir()
    (top / "readonly" / "inside").write_text("r")
    os.chmod(top / "readonly", 0o500)
    deep = top / "deep"
    deep.mkdir()
    current = str(deep)
    for i in range(150):
        os.mkdir(f"{current}/{i % 10}")
        current = f"{current}/{i % 10}"
        if i % 7 == 0:
            with open(f"{current}/leaf", "w") as file:
                file.write("d")


def test_remove_tree_removes_exactly_the_identified_tree(workspace: Workspace, root: Path, tmp_path: Path) -> None:
    outside = private_dir(tmp_path / "outside")
    (outside / "keep").write_text("keep")
    target = private_dir(root / "target")
    sibling = private_dir(root / "sibling")
    (sibling / "keep").write_text("keep")
    build_tree(target, outside)
    expected = identity(workspace, target)
    assert workspace.remove_tree(str(target), expected) is True
    assert not target.exists()
    assert sorted(os.listdir(root)) == ["sibling"], "no quarantine left behind"
    assert (outside / "keep").read_text() == "keep", "a symbolic link's target is never touched"
    assert (sibling / "keep").read_text() == "keep"
    # Nothing left: neither the target nor a quarantine of it.
    assert workspace.remove_tree(str(target), expected) is False


def test_remove_tree_refuses_a_swapped_directory(workspace: Workspace, root: Path) -> None:
    target = private_dir(root / "target")
    expected = identity(workspace, target)
    target.rename(root / "moved-away")
    private_dir(target)
    (target / "precious").write_text("not yours")
    with pytest.raises(HostError) as info:
        workspace.remove_tree(str(target), expected)
    failure = failure_of(info)
    assert failure.kind == "identity-changed" and failure.path == str(target)
    assert failure.message == f"{target}: recursive removal target changed identity"
    assert (target / "precious").read_text() == "not yours"
    assert sorted(os.listdir(root)) == ["moved-away", "target"]


def test_remove_tree_refuses_a_directory_that_is_not_private(workspace: Workspace, root: Path) -> None:
    target = private_dir(root / "target")
    os.chmod(target, 0o755)
    with pytest.raises(HostError) as info:
        workspace.remove_tree(str(target), identity(workspace, target))
    assert failure_of(info).message == f"{target}: recursive removal target changed identity"
    assert target.exists()


def test_remove_tree_refusals_of_the_reference(workspace: Workspace, root: Path) -> None:
    expected = identity(workspace, root)
    with pytest.raises(HostError) as info:
        workspace.remove_tree("/tmp", expected)
    assert failure_of(info).message == "/tmp: private recursive removal target is too broad"
    with pytest.raises(HostError) as info:
        workspace.remove_tree(str(root / "absent" / "target"), expected)
    failure = failure_of(info)
    assert failure.kind == "identity-changed"
    assert failure.message == f"{root / 'absent' / 'target'}: recursive removal parent is absent for an identity-bound target"
    real = private_dir(root / "real")
    private_dir(real / "target")
    (root / "link").symlink_to(real)
    with pytest.raises(HostError) as info:
        workspace.remove_tree(str(root / "link" / "target"), identity(workspace, real / "target"))
    assert failure_of(info).message == f"{root / 'link' / 'target'}: directory path no longer matches its validated identity"
    assert (real / "target").exists()
    # A symbolic link at the target's place is not the directory.
    (root / "target-link").symlink_to(real / "target")
    with pytest.raises(HostError) as info:
        workspace.remove_tree(str(root / "target-link"), identity(workspace, real / "target"))
    assert failure_of(info).message.endswith("recursive removal target changed identity")


CRASHING_REMOVER = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, sys.argv[1])
    sys.path.insert(0, sys.argv[2])
    from proclease._sys import Directory
    from proclease._wit import rec
    from test_workspace import Workspace
    rename = Directory.rename
    def crash(self, source, target_dir, target, replace):
        answer = rename(self, source, target_dir, target, replace)
        if target.startswith(b".io-remove-"):
            os.kill(os.getpid(), signal.SIGKILL)  # the instant after the quarantine rename
        return answer
    Directory.rename = crash
    ws = Workspace(sys.argv[3], [sys.argv[4]])
    ws.remove_tree(sys.argv[5], rec(device=sys.argv[6], inode=sys.argv[7], birthtime_ns=sys.argv[8]))
    """
)


def crash_mid_removal(home: Path, root: Path, target: Path, expected: Any) -> None:
    """Runs a remover in a child process that is SIGKILLed right after it quarantined
    `target`."""
    here = str(Path(__file__).resolve().parent)
    child = subprocess.run(
        [sys.executable, "-c", CRASHING_REMOVER, SRC, here, str(home), str(root), str(target), expected.device, expected.inode, expected.birthtime_ns],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr


def test_a_removal_killed_mid_quarantine_is_completed_by_a_later_call(workspace: Workspace, home: Path, root: Path, tmp_path: Path) -> None:
    target = private_dir(root / "target")
    build_tree(target, private_dir(tmp_path / "outside"))
    expected = identity(workspace, target)
    crash_mid_removal(home, root, target, expected)
    assert not target.exists()
    quarantines = [name for name in os.listdir(root) if name.startswith(".io-remove-")]
    assert len(quarantines) == 1 and QUARANTINE.match(quarantines[0]) is not None, quarantines
    # The remover is dead (the kernel says ESRCH): the quarantine of this identity is finished.
    assert workspace.remove_tree(str(target), expected) is True
    assert os.listdir(root) == []
    assert workspace.remove_tree(str(target), expected) is False


def test_a_quarantine_whose_remover_lives_is_left_alone(workspace: Workspace, root: Path) -> None:
    target = private_dir(root / "target")
    (target / "work").write_text("in progress")
    expected = identity(workspace, target)
    live = subprocess.Popen(["sleep", "60"])
    try:
        quarantine = root / f".io-remove-{live.pid}-{uuid.uuid4()}.quarantine"
        target.rename(quarantine)
        with pytest.raises(HostError) as info:
            workspace.remove_tree(str(target), expected)
        failure = failure_of(info)
        assert failure.kind == "identity-changed"
        assert failure.message == f"{target}: recursive removal quarantine owner is live or cannot be proven dead"
        assert (quarantine / "work").exists()
    finally:
        live.kill()
        live.wait()
    # Now the remover is provably dead.
    assert workspace.remove_tree(str(target), expected) is True
    assert os.listdir(root) == []


def test_a_quarantine_of_another_identity_is_ignored(workspace: Workspace, root: Path) -> None:
    target = private_dir(root / "target")
    expected = identity(workspace, target)
    other = private_dir(root / "other")
    dead = subprocess.Popen(["true"])
    dead.wait()
    other.rename(root / f".io-remove-{dead.pid}-{uuid.uuid4()}.quarantine")
    target.rmdir()
    assert workspace.remove_tree(str(target), expected) is False
    assert len(os.listdir(root)) == 1, "another identity's quarantine stays"


def test_this_process_finishes_its_own_abandoned_quarantine(workspace: Workspace, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = private_dir(root / "target")
    (target / "file").write_text("x")
    expected = identity(workspace, target)

    def failing(self: Directory, name: bytes) -> int:
        return 5  # EIO, as a failing disk reports it

    monkeypatch.setattr(Directory, "unlink", failing)
    with pytest.raises(HostError) as info:
        workspace.remove_tree(str(target), expected)
    failure = failure_of(info)
    assert failure.kind == "io" and failure.errno == "EIO" and failure.operation == "removal"
    assert failure.message == f"{target}: removal failed: Input/output error (os error 5)"
    monkeypatch.undo()
    # Its own pid is alive, but no thread of it is deleting that quarantine any more.
    assert workspace.remove_tree(str(target), expected) is True
    assert os.listdir(root) == []


def test_remove_tree_never_crosses_into_a_mounted_filesystem(workspace: Workspace, root: Path) -> None:
    target = private_dir(root / "target")
    mount_point = private_dir(target / "mnt")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        (mount_point / "other-fs").write_text("keep")
        expected = identity(workspace, target)
        with pytest.raises(HostError) as info:
            workspace.remove_tree(str(target), expected)
        failure = failure_of(info)
        assert failure.kind == "io" and failure.errno == "EXDEV"
        assert "a filesystem is mounted inside the tree: unmount it, then recover again" in failure.message
        quarantine = next(root.glob(".io-remove-*.quarantine"))
        assert (quarantine / "mnt" / "other-fs").read_text() == "keep"
    finally:
        for candidate in [mount_point, *root.glob(".io-remove-*.quarantine/mnt")]:
            subprocess.run(["umount", str(candidate)], capture_output=True)
    # Unmounted, a later call finishes the (own, abandoned) quarantine.
    assert workspace.remove_tree(str(target), expected) is True
    assert os.listdir(root) == []
