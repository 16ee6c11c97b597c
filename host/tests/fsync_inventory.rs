//! Durability you can account for (issue #44): every fsync and fdatasync of a warm
//! `run -- true`, in order, is the one `docs/durability.md` lists with the crash guarantee it
//! buys. A change that adds, drops or moves one fails here until that page says why.
//!
//! Counted with strace(1) on the real binary: where strace is missing the test says so and
//! passes, unless `PROCLEASE_REQUIRE_NAMESPACES=1` (set by `.ci/run`, which installs strace)
//! makes that a failure.

mod common;

use common::{PROCLEASE, sandbox};

/// What a synced descriptor names, by the role `docs/durability.md` gives it.
fn role(path: &str) -> String {
    if path.contains("/.proclease/staging/") {
        "staged record".into()
    } else if path.ends_with("/recovery/proclease-directory-creations") {
        "creation intents".into()
    } else if path.ends_with("/recovery/beeper-message-like-me-directory-leases") {
        "directory leases".into()
    } else if path.contains("/.proclease/runs/") && path.ends_with(".run") {
        "run journal entry".into()
    } else if path.ends_with("/.proclease/runs") {
        "run journal".into()
    } else {
        format!("unlisted: {path}")
    }
}

/// The (system call, role) of every fsync and fdatasync in an `strace -f -y` output, in order.
/// A call another thread interrupted is named on its `<unfinished ...>` line only.
fn synced(trace: &str) -> Vec<(String, String)> {
    trace
        .lines()
        .filter_map(|line| {
            // "PID fsync(FD</path>) = 0" or "PID fsync(FD</path> <unfinished ...>"
            let call = line.split_once(' ').map_or(line, |(_, rest)| rest).trim_start();
            let name = ["fsync(", "fdatasync("].into_iter().find(|name| call.starts_with(name))?;
            let path = call.split_once('<')?.1.split_once('>')?.0;
            Some((name.trim_end_matches('(').to_owned(), role(path)))
        })
        .collect()
}

#[test]
fn a_warm_run_makes_exactly_the_fsyncs_the_durability_page_lists() {
    if !common::strace_available() {
        return;
    }
    let sandbox = sandbox();
    // The first run makes the state home's directories durable once (20 more fsyncs).
    let warm = sandbox.run(&["run", "--workdir", &sandbox.root.join("warm").display().to_string(), "--", "true"]);
    assert!(warm.status.success(), "{}", String::from_utf8_lossy(&warm.stderr));
    let trace = sandbox.root.join("trace");
    let job = sandbox.root.join("job").display().to_string();
    let strace = ["strace", "-f", "-qq", "-y", "-e", "trace=fsync,fdatasync", "-o", &trace.display().to_string()];
    let output = sandbox.run_in(&strace, &["run", "--workdir", &job, "--", "true"]);
    assert!(output.status.success(), "{PROCLEASE} run under strace: {}", String::from_utf8_lossy(&output.stderr));
    let text = std::fs::read_to_string(&trace).expect("the trace");
    let expected: Vec<(&str, &str)> = vec![
        // 1. create the creation intent: its bytes (b), the collection (c)
        ("fsync", "staged record"),
        ("fsync", "creation intents"),
        // 2. replace the intent with the directory's identity: b, c
        ("fsync", "staged record"),
        ("fsync", "creation intents"),
        // 3. create the directory lease: b, c
        ("fsync", "staged record"),
        ("fsync", "directory leases"),
        // 4. remove the creation intent: c
        ("fsync", "creation intents"),
        // 5. the run journal's `begin`: nothing (its `finished` makes the entry durable)
        // 6, 7. the lease `launching`, then `running`: b only (lazy: deviation 28)
        ("fsync", "staged record"),
        ("fsync", "staged record"),
        // 8. the journal's `finished`, in place: the file's data, then its directory
        ("fdatasync", "run journal entry"),
        ("fsync", "run journal"),
        // 9. the lease `settled`: b only (lazy)
        ("fsync", "staged record"),
        // 10. remove the lease: c
        ("fsync", "directory leases"),
    ];
    let got = synced(&text);
    let got: Vec<(&str, &str)> = got.iter().map(|(call, role)| (call.as_str(), role.as_str())).collect();
    assert_eq!(got, expected, "the fsyncs of `run -- true` differ from docs/durability.md's list (update both); the trace:\n{text}");
}

#[test]
fn the_trace_reader_names_every_sync_once() {
    let trace = "12 fsync(18</s/.proclease/staging/1-a.tmp>) = 0\n\
                 12 --- SIGCHLD {si_signo=SIGCHLD} ---\n\
                 12 fsync(20</s/.proclease/staging/2-b.tmp> <unfinished ...>\n\
                 13 <... fsync resumed>)              = 0\n\
                 12 fdatasync(12</s/.proclease/runs/x.run>) = 0\n\
                 12 fsync(7</elsewhere>) = 0\n";
    let got = synced(trace);
    assert_eq!(
        got,
        vec![
            ("fsync".to_owned(), "staged record".to_owned()),
            ("fsync".to_owned(), "staged record".to_owned()),
            ("fdatasync".to_owned(), "run journal entry".to_owned()),
            ("fsync".to_owned(), "unlisted: /elsewhere".to_owned()),
        ]
    );
}
