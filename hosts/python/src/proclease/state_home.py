"""The state home (spec §3.1, in its spirit; `host/src/imports/state_store/home.rs`): validated,
created or claimed before the portable artifact is granted it, as the native binary does, and the
kernel-lock files this host takes in it (`.proclease/locks/`).

Everything else the state home holds — records and their compare-and-swap, the reference's
mutation claims, the collection recovery, the plugin catalog and its lock — is the portable
artifact's (`proclease-portable.wasm`: `guest/protocols`, the native binary's code), which this
host grants the state home's descriptor (`_sys.SysFs`).
"""

from __future__ import annotations

import errno as _errno
import os
import unicodedata
import uuid
from pathlib import PurePosixPath
from typing import List, Optional, Tuple

from . import _fsops
from ._errors import Error
from ._wit import os_message

#: proclease's own directory in the state home, which no store path can name.
INTERNAL = ".proclease"

#: The state directory names of the reference (§3.1, newer list), the only first segments a store
#: path may have.
STATE_DIRECTORIES = (
    "adapter-generations",
    "adapters",
    "auth",
    "browser-snapshots",
    "captures",
    "control",
    "derivations",
    "idempotency",
    "linked-device-stores",
    "menubar",
    "messaging",
    "omni-read-projections",
    "operation-permissions",
    "plan-assets",
    "plans",
    "provider-plugin-state",
    "provider-plugins",
    "read-projection-control",
    "read-projections",
    "recovery",
    "repair-signals",
    "run-journals",
    "runs",
    "session-secrets",
    "tools",
)


def rust_debug(text: str) -> str:
    """`format!("{text:?}")` of a Rust `&str`: double quotes, `\\t \\r \\n \\\\ \\" \\0`
    escaped, other non-printable characters as `\\u{hex}`. (Python's `isprintable` and
    combining classes stand in for Rust's printable and grapheme-extend tables.)"""
    out = ['"']
    for c in text:
        simple = {"\t": "\\t", "\r": "\\r", "\n": "\\n", "\\": "\\\\", '"': '\\"', "\0": "\\0"}.get(c)
        if simple is not None:
            out.append(simple)
        elif (not c.isprintable() and c != " ") or unicodedata.category(c) in ("Mn", "Me"):
            out.append(f"\\u{{{ord(c):x}}}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)



# ================================================================================================
# The state home (state_store/home.rs; spec §3.1, in its spirit)
#
# Validation before anything is read or written:
# * never a shared root: `/`, the home directory or its parent, the temporary directory, the
#   working directory, `~/{Desktop,Documents,Downloads,Library,.cache,.config,.local}`,
#   `~/.local/share`, `$XDG_DATA_HOME` itself;
# * the home itself is never a symbolic link; it must be a real directory owned by the user;
# * absent: created (mode 0700) from an existing ancestor that is a real, owned directory not
#   writable by group or others;
# * present and unclaimed: empty, or holding only the reference's state directory names; then
#   made mode 0700 and claimed with the reference's marker `.io-state.json`;
# * a claimed home must already be mode 0700.
# ================================================================================================

#: The reference's ownership marker (§3.1) and its exact content.
MARKER = ".io-state.json"
MARKER_CONTENT = '{"kind":"io-state","schemaVersion":1}\n'


class StateHomeError(Error):
    """Why a state home cannot be used (`StateHomeError`); the message names the path and what
    to do. `kind`: `unconfigured`, `shared-root`, `unsafe` or `io`."""

    def __init__(self, kind: str, message: str, path: Optional[str] = None, error: Optional[OSError] = None) -> None:
        super().__init__(message, kind=kind)
        self.__cause__ = error
        self.path = path
        self.error = error


def _home_unsafe(path: str, reason: str) -> StateHomeError:
    return StateHomeError("unsafe", f"{path}: {reason}", path)


def _home_io(path: str, operation: str, error: OSError) -> StateHomeError:
    return StateHomeError("io", f"{path}: {operation} failed: {os_message(error)}", path, error)


def lexical_absolute(path: str) -> str:
    """`path` made absolute against the working directory and lexically normalised (`.`
    dropped, `..` applied lexically; symbolic links are not resolved; `home::lexical_absolute`)."""
    joined = path if path.startswith("/") else os.path.join(os.getcwd(), path)
    out: List[str] = []
    for part in joined.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out:
                out.pop()
            continue
        out.append(part)
    return "/" + "/".join(out)


def _absolute(path: str) -> str:
    try:
        return lexical_absolute(path)
    except OSError as e:
        raise _home_io(path, "reading the working directory", e) from None


def _physical(path: str) -> str:
    """The physical path: the deepest existing *ancestor* resolved with realpath, the rest
    appended. The final component itself is never resolved (a symbolic link there is refused)."""
    parent, name = os.path.split(path)
    if name == "":
        return path
    existing = parent
    missing: List[str] = []
    while True:
        try:
            os.lstat(existing)
            break
        except OSError:
            last = os.path.basename(existing)
            if not last:
                break
            missing.append(last)
            existing = os.path.dirname(existing)
    try:
        resolved = os.path.realpath(existing, strict=True)
    except OSError as e:
        raise _home_io(existing, "realpath", e) from None
    if not os.path.isdir(resolved):
        raise _home_unsafe(existing, "a state home ancestor is not a directory")
    for part in reversed(missing):
        resolved = os.path.join(resolved, part)
    return os.path.join(resolved, name)


def _is_shared_root(path: str) -> bool:
    def canonical(p: str) -> str:
        try:
            return os.path.realpath(p, strict=True)
        except OSError:
            return p

    # std::env::temp_dir(): $TMPDIR, else /tmp.
    shared = [PurePosixPath("/"), PurePosixPath(canonical(os.environ.get("TMPDIR", "/tmp")))]
    try:
        shared.append(PurePosixPath(canonical(os.getcwd())))
    except OSError:
        pass
    home_var = os.environ.get("HOME")
    if home_var:
        home = PurePosixPath(canonical(home_var))
        if home != home.parent:
            shared.append(home.parent)
        for child in ("Desktop", "Documents", "Downloads", "Library", ".cache", ".config", ".local", ".local/share"):
            shared.append(home / child)
        shared.append(home)
    data = os.environ.get("XDG_DATA_HOME")
    if data:
        shared.append(PurePosixPath(canonical(data)))
    return PurePosixPath(path) in shared


def _is_marker_stage(name: str) -> bool:
    """`^\\.io-state\\.stage-\\d+-[0-9a-f-]{36}\\.json$`: a marker being published (§3.1)."""
    if not (name.startswith(".io-state.stage-") and name.endswith(".json")):
        return False
    pid, sep, rest = name[len(".io-state.stage-") : -len(".json")].partition("-")
    return bool(sep) and (pid.isascii() and pid.isdigit()) and len(rest) == 36 and all(c in "0123456789abcdef-" for c in rest)


def _validate_present(path: str, st: os.stat_result) -> None:
    if _fsops.file_kind(st.st_mode) == _fsops.S_IFLNK:
        raise _home_unsafe(path, "the state home is a symbolic link; point proclease at the real directory")
    if _fsops.file_kind(st.st_mode) != _fsops.S_IFDIR:
        raise _home_unsafe(path, "the state home is not a directory")
    if st.st_uid != _fsops.euid():
        raise _home_unsafe(path, "the state home must be a directory owned by you")
    mode = st.st_mode & 0o777
    try:
        os.lstat(os.path.join(path, MARKER))
        claimed = True
    except OSError:
        claimed = False
    if claimed:
        if mode != 0o700:
            raise _home_unsafe(path, f"the state home must be private (mode 0700, is {mode:o}); run chmod 700 on it")
        return
    try:
        entries = [os.fsdecode(name) for name in os.listdir(path)]
    except OSError as e:
        raise _home_io(path, "list", e) from None
    # Another process may be claiming the same home right now: its marker stage and marker, and
    # the store's own directory, are not foreign (§3.1 allows interrupted marker stages).
    foreign = [n for n in entries if n not in STATE_DIRECTORIES and n not in (".proclease", MARKER) and not _is_marker_stage(n)]
    if foreign:
        shown = foreign[0].encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        raise _home_unsafe(path, f"is not empty and not a state home (it holds {rust_debug(shown)}); choose a dedicated directory")
    if not entries and mode & 0o022 != 0:
        raise _home_unsafe(path, f"an unclaimed state home must not be group/world-writable (mode {mode:o}); use a private directory")
    if entries and mode != 0o700:
        raise _home_unsafe(path, f"the state home must be private (mode 0700, is {mode:o}); run chmod 700 on it")
    try:
        os.chmod(path, 0o700)
    except OSError as e:
        raise _home_io(path, "chmod 700", e) from None


def _create_dir_all(path: str) -> None:
    """`DirBuilder::new().recursive(true).mode(0o700).create(path)`: every missing directory
    created with mode 0700 (less the umask); one that appears meanwhile is fine."""
    try:
        os.mkdir(path, 0o700)
        return
    except FileNotFoundError:
        parent = os.path.dirname(path)
        if parent == path:
            raise
        _create_dir_all(parent)
    except OSError:
        if os.path.isdir(path):
            return
        raise
    try:
        os.mkdir(path, 0o700)
    except OSError:
        if not os.path.isdir(path):
            raise


def _create(path: str) -> None:
    """Creates the state home and any missing ancestors (0700) from the nearest existing
    ancestor, which must be a real, owned directory that group and others cannot write."""
    anchor = path
    while True:
        try:
            os.lstat(anchor)
            break
        except OSError:
            parent = os.path.dirname(anchor)
            if parent == anchor:
                raise _home_unsafe(path, "has no existing ancestor to create it in") from None
            anchor = parent
    try:
        st = os.lstat(anchor)
    except OSError as e:
        raise _home_io(anchor, "lstat", e) from None
    owned = st.st_uid == _fsops.euid()
    if _fsops.file_kind(st.st_mode) != _fsops.S_IFDIR or not owned or st.st_mode & 0o022 != 0:
        raise _home_unsafe(
            anchor,
            f"cannot create the state home {path} here: the nearest existing ancestor must be a real directory owned by you and not writable by group or others",
        )
    try:
        _create_dir_all(path)
    except OSError as e:
        raise _home_io(path, "mkdir", e) from None
    try:
        os.chmod(path, 0o700)
    except OSError as e:
        raise _home_io(path, "chmod 700", e) from None
    try:
        fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def _claim(dir_fd: int, path: str) -> None:
    """Publishes the reference's ownership marker if absent (temp, fsync, link, fsync), and
    checks an existing one is exactly it."""
    marker = os.path.join(path, MARKER)
    try:
        fd = os.open(MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        stage = f".io-state.stage-{os.getpid()}-{uuid.uuid4()}.json"
        try:
            try:
                _fsops.write_new_file(dir_fd, stage, MARKER_CONTENT.encode())
                try:
                    os.link(stage, MARKER, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
                except FileExistsError:
                    pass
            finally:
                try:
                    os.unlink(stage, dir_fd=dir_fd)
                except OSError:
                    pass
        except OSError as e:
            raise _home_io(marker, "publishing the state home marker", e) from None
        try:
            os.fsync(dir_fd)
        except OSError as e:
            raise _home_io(path, "fsync", e) from None
        return
    except OSError as e:
        if e.errno == _errno.ELOOP:
            raise _home_unsafe(marker, "the state home marker is a symbolic link; remove it") from None
        raise _home_io(marker, "open", e) from None
    try:
        try:
            st = os.fstat(fd)
        except OSError as e:
            raise _home_io(marker, "fstat", e) from None
        try:
            text: Optional[str] = os.read(fd, 257).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            text = None
    finally:
        os.close(fd)
    private = st.st_mode & 0o170077 == 0o100000 and st.st_uid == _fsops.euid()
    if text is None or not private or text != MARKER_CONTENT:
        raise _home_unsafe(marker, "the state home marker is not the expected private file; inspect it before going on")


def select_state_home(flag: Optional[str] = None) -> Tuple[str, str]:
    """Chooses the state home path (`StateHome::select`): `flag` > `PROCLEASE_STATE_HOME` >
    `GHOSTGET_STATE_HOME` > `$XDG_DATA_HOME/proclease` > `~/.local/share/proclease` (blank
    variables are ignored); the absolute path and where it came from (`flag`,
    `proclease-variable`, `ghostget-variable`, `default`)."""

    def var(name: str) -> Optional[str]:
        value = os.environ.get(name)
        return value if value is not None and value.strip() != "" else None

    if flag is not None:
        path, source = flag, "flag"
    elif var("PROCLEASE_STATE_HOME"):
        path, source = var("PROCLEASE_STATE_HOME"), "proclease-variable"
    elif var("GHOSTGET_STATE_HOME"):
        path, source = var("GHOSTGET_STATE_HOME"), "ghostget-variable"
    elif var("XDG_DATA_HOME"):
        path, source = os.path.join(var("XDG_DATA_HOME"), "proclease"), "default"
    else:
        home = var("HOME")
        if home is None:
            raise StateHomeError("unconfigured", "no state home: set --state-home or PROCLEASE_STATE_HOME to a dedicated directory")
        path, source = os.path.join(home, ".local/share/proclease"), "default"
    assert path is not None
    return _absolute(path), source


class StateHome:
    """An opened, validated state home (`home::StateHome`): its physical path (for messages)
    and an `O_NOFOLLOW` descriptor whose identity was checked against the path; every store path
    is relative to the descriptor."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def open(cls, path: str) -> "StateHome":
        """Validates, creates or claims (see above) and opens the state home at `path`
        (`StateHome::open`). Raises `StateHomeError`."""
        path = _physical(_absolute(path))
        if _is_shared_root(path):
            raise StateHomeError(
                "shared-root",
                f"{path}: a state home must be a dedicated child directory, not a filesystem, home, temporary, working or shared data root; choose e.g. ~/.local/share/proclease",
                path,
            )
        try:
            st: Optional[os.stat_result] = os.lstat(path)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise _home_io(path, "lstat", e) from None
        if st is not None:
            _validate_present(path, st)
        else:
            _create(path)
        try:
            fd = os.open(path, _fsops.DIR_FLAGS)
        except OSError as e:
            if e.errno == _errno.ELOOP:
                raise _home_unsafe(path, "the state home is a symbolic link; point proclease at the real directory") from None
            raise _home_io(path, "open", e) from None
        try:
            try:
                opened = os.fstat(fd)
            except OSError as e:
                raise _home_io(path, "fstat", e) from None
            try:
                now = os.lstat(path)
            except OSError as e:
                raise _home_io(path, "lstat", e) from None
            if opened.st_dev != now.st_dev or opened.st_ino != now.st_ino:
                raise _home_unsafe(path, "the state home changed while it was opened; retry")
            _claim(fd, path)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1




def _private_dir(parent_fd: int, name: str, label: str) -> int:
    """Opens (creating 0700 if absent) a private directory of proclease's own in the state
    home, never through a symbolic link; `label` names it in errors. Raises `StateHomeError`."""
    try:
        _fsops.create_private_dir(parent_fd, name)
    except OSError as e:
        raise _home_io(label, "mkdir", e) from None
    try:
        fd = _fsops.open_dir(parent_fd, name)
    except OSError as e:
        if e.errno == _errno.ELOOP:
            raise _home_unsafe(label, "unsafe: is a symbolic link") from None
        raise _home_io(label, "open", e) from None
    try:
        st = os.fstat(fd)
    except OSError as e:
        os.close(fd)
        raise _home_io(label, "fstat", e) from None
    if st.st_uid != _fsops.euid() or st.st_mode & 0o777 != 0o700:
        os.close(fd)
        raise _home_unsafe(label, "unsafe: must be owned by you with mode 0700")
    return fd


class GrantedStateHome:
    """A state home opened for the portable artifact (`StateHome.open`: validated, created or
    claimed), with its lock directory `.proclease/locks/` made (0700) if absent, where the
    artifact's protocols take the state home's kernel locks.

    Raises `StateHomeError` when either cannot be used."""

    def __init__(self, home: str) -> None:
        self.home = StateHome.open(home)
        try:
            internal = _private_dir(self.home.fd, INTERNAL, INTERNAL)
            try:
                os.close(_private_dir(internal, "locks", f"{INTERNAL}/locks"))
            finally:
                os.close(internal)
        except BaseException:
            self.close()
            raise

    @property
    def home_path(self) -> str:
        """The state home's physical path (for messages; all access goes through descriptors)."""
        return self.home.path

    def close(self) -> None:
        """Closes the state home's descriptor."""
        self.home.close()
