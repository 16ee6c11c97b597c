//! State home validation on real directories: shared roots, foreign directories, modes,
//! creation anchors and the reference's ownership marker.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use proclease::state_home::{MARKER, MARKER_CONTENT, StateHome, StateHomeError};

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

#[test]
fn shared_roots_are_refused() {
    let mut roots = vec![std::path::PathBuf::from("/"), std::env::temp_dir(), std::env::current_dir().expect("cwd")];
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(home.into());
    }
    for root in roots {
        match StateHome::open(&root) {
            Err(StateHomeError::SharedRoot(_)) => {}
            other => panic!("{}: expected a shared-root refusal, got {other:?}", root.display()),
        }
    }
}

#[test]
fn an_absent_home_is_created_private_and_claimed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("a/b/state");
    let opened = StateHome::open(&home).expect("created");
    assert_eq!(opened.path(), std::fs::canonicalize(&home).expect("exists"));
    for path in [dir.path().join("a"), dir.path().join("a/b"), home.clone()] {
        let mode = std::fs::metadata(&path).expect("exists").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", path.display());
    }
    assert_eq!(std::fs::read_to_string(home.join(MARKER)).expect("marker"), MARKER_CONTENT);
    StateHome::open(&home).expect("reopens");
}

#[test]
fn a_world_writable_creation_anchor_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let anchor = dir.path().join("shared");
    std::fs::create_dir(&anchor).expect("mkdir");
    chmod(&anchor, 0o777);
    let error = StateHome::open(&anchor.join("state")).expect_err("refused");
    assert!(error.to_string().contains("not writable by group or others"), "{error}");
    assert!(!anchor.join("state").exists());
}

#[test]
fn a_foreign_non_empty_directory_is_never_claimed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("project");
    std::fs::create_dir(&home).expect("mkdir");
    std::fs::write(home.join("Cargo.toml"), "x").expect("write");
    let error = StateHome::open(&home).expect_err("refused");
    assert!(error.to_string().contains("is not empty and not a state home"), "{error}");
    assert!(!home.join(MARKER).exists());
}

#[test]
fn an_existing_ghostget_layout_is_claimed_and_modes_are_enforced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("ghostget");
    std::fs::create_dir_all(home.join("recovery")).expect("mkdir");
    chmod(&home, 0o755);
    chmod(&home.join("recovery"), 0o700);
    let error = StateHome::open(&home).expect_err("a non-empty unclaimed home must be 0700 (§3.1)");
    assert!(error.to_string().contains("run chmod 700"), "{error}");
    chmod(&home, 0o700);
    StateHome::open(&home).expect("a private ghostget layout is claimed");
    assert_eq!(std::fs::metadata(&home).expect("exists").permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::read_to_string(home.join(MARKER)).expect("marker"), MARKER_CONTENT);

    chmod(&home, 0o750);
    let error = StateHome::open(&home).expect_err("a claimed home must stay 0700");
    assert!(error.to_string().contains("run chmod 700"), "{error}");

    chmod(&home, 0o700);
    std::fs::write(home.join(MARKER), "{}\n").expect("tamper");
    chmod(&home.join(MARKER), 0o600);
    let error = StateHome::open(&home).expect_err("a foreign marker is refused");
    assert!(error.to_string().contains("marker"), "{error}");
}

/// Many processes opening the same fresh state home at once all succeed (each may see another's
/// marker being published).
#[test]
fn concurrent_first_opens_all_succeed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("state");
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let home = home.clone();
            std::thread::spawn(move || StateHome::open(&home).map(|_| ()).map_err(|e| e.to_string()))
        })
        .collect();
    for thread in threads {
        thread.join().expect("thread").expect("every open succeeds");
    }
    assert_eq!(std::fs::read_to_string(home.join(MARKER)).expect("marker"), MARKER_CONTENT);
}

#[test]
fn an_empty_world_writable_home_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("state");
    std::fs::create_dir(&home).expect("mkdir");
    chmod(&home, 0o777);
    let error = StateHome::open(&home).expect_err("refused");
    assert!(error.to_string().contains("must not be group/world-writable"), "{error}");
    assert!(!home.join(MARKER).exists());
}
