//! What a path under the granted roots is, the publication of a stage, and why a directory is
//! not one a lease can hold — the workspace's file-system facts the library's facade asks for
//! (issue #29: `host/src/api/` does no file-system IO of its own). Every path is walked from its
//! granted root, component by component, without following a symbolic link.

use crate::prelude::*;

use super::protocol::{Walk, WorkspaceProtocol, walk};
use super::{WorkspaceError, io_error};
use crate::seam::{Errno, Fs, Kernel, S_IFDIR, S_IFLNK};

/// What is at a workspace path: the component's own type (WIT `workspace.path-kind`).
pub use proclease_core::effects::PathKind;

impl<F: Fs, K: Kernel> WorkspaceProtocol<F, K> {
    /// What is at `path`, never following a symbolic link.
    ///
    /// Errors: `path` is not absolute and normalised, or not under a granted root; an I/O error.
    pub fn kind(&self, path: &str) -> Result<PathKind, WorkspaceError> {
        let (root, rest) = self.locate(path, true)?;
        let Some((name, parent)) = rest.split_last() else { return Ok(PathKind::Directory) };
        let parent_fd = match walk(self.fs(), &root.dir, parent) {
            Walk::Open(fd) => fd,
            Walk::Absent => return Ok(PathKind::Absent),
            Walk::NotPhysical => return Ok(PathKind::Unreachable),
            Walk::Failed(e) => return Err(io_error(path, "open of an ancestor")(e)),
        };
        Ok(match self.fs().lstat(&parent_fd, *name).map_err(io_error(path, "statx"))? {
            None => PathKind::Absent,
            Some(stat) => match stat.kind() {
                S_IFDIR => PathKind::Directory,
                S_IFLNK => PathKind::SymbolicLink,
                _ => PathKind::Other,
            },
        })
    }

    /// Renames `from` to `to` (two names in the directory `parent`) without ever replacing
    /// what is at `to`, and makes the rename durable (fsync of `parent`). `Ok(false)` when `to`
    /// exists. The publication of a stage (§6A.1 `bundle-stage`).
    ///
    /// Errors: `parent` outside the granted roots or not physically reachable; an I/O error of
    /// the rename or the fsync.
    pub fn rename_new(&self, parent: &str, from: &str, to: &str) -> Result<bool, WorkspaceError> {
        let (root, rest) = self.locate(parent, true)?;
        let parent_fd = match walk(self.fs(), &root.dir, &rest) {
            Walk::Open(fd) => fd,
            Walk::Absent => return Err(io_error(parent, "open")(Errno::NOENT)),
            Walk::NotPhysical => {
                return Err(WorkspaceError::Refused { path: parent.into(), reason: "a path component is a symbolic link or not a directory; give the real path".into() });
            }
            Walk::Failed(e) => return Err(io_error(parent, "open")(e)),
        };
        match self.fs().rename(&parent_fd, from, &parent_fd, to, false) {
            Ok(()) => {}
            Err(Errno::EXIST | Errno::NOTEMPTY) => return Ok(false),
            Err(e) => return Err(WorkspaceError::Io { path: format!("{parent}/{from}"), operation: "rename", source: e.into() }),
        }
        self.fs().sync_dir(&parent_fd).map_err(io_error(parent, "fsync"))?;
        Ok(true)
    }

    /// Says which condition of §6A.4 `dir` or its parent misses, for a lease refused with
    /// `… is not an owned physical directory`: a parent that is not the user's or that group or
    /// others can write (a shared `/tmp`), a symbolic link or non-directory on the way, a
    /// directory that is not the user's or not mode 0700, or a file system without birth times.
    /// Reads only facts; a path outside the granted roots gets the general condition.
    pub fn why_not_physical(&self, dir: &str) -> String {
        let euid = self.fs().euid();
        let shown = dir;
        if let Some(parent) = parent(dir)
            && let Some(facts) = self.inspect(parent).ok().flatten()
            && facts.is_directory
            && (!facts.owned || facts.mode & 0o022 != 0)
        {
            return format!(
                "its parent {} must be a directory you own that group and others cannot write; a shared directory \
                     such as /tmp cannot hold leased directories: use a private one, e.g. mkdir -m 700 /tmp/$USER-jobs",
                parent
            );
        }
        let ancestors: Vec<&str> = core::iter::successors(Some(dir), |path| parent(path)).collect();
        for ancestor in ancestors.into_iter().rev().skip(1) {
            match self.kind(ancestor) {
                Ok(PathKind::SymbolicLink) => {
                    return format!("{ancestor} is a symbolic link: a leased directory must be reached without symbolic links; give the real path");
                }
                Ok(PathKind::Other) => return format!("{ancestor} is not a directory"),
                _ => {}
            }
        }
        let facts = self.inspect(dir).ok().flatten();
        let Some(facts) = facts.filter(|f| f.is_directory) else { return format!("{shown} must be a real directory you own with mode 0700") };
        if !facts.owned {
            let owner = self.owner(dir).map_or_else(|| "another user".to_string(), |uid| format!("uid {uid}"));
            return format!("{shown} belongs to {owner}, not to you (uid {euid}): lease a directory you own");
        }
        if facts.mode != 0o700 {
            return format!("{shown} has mode {:04o}; a leased directory must have mode 0700: chmod 700 {shown}", facts.mode);
        }
        // A directory identity includes its birth time; without it no lease can prove later that
        // the directory is the one it leased.
        if facts.identity.birthtime_ns == "0" {
            return format!(
                "the filesystem holding {shown} does not record birth times (statx btime), which a lease needs to prove the directory \
                 is the one it leased: use a directory on ext4, xfs, btrfs or tmpfs"
            );
        }
        format!("{shown} must be a real directory you own with mode 0700, reached without symbolic links")
    }

    /// The owner (uid) of what is at `path`, when it can be reached physically.
    fn owner(&self, path: &str) -> Option<u32> {
        let (root, rest) = self.locate(path, true).ok()?;
        let Some((name, parent)) = rest.split_last() else { return self.fs().stat_dir(&root.dir).ok().map(|s| s.uid) };
        let Walk::Open(parent_fd) = walk(self.fs(), &root.dir, parent) else { return None };
        self.fs().lstat(&parent_fd, *name).ok()?.map(|s| s.uid)
    }
}

/// The parent of a path, as `Path::parent` gives it for an absolute one (`/a` → `/`, `/` →
/// none); a trailing `/` is not a component.
fn parent(path: &str) -> Option<&str> {
    let (head, _) = path.trim_end_matches('/').rsplit_once('/')?;
    Some(if head.is_empty() { "/" } else { head })
}

#[cfg(test)]
mod tests {
    /// As `Path::parent` answers for absolute paths (the std type this replaced).
    #[test]
    fn parent_is_what_path_parent_gives() {
        for path in ["/", "/a", "/a/b", "/a/b/", "/home/u/jobs/j1"] {
            let std = std::path::Path::new(path).parent().map(|p| p.to_str().unwrap_or_default());
            assert_eq!(super::parent(path), std, "{path}");
        }
    }
}
