//! Workspace directory identity and identity-bound removal on real directories: refusals outside
//! the granted roots, inode reuse, interrupted quarantines, and symbolic links swapped in while a
//! tree is being deleted.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use proclease::workspace::{Workspace, WorkspaceError};

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    workspace: Workspace,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("realpath").join("root");
    private_dir(&root);
    let workspace = Workspace::new(std::slice::from_ref(&root)).expect("grant");
    Fixture { _dir: dir, root, workspace }
}

fn private_dir(path: &Path) {
    std::fs::create_dir_all(path).expect("mkdir");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).expect("chmod");
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// A small tree: files, a nested directory, and a symbolic link to `outside`.
fn populate(target: &Path, outside: &Path) {
    private_dir(&target.join("nested/deeper"));
    std::fs::write(target.join("a.txt"), "a").expect("write");
    std::fs::write(target.join("nested/deeper/b.txt"), "b").expect("write");
    symlink(outside, target.join("escape")).expect("symlink");
}

#[test]
fn inspect_reports_physical_facts() {
    let f = fixture();
    let target = f.root.join("work");
    private_dir(&target);
    let facts = f.workspace.inspect(s(&target)).expect("inspect").expect("present");
    let meta = std::fs::symlink_metadata(&target).expect("lstat");
    assert!(facts.canonical && facts.is_directory && facts.owned);
    assert_eq!(facts.mode, 0o700);
    assert_eq!(facts.identity.device, meta.dev().to_string());
    assert_eq!(facts.identity.inode, meta.ino().to_string());
    let birth: u128 = facts.identity.birthtime_ns.parse().expect("decimal");
    assert!(birth > 0, "this filesystem reports birth times");

    assert_eq!(f.workspace.inspect(s(&f.root.join("absent"))).expect("inspect"), None);
    assert_eq!(f.workspace.inspect(s(&f.root.join("absent/deeper"))).expect("inspect"), None);

    symlink(&target, f.root.join("link")).expect("symlink");
    let link = f.workspace.inspect(s(&f.root.join("link"))).expect("inspect").expect("present");
    assert!(!link.canonical && !link.is_directory, "a symbolic link is not a physical directory");
    let through = f.workspace.inspect(s(&f.root.join("link/sub"))).expect("inspect").expect("reported");
    assert!(!through.canonical, "a path through a symbolic link is not its own realpath");

    let root_facts = f.workspace.inspect(s(&f.root)).expect("the root itself can be inspected").expect("present");
    assert!(root_facts.is_directory);
}

#[test]
fn paths_outside_the_granted_roots_are_refused() {
    let f = fixture();
    for path in ["/etc", "/etc/passwd", "relative/path", "/tmp/../etc"] {
        let error = f.workspace.inspect(path).expect_err("refused");
        assert!(matches!(error, WorkspaceError::Refused { .. }), "{path}: {error}");
        assert!(error.to_string().contains(path), "{error}");
    }
    let sibling = f.root.parent().expect("parent").join("sibling");
    private_dir(&sibling);
    let identity = proclease::core::records::DirectoryIdentity { device: "1".into(), inode: "1".into(), birthtime_ns: "1".into() };
    let error = f.workspace.remove_tree(s(&sibling), &identity).expect_err("refused");
    assert!(error.to_string().contains("--workspace-root"), "{error}");
    assert!(sibling.exists());
    assert!(f.workspace.remove_tree(s(&f.root), &identity).is_err(), "a root itself is never removed");
    assert!(f.root.exists());
}

#[test]
fn removal_deletes_exactly_the_identified_tree() {
    let f = fixture();
    let outside = f.root.parent().expect("parent").join("outside");
    private_dir(&outside);
    std::fs::write(outside.join("precious"), "keep").expect("write");
    let target = f.root.join("work");
    private_dir(&target);
    populate(&target, &outside);
    let identity = f.workspace.inspect(s(&target)).expect("inspect").expect("present").identity;
    assert!(f.workspace.remove_tree(s(&target), &identity).expect("removed"));
    assert!(!target.exists());
    assert_eq!(std::fs::read_to_string(outside.join("precious")).expect("outside intact"), "keep");
    assert_eq!(std::fs::read_dir(&f.root).expect("list").count(), 0, "no quarantine left behind");
    assert!(!f.workspace.remove_tree(s(&target), &identity).expect("nothing left"), "a second removal finds nothing");
}

#[test]
fn a_directory_replaced_at_the_same_path_is_not_removed() {
    let f = fixture();
    let target = f.root.join("work");
    private_dir(&target);
    let identity = f.workspace.inspect(s(&target)).expect("inspect").expect("present").identity;
    std::fs::rename(&target, f.root.join("displaced")).expect("rename away");
    private_dir(&target);
    std::fs::write(target.join("marker"), "new").expect("write");
    let error = f.workspace.remove_tree(s(&target), &identity).expect_err("refused");
    assert_eq!(error.to_string(), format!("{}: recursive removal target changed identity", target.display()));
    assert_eq!(std::fs::read_to_string(target.join("marker")).expect("kept"), "new");
    assert!(f.root.join("displaced").is_dir());

    // Not private any more: refused too.
    let open = f.root.join("open");
    private_dir(&open);
    let identity = f.workspace.inspect(s(&open)).expect("inspect").expect("present").identity;
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    assert!(f.workspace.remove_tree(s(&open), &identity).is_err());
    assert!(open.exists());
}

fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().expect("spawn");
    let pid = child.id();
    child.wait().expect("reap");
    pid
}

#[test]
fn an_interrupted_quarantine_is_completed_only_when_its_remover_is_dead() {
    let f = fixture();
    let target = f.root.join("work");
    private_dir(&target);
    std::fs::write(target.join("file"), "x").expect("write");
    let identity = f.workspace.inspect(s(&target)).expect("inspect").expect("present").identity;

    // A live remover (another process, perhaps still deleting it): not proof of death.
    let mut remover = std::process::Command::new("sleep").arg("30").spawn().expect("spawn");
    let live = f.root.join(format!(".io-remove-{}-{}.quarantine", remover.id(), uuid::Uuid::new_v4()));
    std::fs::rename(&target, &live).expect("quarantine");
    let error = f.workspace.remove_tree(s(&target), &identity).expect_err("refused");
    assert!(error.to_string().ends_with("recursive removal quarantine owner is live or cannot be proven dead"), "{error}");
    assert!(live.exists());
    remover.kill().expect("kill");
    remover.wait().expect("reap");

    // A dead remover's quarantine is completed.
    let dead = f.root.join(format!(".io-remove-{}-{}.quarantine", dead_pid(), uuid::Uuid::new_v4()));
    std::fs::rename(&live, &dead).expect("requarantine");
    assert!(f.workspace.remove_tree(s(&target), &identity).expect("completed"));
    assert_eq!(std::fs::read_dir(&f.root).expect("list").count(), 0);

    // This process's own quarantine that no thread of it is deleting (a removal that failed
    // and returned) is finished by it.
    private_dir(&target);
    std::fs::write(target.join("file"), "x").expect("write");
    let identity = f.workspace.inspect(s(&target)).expect("inspect").expect("present").identity;
    let own = f.root.join(format!(".io-remove-{}-{}.quarantine", std::process::id(), uuid::Uuid::new_v4()));
    std::fs::rename(&target, &own).expect("quarantine");
    assert!(f.workspace.remove_tree(s(&target), &identity).expect("completed"));
    assert!(!own.exists());

    // A quarantine of another identity is not touched.
    let other = f.root.join(format!(".io-remove-{}-{}.quarantine", dead_pid(), uuid::Uuid::new_v4()));
    private_dir(&other);
    assert!(!f.workspace.remove_tree(s(&target), &identity).expect("nothing of this identity"));
    assert!(other.exists());
}

#[test]
fn subdirectories_swapped_for_symlinks_during_removal_never_lead_outside() {
    let f = fixture();
    let outside = f.root.parent().expect("parent").join("outside");
    private_dir(&outside);
    for i in 0..20 {
        std::fs::write(outside.join(format!("precious-{i}")), "keep").expect("write");
    }
    for round in 0..100 {
        let target = f.root.join(format!("work-{round}"));
        private_dir(&target);
        for d in 0..8 {
            private_dir(&target.join(format!("sub-{d}")));
            for file in 0..8 {
                std::fs::write(target.join(format!("sub-{d}/f{file}")), "x").expect("write");
            }
        }
        let identity = f.workspace.inspect(s(&target)).expect("inspect").expect("present").identity;
        let stop = Arc::new(AtomicBool::new(false));
        let attacker = {
            let (target, outside, stop) = (target.clone(), outside.clone(), stop.clone());
            std::thread::spawn(move || {
                // Keep swapping sub-directories (wherever the tree now is) for links to `outside`.
                while !stop.load(Ordering::Relaxed) {
                    for d in 0..8 {
                        let sub = target.join(format!("sub-{d}"));
                        let _ = std::fs::rename(&sub, target.join(format!("moved-{d}")));
                        let _ = symlink(&outside, &sub);
                    }
                }
            })
        };
        let _ = f.workspace.remove_tree(s(&target), &identity);
        stop.store(true, Ordering::Relaxed);
        attacker.join().expect("attacker");
        let left = std::fs::read_dir(&outside).expect("outside").count();
        assert_eq!(left, 20, "round {round}: files outside the target were deleted");
    }
}

/// Whatever a leased command leaves in its directory is removable: 20,000 levels of nesting (no
/// recursion, bounded descriptors), 105,000 files in one directory, and names that are not UTF-8.
#[test]
fn removal_handles_deep_wide_and_non_utf8_trees() {
    use std::os::unix::ffi::OsStrExt as _;
    let f = fixture();
    let target = f.root.join("work");
    private_dir(&target);
    // Deep: create 20,000 nested directories descriptor-relative (paths would be too long).
    let mut dir = std::fs::File::open(&target).expect("open");
    for _ in 0..20_000 {
        rustix::fs::mkdirat(&dir, "d", rustix::fs::Mode::from_raw_mode(0o700)).expect("mkdir");
        let next = rustix::fs::openat(&dir, "d", rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY, rustix::fs::Mode::empty()).expect("open");
        dir = std::fs::File::from(next);
    }
    drop(dir);
    // Wide.
    let wide = target.join("wide");
    private_dir(&wide);
    for i in 0..105_000 {
        std::fs::File::create(wide.join(format!("f{i}"))).expect("file");
    }
    // Not UTF-8.
    let odd = target.join(std::ffi::OsStr::from_bytes(b"bad\xffdir"));
    private_dir(&odd);
    std::fs::write(odd.join(std::ffi::OsStr::from_bytes(b"\xfe\xfd")), "x").expect("file");
    let identity = f.workspace.inspect(s(&target)).expect("inspect").expect("present").identity;
    assert!(f.workspace.remove_tree(s(&target), &identity).expect("removed"));
    assert!(!target.exists());
    assert_eq!(std::fs::read_dir(&f.root).expect("list").count(), 0, "no quarantine left behind");
}

/// A root whose path is not UTF-8 (a home directory named in Latin-1) is left out, not an error:
/// no lease path can name a directory under it, and the other roots keep working.
#[test]
fn a_root_that_is_not_utf8_is_left_out_and_the_others_still_work() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let latin1 = dir.path().join(std::ffi::OsStr::from_bytes(b"j\xf6rg"));
    let good = dir.path().join("good");
    for root in [&latin1, &good] {
        std::fs::create_dir(root).expect("a root");
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    let workspace = Workspace::new(&[latin1, good.clone()]).expect("a root that is not UTF-8 does not stop the others");
    let good = std::fs::canonicalize(&good).expect("realpath");
    assert_eq!(workspace.roots().collect::<Vec<_>>(), [good.as_path()]);
    let job = format!("{}/job", good.display());
    assert_eq!(workspace.create_private_directory(&job).expect("create under the other root"), vec![job]);
}
