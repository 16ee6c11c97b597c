//! What the command line says (issue #18): each command's exact words for what it did and what
//! to do next, one `--json` convention, logging, and the files it writes. Real binary, real
//! state homes, real processes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_proclease");
const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const C: &str = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";
const LEASE_ID: &str = "44444444-4444-4444-8444-444444444444";

/// A private directory with a state home in it; the processes a test leaves running are
/// killed when it is dropped.
struct World {
    dir: tempfile::TempDir,
    home: PathBuf,
    leftovers: Vec<u32>,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("state");
        World { dir, home, leftovers: Vec::new() }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command.args(args).env("PROCLEASE_STATE_HOME", &self.home).env_remove("GHOSTGET_STATE_HOME").env_remove("RUST_LOG");
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("proclease runs")
    }

    fn json(&self, args: &[&str]) -> Value {
        let output = self.run(args);
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}{}", stdout(&output), stderr(&output)))
    }

    /// `run --workdir DIR -- sleep 600` whose supervisor is then killed (-9) once the child is
    /// recorded: returns (supervisor pid, child pid); the child keeps running.
    fn crashed_run(&mut self, dir: &Path) -> (u64, u64) {
        let mut supervisor: Child =
            self.command(&["run", "--workdir", dir.to_str().expect("utf-8"), "--", "sleep", "600"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn run");
        let start = Instant::now();
        let child = loop {
            let doc = self.json(&["doctor", "--json"]);
            let recorded = doc["entries"].as_array().into_iter().flatten().find(|e| e["target"] == dir.to_str().expect("utf-8"));
            if let Some(child) = recorded.and_then(|e| e["childPid"].as_u64()) {
                break child;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "the run never recorded its child: {doc}");
            std::thread::sleep(Duration::from_millis(50));
        };
        supervisor.kill().expect("kill -9 the supervisor");
        supervisor.wait().expect("reap");
        self.leftovers.push(u32::try_from(child).expect("pid"));
        (u64::from(supervisor.id()), child)
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for pid in &self.leftovers {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Kills a process and waits until its pid is gone (it is a child of the test: reaped).
fn kill_and_reap(child: &mut Child) {
    child.kill().expect("kill");
    child.wait().expect("reap");
}

/// The identity `proclease identity PID --json` reports for a live process.
fn identity_of(world: &World, pid: u32) -> Value {
    world.json(&["identity", &pid.to_string(), "--json"])
}

/// Writes a canonical v2 invocation lease (containment parent-owned) owned by `owner`.
fn write_invocation_lease(world: &World, owner: &Value) -> PathBuf {
    // The state home as proclease makes it (private, claimed).
    assert!(world.run(&["doctor"]).status.success());
    let identity = serde_json::json!({
        "adapterId": "portable-test", "bundleSha256": A, "contractVersion": 1, "descriptorSha256": C, "hostApiVersion": 1,
        "manifestSha256": B, "operation": "records.read", "pluginId": "portable-test", "pluginVersion": "1.0.0",
        "surfaceId": "portable-test", "transport": "provider-api",
    });
    let lease = serde_json::json!({
        "acquiredAt": "2026-07-25T12:00:00.000Z", "containment": {"status": "parent-owned"}, "identity": identity,
        "leaseId": LEASE_ID,
        "owner": {"bootId": owner["bootId"], "pid": owner["pid"], "processStartId": owner["processStartId"], "token": "66666666-6666-4666-8666-666666666666"},
        "runId": "55555555-5555-4555-8555-555555555555", "schemaVersion": 2,
    });
    use std::os::unix::fs::PermissionsExt as _;
    let collection = world.home.join("provider-plugin-state/.invocations");
    std::fs::create_dir_all(&collection).expect("collection");
    for dir in [world.home.join("provider-plugin-state"), collection.clone()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    let file = collection.join(format!("{LEASE_ID}.json"));
    // serde_json's map is sorted: this is the canonical form.
    std::fs::write(&file, format!("{lease}\n")).expect("write lease");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    file
}

#[test]
fn doctor_shows_the_child_column_with_numeric_pids_and_keeps_columns_aligned() {
    let mut world = World::new();
    let long = world.path("a-long-directory-name-that-is-wider-than-any-column-header/and/deeper/job");
    let short = world.path("job");
    let (owner_long, child_long) = world.crashed_run(&long);
    let (owner_short, child_short) = world.crashed_run(&short);

    let output = world.run(&["doctor"]);
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("state home: {}", world.home.display()));
    let header = lines[1];
    let target_width = long.to_str().expect("utf-8").len();
    assert!(header.starts_with(&format!("KIND         TARGET{}  OWNER  CHILD  PHASE    AGE  DISPOSITION  WHY", " ".repeat(target_width - 6))), "{text}");
    for (dir, owner, child) in [(&long, owner_long, child_long), (&short, owner_short, child_short)] {
        let row = lines.iter().find(|l| l.contains(&format!(" {} ", dir.display()))).unwrap_or_else(|| panic!("a row for {}: {text}", dir.display()));
        // Each column starts where its header starts (numbers end where theirs end).
        let at = |name: &str| header.find(name).expect("header column");
        assert_eq!(&row[at("TARGET")..at("TARGET") + dir.to_str().expect("utf-8").len()], dir.to_str().expect("utf-8"));
        assert_eq!(row[..at("CHILD") + 5].trim_end().rsplit(' ').next(), Some(child.to_string().as_str()), "CHILD column: {row}");
        assert_eq!(row[..at("OWNER") + 5].trim_end().rsplit(' ').next(), Some(owner.to_string().as_str()), "OWNER column: {row}");
        assert_eq!(&row[at("DISPOSITION")..at("DISPOSITION") + 6], "active", "{row}");
        assert!(row.contains(&format!("owner pid {owner} is gone")), "{row}");
    }

    let doc = world.json(&["doctor", "--json"]);
    assert_eq!(doc["schemaVersion"], 1);
    let entry = doc["entries"].as_array().expect("entries").iter().find(|e| e["target"] == short.to_str().expect("utf-8")).expect("entry");
    assert_eq!(entry["ownerPid"], serde_json::json!(owner_short), "pids are numbers: {entry}");
    assert_eq!(entry["childPid"], serde_json::json!(child_short), "{entry}");
    assert_eq!(entry["disposition"], "active");
}

#[test]
fn recover_dry_run_covers_invocation_leases_and_recover_says_what_it_removed() {
    let world = World::new();
    let mut gone = Command::new("sleep").arg("600").spawn().expect("sleep");
    let owner = identity_of(&world, gone.id());
    kill_and_reap(&mut gone);
    let lease = write_invocation_lease(&world, &owner);

    let output = world.run(&["recover", "--dry-run"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), format!("would remove invocation lease {LEASE_ID}: its owner and host are provably gone\n"));
    assert!(lease.exists(), "a dry run removes nothing");
    let doc = world.json(&["recover", "--dry-run", "--json"]);
    assert_eq!(doc["schemaVersion"], 1);
    assert_eq!(doc["invocationLeases"]["entries"], serde_json::json!([{"leaseId": LEASE_ID, "decision": "remove"}]));
    assert_eq!(doc["invocationLeases"]["removed"], 1);

    let doctor = world.json(&["doctor", "--json"]);
    let row = &doctor["entries"][0];
    assert_eq!((row["kind"].as_str(), row["disposition"].as_str()), (Some("invocation"), Some("recoverable")), "{doctor}");
    assert_eq!(row["ownerPid"], owner["pid"]);
    assert_eq!(row["recoverAction"], "remove");

    let output = world.run(&["recover"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        format!(
            "removed invocation lease {LEASE_ID}: its owner and host are provably gone\nrecovered: 0\npublished: 0\nactive: 0\nindeterminate: 0\n\
             invocation leases removed: 1 (active 0, unknown 0, invalid 0)\n"
        )
    );
    assert!(!lease.exists());
}

#[test]
fn recover_names_each_directory_it_removed_and_each_lease_it_kept() {
    let mut world = World::new();
    let kept = world.path("kept");
    let removed = world.path("removed");
    let (_, _) = world.crashed_run(&kept);
    let (owner, child) = world.crashed_run(&removed);
    let status = Command::new("kill").arg("-9").arg(child.to_string()).status().expect("kill");
    assert!(status.success());
    // The child was not the test's: wait until the kernel has reaped it (init adopts it).
    let start = Instant::now();
    while Path::new(&format!("/proc/{child}")).exists() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = world.run(&["recover"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}{}", stderr(&output));
    let removed_line = format!("removed {} (owner pid {owner} is gone", removed.display());
    assert!(text.lines().any(|l| l.starts_with(&removed_line)), "{text}");
    assert!(text.lines().any(|l| l.starts_with(&format!("kept {}: active (owner pid", kept.display()))), "{text}");
    assert!(text.ends_with("recovered: 1\npublished: 0\nactive: 1\nindeterminate: 0\n"), "{text}");
    assert!(!removed.exists() && kept.exists());
}

/// A creator that crashed between its `mkdir` and its lease leaves an intent and an empty
/// directory: `recover` removes the directory and says so, in its lines and in `--json`
/// (`directoryCreations`, one model for both).
#[test]
fn recover_reports_what_a_crashed_creator_left_in_text_and_json() {
    let world = World::new();
    let (left, file) = crashed_creator_left(&world, "left");
    let left_text = left.to_str().expect("UTF-8");
    let id = "77777777-7777-4777-8777-777777777777";

    let doc = world.json(&["recover", "--dry-run", "--json"]);
    let row = &doc["directoryCreations"][0];
    assert_eq!((row["file"].as_str(), row["path"].as_str(), row["action"].as_str()), (Some(&*format!("{id}.json")), Some(left_text), Some("finish")), "{doc}");
    assert_eq!((&row["removed"], &row["done"], &row["error"]), (&serde_json::json!([left_text]), &serde_json::json!(false), &Value::Null), "{doc}");
    assert!(left.exists() && file.exists(), "a dry run removes nothing");

    let output = world.run(&["recover"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}{}", stderr(&output));
    assert!(text.lines().any(|l| l.starts_with(&format!("removed {left_text} (")) && l.ends_with(": a crashed run created it and never leased it)")), "{text}");
    assert!(!left.exists() && !file.exists(), "the directory and its intent are gone");
}

/// Makes the directory `path`, mode 0700 (as a creator makes it).
fn private_dir(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir(path).expect("mkdir");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).expect("chmod");
}

/// What a creator that crashed between its `mkdir` and its lease leaves: the empty directory
/// `name` in the world and the intent naming it (a killed process's), whose file is returned.
fn crashed_creator_left(world: &World, name: &str) -> (PathBuf, PathBuf) {
    let left = world.path(name);
    private_dir(&left);
    let file = crashed_creator_intent(world, &left, &[&left]);
    (left, file)
}

/// The intent of a creator that crashed before it recorded any identity: it was creating
/// `path` and had planned `created` (a killed process's; nothing is made here). Its file.
fn crashed_creator_intent(world: &World, path: &Path, created: &[&Path]) -> PathBuf {
    let mut gone = Command::new("sleep").arg("600").spawn().expect("sleep");
    let owner = identity_of(world, gone.id());
    kill_and_reap(&mut gone);
    creator_intent(world, &owner, path, created)
}

/// The intent of the creator `owner` (an identity as `proclease identity --json` gives it),
/// creating `path`, that planned `created` and recorded no identity yet. Its file.
fn creator_intent(world: &World, owner: &Value, path: &Path, created: &[&Path]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    assert!(world.run(&["doctor"]).status.success(), "the state home as proclease makes it");
    let id = "77777777-7777-4777-8777-777777777777";
    let created: Vec<Value> = created.iter().map(|p| serde_json::json!({"identity": null, "path": p.to_str().expect("UTF-8")})).collect();
    let intent = serde_json::json!({
        "created": created, "id": id, "kind": "proclease-directory-creation",
        "owner": {"bootId": owner["bootId"], "pid": owner["pid"], "processStartId": owner["processStartId"]},
        "path": path.to_str().expect("UTF-8"), "schemaVersion": 1,
    });
    let intents = world.home.join("recovery/proclease-directory-creations");
    std::fs::create_dir_all(&intents).expect("intents");
    for dir in [world.home.join("recovery"), intents.clone()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    let file = intents.join(format!("{id}.json"));
    std::fs::write(&file, format!("{intent}\n")).expect("write intent");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    file
}

/// Runs `recover` twice, each time succeeding and leaving the directory `kept` (`why` says
/// whose it is).
fn recover_twice_keeping(world: &World, kept: &Path, why: &str) {
    for _ in 0..2 {
        let output = world.run(&["recover"]);
        assert!(output.status.success(), "{}", stderr(&output));
        assert!(kept.is_dir(), "{why}: {}", stdout(&output));
    }
}

/// The intent's entries have no identity, so its recovery would remove any empty directory at
/// their paths: one a run made inside the directory it leased, or a stage published where the
/// dead creator was making its output. Once leased, both are the lease's (deviation 27).
#[test]
fn what_a_run_made_or_published_where_a_crashed_creator_planned_stays() {
    let world = World::new();
    let (outer, inner) = (world.path("job"), world.path("job/cache"));
    private_dir(&outer);
    let intent = crashed_creator_intent(&world, &inner, &[&outer, &inner]);
    let output = world.run(&["run", "--workdir", outer.to_str().expect("UTF-8"), "--", "sh", "-c", "mkdir cache && echo built > result.txt"]);
    assert!(output.status.success(), "{}", stderr(&output));
    recover_twice_keeping(&world, &inner, "the empty directory the run made in its result stays");
    assert!(!intent.exists(), "nothing of the intent is left: the run's lease took both directories");

    let (stage, published) = (world.path("exports/.stage"), world.path("exports/v1"));
    private_dir(&world.path("exports"));
    let intent = crashed_creator_intent(&world, &published, &[&published]);
    let output = world.run(&["run", "--stage", stage.to_str().expect("UTF-8"), "--output", published.to_str().expect("UTF-8"), "--", "true"]);
    assert!(output.status.success(), "{}", stderr(&output));
    recover_twice_keeping(&world, &published, "the published (empty) output stays");
    assert!(!intent.exists(), "the stage's lease took its output root out of the intent");
}

/// The hole the interleaving explorer found (`docs/deviations.md` 27): a run that leases the
/// empty directory a crashed creator left, and keeps it as its result, owns it from then on —
/// the dead creator's intent stops naming it, and no later `recover` removes it.
#[test]
fn a_directory_a_crashed_creator_left_is_kept_once_a_run_leased_it() {
    let world = World::new();
    let (left, intent) = crashed_creator_left(&world, "reused");
    let left_text = left.to_str().expect("UTF-8");
    let output = world.run(&["run", "--workdir", left_text, "--", "true"]);
    assert!(output.status.success(), "the empty directory is leased: {}", stderr(&output));
    for _ in 0..2 {
        let output = world.run(&["recover"]);
        assert!(output.status.success(), "{}", stderr(&output));
        assert!(left.is_dir(), "the run's (empty) result stays through every recover: {}", stdout(&output));
        assert!(stdout(&output).ends_with("recovered: 0\npublished: 0\nactive: 0\nindeterminate: 0\n"), "{}", stdout(&output));
    }
    assert!(!intent.exists(), "the dead creator's intent no longer names the directory the run leased");
}

/// The witnesses left in the state home (`.proclease/witnesses/<boot id>/*.witness`).
fn witnesses_left(world: &World) -> Vec<PathBuf> {
    let boots = std::fs::read_dir(world.home.join(".proclease/witnesses")).map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect::<Vec<_>>()).unwrap_or_default();
    boots.iter().flat_map(|boot| std::fs::read_dir(boot).into_iter().flatten().filter_map(Result::ok).map(|e| e.path())).collect()
}

/// Commands that end normally leave no witness behind: before, each `doctor`, `recover` and
/// `invocations repair` left one, so a state home checked from cron gathered a file a minute.
#[test]
fn commands_that_end_normally_leave_no_witness_behind() {
    let world = World::new();
    let work = world.path("job");
    let commands: [&[&str]; 6] = [
        &["doctor"],
        &["recover"],
        &["recover", "--dry-run"],
        &["invocations", "repair"],
        &["invocations", "list"],
        &["run", "--workdir", work.to_str().expect("UTF-8"), "--", "true"],
    ];
    for _ in 0..2 {
        for args in commands {
            let output = world.run(args);
            assert!(output.status.success(), "{args:?}: {}", stderr(&output));
            assert_eq!(witnesses_left(&world), Vec::<PathBuf>::new(), "after {args:?}");
        }
    }
}

/// A creator alive when a run leased the directory it had made (a host that takes no
/// lease-creation lock: the native one cannot interleave so), and dead while the run works:
/// recovery never removes what the live run made inside its directory, even where the dead
/// creator's intent, recording no identity, names it.
#[test]
fn recovery_leaves_what_a_live_run_made_inside_its_directory() {
    let world = World::new();
    let (outer, inner) = (world.path("job"), world.path("job/cache"));
    private_dir(&outer);
    let mut creator = Command::new("sleep").arg("600").spawn().expect("sleep");
    let owner = identity_of(&world, creator.id());
    let intent = creator_intent(&world, &owner, &inner, &[&outer, &inner]);
    let script = "mkdir cache && touch ready && while [ ! -e go ]; do sleep 0.02; done; [ -d cache ] && echo kept > kept.txt";
    let mut run = world.command(&["run", "--workdir", outer.to_str().expect("UTF-8"), "--", "sh", "-c", script]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("run");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !outer.join("ready").exists() {
        assert!(Instant::now() < deadline, "the run never started its command");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(intent.exists(), "a live creator's intent is left alone");
    kill_and_reap(&mut creator);
    let output = world.run(&["recover"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(inner.is_dir(), "the live run's (empty) directory stays: {}", stdout(&output));
    std::fs::write(outer.join("go"), b"").expect("go");
    let status = run.wait().expect("the run ends");
    assert!(status.success(), "the command found its directory: {status}");
    assert!(outer.join("kept.txt").exists());
}

#[test]
fn validate_takes_the_kind_from_the_collection_and_says_why_a_name_is_refused() {
    let world = World::new();
    let owner = format!(r#"{{"bootId":"{A}","pid":4242,"processStartId":"{B}"}}"#);
    let lease = |kind: &str| {
        format!(
            r#"{{"childOwner":null,"createdAtMs":1000,"directoryIdentity":{{"birthtimeNs":"1722000001000000000","device":"2049","inode":"131074"}},"id":"33333333-3333-4333-9333-333333333333","kind":"{kind}","outputRoot":"/home/u/exports/published","owner":{owner},"parentIdentity":{{"birthtimeNs":"1722000000123456789","device":"2049","inode":"131073"}},"parentPath":"/home/u/exports","path":"/home/u/exports/stage","phase":"preparing","recoverAfterMs":2000,"role":"bundle-stage","schemaVersion":2}}"#
        ) + "\n"
    };
    let collection = world.path("copy/beeper-message-like-me-directory-leases");
    std::fs::create_dir_all(&collection).expect("dir");
    let valid = collection.join("33333333-3333-4333-9333-333333333333.json");
    std::fs::write(&valid, lease("beeper-message-like-me-directory-lease")).expect("write");
    let renamed = collection.join("00000000-0000-4000-8000-000000000000.json");
    std::fs::write(&renamed, lease("beeper-message-like-me-directory-lease")).expect("write");
    let other_kind = world.path("copy/beeper-message-like-me-directory-leases/33333333-3333-4333-9333-333333333334.json");
    std::fs::write(&other_kind, lease("beeper-message-like-me-export-admission")).expect("write");
    let marker = world.path("copy/.io-state.json");
    std::fs::write(&marker, "{\"kind\":\"io-state\",\"schemaVersion\":1}\n").expect("write");
    let bad_marker = world.path("bad/.io-state.json");
    std::fs::create_dir_all(bad_marker.parent().expect("parent")).expect("dir");
    std::fs::write(&bad_marker, "{\"kind\":\"io-state\",\"schemaVersion\":1}").expect("write");

    let output = world.run(&["validate", world.path("copy").to_str().expect("utf-8"), bad_marker.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(1));
    let lines: Vec<String> = stdout(&output).lines().map(String::from).collect();
    let line = |path: &Path| lines.iter().find(|l| l.starts_with(&format!("{}: ", path.display()))).cloned().unwrap_or_else(|| panic!("{}: {lines:?}", path.display()));
    assert!(line(&marker).starts_with(&format!("{}: valid state-home-marker v1, canonical, sha256 ", marker.display())), "{lines:?}");
    assert!(line(&valid).starts_with(&format!("{}: valid directory-lease v2, canonical", valid.display())), "{lines:?}");
    assert!(
        line(&renamed).starts_with(&format!(
            "{}: invalid directory-lease: Beeper Message Like Me recovery: directory lease is not canonical; its file name must be \
             33333333-3333-4333-9333-333333333333.json (the lease's id): a reader refuses it under any other name (canonical, sha256 ",
            renamed.display()
        )),
        "{lines:?}"
    );
    assert!(
        line(&other_kind).starts_with(&format!("{}: invalid directory-lease: Beeper Message Like Me recovery: directory lease identity is invalid (", other_kind.display())),
        "{lines:?}"
    );
    assert!(
        line(&bad_marker).starts_with(&format!(
            "{}: invalid state-home-marker: state-home marker must be exactly {{\"kind\":\"io-state\",\"schemaVersion\":1}} and a newline (§3.2): \
             a reader refuses the state home (",
            bad_marker.display()
        )),
        "{lines:?}"
    );

    let doc = world.json(&["validate", "--json", renamed.to_str().expect("utf-8")]);
    assert_eq!(doc["schemaVersion"], 1);
    assert_eq!(doc["files"][0]["kind"], "directory-lease");
    assert_eq!(doc["files"][0]["hint"], "its file name must be 33333333-3333-4333-9333-333333333333.json (the lease's id): a reader refuses it under any other name");
}

#[test]
fn identity_of_a_gone_pid_prints_its_status() {
    let world = World::new();
    let mut gone = Command::new("true").spawn().expect("true");
    let pid = gone.id();
    gone.wait().expect("reap");
    let output = world.run(&["identity", &pid.to_string()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), format!("pid               {pid}\nowner status      different-or-dead (no live process has this pid)\n"));
    let doc = world.json(&["identity", &pid.to_string(), "--json"]);
    assert_eq!(doc, serde_json::json!({"schemaVersion": 1, "pid": pid, "bootId": null, "processStartId": null, "status": "different-or-dead"}));
    let live = world.json(&["identity", "1", "--json"]);
    assert_eq!((live["pid"].as_u64(), live["status"].as_str()), (Some(1), Some("exact-live-owner")), "{live}");
}

#[test]
fn messages_name_the_cause_and_the_way_out() {
    let world = World::new();
    // A workdir that is a file.
    let file = world.path("a-file");
    std::fs::write(&file, "x").expect("write");
    let output = world.run(&["run", "--workdir", file.to_str().expect("utf-8"), "--", "true"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stderr(&output), format!("proclease: {}: refused: it exists and is not a directory; give a directory path (proclease creates it if absent)\n", file.display()));
    // The command without `--`.
    let job = world.path("job");
    let output = world.run(&["run", "--workdir", job.to_str().expect("utf-8"), "sleep", "1"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).ends_with("hint: put the command after `--`, e.g. proclease run --workdir DIR -- make -j4\n"), "{}", stderr(&output));
    assert!(!job.exists(), "a usage error creates nothing");
    // `invocations run` without a catalog.
    let op = world.path("op.json");
    std::fs::write(
        &op,
        format!(
            r#"{{"adapterId":"portable-test","bundleSha256":"{A}","contractVersion":1,"descriptorSha256":"{C}","hostApiVersion":1,"manifestSha256":"{B}","operation":"records.read","pluginId":"portable-test","pluginVersion":"1.0.0","surfaceId":"portable-test","transport":"provider-api"}}"#
        ),
    )
    .expect("write");
    let output = world.run(&["invocations", "run", "--identity", op.to_str().expect("utf-8"), "--", "true"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output),
        format!(
            "proclease: portable provider plugin portable-test changed or was disabled before execution; retry from current capabilities\n\
             the plugin catalog {} does not exist, so no plugin is installed: create it, or name another with --plugin-catalog FILE \
             (format: `proclease invocations --help`)\n",
            world.home.join("provider-plugins/catalog.json").display()
        )
    );
    // Help text: doctor names invocation leases and CHILD; no help cites sections of a spec
    // that is not in the repository.
    let doctor_help = stdout(&world.run(&["doctor", "--help"]));
    assert!(doctor_help.contains("every plugin invocation lease") && doctor_help.contains("CHILD is the recorded child"), "{doctor_help}");
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["recover", "--help"],
        &["doctor", "--help"],
        &["invocations", "--help"],
        &["invocations", "repair", "--help"],
        &["invocations", "run", "--help"],
        &["validate", "--help"],
        &["identity", "--help"],
        &["component", "--help"],
    ] {
        let help = stdout(&world.run(args));
        assert!(!help.contains('§'), "{args:?} cites a spec section: {help}");
    }
}

#[test]
fn recover_on_a_read_only_state_home_names_the_cause_and_doctor_still_works() {
    let required = std::env::var_os("PROCLEASE_REQUIRE_MOUNTS").is_some();
    let mut world = World::new();
    let job = world.path("job");
    world.crashed_run(&job);
    let ro = world.path("read-only-home");
    std::fs::create_dir(&ro).expect("dir");
    let bind = Command::new("mount").arg("--bind").arg(&world.home).arg(&ro).status();
    if !bind.is_ok_and(|s| s.success()) {
        assert!(!required, "PROCLEASE_REQUIRE_MOUNTS is set but a bind mount failed (run as root)");
        eprintln!("SKIPPED: a read-only bind mount needs root (mount --bind)");
        return;
    }
    let remount = Command::new("mount").args(["-o", "remount,ro,bind"]).arg(&ro).status().expect("remount");
    let result = std::panic::catch_unwind(|| {
        assert!(remount.success());
        let mut command = world.command(&["recover"]);
        command.env("PROCLEASE_STATE_HOME", &ro);
        let output = command.output().expect("recover");
        assert_eq!(output.status.code(), Some(1));
        assert_eq!(
            stderr(&output),
            format!(
                "proclease: {}: Read-only file system (os error 30)\nrecover writes to the state home (its locks and lease records), so the \
                 state home must be writable; `proclease doctor` shows the same decisions without writing\n",
                ro.join(".proclease/locks/directory-lease-recovery.lock").display()
            )
        );
        let mut command = world.command(&["doctor", "--json"]);
        command.env("PROCLEASE_STATE_HOME", &ro);
        let output = command.output().expect("doctor");
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let doc: Value = serde_json::from_slice(&output.stdout).expect("json");
        assert_eq!(doc["entries"][0]["disposition"], "active", "{doc}");
    });
    let _ = Command::new("umount").arg(&ro).status();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn version_completions_manual_and_the_component_file() {
    let world = World::new();
    let description = world.json(&["component", "--interfaces", "--json"]);
    assert_eq!(description["schemaVersion"], 1);
    assert_eq!(description["witPackage"], "proclease:lease@0.3.0");
    let sha = description["sha256"].as_str().expect("sha256");
    assert_eq!(stdout(&world.run(&["--version"])), format!("proclease 0.1.0 (component sha256 {sha}, WIT proclease:lease@0.3.0)\n"));
    assert!(description["imports"].as_array().is_some_and(|i| i.iter().any(|n| n == "proclease:lease/state-store@0.3.0")), "{description}");

    let bash = stdout(&world.run(&["completions", "bash"]));
    assert!(bash.contains("_proclease()") && bash.contains("recover") && bash.contains("--workdir"), "{bash}");
    let man = stdout(&world.run(&["man"]));
    assert!(man.starts_with(".ie \\n(.g .ds Aq \\(aq") && man.contains(".TH proclease 1"), "{man}");
    let pages = world.path("man");
    let output = world.run(&["man", "--dir", pages.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    for page in ["proclease.1", "proclease-run.1", "proclease-recover.1", "proclease-invocations-repair.1"] {
        assert!(std::fs::read_to_string(pages.join(page)).is_ok_and(|t| t.contains(".TH")), "{page}");
    }

    let wasm = world.path("proclease.wasm");
    std::fs::write(&wasm, "keep me").expect("write");
    let output = world.run(&["component", "-o", wasm.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output),
        format!("proclease: {}: cannot write the component: File exists (os error 17)\nit exists and was kept; add --force to replace it\n", wasm.display())
    );
    assert_eq!(std::fs::read_to_string(&wasm).expect("kept"), "keep me");
    let output = world.run(&["component", "-o", wasm.to_str().expect("utf-8"), "--force"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(std::fs::read(&wasm).expect("written").starts_with(b"\0asm"));

    // A terminal on standard output: `script` gives the command one.
    let script = Command::new("script").args(["-qec", &format!("{BIN} component"), "/dev/null"]).output();
    match script {
        Ok(output) => {
            let text = stdout(&output);
            assert!(text.contains("proclease: standard output is a terminal: the component is binary"), "{text}");
            assert!(!text.contains("\0asm"), "no binary on a terminal: {text}");
        }
        Err(e) => eprintln!("SKIPPED the terminal case: script(1) is not available ({e})"),
    }
}

#[test]
fn logging_follows_verbose_quiet_and_rust_log() {
    let mut world = World::new();
    let job = world.path("job");
    world.crashed_run(&job);
    let quiet = world.run(&["recover", "--dry-run"]);
    assert_eq!(stderr(&quiet), "", "no log by default");
    let verbose = world.run(&["-v", "recover", "--dry-run"]);
    let log = stderr(&verbose);
    assert!(log.contains("proclease::api::directory_lease: directory lease recovery") && log.contains(&format!("path={} ", job.display())), "{log}");
    assert!(log.contains("action=keep ") && log.contains("dry_run=true") && log.contains("reason=owner pid"), "{log}");
    assert!(!log.contains("probed a recorded process"), "-v shows decisions, not every probe: {log}");
    let debug = world.run(&["-vv", "doctor"]);
    assert!(stderr(&debug).contains("probed a recorded process") && stderr(&debug).contains("spawned=Held"), "{}", stderr(&debug));
    let mut command = world.command(&["-q", "doctor"]);
    command.env("RUST_LOG", "proclease=debug");
    let output = command.output().expect("doctor");
    assert!(stderr(&output).contains("probed a recorded process"), "RUST_LOG overrides -q: {}", stderr(&output));
    let silent = world.run(&["-q", "recover", "--dry-run"]);
    assert_eq!(stderr(&silent), "");
}

#[test]
fn every_json_document_has_one_convention() {
    let mut world = World::new();
    let job = world.path("job");
    world.crashed_run(&job);
    for args in [
        &["doctor", "--json"][..],
        &["recover", "--dry-run", "--json"],
        &["invocations", "list", "--json"],
        &["invocations", "repair", "--json"],
        &["identity", "--json"],
        &["component", "--interfaces", "--json"],
    ] {
        let output = world.run(args);
        let text = stdout(&output);
        let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"));
        assert_eq!(doc["schemaVersion"], 1, "{args:?}: {text}");
        assert_eq!(text, format!("{}\n", serde_json::to_string_pretty(&doc).expect("pretty")), "{args:?} is pretty-printed");
    }
    let doctor = world.json(&["doctor", "--json"]);
    assert!(doctor["entries"][0]["ownerPid"].is_u64() && doctor["entries"][0]["childPid"].is_u64(), "{doctor}");
}
