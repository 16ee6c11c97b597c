//! The state home: the one private directory all lease records live under (spec §3.1, in its
//! spirit).
//!
//! Selection: `--state-home` > `PROCLEASE_STATE_HOME` > `GHOSTGET_STATE_HOME` >
//! `$XDG_DATA_HOME/proclease` > `~/.local/share/proclease` (blank variables are ignored;
//! relative paths resolve against the working directory; symbolic links in *ancestors* are
//! resolved as the reference's realpath does).
//!
//! Validation before anything is read or written:
//! * never a shared root: `/`, the home directory or its parent, the temporary directory, the
//!   working directory, `~/{Desktop,Documents,Downloads,Library,.cache,.config,.local}`,
//!   `~/.local/share`, `$XDG_DATA_HOME` itself;
//! * the home itself is never a symbolic link; it must be a real directory owned by the user;
//! * absent: created (mode 0700) from an existing ancestor that is a real, owned directory not
//!   writable by group or others;
//! * present and unclaimed: empty, or holding only the reference's state directory names;
//!   then made mode 0700 and claimed with the reference's marker `.io-state.json`
//!   (`{"kind":"io-state","schemaVersion":1}` + LF), so ghostget accepts it too;
//! * a claimed home must already be mode 0700.
//!
//! It is opened once, as a cap-std [`Dir`] through an `O_NOFOLLOW` descriptor whose identity is
//! checked against the validated path; every store path is relative to it.

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};

use cap_std::fs::Dir;
use rustix::fs::{Mode, OFlags};

/// The reference's ownership marker (§3.1) and its exact content.
pub const MARKER: &str = ".io-state.json";
/// The exact content of [`MARKER`].
pub const MARKER_CONTENT: &str = "{\"kind\":\"io-state\",\"schemaVersion\":1}\n";

/// Why a state home cannot be used. Every message names the path and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateHomeError {
    /// No state home could be chosen (no home directory and nothing configured).
    #[error("no state home: set --state-home or PROCLEASE_STATE_HOME to a dedicated directory")]
    Unconfigured,
    /// The path is a shared root that must never hold lease state.
    #[error("{0}: a state home must be a dedicated child directory, not a filesystem, home, temporary, working or shared data root; choose e.g. ~/.local/share/proclease")]
    SharedRoot(PathBuf),
    /// The path (or its creation anchor) is not safe.
    #[error("{path}: {reason}")]
    Unsafe {
        /// The path.
        path: PathBuf,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// An I/O error.
    #[error("{path}: {operation} failed: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What was being done.
        operation: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

fn unsafe_(path: &Path, reason: impl Into<String>) -> StateHomeError {
    StateHomeError::Unsafe { path: path.to_path_buf(), reason: reason.into() }
}

fn io<'a>(path: &'a Path, operation: &'static str) -> impl FnOnce(std::io::Error) -> StateHomeError + 'a {
    move |source| StateHomeError::Io { path: path.to_path_buf(), operation, source }
}

/// Where the state home path came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `--state-home`.
    Flag,
    /// `PROCLEASE_STATE_HOME`.
    ProcleaseVariable,
    /// `GHOSTGET_STATE_HOME`.
    GhostgetVariable,
    /// `$XDG_DATA_HOME/proclease` or `~/.local/share/proclease`.
    Default,
}

/// An opened, validated state home.
#[derive(Debug)]
pub struct StateHome {
    path: PathBuf,
    dir: Dir,
}

impl StateHome {
    /// Chooses the state home path (see the module docs for the order) from the flag and the
    /// process environment.
    pub fn select(flag: Option<&Path>) -> Result<(PathBuf, Source), StateHomeError> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.to_string_lossy().trim().is_empty()).map(PathBuf::from);
        let (path, source) = if let Some(flag) = flag {
            (flag.to_path_buf(), Source::Flag)
        } else if let Some(path) = var("PROCLEASE_STATE_HOME") {
            (path, Source::ProcleaseVariable)
        } else if let Some(path) = var("GHOSTGET_STATE_HOME") {
            (path, Source::GhostgetVariable)
        } else if let Some(data) = var("XDG_DATA_HOME") {
            (data.join("proclease"), Source::Default)
        } else {
            let home = var("HOME").ok_or(StateHomeError::Unconfigured)?;
            (home.join(".local/share/proclease"), Source::Default)
        };
        Ok((absolute(&path)?, source))
    }

    /// Validates, creates or claims (module docs) and opens the state home at `path`.
    pub fn open(path: &Path) -> Result<StateHome, StateHomeError> {
        let path = physical(&absolute(path)?)?;
        if is_shared_root(&path) {
            return Err(StateHomeError::SharedRoot(path));
        }
        match std::fs::symlink_metadata(&path) {
            Ok(meta) => validate_present(&path, &meta)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(&path)?,
            Err(e) => return Err(io(&path, "lstat")(e)),
        }
        let fd = rustix::fs::open(&path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).map_err(|e| match e {
            rustix::io::Errno::LOOP => unsafe_(&path, "the state home is a symbolic link; point proclease at the real directory"),
            e => io(&path, "open")(e.into()),
        })?;
        let opened = rustix::fs::fstat(&fd).map_err(|e| io(&path, "fstat")(e.into()))?;
        let meta = std::fs::symlink_metadata(&path).map_err(io(&path, "lstat"))?;
        if opened.st_dev != meta.dev() || opened.st_ino != meta.ino() {
            return Err(unsafe_(&path, "the state home changed while it was opened; retry"));
        }
        claim(&fd, &path)?;
        Ok(StateHome { dir: Dir::from_std_file(std::fs::File::from(fd)), path })
    }

    /// The state home's absolute path (for messages; all access goes through [`Self::dir`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The state home as a capability.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }
}

/// `path` made absolute against the working directory and lexically normalised (`.` dropped,
/// `..` applied lexically; symbolic links are not resolved).
///
/// Errors: the working directory cannot be read (for a relative path).
pub fn lexical_absolute(path: &Path) -> std::io::Result<PathBuf> {
    let joined = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir()?.join(path) };
    let mut out = PathBuf::from("/");
    for component in joined.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(out)
}

fn absolute(path: &Path) -> Result<PathBuf, StateHomeError> {
    lexical_absolute(path).map_err(io(path, "reading the working directory"))
}

/// The physical path: the deepest existing *ancestor* resolved with realpath, the rest
/// appended. The final component itself is never resolved (a symbolic link there is refused).
fn physical(path: &Path) -> Result<PathBuf, StateHomeError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(path.to_path_buf());
    };
    let mut existing = parent.to_path_buf();
    let mut missing = Vec::new();
    while std::fs::symlink_metadata(&existing).is_err() {
        let Some(last) = existing.file_name().map(|n| n.to_os_string()) else { break };
        missing.push(last);
        existing.pop();
    }
    let mut resolved = std::fs::canonicalize(&existing).map_err(io(&existing, "realpath"))?;
    if !resolved.is_dir() {
        return Err(unsafe_(&existing, "a state home ancestor is not a directory"));
    }
    for part in missing.into_iter().rev() {
        resolved.push(part);
    }
    resolved.push(name);
    Ok(resolved)
}

fn is_shared_root(path: &Path) -> bool {
    let canonical = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
    let mut shared = vec![PathBuf::from("/"), canonical(std::env::temp_dir())];
    if let Ok(cwd) = std::env::current_dir() {
        shared.push(canonical(cwd));
    }
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from) {
        let home = canonical(home);
        if let Some(parent) = home.parent() {
            shared.push(parent.to_path_buf());
        }
        for child in ["Desktop", "Documents", "Downloads", "Library", ".cache", ".config", ".local", ".local/share"] {
            shared.push(home.join(child));
        }
        shared.push(home);
    }
    if let Some(data) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        shared.push(canonical(PathBuf::from(data)));
    }
    shared.iter().any(|root| root == path)
}

fn validate_present(path: &Path, meta: &std::fs::Metadata) -> Result<(), StateHomeError> {
    if meta.file_type().is_symlink() {
        return Err(unsafe_(path, "the state home is a symbolic link; point proclease at the real directory"));
    }
    if !meta.is_dir() {
        return Err(unsafe_(path, "the state home is not a directory"));
    }
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(unsafe_(path, "the state home must be a directory owned by you"));
    }
    let mode = meta.mode() & 0o777;
    let claimed = std::fs::symlink_metadata(path.join(MARKER)).is_ok();
    if claimed {
        if mode != 0o700 {
            return Err(unsafe_(path, format!("the state home must be private (mode 0700, is {mode:o}); run chmod 700 on it")));
        }
        return Ok(());
    }
    let entries: Vec<String> = std::fs::read_dir(path).map_err(io(path, "list"))?.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned())).collect();
    // Another process may be claiming the same home right now: its marker stage and marker,
    // and the store's own directory, are not foreign (§3.1 allows interrupted marker stages).
    let foreign: Vec<&String> = entries
        .iter()
        .filter(|name| !super::path::STATE_DIRECTORIES.contains(&name.as_str()) && !matches!(name.as_str(), ".proclease" | MARKER) && !is_marker_stage(name))
        .collect();
    if !foreign.is_empty() {
        return Err(unsafe_(path, format!("is not empty and not a state home (it holds {:?}); choose a dedicated directory", foreign[0])));
    }
    if entries.is_empty() && mode & 0o022 != 0 {
        return Err(unsafe_(path, format!("an unclaimed state home must not be group/world-writable (mode {mode:o}); use a private directory")));
    }
    if !entries.is_empty() && mode != 0o700 {
        return Err(unsafe_(path, format!("the state home must be private (mode 0700, is {mode:o}); run chmod 700 on it")));
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(io(path, "chmod 700"))
}

/// `^\.io-state\.stage-\d+-[0-9a-f-]{36}\.json$`: a marker being published (§3.1).
fn is_marker_stage(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(".io-state.stage-").and_then(|r| r.strip_suffix(".json")) else { return false };
    let Some((pid, id)) = rest.split_once('-') else { return false };
    !pid.is_empty() && pid.bytes().all(|c| c.is_ascii_digit()) && id.len() == 36 && id.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c) || c == b'-')
}

/// Creates the state home and any missing ancestors (0700) from the nearest existing ancestor,
/// which must be a real, owned directory that group and others cannot write.
fn create(path: &Path) -> Result<(), StateHomeError> {
    let mut anchor = path.to_path_buf();
    while std::fs::symlink_metadata(&anchor).is_err() {
        if !anchor.pop() {
            return Err(unsafe_(path, "has no existing ancestor to create it in"));
        }
    }
    let meta = std::fs::symlink_metadata(&anchor).map_err(io(&anchor, "lstat"))?;
    let owned = meta.uid() == rustix::process::geteuid().as_raw();
    if !meta.is_dir() || !owned || meta.mode() & 0o022 != 0 {
        return Err(unsafe_(
            &anchor,
            format!(
                "cannot create the state home {} here: the nearest existing ancestor must be a real directory owned by you and not writable by group or others",
                path.display()
            ),
        ));
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(path).map_err(io(path, "mkdir"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(io(path, "chmod 700"))?;
    if let Some(parent) = path.parent() {
        let _ = std::fs::File::open(parent).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// Publishes the reference's ownership marker if absent (temp, fsync, link, fsync), and checks
/// an existing one is exactly it.
fn claim(dir: &std::os::fd::OwnedFd, path: &Path) -> Result<(), StateHomeError> {
    use std::io::Read as _;
    let marker = path.join(MARKER);
    match rustix::fs::openat(dir, MARKER, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => {
            let stat = rustix::fs::fstat(&fd).map_err(|e| io(&marker, "fstat")(e.into()))?;
            let mut text = String::new();
            let read = std::fs::File::from(fd).take(257).read_to_string(&mut text);
            let private = stat.st_mode & 0o170077 == 0o100000 && stat.st_uid == rustix::process::geteuid().as_raw();
            if read.is_err() || !private || text != MARKER_CONTENT {
                return Err(unsafe_(&marker, "the state home marker is not the expected private file; inspect it before going on"));
            }
            Ok(())
        }
        Err(rustix::io::Errno::NOENT) => {
            let stage = format!(".io-state.stage-{}-{}.json", std::process::id(), uuid::Uuid::new_v4());
            let written = crate::fsops::write_new_file(dir, &stage, MARKER_CONTENT.as_bytes());
            let linked = written.and_then(|()| {
                rustix::fs::linkat(dir, &stage, dir, MARKER, rustix::fs::AtFlags::empty()).or_else(|e| if e == rustix::io::Errno::EXIST { Ok(()) } else { Err(e.into()) })
            });
            let _ = rustix::fs::unlinkat(dir, &stage, rustix::fs::AtFlags::empty());
            linked.map_err(io(&marker, "publishing the state home marker"))?;
            rustix::fs::fsync(dir).map_err(|e| io(path, "fsync")(e.into()))
        }
        Err(rustix::io::Errno::LOOP) => Err(unsafe_(&marker, "the state home marker is a symbolic link; remove it")),
        Err(e) => Err(io(&marker, "open")(e.into())),
    }
}
