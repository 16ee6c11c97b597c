"""The system-call contract as this package implements it (`proclease._sys`, `wit/sys.wit`),
call by call on real directories: the errno each call answers where the protocols depend on one
(a refused no-replace rename or link is how a claim loses; `ELOOP` is how a symbolic link is
refused), and names that are not one directory entry refused with `EINVAL` instead of acting on
another file. `tests/src/portable.rs` is the Rust reference of the same contract.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from proclease._binding import Variant
from proclease._sys import Directory, SysFs
from proclease._wit import HostError


@pytest.fixture
def here(tmp_path: Path) -> Iterator[Directory]:
    os.chmod(tmp_path, 0o700)
    yield SysFs(str(tmp_path), []).state_home()


def refused(call: Callable[[], Any]) -> Any:
    """The error case a call answered."""
    with pytest.raises(HostError) as raised:
        call()
    return raised.value.payload


def test_a_no_replace_rename_or_a_link_onto_an_existing_name_answers_eexist_and_changes_nothing(here: Directory, tmp_path: Path) -> None:
    (tmp_path / "claim").write_bytes(b"mine")
    (tmp_path / "theirs").write_bytes(b"theirs")
    assert here.rename(b"claim", here, b"theirs", False) == errno.EEXIST
    assert here.link(b"claim", here, b"theirs") == errno.EEXIST
    assert (tmp_path / "claim").read_bytes() == b"mine" and (tmp_path / "theirs").read_bytes() == b"theirs"
    assert here.rename(b"claim", here, b"free", False) is None
    assert (tmp_path / "free").read_bytes() == b"mine" and not (tmp_path / "claim").exists()
    assert here.rename(b"free", here, b"theirs", True) is None
    assert (tmp_path / "theirs").read_bytes() == b"mine"
    assert here.link(b"theirs", here, b"second") is None
    assert os.stat(tmp_path / "second").st_ino == os.stat(tmp_path / "theirs").st_ino


def test_symbolic_links_are_refused_with_eloop_never_followed(here: Directory, tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_bytes(b"x")
    (tmp_path / "to-dir").symlink_to(tmp_path / "dir")
    (tmp_path / "to-file").symlink_to(tmp_path / "file")
    assert refused(lambda: here.open_dir(b"to-dir")) == errno.ELOOP
    assert refused(lambda: here.open_file(b"to-file")) == errno.ELOOP
    assert refused(lambda: here.open_dir(b"file")) == errno.ENOTDIR
    assert refused(lambda: here.open_dir(b"absent")) == errno.ENOENT
    link = here.lstat(b"to-dir").stat
    assert link.mode & 0o170000 == 0o120000, "lstat describes the link itself"
    assert here.lstat(b"absent").stat is None


def test_lstat_gives_the_kernels_identity_of_a_file(here: Directory, tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"12345")
    found = here.lstat(b"file").stat
    real = os.lstat(tmp_path / "file")
    assert (found.dev, found.ino, found.size, found.mode, found.uid) == (real.st_dev, real.st_ino, 5, real.st_mode, real.st_uid)
    assert found.mtime == divmod(real.st_mtime_ns, 1_000_000_000)


def test_names_that_are_not_one_entry_answer_einval_and_touch_nothing(here: Directory, tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(b"b")
    for name in (b"a\0b", b"sub/b", b""):
        assert refused(lambda: here.lstat(name)) == errno.EINVAL, name
        assert refused(lambda: here.open_file(name)) == errno.EINVAL, name
        assert here.rename(name, here, b"q", False) == errno.EINVAL, name
        assert here.unlink(name) == errno.EINVAL, name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "sub"] and (tmp_path / "sub" / "b").exists()


def test_created_files_and_directories_are_private_and_never_replace_anything(here: Directory, tmp_path: Path) -> None:
    created = here.create_file(b"new")
    assert created.write_all(b"hello") is None and created.sync() is None
    assert (tmp_path / "new").read_bytes() == b"hello" and os.stat(tmp_path / "new").st_mode & 0o777 == 0o600
    assert refused(lambda: here.create_file(b"new")) == errno.EEXIST
    made = here.make_dir(b"dir")
    assert os.stat(tmp_path / "dir").st_mode & 0o777 == 0o700 and made.stat().ino == os.stat(tmp_path / "dir").st_ino
    assert refused(lambda: here.make_dir(b"dir")) == errno.EEXIST
    assert here.unlink(b"dir") == errno.EISDIR
    (tmp_path / "dir" / "inside").write_bytes(b"")
    assert here.remove_dir(b"dir") == errno.ENOTEMPTY
    reader = here.open_file(b"new")
    assert reader.read_up_to(3, 5) == b"hel"


def test_a_failed_call_answers_its_errno_instead_of_success(here: Directory, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"kept")
    reader = here.open_file(b"f")  # opened for reading: a write fails
    assert reader.write_all(b"x") == errno.EBADF
    assert reader.write_at(b"x", 0) == errno.EBADF
    assert (tmp_path / "f").read_bytes() == b"kept"


def test_listings_are_bounded_and_filtered_by_prefix(here: Directory, tmp_path: Path) -> None:
    for name in ("claim-1", "claim-2", "claim-3", "other"):
        (tmp_path / name).write_bytes(b"")
    assert sorted(here.read_names(b"claim-", 3)) == [b"claim-1", b"claim-2", b"claim-3"]
    assert refused(lambda: here.read_names(b"claim-", 2)) == Variant("too-many", None)
    assert len(here.first_names(2)) == 2


def test_a_kernel_lock_is_exclusive_until_its_holder_drops_it(here: Directory) -> None:
    first = here.try_lock(b"lock")
    assert first.tag == "taken"
    assert here.try_lock(b"lock") == Variant("held", None)
    first.payload.release()
    again = here.try_lock(b"lock")
    assert again.tag == "taken"
    again.payload.release()


def test_a_lock_keeps_its_holders_note_for_the_next_holder(here: Directory, tmp_path: Path) -> None:
    first = here.try_lock(b"lock").payload
    assert first.noted(36) == b"", "a new lock file notes nothing"
    assert first.note(b"3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d") is None
    assert first.note(b"0123") is None  # overwrites in place, from the start
    first.release()
    second = here.try_lock(b"lock").payload
    assert second.noted(36) == b"01239a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d"
    assert second.noted(4) == b"0123"
    second.release()
    assert (tmp_path / "lock").stat().st_mode & 0o777 == 0o600
    directory = here.try_lock_directory().payload
    assert refused(lambda: directory.noted(36)) == errno.EISDIR
    directory.release()


def test_a_stopping_signal_ends_the_waits_of_its_own_thread_only() -> None:
    """`stop_waits` (what `run` calls at Ctrl-C before its command starts) answers no time left
    to the thread that stopped, never to another thread of the process (a library user's
    worker keeps its whole bound), and is lifted by `stop_waits(None)`."""
    import threading
    import time

    from proclease._sys import SysKernel

    kernel = SysKernel(lock_timeout=5.0)
    kernel.stop_waits(0.0)
    assert kernel.lock_wait_ns() == 0
    begun = time.monotonic()
    kernel.pause(30_000_000_000)
    assert time.monotonic() - begun < 25, "a pause of the stopped thread ends at the stop"
    elsewhere = []
    worker = threading.Thread(target=lambda: elsewhere.append(kernel.lock_wait_ns()))
    worker.start()
    worker.join()
    assert elsewhere == [5_000_000_000]
    kernel.stop_waits(None)
    assert kernel.lock_wait_ns() == 5_000_000_000
