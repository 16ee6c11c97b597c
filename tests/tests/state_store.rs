//! The state store on real files and real processes: the compare-and-swap contract, hostile
//! filesystems, races between processes, and SIGKILL at random instants.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use proclease::core::digest::sha256_hex;
use proclease::process_identity::ProcessIdentity;
use proclease::state_home::StateHome;
use proclease::state_store::{BatchInvalid, BatchStatus, EntryKind, StateStore, StoreError, StoreProtocol};
use proclease_tests::interposed_fs::InterposedFs;
use proclease_tests::store_fixtures::{assert_compare_and_swap_contract, is_complete_churn_record, round_record};

struct Fixture {
    _dir: tempfile::TempDir,
    home: PathBuf,
    store: StateStore,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("state");
    let store = open(&home);
    Fixture { _dir: dir, home, store }
}

fn open(home: &Path) -> StateStore {
    let home = StateHome::open(home).expect("state home opens");
    StateStore::open(home, Arc::new(ProcessIdentity::new())).expect("store opens")
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).expect("exists").mode() & 0o777
}

fn staging_entries(home: &Path) -> Vec<String> {
    std::fs::read_dir(home.join(".proclease/staging")).expect("staging exists").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect()
}

const RECORD: &str = "recovery/things/a.json";

#[test]
fn compare_and_swap_contract() {
    let f = fixture();
    let mut store = proclease::state_store::SharedStore::new(Arc::new(open(&f.home)));
    // Between the steps, the record on disk is what the store says.
    assert_compare_and_swap_contract(&mut store, RECORD);
    assert!(!f.home.join(RECORD).exists(), "removed from disk");
    assert!(f.store.create_if_absent(RECORD, "two\n").expect("create"));
    assert_eq!(std::fs::read_to_string(f.home.join(RECORD)).expect("on disk"), "two\n");
}

#[test]
fn files_are_private_and_collections_hold_only_records() {
    let f = fixture();
    assert!(f.store.create_if_absent(RECORD, "one\n").expect("create"));
    assert!(f.store.replace_if_unchanged(RECORD, &sha256_hex(b"one\n"), "two\n").expect("replace"));
    assert_eq!(mode(&f.home), 0o700);
    assert_eq!(mode(&f.home.join("recovery")), 0o700);
    assert_eq!(mode(&f.home.join("recovery/things")), 0o700);
    assert_eq!(mode(&f.home.join(RECORD)), 0o600);
    let entries: Vec<_> = std::fs::read_dir(f.home.join("recovery/things")).expect("list").collect();
    assert_eq!(entries.len(), 1, "no temporaries or locks beside the record");
    assert!(staging_entries(&f.home).is_empty(), "no temporaries left behind");
    let marker = std::fs::read_to_string(f.home.join(".io-state.json")).expect("marker");
    assert_eq!(marker, "{\"kind\":\"io-state\",\"schemaVersion\":1}\n");
}

#[test]
fn ensure_private_directory_and_snapshot() {
    let f = fixture();
    assert_eq!(f.store.snapshot("recovery/leases", false).expect("snapshot"), None);
    let identity = f.store.ensure_private_directory("recovery/leases").expect("ensure");
    let meta = std::fs::metadata(f.home.join("recovery/leases")).expect("exists");
    assert_eq!((identity.device.clone(), identity.inode.clone()), (meta.dev().to_string(), meta.ino().to_string()));
    assert_eq!(meta.mode() & 0o777, 0o700);
    for name in ["b.json", "a.json"] {
        assert!(f.store.create_if_absent(&format!("recovery/leases/{name}"), "{}\n").expect("create"));
    }
    f.store.ensure_private_directory("recovery/leases/sub").expect("sub");
    symlink("/etc/passwd", f.home.join("recovery/leases/link")).expect("symlink");
    let snapshot = f.store.snapshot("recovery/leases", true).expect("snapshot").expect("present");
    assert_eq!(snapshot.identity, identity);
    let listed: Vec<(&str, EntryKind)> = snapshot.entries.iter().map(|e| (e.name.as_str(), e.kind)).collect();
    assert_eq!(listed, vec![("a.json", EntryKind::File), ("b.json", EntryKind::File), ("link", EntryKind::SymbolicLink), ("sub", EntryKind::Directory)]);
    std::fs::set_permissions(f.home.join("recovery/leases/sub"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let error = f.store.snapshot("recovery/leases", false).expect_err("a non-private sub-directory is refused");
    assert!(error.to_string().contains("sub-directory sub must be owned by you with mode 0700"), "{error}");
}

#[test]
fn batch_read_reports_each_file() {
    let f = fixture();
    let identity = f.store.ensure_private_directory("recovery/batch").expect("ensure");
    let dir = f.home.join("recovery/batch");
    let write = |name: &str, bytes: &[u8], mode: u32| {
        std::fs::write(dir.join(name), bytes).expect("write");
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    write("ok.json", b"{}\n", 0o600);
    write("big.json", &[b'x'; 100], 0o600);
    write("shared.json", b"{}\n", 0o644);
    write("binary.json", b"\xff\xfe\n", 0o600);
    write("fill1.json", &[b'y'; 40], 0o600);
    write("fill2.json", &[b'z'; 40], 0o600);
    symlink(dir.join("ok.json"), dir.join("link.json")).expect("symlink");
    let names: Vec<String> = ["ok.json", "absent.json", "big.json", "shared.json", "binary.json", "link.json", "fill1.json", "fill2.json"].iter().map(|s| s.to_string()).collect();
    let results = f.store.read_batch("recovery/batch", &names, 64, 80, &identity).expect("batch");
    let statuses: Vec<BatchStatus> = results.into_iter().map(|(_, s)| s).collect();
    assert_eq!(
        statuses,
        vec![
            BatchStatus::Present("{}\n".into()),
            BatchStatus::Absent,
            BatchStatus::Invalid(BatchInvalid::FileByteBound),
            BatchStatus::Invalid(BatchInvalid::UnsafeFile),
            BatchStatus::Invalid(BatchInvalid::InvalidUtf8),
            BatchStatus::Invalid(BatchInvalid::UnsafeFile),
            BatchStatus::Present("y".repeat(40)),
            BatchStatus::Invalid(BatchInvalid::AggregateByteBound),
        ]
    );
    let mut other = identity.clone();
    other.inode = "1".into();
    let error = f.store.read_batch("recovery/batch", &names, 64, 90, &other).expect_err("identity must match");
    assert!(error.to_string().contains("private state batch directory changed identity"), "{error}");
    let duplicate = vec!["ok.json".to_string(), "ok.json".to_string()];
    assert!(f.store.read_batch("recovery/batch", &duplicate, 64, 90, &identity).is_err());
}

/// The production store over [`InterposedFs`]: `before_read` runs (real system calls) between
/// each `open` of a record and its `read`.
fn interposed(home: &Path, before_read: impl Fn() + Send + Sync + 'static) -> StoreProtocol<InterposedFs, ProcessIdentity> {
    let dir = std::os::fd::OwnedFd::from(std::fs::File::open(home).expect("open the state home"));
    StoreProtocol::open(InterposedFs { before_read: Arc::new(before_read) }, dir, Arc::new(ProcessIdentity::new())).expect("store opens")
}

/// Puts `bytes` at `path` as another writer does: a private file beside it, renamed over it.
fn replace_by_rename(path: &Path, bytes: &[u8]) {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let staged = path.with_extension("staged");
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&staged).expect("stage");
    file.write_all(bytes).expect("write");
    std::fs::rename(&staged, path).expect("rename over the record");
}

// docs/deviations.md 32: a read that overlaps a writer's replace or removal gives the record it
// opened, where the reference (§3.2) fails with `state file changed while it was read`; under
// load, four such overlaps in a row made a read fail (a CI failure of the mixed-host writers).
#[test]
fn a_record_replaced_or_removed_while_it_is_read_is_read_as_it_was_at_the_open() {
    let f = fixture();
    assert!(f.store.create_if_absent(RECORD, "one\n").expect("create"));
    let path = f.home.join(RECORD);
    let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (hook_path, hook_reads) = (path.clone(), reads.clone());
    // Every read of the record overlaps a replace: the reference's rule fails each attempt.
    let store = interposed(&f.home, move || {
        let n = hook_reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        replace_by_rename(&hook_path, format!("v{n}\n").as_bytes());
    });
    assert_eq!(store.read_if_present(RECORD, 1024).expect("read").as_deref(), Some("one\n"), "the record at the open");
    assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 1, "read once: no retry needed");
    assert_eq!(std::fs::read_to_string(&path).expect("on disk"), "v1\n");
    assert_eq!(store.read_if_present(RECORD, 1024).expect("read").as_deref(), Some("v1\n"));
    // A removal that lands while the record is read.
    let hook_path = path.clone();
    let store = interposed(&f.home, move || {
        let _ = std::fs::remove_file(&hook_path);
    });
    assert_eq!(store.read_if_present(RECORD, 1024).expect("read").as_deref(), Some("v2\n"));
    assert_eq!(store.read_if_present(RECORD, 1024).expect("read"), None, "then absent");
}

// A compare-and-swap never takes the record as it was at the open: replaced while the swap read
// it (by a writer outside the protocol: one inside it holds the claim), it is no longer the
// expected record, and the swap answers false, leaving the other writer's version (found by a
// review of the first version of deviation 32, which overwrote it).
#[test]
fn a_compare_and_swap_whose_record_is_replaced_while_it_reads_it_keeps_the_other_version() {
    let f = fixture();
    assert!(f.store.create_if_absent(RECORD, "one\n").expect("create"));
    let path = f.home.join(RECORD);
    let replaced = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (hook_path, hook_replaced) = (path.clone(), replaced.clone());
    let store = interposed(&f.home, move || {
        if !hook_replaced.swap(true, std::sync::atomic::Ordering::SeqCst) {
            replace_by_rename(&hook_path, b"theirs\n");
        }
    });
    assert!(!store.replace_if_unchanged(RECORD, &sha256_hex(b"one\n"), "mine\n").expect("replace"), "the record changed");
    assert!(replaced.load(std::sync::atomic::Ordering::SeqCst), "the replace landed during the read");
    assert_eq!(std::fs::read_to_string(&path).expect("on disk"), "theirs\n", "the other writer's version stays");
}

// The rule's limit: a file rewritten in place, same size, its mtime put back (`rsync --inplace
// --times` does that) shows its change only in its ctime, and its name still names it. That
// read is never trusted: retried, and refused once the file keeps changing.
#[test]
fn a_record_rewritten_in_place_with_its_mtime_put_back_is_never_trusted() {
    let f = fixture();
    assert!(f.store.create_if_absent(RECORD, "one\n").expect("create"));
    let path = f.home.join(RECORD);
    let rewrites = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (hook_path, hook_rewrites) = (path.clone(), rewrites.clone());
    let store = interposed(&f.home, move || {
        use std::io::{Seek as _, Write as _};
        let n = hook_rewrites.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut file = std::fs::OpenOptions::new().write(true).open(&hook_path).expect("open in place");
        let modified = file.metadata().expect("fstat").modified().expect("mtime");
        file.seek(std::io::SeekFrom::Start(0)).expect("seek");
        file.write_all(if n % 2 == 0 { b"two\n" } else { b"one\n" }).expect("rewrite");
        file.set_modified(modified).expect("put the mtime back");
    });
    let error = store.read_if_present(RECORD, 1024).expect_err("a file that keeps changing in place is refused");
    assert_eq!(error.to_string(), format!("{RECORD}: unsafe: state file changed while it was read, again and again; retry when its writers are done"));
    assert_eq!(rewrites.load(std::sync::atomic::Ordering::SeqCst), 4, "each attempt saw the change");
}

#[test]
fn paths_outside_the_layout_are_refused() {
    let f = fixture();
    for path in ["/etc/passwd", "../escape.json", "recovery/../../escape.json", ".proclease/locks/x", "etc/x.json", "recovery"] {
        match f.store.create_if_absent(path, "x\n") {
            Err(StoreError::Refused { path: named, .. }) => assert_eq!(named, path),
            other => panic!("{path}: expected a refusal, got {other:?}"),
        }
    }
}

#[test]
fn symlinks_are_never_followed() {
    let f = fixture();
    let outside = f._dir.path().join("outside.txt");
    std::fs::write(&outside, "precious\n").expect("write");
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    f.store.ensure_private_directory("recovery/things").expect("ensure");
    symlink(&outside, f.home.join(RECORD)).expect("plant symlink at the record");
    let hash = sha256_hex(b"precious\n");
    let read = f.store.read_if_present(RECORD, 1024).expect_err("read refuses");
    assert!(matches!(read, StoreError::Unsafe { .. }), "{read:?}");
    assert!(read.to_string().contains(RECORD), "the error names the path: {read}");
    assert!(matches!(f.store.replace_if_unchanged(RECORD, &hash, "evil\n"), Err(StoreError::Unsafe { .. })));
    assert!(matches!(f.store.remove_if_unchanged(RECORD, &hash), Err(StoreError::Unsafe { .. })));
    assert!(!f.store.create_if_absent(RECORD, "evil\n").expect("create sees the name taken"));
    assert_eq!(std::fs::read_to_string(&outside).expect("intact"), "precious\n");
    assert!(std::fs::symlink_metadata(f.home.join(RECORD)).expect("still there").file_type().is_symlink());

    // A symbolic link in place of a collection directory.
    let elsewhere = f._dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    symlink(&elsewhere, f.home.join("recovery/linked")).expect("plant symlink at the collection");
    let error = f.store.create_if_absent("recovery/linked/a.json", "x\n").expect_err("refused");
    assert!(error.to_string().contains("linked is a symbolic link"), "{error}");
    assert!(f.store.snapshot("recovery/linked", false).is_err());
    assert_eq!(std::fs::read_dir(&elsewhere).expect("list").count(), 0, "nothing written through the link");
}

#[test]
fn a_symlinked_state_home_or_staging_directory_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let real = dir.path().join("real-state");
    std::fs::create_dir(&real).expect("mkdir");
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let link = dir.path().join("state");
    symlink(&real, &link).expect("symlink");
    let error = StateHome::open(&link).expect_err("a symlinked home is refused");
    assert!(error.to_string().contains("symbolic link"), "{error}");
    assert_eq!(std::fs::read_dir(&real).expect("list").count(), 0, "nothing written through the link");

    let home = dir.path().join("state2");
    drop(open(&home));
    let staging = home.join(".proclease/staging");
    std::fs::remove_dir(&staging).expect("rmdir");
    symlink(&real, &staging).expect("symlink");
    let home = StateHome::open(&home).expect("home itself is fine");
    let error = StateStore::open(home, Arc::new(ProcessIdentity::new())).err().expect("a symlinked staging directory is refused");
    assert!(error.to_string().contains("symbolic link"), "{error}");
}

fn worker() -> Command {
    Command::new(env!("CARGO_BIN_EXE_store_worker"))
}

#[test]
fn racing_replacers_have_exactly_one_winner_per_round() {
    const WORKERS: usize = 8;
    const ROUNDS: u64 = 200;
    let f = fixture();
    assert!(f.store.create_if_absent("recovery/race/record.json", &round_record(0, "start")).expect("seed"));
    let home = f.home.to_str().expect("utf-8").to_string();
    let children: Vec<_> =
        (0..WORKERS).map(|i| worker().args(["race-replace", &home, &ROUNDS.to_string(), &format!("w{i}")]).stdout(Stdio::piped()).spawn().expect("spawn")).collect();
    let mut wins = vec![0u32; ROUNDS as usize];
    for child in children {
        let output = child.wait_with_output().expect("wait");
        assert!(output.status.success(), "worker failed: {output:?}");
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let round: usize = line.strip_prefix("won ").and_then(|r| r.parse().ok()).expect("won <round>");
            wins[round] += 1;
        }
    }
    let wrong: Vec<(usize, u32)> = wins.iter().copied().enumerate().filter(|(_, w)| *w != 1).collect();
    assert!(wrong.is_empty(), "rounds without exactly one winner: {wrong:?}");
}

#[test]
fn racing_creators_create_each_record_once() {
    const WORKERS: usize = 8;
    const ROUNDS: u64 = 100;
    let f = fixture();
    let home = f.home.to_str().expect("utf-8").to_string();
    let children: Vec<_> =
        (0..WORKERS).map(|i| worker().args(["race-create", &home, &ROUNDS.to_string(), &format!("w{i}")]).stdout(Stdio::piped()).spawn().expect("spawn")).collect();
    let mut creators: Vec<Vec<String>> = vec![Vec::new(); ROUNDS as usize];
    for (i, child) in children.into_iter().enumerate() {
        let output = child.wait_with_output().expect("wait");
        assert!(output.status.success(), "worker failed: {output:?}");
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let round: usize = line.strip_prefix("created ").and_then(|r| r.parse().ok()).expect("created <round>");
            creators[round].push(format!("w{i}"));
        }
    }
    for (round, who) in creators.iter().enumerate() {
        assert_eq!(who.len(), 1, "round {round} created by {who:?}");
        let text = std::fs::read_to_string(f.home.join(format!("recovery/race-create/{round}.json"))).expect("record");
        assert_eq!(text, round_record(round as u64, &who[0]), "the record is its creator's");
    }
}

/// A small deterministic generator for kill instants (the seed is printed on failure).
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn sigkill_at_random_instants_leaves_only_complete_records() {
    const TRIALS: usize = 200;
    let f = fixture();
    let home = f.home.to_str().expect("utf-8").to_string();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(7) | 1;
    let mut rng = XorShift(seed);
    let mut previous: Vec<Option<String>> = vec![None; 4];
    let mut trials_with_writes = 0;
    for trial in 0..TRIALS {
        let mut child = worker().args(["churn", &home]).stdout(std::process::Stdio::piped()).spawn().expect("spawn");
        // Kill at a random instant of the churn (a loaded machine starts workers slowly).
        let mut ready = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().expect("stdout")), &mut ready).expect("ready");
        assert_eq!(ready, "ready\n", "trial {trial}: the worker did not start");
        std::thread::sleep(Duration::from_micros(rng.next() % 50_000));
        child.kill().expect("SIGKILL");
        let status = child.wait().expect("reap");
        assert!(status.code().is_none(), "trial {trial} (seed {seed}): the worker must die by the signal, not {status}");
        let mut changed = false;
        for k in 0..4u64 {
            let path = format!("recovery/churn/{k}.json");
            let current = f.store.read_if_present(&path, 1 << 20).expect("readable");
            if let Some(text) = &current {
                assert!(is_complete_churn_record(text, k), "trial {trial} (seed {seed}): torn record {path}");
            }
            changed |= current != previous[k as usize];
            previous[k as usize] = current;
        }
        trials_with_writes += usize::from(changed);
        // The following operation succeeds.
        let probe = format!("recovery/churn-probe/{trial}.json");
        assert!(f.store.create_if_absent(&probe, "{}\n").expect("a following operation succeeds"));
        // A killed writer may leave its mutation claim (or the claim's stage) beside the record,
        // as a killed ghostget does (§3.5), and its staged temporary (which writes sweep at most
        // once a second); the next recovering listing removes them.
        f.store.snapshot("recovery/churn", true).expect("a recovering listing succeeds");
        assert!(staging_entries(&f.home).is_empty(), "trial {trial} (seed {seed}): stray temporaries {:?}", staging_entries(&f.home));
        let collection: Vec<String> =
            std::fs::read_dir(f.home.join("recovery/churn")).map(|d| d.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
        assert!(collection.iter().all(|n| n.ends_with(".json")), "trial {trial}: foreign entries {collection:?}");
    }
    // The kills must land while the worker is writing, not only before it starts.
    assert!(trials_with_writes >= TRIALS / 4, "only {trials_with_writes} of {TRIALS} trials saw writes (seed {seed})");
    eprintln!("{trials_with_writes} of {TRIALS} SIGKILLed workers had changed records");
}

/// A staged temporary of a writer that is provably dead (its pid no longer exists).
fn plant_dead_writers_temporary(home: &Path, uuid: &str) -> PathBuf {
    let mut gone = Command::new("true").spawn().expect("spawn");
    let pid = gone.id();
    gone.wait().expect("reap");
    let start_id = "5".repeat(64);
    let path = home.join(format!(".proclease/staging/{pid}-{start_id}-{uuid}.tmp"));
    std::fs::write(&path, "half a record").expect("planted");
    path
}

#[test]
fn dead_writers_temporaries_are_swept_by_a_first_write_and_by_every_recovering_listing() {
    let f = fixture();
    let first = plant_dead_writers_temporary(&f.home, "00000000-0000-4000-8000-000000000001");
    assert!(f.store.create_if_absent(RECORD, "one\n").expect("create"));
    assert!(!first.exists(), "a store handle's first write sweeps the staging directory");
    // Writes sweep at most once a second: a temporary of a writer that died just now stays until
    // then, or until the next recovering listing.
    let second = plant_dead_writers_temporary(&f.home, "00000000-0000-4000-8000-000000000002");
    assert!(f.store.replace_if_unchanged(RECORD, &sha256_hex(b"one\n"), "two\n").expect("replace"));
    assert!(second.exists(), "the second write in the same second does not list the staging directory again");
    f.store.snapshot("recovery/things", true).expect("recovering listing");
    assert!(!second.exists(), "a recovering listing always sweeps");
    assert_eq!(std::fs::read_to_string(f.home.join(RECORD)).expect("record"), "two\n");
}
