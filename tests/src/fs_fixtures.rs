//! Fixtures on real files for the tests: a small tmpfs to mount and make read-only, and a
//! tree's contents to compare before and after.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of `size` mounted on a fresh directory, unmounted when dropped.
pub struct Tmpfs {
    _dir: tempfile::TempDir,
    /// Where it is mounted (resolved).
    pub path: PathBuf,
}

impl Tmpfs {
    /// Mounts one (`size` as `mount -o size=` takes it); `None` where no tmpfs can be mounted
    /// (no `CAP_SYS_ADMIN`), after saying so, unless `PROCLEASE_REQUIRE_MOUNTS` makes that a
    /// failure.
    pub fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = std::fs::canonicalize(dir.path()).expect("realpath").join("mnt");
        std::fs::create_dir(&path).expect("mkdir");
        Self::mount_at(&path, size).then_some(Tmpfs { _dir: dir, path })
    }

    /// Mounts a tmpfs of `size` on `path` (left mounted: the caller unmounts it); `false` as
    /// [`Tmpfs::mount`] says `None`.
    pub fn mount_at(path: &Path, size: &str) -> bool {
        let status = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size},mode=700"), "tmpfs"]).arg(path).status();
        if status.is_ok_and(|s| s.success()) {
            return true;
        }
        assert!(std::env::var_os("PROCLEASE_REQUIRE_MOUNTS").is_none(), "cannot mount a tmpfs (needs CAP_SYS_ADMIN) and PROCLEASE_REQUIRE_MOUNTS is set");
        eprintln!("skipped: cannot mount a tmpfs here (needs CAP_SYS_ADMIN)");
        false
    }

    /// Remounts with `option`, retrying for up to 5 s: `remount,ro` is refused ("mount point is
    /// busy") while any process holds a file of it open for writing, and a child another test
    /// thread forks in the middle of a write holds a copy of that descriptor until its `exec`
    /// (seen once in CI on a loaded machine).
    pub fn remount(&self, option: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let output = Command::new("mount").args(["-o", &format!("remount,{option}")]).arg(&self.path).output().expect("mount");
            if output.status.success() {
                return;
            }
            let said = String::from_utf8_lossy(&output.stderr);
            assert!(std::time::Instant::now() < deadline && said.contains("busy"), "remount {option}: {said}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Every entry under `root` (symbolic links not followed), by its path relative to `root`:
/// `dir MODE`, `file MODE [BYTES]` or `link -> TARGET`.
pub fn tree(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            let mode = meta.permissions().mode();
            let what = if meta.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&path).expect("readlink").display())
            } else if meta.is_dir() {
                pending.push(path.clone());
                format!("dir {mode:o}")
            } else {
                format!("file {mode:o} {:?}", std::fs::read(&path).expect("read"))
            };
            entries.insert(path.strip_prefix(root).expect("below the root").to_path_buf(), what);
        }
    }
    entries
}
