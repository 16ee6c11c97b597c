//! The `proclease` command line, run as a user would: real files, the real binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const C: &str = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

fn proclease(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_proclease")).args(args).output().expect("proclease runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The byte-exact examples of the reference's Appendix A that state a sha256: (file name,
/// file text, sha256).
fn appendix_a() -> Vec<(&'static str, String, &'static str)> {
    let owner = format!(r#"{{"bootId":"{A}","pid":4242,"processStartId":"{B}"}}"#);
    let identity = format!(
        r#"{{"adapterId":"portable-test","bundleSha256":"{A}","contractVersion":1,"descriptorSha256":"{C}","hostApiVersion":1,"manifestSha256":"{B}","operation":"records.read","pluginId":"portable-test","pluginVersion":"1.0.0","surfaceId":"portable-test","transport":"provider-api"}}"#
    );
    let invocation = |containment: &str| {
        format!(
            r#"{{"acquiredAt":"2026-07-25T12:00:00.000Z","containment":{containment},"identity":{identity},"leaseId":"44444444-4444-4444-8444-444444444444","owner":{{"bootId":"{A}","pid":101,"processStartId":"{B}","token":"66666666-6666-4666-8666-666666666666"}},"runId":"55555555-5555-4555-8555-555555555555","schemaVersion":2}}"#
        ) + "\n"
    };
    vec![
        (
            "active.json",
            format!(
                r#"{{"helperOwner":null,"id":"11111111-1111-4111-8111-111111111111","kind":"beeper-message-like-me-export-admission","owner":{owner},"phase":"parent-owned","revision":"22222222-2222-4222-a222-222222222222","schemaVersion":2}}"#
            ) + "\n",
            "1c92998c4b17846b2887d47528da64853b94d362dadb84edbc6dd9763492b690",
        ),
        (
            "active.json",
            format!(r#"{{"id":"11111111-1111-4111-8111-111111111111","kind":"beeper-message-like-me-export-admission","owner":{owner},"schemaVersion":1}}"#) + "\n",
            "4a1fab41d79d1f49836cd1cdfbc26db778b62f1e95a189d91e5512b131a8c9ee",
        ),
        (
            "33333333-3333-4333-9333-333333333333.json",
            format!(
                r#"{{"childOwner":null,"createdAtMs":1000,"directoryIdentity":{{"birthtimeNs":"1722000001000000000","device":"2049","inode":"131074"}},"id":"33333333-3333-4333-9333-333333333333","kind":"beeper-message-like-me-directory-lease","outputRoot":"/home/u/exports/published","owner":{owner},"parentIdentity":{{"birthtimeNs":"1722000000123456789","device":"2049","inode":"131073"}},"parentPath":"/home/u/exports","path":"/home/u/exports/stage","phase":"preparing","recoverAfterMs":2000,"role":"bundle-stage","schemaVersion":2}}"#
            ) + "\n",
            "e8a6927340e4a5d0fcc0e736e9554b43ab3473762081fc419d2cd8037487f3d3",
        ),
        ("44444444-4444-4444-8444-444444444444.json", invocation(r#"{"status":"parent-owned"}"#), "328d266aa362da4a3871b2de637f263f291b2ad0bcc1937254495712bd0fe123"),
        (
            "44444444-4444-4444-8444-444444444444.json",
            invocation(r#"{"host":null,"status":"cleanup-complete"}"#),
            "a171156fc3085501393c987cb711af0726bcd56bf0dd1afda3f0aa3ffba961f0",
        ),
    ]
}

fn write(dir: &Path, sub: usize, name: &str, text: &str) -> PathBuf {
    let dir = dir.join(sub.to_string());
    std::fs::create_dir_all(&dir).expect("mkdir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

#[test]
fn validate_prints_the_appendix_a_sha256_of_each_example() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, (name, text, sha256)) in appendix_a().into_iter().enumerate() {
        let path = write(dir.path(), i, name, &text);
        let output = proclease(&["validate", path.to_str().expect("utf-8 path")]);
        let out = stdout(&output);
        assert!(output.status.success(), "example {}: {out}", i + 1);
        assert!(out.contains(&format!("canonical, sha256 {sha256}")), "example {}: {out}", i + 1);
        assert!(out.contains(": valid "), "example {}: {out}", i + 1);
    }
}

#[test]
fn validate_rejects_one_altered_byte_with_the_reference_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = [
        "Beeper Message Like Me recovery: export admission is not canonical",
        "Beeper Message Like Me recovery: export admission is not canonical",
        "Beeper Message Like Me recovery: directory lease is not canonical",
        "portable invocation lease is not canonical",
        "portable invocation lease is not canonical",
    ];
    for (i, ((name, text, _), message)) in appendix_a().into_iter().zip(expected).enumerate() {
        // Replace the final newline with a space: still JSON, still a valid record, one byte off.
        let altered = format!("{} ", text.trim_end_matches('\n'));
        let path = write(dir.path(), i, name, &altered);
        let output = proclease(&["validate", path.to_str().expect("utf-8 path")]);
        let out = stdout(&output);
        assert_eq!(output.status.code(), Some(1), "example {}: {out}", i + 1);
        assert!(out.contains(message), "example {}: {out}", i + 1);
        assert!(out.contains("not canonical, sha256"), "example {}: {out}", i + 1);
    }
}

#[test]
fn validate_reports_every_file_and_fails_if_any_is_invalid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (name, text, sha256) = appendix_a().remove(0);
    let good = write(dir.path(), 0, name, &text);
    let bad = write(dir.path(), 1, "active.json", "{\"schemaVersion\":2}\n");
    let missing = dir.path().join("absent.json");
    let output = proclease(&["validate", "--json", good.to_str().expect("utf-8"), bad.to_str().expect("utf-8"), missing.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).expect("--json prints JSON");
    assert_eq!(doc["schemaVersion"], 1);
    let items = doc["files"].as_array().expect("an array of files");
    assert_eq!(items.len(), 3);
    assert_eq!(items[0]["valid"], true);
    assert_eq!(items[0]["kind"], "export-admission");
    assert_eq!(items[0]["schema"], "v2");
    assert_eq!(items[0]["sha256"], sha256);
    assert_eq!(items[1]["valid"], false);
    assert_eq!(items[1]["error"], "Beeper Message Like Me recovery: export admission has an unsupported shape");
    assert_eq!(items[2]["valid"], false);
    assert!(items[2]["error"].as_str().expect("message").starts_with("cannot open"));
}

#[test]
fn validate_refuses_non_utf8_and_unknown_records_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let binary = dir.path().join("binary.json");
    std::fs::write(&binary, b"{\"a\":\"\xff\"}\n").expect("write");
    let unknown = write(dir.path(), 0, "thing.json", "{\"hello\":1}\n");
    let output = proclease(&["validate", binary.to_str().expect("utf-8"), unknown.to_str().expect("utf-8")]);
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(1));
    assert!(out.contains("unreadable: not valid UTF-8 (first bad byte at offset 6)"), "{out}");
    assert!(out.contains("invalid unknown kind: not a proclease record"), "{out}");
}

#[test]
fn component_writes_the_embedded_component() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("proclease.wasm");
    let output = proclease(&["component", "-o", path.to_str().expect("utf-8")]);
    assert!(output.status.success());
    let bytes = std::fs::read(&path).expect("written");
    // A component (not a core module): magic, then version 0x0d layer 1.
    assert_eq!(&bytes[..8], b"\0asm\x0d\x00\x01\x00");
    let to_stdout = proclease(&["component"]);
    assert_eq!(to_stdout.stdout, bytes);
}

#[test]
fn usage_errors_exit_2_and_help_shows_examples() {
    assert_eq!(proclease(&["validate"]).status.code(), Some(2));
    assert_eq!(proclease(&["no-such-command"]).status.code(), Some(2));
    let help = proclease(&["--help"]);
    assert!(help.status.success());
    assert!(stdout(&help).contains("Examples:"));
    let version = proclease(&["--version"]);
    let text = stdout(&version);
    assert!(text.starts_with(&format!("proclease {} (component sha256 ", env!("CARGO_PKG_VERSION"))), "{text}");
    assert!(text.ends_with(", WIT proclease:lease@0.3.0)\n"), "{text}");
}

#[test]
fn component_interfaces_name_exactly_the_contract() {
    let output = proclease(&["component", "--interfaces"]);
    assert!(output.status.success());
    let out = stdout(&output);
    for import in ["state-store", "workspace", "process-identity", "clock", "entropy"] {
        assert!(out.contains(&format!("import  proclease:lease/{import}@0.3.0")), "{out}");
    }
    assert!(!out.contains("wasi:"), "no ambient WASI imports: {out}");
    assert!(out.contains("export  proclease:lease/records@0.3.0"), "{out}");
}

/// `component --portable` writes the portable artifact (the component with the portable store
/// inside, `host/component/proclease-portable.wasm`) and describes it: it imports the
/// system-call contract where the component imports a state store and a workspace.
#[test]
fn component_portable_writes_and_describes_the_portable_artifact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("proclease-portable.wasm");
    let output = proclease(&["component", "--portable", "-o", path.to_str().expect("utf-8")]);
    assert!(output.status.success(), "{output:?}");
    let bytes = std::fs::read(&path).expect("written");
    let shipped = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/component/proclease-portable.wasm")).expect("checked in");
    assert!(bytes == shipped, "the portable artifact written is the one shipped");
    assert_eq!(proclease(&["component", "--portable"]).stdout, bytes);
    assert!(bytes != proclease(&["component"]).stdout, "not the component");

    let described = proclease(&["component", "--portable", "--interfaces", "--json"]);
    assert!(described.status.success(), "{described:?}");
    let description: serde_json::Value = serde_json::from_slice(&described.stdout).expect("JSON");
    assert_eq!(description["sha256"], proclease::core::digest::sha256_hex(&bytes));
    assert_eq!(description["bytes"], bytes.len());
    let names = |key: &str| description[key].as_array().expect("a list").iter().map(|n| n.as_str().expect("a name").to_string()).collect::<Vec<_>>();
    let imports = names("imports");
    for import in ["sys-fs", "sys-kernel", "process-identity", "clock", "entropy"] {
        assert!(imports.contains(&format!("proclease:lease/{import}@0.3.0")), "{imports:?}");
    }
    assert!(!imports.iter().any(|n| n.contains("state-store") || n.contains("workspace") || n.contains("plugin-catalog") || n.starts_with("wasi:")), "{imports:?}");
    for export in ["directory-leases", "state-store", "workspace", "plugin-catalog"] {
        assert!(names("exports").contains(&format!("proclease:lease/{export}@0.3.0")), "{description}");
    }
}

#[test]
fn validate_never_blocks_on_special_files_and_says_when_nothing_was_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("lease.json");
    let status = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(status.success());
    let output = proclease(&["validate", fifo.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stdout(&output).contains("unreadable: not a regular file"), "{}", stdout(&output));
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let output = proclease(&["validate", empty.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no *.json files"));
}

/// An etcd store asked of a build without cluster support is refused, never served by the
/// local state home instead (two machines would then decide alone), from `--store` and from
/// `PROCLEASE_STORE`. `.ci/run` runs this file on such a build
/// (`--no-default-features --features cli`).
#[cfg(not(feature = "cluster"))]
#[test]
fn an_etcd_store_without_cluster_support_is_refused_not_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let state = state.to_str().expect("utf-8");
    let out = proclease(&["--state-home", state, "--store", "etcd://127.0.0.1:2379/fleet", "doctor"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let message = String::from_utf8_lossy(&out.stderr);
    assert!(message.contains("etcd://127.0.0.1:2379/fleet: this proclease was built without cluster support"), "{message}");
    assert!(message.contains("enable its feature `cluster`"), "{message}");
    let out = Command::new(env!("CARGO_BIN_EXE_proclease"))
        .args(["--state-home", state, "doctor"])
        .env("PROCLEASE_STORE", "etcd://127.0.0.1:2379/fleet")
        .output()
        .expect("proclease runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("built without cluster support"), "{out:?}");
    // Several endpoints of one cluster are one address (etcdctl's --endpoints form).
    let out = proclease(&["--state-home", state, "--store", "etcd://10.0.0.1:2379,10.0.0.2:2379/fleet", "doctor"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("etcd://10.0.0.1:2379,10.0.0.2:2379/fleet: this proclease was built without cluster support"), "{out:?}");
}

/// A malformed store address says what shape it expects; `file` is the state home (whatever the
/// build).
#[test]
fn a_store_address_says_what_shape_it_expects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let state = state.to_str().expect("utf-8");
    let out = proclease(&["--state-home", state, "--store", "nfs://server/x", "doctor"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("nfs://server/x: expected `file` (the state home) or etcd://HOST:PORT/PREFIX"), "{out:?}");
    let out = proclease(&["--state-home", state, "--store", "file", "doctor"]);
    assert!(out.status.success(), "`file` is the state home: {out:?}");
}

/// Credentials in a store address are refused, and never shown (issue #28, input 3): the
/// message says where they do not go and prints `***@` in their place, from `--store` and from
/// `PROCLEASE_STORE` alike, whatever the build.
#[test]
fn a_store_address_with_credentials_is_refused_without_echoing_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    for (flag, variable) in [
        (Some("etcd://admin:s3cr3t@127.0.0.1:2379/fleet"), None),
        (None, Some("etcd://admin:s3cr3t@127.0.0.1:2379,127.0.0.2:2379/fleet")),
        // A password holding `/` and `@`.
        (Some("etcd://admin:s3/cr@3t@127.0.0.1:2379/fleet"), None),
    ] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_proclease"));
        command.arg("--state-home").arg(&state);
        if let Some(address) = flag {
            command.args(["--store", address]);
        }
        command.env_remove("PROCLEASE_STORE");
        if let Some(address) = variable {
            command.env("PROCLEASE_STORE", address);
        }
        let out = command.arg("doctor").output().expect("proclease runs");
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let leaked = |text: &str| ["s3cr3t", "s3/cr", "cr@3t", "admin"].iter().any(|secret| text.contains(secret));
        assert!(!leaked(&stdout) && !leaked(&stderr), "the password is echoed: {stderr}");
        assert!(stderr.contains("etcd://***@127.0.0.1:2379") && stderr.contains("credentials do not go in the address"), "{stderr}");
    }
}

/// `PROCLEASE_STORE=` (set but empty, as a shell script's `PROCLEASE_STORE=$UNSET_VAR` leaves
/// it) means the state home, as for the library (issue #28, input 8): `doctor` works and names
/// the `file` store.
#[test]
fn an_empty_store_variable_is_the_state_home() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_proclease"))
        .arg("--state-home")
        .arg(dir.path().join("state"))
        .args(["doctor", "--json"])
        .env("PROCLEASE_STORE", "")
        .output()
        .expect("proclease runs");
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["store"], "file", "{report}");
}

/// A reporting command whose reader goes away (`proclease doctor | head -1`, `recover | true`)
/// ends as Unix tools do — quietly, with the status SIGPIPE gives (141) — and never panics
/// (issue #27, item 4). SIGPIPE itself stays ignored (#45 case 6: a socket etcd closed must be
/// an error with a message), so the status is the program's own.
#[test]
fn a_closed_stdout_ends_a_report_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Enough leases that the report is longer than one line.
    for i in 0..3 {
        let out = Command::new(env!("CARGO_BIN_EXE_proclease"))
            .arg("--state-home")
            .arg(dir.path().join("state"))
            .arg("--workspace-root")
            .arg(dir.path())
            .args(["run", "--containment", "none", "--workdir"])
            .arg(dir.path().join(format!("w{i}")))
            .args(["--", "true"])
            .output()
            .expect("run");
        assert!(out.status.success(), "{out:?}");
    }
    for args in [&["doctor"][..], &["recover", "--dry-run"], &["doctor", "--json"]] {
        for _ in 0..5 {
            let mut child = Command::new(env!("CARGO_BIN_EXE_proclease"))
                .arg("--state-home")
                .arg(dir.path().join("state"))
                .arg("--workspace-root")
                .arg(dir.path())
                .args(args)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn");
            // The reader goes away before anything was read.
            drop(child.stdout.take());
            let out = child.wait_with_output().expect("wait");
            assert!(matches!(out.status.code(), Some(0 | 141)), "{args:?}: {out:?}");
            assert!(out.stderr.is_empty(), "quietly: {args:?}: {out:?}");
        }
    }
}

/// `proclease --state-home DIR/state --workspace-root DIR ARGS…`.
fn proclease_in(dir: &std::path::Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_proclease"));
    command.arg("--state-home").arg(dir.join("state")).arg("--workspace-root").arg(dir).args(args);
    command
}

/// A flock(1) holding `lock` for ten minutes, in a process group of its own (for
/// [`kill_group`]), once it holds it; and the lock file, open, to ask whether it is still held.
fn hold_for_ten_minutes(lock: &std::path::Path) -> (std::process::Child, std::fs::File) {
    use std::os::unix::process::CommandExt as _;
    let holder = Command::new("flock").arg(lock).args(["sleep", "600"]).process_group(0).spawn().expect("flock(1)");
    let held = std::fs::File::open(lock).expect("open the lock");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while proclease::lock_wait::holder(&held).is_none() {
        assert!(std::time::Instant::now() < deadline, "flock(1) never took the lock");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    (holder, held)
}

/// Kills the process group of `leader` (flock(1) and its sleep) and reaps the leader.
fn kill_group(leader: &mut std::process::Child) {
    let _ = rustix::process::kill_process_group(rustix::process::Pid::from_raw(leader.id() as i32).expect("pid"), rustix::process::Signal::KILL);
    let _ = leader.wait();
}

/// `run`'s exit status once it ended, within a minute (a liveness bound, not a timing: the
/// locks the tests hold stay held for ten minutes); `None` when it still ran (it is killed then).
fn ended_within_a_minute(run: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(status) = run.try_wait().expect("wait") {
            return Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = run.kill();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A Ctrl-C (SIGINT) before the command started — here while `run` waits for the lease
/// creation lock another process holds — stops the run cleanly: exit 130, the command never
/// ran, and no lease or directory is left behind (before, the signal killed the supervisor
/// mid-lease and left both for `recover`). And at once: the wait for the lock ends while the
/// lock is still held (before, the run waited out its `--lock-timeout`, then said it timed out).
#[test]
fn a_signal_before_the_command_started_leaves_nothing_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let proclease = |args: &[&str]| proclease_in(dir.path(), args);
    let first = proclease(&["run", "--workdir", dir.path().join("first").to_str().expect("utf-8"), "--", "true"]).output().expect("run");
    assert!(first.status.success(), "{first:?}");
    // The lease-creation lock, and the lease collection's writer lock (state_store/lock.rs),
    // which the acquisition takes more than once: every wait for it ends.
    let collection = format!("{}.lock", proclease::core::digest::identity_digest("proclease-collection-lock", "recovery/beeper-message-like-me-directory-leases"));
    for name in ["directory-lease-creation.lock", collection.as_str()] {
        let lock = dir.path().join("state/.proclease/locks").join(name);
        assert!(lock.exists(), "the lock file is where the test expects it: {name}");
        let (mut holder, held) = hold_for_ten_minutes(&lock);
        let job = dir.path().join(format!("job-{}", &name[..8]));
        let mut run = proclease(&["--lock-timeout", "10m", "run", "--workdir", job.to_str().expect("utf-8"), "--", "touch", "ran"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run");
        // Once it waits (it says so after a second), Ctrl-C.
        let rest = {
            use std::io::BufRead as _;
            let mut lines = std::io::BufReader::new(run.stderr.take().expect("stderr")).lines();
            let mut line = String::new();
            while !line.contains("waiting for pid") {
                line = lines.next().expect("run said nothing before it ended").expect("stderr");
            }
            let pid = rustix::process::Pid::from_raw(run.id() as i32).expect("pid");
            rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
            std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>().join("\n"))
        };
        let status = ended_within_a_minute(&mut run);
        let still_held = proclease::lock_wait::holder(&held).is_some();
        kill_group(&mut holder);
        let status = status.unwrap_or_else(|| panic!("run still waits for {name} a minute after Ctrl-C"));
        let said = rest.join().expect("stderr reader");
        assert!(still_held, "the lock was still held when run ended");
        assert_eq!(status.code(), Some(130), "{status:?}: {said}");
        assert!(said.contains("interrupted by signal 2 before the command started"), "{said}");
        assert!(!said.contains("proclease: waited"), "the signal is reported, not a timeout: {said}");
        assert!(!job.exists(), "the directory it created is removed");
        let doctor = proclease(&["doctor", "--json"]).output().expect("doctor");
        let doc: serde_json::Value = serde_json::from_slice(&doctor.stdout).expect("json");
        assert_eq!(doc["entries"].as_array().map(Vec::len), Some(0), "no lease is left: {doc}");
    }
}

/// A signal after the lease was taken but before the command started: the waits between the two
/// end within the signal's grace too, and what the grace was too short to release is named —
/// never "nothing is left behind" when something is. Staged with real locks: `run --exclusive`
/// holds the export admission, waits for the lease-creation lock (held by flock(1)); the test
/// then takes the admission collection's lock and frees the other, so that `run` leases its
/// directory and then waits for the admission's lock to mark the launch. Ctrl-C there.
#[test]
fn a_signal_after_the_lease_ends_the_waits_before_the_command_and_names_what_is_left() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let proclease = |args: &[&str]| proclease_in(dir.path(), args);
    let first = proclease(&["run", "--exclusive", "--workdir", dir.path().join("first").to_str().expect("utf-8"), "--", "true"]).output().expect("run");
    assert!(first.status.success(), "{first:?}");
    let locks = dir.path().join("state/.proclease/locks");
    let admissions = format!("{}.lock", proclease::core::digest::identity_digest("proclease-collection-lock", "recovery/beeper-message-like-me-export-admission"));
    let (creation, admission) = (locks.join("directory-lease-creation.lock"), locks.join(admissions));
    assert!(creation.exists() && admission.exists(), "the lock files are where the test expects them");
    let (mut creation_holder, _) = hold_for_ten_minutes(&creation);
    let job = dir.path().join("job");
    let mut run = proclease(&["--lock-timeout", "10m", "run", "--exclusive", "--workdir", job.to_str().expect("utf-8"), "--", "touch", "ran"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run");
    let mut lines = std::io::BufReader::new(run.stderr.take().expect("stderr")).lines();
    let mut said = Vec::new();
    let mut until_it_waits = |said: &mut Vec<String>| loop {
        let line = lines.next().expect("run said nothing more before it ended").expect("stderr");
        said.push(line.clone());
        if line.contains("waiting for pid") {
            break;
        }
    };
    until_it_waits(&mut said);
    let (mut admission_holder, held) = hold_for_ten_minutes(&admission);
    kill_group(&mut creation_holder);
    // Now `run` leases the directory, then waits for the admission's lock.
    until_it_waits(&mut said);
    assert!(job.is_dir(), "the directory was leased before the second wait: {said:?}");
    rustix::process::kill_process(rustix::process::Pid::from_raw(run.id() as i32).expect("pid"), rustix::process::Signal::INT).expect("SIGINT");
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    let status = ended_within_a_minute(&mut run);
    let still_held = proclease::lock_wait::holder(&held).is_some();
    kill_group(&mut admission_holder);
    let status = status.unwrap_or_else(|| panic!("run still waits for the admission's lock a minute after Ctrl-C: {said:?}"));
    said.extend(rest.join().expect("stderr reader"));
    let said = said.join("\n");
    assert!(still_held, "the lock was still held when run ended");
    assert_eq!(status.code(), Some(130), "{status:?}: {said}");
    assert!(!said.contains("proclease: waited"), "the signal is reported, not a timeout: {said}");
    assert!(!said.contains("nothing is left behind"), "the admission could not be released: {said}");
    assert!(
        said.contains("interrupted by signal 2 before the command started; nothing was started, but not all it held could be released in time: the export admission ("),
        "{said}"
    );
    assert!(said.contains("the next `run --exclusive` takes it over once this process has exited"), "{said}");
    assert!(!job.join("ran").exists(), "the command never ran");
    assert!(!job.exists(), "the directory, whose lease was released, is removed");
    // As said: the next exclusive run takes the dead run's admission over, and nothing stays.
    let next = proclease(&["run", "--exclusive", "--workdir", dir.path().join("next").to_str().expect("utf-8"), "--", "true"]).output().expect("run");
    assert!(next.status.success(), "{}", String::from_utf8_lossy(&next.stderr));
    let doctor = proclease(&["doctor", "--json"]).output().expect("doctor");
    let doc: serde_json::Value = serde_json::from_slice(&doctor.stdout).expect("json");
    assert_eq!(doc["entries"].as_array().map(Vec::len), Some(0), "nothing is left: {doc}");
}

/// A signal that cuts a lease's creation short, when its undo cannot remove the creation intent
/// it recorded (the intents' collection lock held by a hung process): the message names the
/// intent, and `recover` finishes it once `run` has exited. Staged with strace(1), which delays
/// the `mkdir` of the leased directory by 5 s (a fake of the instant only: `run` is the real
/// binary): in that window the intent exists, the test takes the intents' lock with flock(1)
/// and sends Ctrl-C, so the intent's update after the `mkdir` waits for the lock and is cut
/// short, and so is the undo's removal of the intent.
#[test]
fn a_signal_that_cuts_a_lease_creation_short_names_the_creation_intent_it_leaves() {
    use proclease::core::directory_leases::INTENTS;
    use std::io::Read as _;
    if !common::strace_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let proclease = |args: &[&str]| proclease_in(dir.path(), args);
    let first = proclease(&["run", "--workdir", dir.path().join("first").to_str().expect("utf-8"), "--", "true"]).output().expect("run");
    assert!(first.status.success(), "{first:?}");
    let intents = dir.path().join("state").join(INTENTS);
    let lock = dir.path().join("state/.proclease/locks").join(format!("{}.lock", proclease::core::digest::identity_digest("proclease-collection-lock", INTENTS)));
    assert!(lock.exists(), "the intents' lock file is where the test expects it");
    let job = dir.path().join("job");
    let traced = proclease(&["run", "--workdir", job.to_str().expect("utf-8"), "--", "touch", "ran"]);
    // `-P` limits the delay to system calls on the test's directory: the `mkdirat` of `job`.
    let mut run = Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "-P"])
        .arg(dir.path())
        .args(["-e", "trace=mkdir,mkdirat", "-e", "inject=mkdir,mkdirat:delay_enter=5000000", "--"])
        .arg(traced.get_program())
        .args(traced.get_args())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("strace");
    let mut stderr = run.stderr.take().expect("stderr");
    let said = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let recorded = || std::fs::read_dir(&intents).expect("the intents").filter_map(Result::ok).any(|entry| entry.file_name().to_string_lossy().ends_with(".json"));
    while !recorded() {
        assert!(std::time::Instant::now() < deadline, "run never recorded its creation intent");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (mut holder, _) = hold_for_ten_minutes(&lock);
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", run.id())).expect("strace's children");
    let pid: i32 = children.split_whitespace().next().and_then(|pid| pid.parse().ok()).expect("the traced run's pid");
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid).expect("pid"), rustix::process::Signal::INT).expect("SIGINT");
    let status = ended_within_a_minute(&mut run);
    kill_group(&mut holder);
    let said = said.join().expect("stderr reader");
    let status = status.unwrap_or_else(|| panic!("run still waits a minute after Ctrl-C: {said}"));
    assert_eq!(status.code(), Some(130), "{status:?}: {said}");
    let left: Vec<_> = std::fs::read_dir(&intents).expect("the intents").map(|entry| entry.expect("entry").file_name().into_string().expect("utf-8")).collect();
    assert_eq!(left.len(), 1, "the intent is left: {left:?}");
    let named = format!(
        "proclease: interrupted by signal 2 before the command started; nothing was started, but not all it held could be released in time: the creation intent {INTENTS}/{} of {}: `proclease recover` finishes it once this process has exited",
        left[0],
        job.display()
    );
    assert!(said.contains(&named), "{said}");
    assert!(!job.join("ran").exists(), "the command never ran");
    // As said: recover finishes it, and nothing stays.
    let recover = proclease(&["recover"]).output().expect("recover");
    assert!(recover.status.success(), "{recover:?}");
    assert_eq!(std::fs::read_dir(&intents).expect("the intents").count(), 0, "recover finished the intent");
    assert!(!job.exists(), "no directory is left");
}

/// A refusal that wraps another failure keeps it (issue #29): with the state home read-only
/// (a read-only bind mount in a mount namespace), `run --exclusive` says the reference's
/// `… export admission could not be acquired safely` and, on the next line, what it wrapped.
#[test]
fn a_wrapped_failure_is_printed_as_the_refusals_cause() {
    if !common::namespaces_available(&["--mount"]) {
        return;
    }
    let s = common::sandbox();
    assert!(s.run(&["doctor"]).status.success(), "the state home is made");
    let state = s.state.to_str().expect("utf-8");
    let read_only = format!("mount --bind {state} {state} && mount -o remount,bind,ro {state} && exec \"$@\"");
    let job = s.root.join("job");
    let run = s.run_in(&["unshare", "--mount", "sh", "-c", &read_only, "sh"], &["run", "--exclusive", "--workdir", job.to_str().expect("utf-8"), "--", "true"]);
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    let said = common::stderr(&run);
    let mut lines = said.lines().filter(|l| !l.trim().is_empty());
    let first = lines.next().unwrap_or_default();
    assert!(first.ends_with("Beeper Message Like Me recovery: export admission could not be acquired safely"), "the reference's message: {said}");
    let cause = lines.next().unwrap_or_default();
    assert!(cause.starts_with("  caused by: ") && cause.contains("Read-only file system"), "then what it wrapped: {said}");
}

/// The binary carries no compiler (issue #30): Cranelift is only in the build script, which
/// precompiles the component; the runtime loads that code. Were `cranelift` enabled in the
/// binary's wasmtime (by any crate of this build), its symbols would be here: the binary built
/// before #30 held about 3,400 of them.
#[test]
fn the_binary_has_no_compiler_inside() {
    let binary = std::fs::read(env!("CARGO_BIN_EXE_proclease")).expect("the proclease binary is readable");
    let has = |needle: &[u8]| binary.windows(needle.len()).any(|w| w == needle);
    assert!(has(b"wasmtime"), "the check looks in the right place: the binary holds wasmtime");
    assert!(!has(b"cranelift_codegen") && !has(b"cranelift-codegen"), "the proclease binary contains Cranelift");
}

/// On the file store too, an exclusive run's command gets a fencing token that grows with every
/// holder of the export admission (issue #28: the state home's counter,
/// `.proclease/fence/export-admission.json`), and `fence check` — from inside the command with
/// no flags (PROCLEASE_FENCING_STORE names the state home), or from outside with
/// `--state-home` — says current only while that holder holds the admission.
#[test]
fn every_exclusive_run_on_a_state_home_gets_a_greater_fencing_token() {
    let s = common::sandbox();
    let job = |name: &str| s.root.join(name).display().to_string();
    // The first holder checks its own fence from inside, with another state home in its
    // environment: the token's store must win.
    let inside = s.root.join("inside");
    let script = format!(
        "echo \"$PROCLEASE_FENCING_TOKEN\" > {root}/t1; PROCLEASE_STATE_HOME={root}/elsewhere {bin} fence check \"$PROCLEASE_FENCING_TOKEN\" > {inside}; echo \"exit $?\" >> {inside}",
        root = s.root.display(),
        bin = common::PROCLEASE,
        inside = inside.display()
    );
    let first = s.run(&["run", "--exclusive", "--workdir", &job("one"), "--", "sh", "-c", &script]);
    assert!(first.status.success(), "{first:?}");
    let said = std::fs::read_to_string(&inside).expect("the check's output");
    assert!(said.starts_with("fencing token 1 is current: its holder (pid ") && said.ends_with("exit 0\n"), "{said}");
    let second = s.run(&["run", "--exclusive", "--workdir", &job("two"), "--", "sh", "-c", &format!("echo \"$PROCLEASE_FENCING_TOKEN\" > {}/t2", s.root.display())]);
    assert!(second.status.success(), "{second:?}");
    let token = |name: &str| std::fs::read_to_string(s.root.join(name)).expect("token file").trim().to_owned();
    assert_eq!((token("t1"), token("t2")), ("1".to_owned(), "2".to_owned()));
    // A holder that runs now: current from outside; the earlier ones stale, saying why.
    let tag = common::unique_seconds();
    let mut third =
        s.spawn(&["run", "--exclusive", "--workdir", &job("three"), "--", "sh", "-c", &format!("echo \"$PROCLEASE_FENCING_TOKEN\" > {}/t3; exec sleep {tag}", s.root.display())]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::read_to_string(s.root.join("t3")).map_or(true, |t| !t.ends_with('\n')) {
        assert!(std::time::Instant::now() < deadline, "the third run never started its command");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(token("t3"), "3");
    let check = |token: &str| {
        let out = s.run(&["fence", "check", token]);
        (out.status.code(), common::stdout(&out))
    };
    let (code, said) = check("3");
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("fencing token 3 is current"), "{said}");
    for (stale, words) in [
        ("1", "another holder acquired the export admission since (token 3)"),
        ("2", "another holder acquired the export admission since (token 3)"),
        ("4", "4 is no token of this export admission"),
    ] {
        let (code, said) = check(stale);
        assert_eq!(code, Some(1), "{stale}: {said}");
        assert!(said.contains(&format!("fencing token {stale} is stale: {words}")), "{stale}: {said}");
    }
    // Once the holder released the admission (its command ended), its token is stale too.
    common::kill(common::wait_for_process(&["sleep", &tag]));
    third.wait().expect("the third run ends");
    let (code, said) = check("3");
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("stale: the export admission was released"), "{said}");
    // The counter is one canonical record beside the admission, in the state home's own files.
    let counter = std::fs::read_to_string(s.state.join(".proclease/fence/export-admission.json")).expect("counter");
    assert!(counter.starts_with("{\"claimId\":\"") && counter.ends_with("\",\"schemaVersion\":1,\"token\":3}\n"), "{counter}");
    // JSON for scripts.
    let out = s.run(&["fence", "check", "3", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!((doc["current"].as_bool(), doc["token"].as_i64()), (Some(false), Some(3)), "{doc}");
    // A check writes nothing: a state home that never handed out a token is stale, and is not
    // made; a relative `file:` store is refused; 0 is no token.
    let nowhere = s.root.join("no-such-home");
    let out = s.command(&["fence", "check", "1"]).env("PROCLEASE_FENCING_STORE", format!("file:{}", nowhere.display())).output().expect("runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(common::stdout(&out).contains("stale: no fencing token was handed out in the state home"), "{out:?}");
    assert!(!nowhere.exists(), "the check made a state home");
    let out = s.command(&["fence", "check", "1"]).env("PROCLEASE_FENCING_STORE", "file:relative/home").output().expect("runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(common::stderr(&out).contains("names its state home by an absolute path"), "{out:?}");
    let (code, said) = check("0");
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("0 is no token of this export admission"), "{said}");
}

/// A state home whose witness directory or run journal is there but cannot be trusted (here,
/// mode 0755 after a careless `chmod -R`) starts no command: without the witness nothing would
/// prove the command's processes alive once its supervisor is gone, and without the journal a
/// crash after it finished would look like a crashed start. `run` refuses, says which
/// directory and what to do, and leaves nothing (no directory, no lease); `doctor` still
/// answers and warns; once the mode is fixed the run goes ahead. Before, both were dropped
/// silently and the run went ahead unprotected.
#[test]
fn a_run_refuses_a_state_home_whose_witnesses_or_journal_cannot_be_kept() {
    use std::os::unix::fs::PermissionsExt as _;
    let s = common::sandbox();
    let proclease = |args: &[&str]| s.run(args);
    let first = proclease(&["run", "--workdir", s.root.join("first").to_str().expect("utf-8"), "--", "true"]);
    assert!(first.status.success(), "{first:?}");
    let internal = s.state.join(".proclease");
    let chmod = |name: &str, mode: u32| std::fs::set_permissions(internal.join(name), std::fs::Permissions::from_mode(mode)).expect("chmod");
    for (name, said) in [
        ("witnesses", ".proclease/witnesses: check failed: must be a directory owned by you with mode 0700 (chmod 700 it)"),
        ("runs", "cannot start the run journal: .proclease/runs: check: must be a directory owned by you with mode 0700 (chmod 700 it)"),
    ] {
        chmod(name, 0o755);
        let job = s.root.join(format!("job-{name}"));
        let out = proclease(&["run", "--workdir", job.to_str().expect("utf-8"), "--", "touch", "ran"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: {out:?}");
        assert!(stderr.contains(said), "{name}: {stderr}");
        assert!(!job.exists(), "{name}: nothing was started or created");
        let doctor = proclease(&["doctor", "--json"]);
        assert!(doctor.status.success(), "{name}: doctor still answers: {doctor:?}");
        assert!(String::from_utf8_lossy(&doctor.stderr).contains(&format!("{}: ", s.state.display())), "{name}: doctor warns: {doctor:?}");
        let doc: serde_json::Value = serde_json::from_slice(&doctor.stdout).expect("json");
        assert_eq!(doc["entries"].as_array().map(Vec::len), Some(0), "{name}: no lease is left: {doc}");
        chmod(name, 0o700);
        let out = proclease(&["run", "--workdir", job.to_str().expect("utf-8"), "--", "touch", "ran"]);
        assert!(out.status.success(), "{name}, fixed: {out:?}");
        assert!(job.join("ran").exists(), "{name}, fixed: the command ran");
    }
}
