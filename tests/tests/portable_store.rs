//! The portable store (`guest/portable`, issue #41): the store's protocol built as a WebAssembly
//! component over the system-call contract (`wit/sys.wit`), run here over a native
//! implementation of that contract (`proclease_tests::portable`), beside the native store on
//! real directories. It must be the same store: the same answers, the same bytes on disk, the
//! same refusals word for word, and each must read, swap and lock against the other.

use std::fs::TryLockError;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use proclease::core::digest::sha256_hex;
use proclease::core::effects::{Failure, Store, Workspace as _};
use proclease::process_identity::ProcessIdentity;
use proclease::state_home::StateHome;
use proclease::state_store::{LEASING_LOCK, RECOVERY_LOCK, StateStore};
use proclease_tests::fs_fixtures::{Tmpfs, tree};
use proclease_tests::portable::PortableStore;
use proclease_tests::store_fixtures::assert_compare_and_swap_contract;

/// A fresh state home (created and claimed as the native host does) under a temporary directory.
fn state_home(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    let home = dir.path().join(name);
    StateHome::open(&home).expect("the state home opens");
    home
}

fn native(home: &Path) -> StateStore {
    StateStore::open(StateHome::open(home).expect("the state home opens"), Arc::new(ProcessIdentity::new())).expect("the native store opens")
}

/// One state home with both stores on it.
fn both_stores() -> (tempfile::TempDir, PathBuf, StateStore, PortableStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = state_home(&dir, "state");
    let (native, portable) = (native(&home), PortableStore::open(&home));
    (dir, home, native, portable)
}

/// What the native store answers, as the failure the component would be given.
fn native_answer<T>(answer: Result<T, proclease::state_store::StoreError>) -> Result<T, Failure> {
    answer.map_err(|e| e.failure())
}

#[test]
fn the_portable_store_imports_only_the_system_call_contract_and_exports_the_store_workspace_and_catalog() {
    let (mut imports, exports) = PortableStore::world();
    imports.sort();
    assert_eq!(
        imports,
        [
            "proclease:lease/clock@0.3.0",
            "proclease:lease/process-identity@0.3.0",
            "proclease:lease/sys-fs@0.3.0",
            "proclease:lease/sys-kernel@0.3.0",
            "proclease:lease/types@0.3.0",
        ],
        "no WASI, no ambient authority: only the contract, the identity facts and the time a lock records"
    );
    assert_eq!(
        exports,
        [
            "proclease:lease/state-store@0.3.0",
            "proclease:lease/workspace@0.3.0",
            "proclease:lease/plugin-catalog@0.3.0",
            "proclease:lease/workspace-advice@0.3.0",
            "proclease:lease/store-advice@0.3.0",
            "proclease:lease/recovery-turn@0.3.0"
        ],
        "what the component imports, and what its host's messages and recovery turn need"
    );
}

#[test]
fn the_compare_and_swap_contract_holds_on_the_portable_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = state_home(&dir, "state");
    let mut portable = PortableStore::open(&home);
    assert_compare_and_swap_contract(&mut portable, "control/leases/one.json");
}

/// The same calls on two state homes, one through each store: the same answers, and then the
/// same files, modes and bytes (the lease-creation lock file included).
#[test]
fn the_portable_store_answers_and_writes_what_the_native_store_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (native_home, portable_home) = (state_home(&dir, "native"), state_home(&dir, "portable"));
    let native = native(&native_home);
    let mut portable = PortableStore::open(&portable_home);

    let one = "{\"n\":1}\n";
    let two = "{\"n\":2}\n";
    assert_eq!(
        portable.ensure_private_directory("control/leases"),
        native_answer(native.ensure_private_directory("control/leases")).map(|_| portable_identity(&portable_home, "control/leases"))
    );
    assert_eq!(portable.create_if_absent("control/leases/a.json", one), native_answer(native.create_if_absent("control/leases/a.json", one)));
    assert_eq!(portable.create_if_absent("control/leases/b.json", two), native_answer(native.create_if_absent("control/leases/b.json", two)));
    assert_eq!(portable.create_if_absent("control/leases/a.json", two), native_answer(native.create_if_absent("control/leases/a.json", two)));
    assert_eq!(
        portable.replace_if_unchanged("control/leases/a.json", &sha256_hex(b"stale"), two),
        native_answer(native.replace_if_unchanged("control/leases/a.json", &sha256_hex(b"stale"), two))
    );
    assert_eq!(
        portable.replace_if_unchanged_lazily("control/leases/a.json", &sha256_hex(one.as_bytes()), two),
        native_answer(native.replace_if_unchanged_lazily("control/leases/a.json", &sha256_hex(one.as_bytes()), two))
    );
    assert_eq!(portable.read_if_present("control/leases/a.json", 1024), native_answer(native.read_if_present("control/leases/a.json", 1024)));
    assert_eq!(
        portable.read_if_present("control/leases/a.json", 3).map_err(|f| f.message),
        native_answer(native.read_if_present("control/leases/a.json", 3)).map_err(|f| f.message),
        "a bound too small"
    );

    let listed = portable.snapshot("control/leases", true).expect("the portable snapshot").expect("the collection exists");
    let natively = native.snapshot("control/leases", true).expect("the native snapshot").expect("the collection exists");
    let names = |s: &proclease::core::effects::CollectionSnapshot| s.entries.iter().map(|e| (e.name.clone(), e.kind)).collect::<Vec<_>>();
    assert_eq!(names(&listed), names(&natively));
    let wanted = ["a.json".to_string(), "b.json".to_string(), "c.json".to_string()];
    let batch = portable.read_batch("control/leases", &wanted, 1024, 4096, &listed.identity).expect("the portable batch");
    assert_eq!(batch, native.read_batch("control/leases", &wanted, 1024, 4096, &natively.identity).expect("the native batch"));

    assert_eq!(
        portable.remove_if_unchanged("control/leases/b.json", &sha256_hex(two.as_bytes())),
        native_answer(native.remove_if_unchanged("control/leases/b.json", &sha256_hex(two.as_bytes())))
    );
    assert_eq!(portable.snapshot("control/absent", false), native_answer(native.snapshot("control/absent", false)));

    assert!(portable.lock_leasing_taken().expect("the lease-creation lock"), "taken on a host with kernel locks");
    portable.unlock_leasing();
    drop(native.lock_file(LEASING_LOCK).expect("the native lock file"));

    assert_eq!(noted_ids_hidden(&portable_home), noted_ids_hidden(&native_home), "the same files, modes and bytes");
}

/// `tree` with the content of each collection lock file replaced by its shape: both stores note
/// the id of their last mutation claim there (`Fs::note_in_lock`), a fresh random UUID each.
fn noted_ids_hidden(home: &Path) -> std::collections::BTreeMap<PathBuf, String> {
    let mut tree = tree(home);
    for (path, what) in tree.iter_mut() {
        let in_locks = path.parent().is_some_and(|p| p.ends_with(".proclease/locks"));
        if in_locks && what.starts_with("file ") && path.file_name().is_some_and(|n| n != LEASING_LOCK) {
            let bytes = std::fs::read(home.join(path)).expect("the lock file");
            let id = std::str::from_utf8(&bytes).expect("a note is text");
            assert!(proclease::core::js::is_uuid_v4(id), "{}: the note is a claim id, not {id:?}", path.display());
            *what = format!("{} <a claim id>", what.split(' ').take(2).collect::<Vec<_>>().join(" "));
        }
    }
    tree
}

/// The identity the portable store reports for a collection is the directory's own.
fn portable_identity(home: &Path, collection: &str) -> proclease::core::effects::CollectionIdentity {
    let meta = std::fs::metadata(home.join(collection)).expect("the collection exists");
    proclease::core::effects::CollectionIdentity { device: meta.dev().to_string(), inode: meta.ino().to_string() }
}

/// One state home, both stores: each reads what the other wrote, and a swap on a stale view
/// fails whichever store made it.
#[test]
fn each_store_reads_and_swaps_what_the_other_wrote() {
    let (_dir, _home, native, mut portable) = both_stores();

    assert_eq!(portable.create_if_absent("control/leases/x.json", "from the component\n"), Ok(true));
    assert_eq!(native.read_if_present("control/leases/x.json", 1024).expect("native read").as_deref(), Some("from the component\n"));
    assert!(native.replace_if_unchanged("control/leases/x.json", &sha256_hex(b"from the component\n"), "from the host\n").expect("native swap"));
    assert_eq!(portable.read_if_present("control/leases/x.json", 1024), Ok(Some("from the host\n".to_string())));
    assert_eq!(portable.replace_if_unchanged("control/leases/x.json", &sha256_hex(b"from the component\n"), "lost\n"), Ok(false), "a stale view never wins");
    assert!(!native.create_if_absent("control/leases/x.json", "again\n").expect("native create"));
    assert_eq!(portable.remove_if_unchanged("control/leases/x.json", &sha256_hex(b"from the host\n")), Ok(true));
    assert_eq!(native.read_if_present("control/leases/x.json", 1024).expect("native read"), None);
}

/// A refusal, an unsafe file and a failed system call read the same, byte for byte: kind,
/// message, errno, path and operation (the protocols word them, whatever runs them).
#[test]
fn refusals_unsafe_files_and_errnos_read_as_natively() {
    let (_dir, home, native, mut portable) = both_stores();
    assert!(native.create_if_absent("control/leases/open.json", "{}\n").expect("create"));
    std::fs::set_permissions(home.join("control/leases/open.json"), std::fs::Permissions::from_mode(0o644)).expect("chmod");
    symlink("/etc/hostname", home.join("control/leases/linked.json")).expect("symlink");
    std::fs::write(home.join("control/flat"), "not a directory\n").expect("a file where a directory is expected");
    std::fs::set_permissions(home.join("control/flat"), std::fs::Permissions::from_mode(0o600)).expect("chmod");

    let cases = ["../escape.json", "top.json", "leases/x.json", "control/leases/open.json", "control/leases/linked.json", "control/flat/inside.json"];
    let mut kinds = Vec::new();
    for path in cases {
        let natively = native_answer(native.read_if_present(path, 1024));
        let answered = portable.read_if_present(path, 1024);
        let Err(failure) = &natively else { panic!("{path}: the native store refuses it") };
        kinds.push((failure.kind, failure.errno.clone()));
        assert_eq!(answered, natively, "{path}");
        let natively = native_answer(native.create_if_absent(path, "{}\n"));
        assert_eq!(portable.create_if_absent(path, "{}\n"), natively, "{path}");
    }

    // A failed system call: a collection made immutable (`chattr +i`, which binds root too)
    // refuses the link of a new record with EPERM.
    assert!(native.create_if_absent("control/frozen/old.json", "{}\n").expect("create"));
    match Immutable::set(&home.join("control/frozen")) {
        Some(_frozen) => {
            let natively = native_answer(native.create_if_absent("control/frozen/new.json", "{}\n"));
            let Err(failure) = &natively else { panic!("an immutable collection takes no new record") };
            kinds.push((failure.kind, failure.errno.clone()));
            assert_eq!(portable.create_if_absent("control/frozen/new.json", "{}\n"), natively);
        }
        None if std::env::var_os("PROCLEASE_REQUIRE_MOUNTS").is_some() => panic!("cannot make a directory immutable here (FS_IOC_SETFLAGS), and PROCLEASE_REQUIRE_MOUNTS is set"),
        None => eprintln!("skipped the errno case: this file system or user cannot make a directory immutable (FS_IOC_SETFLAGS)"),
    }
    // Each kind of answer was compared: refusals, unsafe files, and a failed system call with
    // its errno (a file where a directory is expected).
    use proclease::core::FailureKind;
    assert!(kinds.iter().any(|(kind, _)| *kind == FailureKind::Refused), "{kinds:?}");
    assert!(kinds.iter().any(|(kind, _)| *kind == FailureKind::Unsafe), "{kinds:?}");
    if std::env::var_os("PROCLEASE_REQUIRE_MOUNTS").is_some() {
        assert!(kinds.iter().any(|(_, errno)| errno.is_some()), "{kinds:?}");
    }
}

/// A directory's immutable flag, cleared again when dropped (so that the temporary directory
/// can be removed).
struct Immutable(std::fs::File);

impl Immutable {
    /// `None` where the flag cannot be set (tmpfs before Linux 6.0, no `CAP_LINUX_IMMUTABLE`).
    fn set(dir: &Path) -> Option<Immutable> {
        use rustix::fs::{IFlags, ioctl_getflags, ioctl_setflags};
        let file = std::fs::File::open(dir).ok()?;
        let flags = ioctl_getflags(&file).ok()?;
        ioctl_setflags(&file, flags | IFlags::IMMUTABLE).ok()?;
        Some(Immutable(file))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        use rustix::fs::{IFlags, ioctl_getflags, ioctl_setflags};
        if let Ok(flags) = ioctl_getflags(&self.0) {
            let _ = ioctl_setflags(&self.0, flags - IFlags::IMMUTABLE);
        }
    }
}

/// A writer's temporary in `.proclease/staging` is removed once its writer is provably dead, and
/// kept while it lives: the component judges owners by the core's rules over the host's
/// `process-identity` facts, as the native store does.
#[test]
fn a_dead_writers_temporary_is_swept_and_a_live_ones_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = state_home(&dir, "state");
    let mut portable = PortableStore::open(&home);
    assert_eq!(portable.create_if_absent("control/leases/a.json", "{}\n"), Ok(true));

    let mut child = std::process::Command::new("true").spawn().expect("true runs");
    let dead_pid = child.id();
    child.wait().expect("true ends");
    let own = ProcessIdentity::new().self_identity().expect("own identity");
    let staging = home.join(".proclease/staging");
    let dead = staging.join(format!("{dead_pid}-{}-{}.tmp", "a".repeat(64), uuid::Uuid::new_v4()));
    let live = staging.join(format!("{}-{}-{}.tmp", own.pid, own.process_start_id, uuid::Uuid::new_v4()));
    for path in [&dead, &live] {
        std::fs::write(path, "partial").expect("a temporary");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }

    portable.snapshot("control/leases", true).expect("a recovering snapshot");
    assert!(!dead.exists(), "the dead writer's temporary is removed");
    assert!(live.exists(), "a live writer's temporary is kept");
}

/// The recovery turn is the native host's (every host's `recover` takes turns with every
/// other's), and the lease-creation lock is one kernel lock for both: see
/// [`one_lock_for_both`].
#[test]
fn the_recovery_turn_and_the_lease_creation_lock_exclude_across_the_native_host_and_the_component() {
    one_lock_for_both(RECOVERY_LOCK, PortableStore::take_recovery_turn, PortableStore::end_recovery_turn);
    one_lock_for_both(LEASING_LOCK, PortableStore::lock_leasing_taken, PortableStore::unlock_leasing);
}

/// The kernel lock `name` is one lock for the native host and the component: the component
/// (`take`) waits while the native host holds it and takes it once released, taking it again
/// while held changes nothing, and the native host cannot take it until the component lets it
/// go (`end`).
fn one_lock_for_both(name: &str, take: fn(&mut PortableStore) -> proclease_tests::portable::Answer<bool>, end: fn(&mut PortableStore)) {
    let (_dir, _home, native, mut portable) = both_stores();

    let held = native.lock_file(name).expect("the lock file");
    held.lock().expect("the native host takes the lock");
    let released = Arc::new(AtomicBool::new(false));
    let releaser = {
        let released = released.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            released.store(true, Ordering::SeqCst);
            drop(held);
        })
    };
    assert_eq!(take(&mut portable), Ok(true), "{name}");
    assert!(released.load(Ordering::SeqCst), "{name}: the component took the lock only once the native host released it");
    releaser.join().expect("the releaser ends");
    assert_eq!(take(&mut portable), Ok(true), "{name}: taking it again while held changes nothing");

    let attempt = native.lock_file(name).expect("the lock file");
    assert!(matches!(attempt.try_lock(), Err(TryLockError::WouldBlock)), "{name}: held by the component");
    end(&mut portable);
    attempt.try_lock().expect("free once the component released it");
}

/// Two workspaces, one through each: the native one on root `a`, the component on root `b`,
/// the same calls on the same shapes of tree. Answers are compared with `b` written as `a`.
struct Workspaces {
    _dir: tempfile::TempDir,
    a: PathBuf,
    b: PathBuf,
    native: proclease::workspace::Workspace,
    portable: PortableStore,
}

impl Workspaces {
    fn new() -> Workspaces {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = state_home(&dir, "state");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        for root in [&a, &b] {
            std::fs::create_dir(root).expect("a root");
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        }
        let (a, b) = (std::fs::canonicalize(&a).expect("realpath"), std::fs::canonicalize(&b).expect("realpath"));
        let native = proclease::workspace::Workspace::new(std::slice::from_ref(&a)).expect("the native workspace");
        let portable = PortableStore::with_roots(&home, &[&b]);
        Workspaces { _dir: dir, a, b, native, portable }
    }

    fn a(&self, below: &str) -> String {
        format!("{}/{below}", self.a.display())
    }

    fn b(&self, below: &str) -> String {
        format!("{}/{below}", self.b.display())
    }

    /// The identity of the directory `path` (under either root), as the native workspace
    /// reports it.
    fn identity(&self, path: &str) -> proclease::core::records::DirectoryIdentity {
        let both = proclease::workspace::Workspace::new(&[self.a.clone(), self.b.clone()]).expect("the native workspace");
        both.inspect(path).expect("inspect").expect("present").identity
    }

    /// `text` with root `b` written as root `a`.
    fn as_a(&self, text: &str) -> String {
        text.replace(&self.b.display().to_string(), &self.a.display().to_string())
    }

    fn same<T: std::fmt::Debug>(&self, native: Result<T, proclease::workspace::WorkspaceError>, portable: Result<T, Failure>, what: &str) {
        let native = format!("{:?}", native.map_err(|e| e.failure()));
        assert_eq!(self.as_a(&format!("{portable:?}")), native, "{what}");
    }
}

/// A tree of files and directories, some deep, some read-only, under `path`.
fn tree_at(path: &Path) {
    std::fs::create_dir_all(path.join("out/deep/er")).expect("a tree");
    std::fs::write(path.join("out/result.txt"), "built\n").expect("a file");
    std::fs::write(path.join("out/deep/er/leaf"), "x").expect("a file");
    std::fs::set_permissions(path.join("out/deep"), std::fs::Permissions::from_mode(0o500)).expect("read-only");
}

#[test]
fn the_portable_workspace_creates_inspects_and_removes_as_the_native_one() {
    let mut w = Workspaces::new();

    let (native, portable) = (w.native.create_private_directory(&w.a("jobs/one")), w.portable.create_private_directory(&w.b("jobs/one")));
    w.same(native, portable, "create");
    let (native, portable) = (w.native.inspect(&w.a("jobs/one")), w.portable.inspect(&w.b("jobs/one")));
    let (native, portable) = (native.expect("native facts").expect("present"), portable.expect("portable facts").expect("present"));
    assert_eq!((portable.canonical, portable.is_directory, portable.owned, portable.mode), (native.canonical, native.is_directory, native.owned, native.mode));
    assert_eq!(portable.identity, w.identity(&w.b("jobs/one")), "the directory's own identity");
    assert_eq!(w.portable.inspect(&w.b("jobs/absent")), Ok(None));

    // Outside the granted roots, and a path that is not normalised: refused alike.
    for (native_path, portable_path) in [("/etc/x".to_string(), "/etc/x".to_string()), (w.a("jobs/../x"), w.b("jobs/../x"))] {
        let (native, portable) = (w.native.inspect(&native_path), w.portable.inspect(&portable_path));
        assert!(native.is_err(), "{native_path} is refused");
        w.same(native, portable, &native_path);
    }

    // A tree removed only with its identity: a wrong one is refused and changes nothing.
    tree_at(&w.a.join("jobs/one"));
    tree_at(&w.b.join("jobs/one"));
    let wrong = proclease::core::records::DirectoryIdentity { device: "1".into(), inode: "2".into(), birthtime_ns: "3".into() };
    let (native, portable) = (w.native.remove_tree(&w.a("jobs/one"), &wrong), w.portable.remove_tree(&w.b("jobs/one"), &wrong));
    assert!(native.is_err(), "a wrong identity is refused");
    w.same(native, portable, "a wrong identity");
    assert_eq!(std::fs::read_to_string(w.b.join("jobs/one/out/result.txt")).expect("kept"), "built\n");

    let (native_id, portable_id) = (w.identity(&w.a("jobs/one")), w.identity(&w.b("jobs/one")));
    assert_eq!(w.native.remove_tree(&w.a("jobs/one"), &native_id).map_err(|e| e.failure()), Ok(true));
    assert_eq!(w.portable.remove_tree(&w.b("jobs/one"), &portable_id), Ok(true));
    assert!(!w.b.join("jobs/one").exists(), "the tree is gone");
    assert_eq!(tree(&w.b.join("jobs")), tree(&w.a.join("jobs")), "and no quarantine is left beside it");
    assert!(tree(&w.b.join("jobs")).is_empty());

    // An empty directory goes only when it is empty and still the one identified.
    for root in [&w.a, &w.b] {
        std::fs::create_dir(root.join("jobs/empty")).expect("mkdir");
        std::fs::set_permissions(root.join("jobs/empty"), std::fs::Permissions::from_mode(0o700)).expect("chmod");
        std::fs::write(root.join("jobs/full"), "").expect("a file");
    }
    let (native, portable) = (w.native.remove_empty_directory(&w.a("jobs/empty"), Some(&wrong)), w.portable.remove_empty_directory(&w.b("jobs/empty"), Some(&wrong)));
    w.same(native, portable, "an empty directory of another identity");
    assert!(w.b.join("jobs/empty").exists());
    let (native_id, portable_id) = (w.identity(&w.a("jobs/empty")), w.identity(&w.b("jobs/empty")));
    assert_eq!(w.portable.remove_empty_directory(&w.b("jobs/empty"), Some(&portable_id)), Ok(true));
    assert_eq!(w.native.remove_empty_directory(&w.a("jobs/empty"), Some(&native_id)).map_err(|e| e.failure()), Ok(true));
    assert_eq!(tree(&w.b.join("jobs")), tree(&w.a.join("jobs")));
}

/// On a read-only state home (`EROFS`) the portable store still lists and reads, as the native
/// one does (the collection lock file is opened read-only), and refuses a write with the same
/// failure.
#[test]
fn a_read_only_state_home_is_read_and_refused_as_natively() {
    let Some(fs) = Tmpfs::mount("1m") else { return };
    let home = fs.path.join("state");
    StateHome::open(&home).expect("the state home opens");
    let native = native(&home);
    let mut portable = PortableStore::open(&home);
    assert_eq!(portable.create_if_absent("control/leases/a.json", "{}\n"), Ok(true));
    fs.remount("ro");

    assert_eq!(portable.read_if_present("control/leases/a.json", 1024), native_answer(native.read_if_present("control/leases/a.json", 1024)));
    let listed = portable.snapshot("control/leases", false).expect("the portable store lists a read-only collection").expect("present");
    let natively = native.snapshot("control/leases", false).expect("the native store lists it").expect("present");
    assert_eq!(listed.entries.iter().map(|e| &e.name).collect::<Vec<_>>(), natively.entries.iter().map(|e| &e.name).collect::<Vec<_>>());
    let refused = native_answer(native.create_if_absent("control/leases/b.json", "{}\n"));
    assert_eq!(refused.as_ref().map_err(|f| f.errno.as_deref()), Err(Some("EROFS")));
    assert_eq!(portable.create_if_absent("control/leases/b.json", "{}\n"), refused);
    drop(fs);
}
