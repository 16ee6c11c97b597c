//! Cluster mode end to end (`docs/cluster.md`, issue #20): several "machines" sharing one export
//! admission and one set of plugin invocation leases through a real etcd.
//!
//! A machine is a process tree in its own PID and mount namespaces whose
//! `/proc/sys/kernel/random/boot_id` is a bind-mounted file of its own (`unshare --pid --mount
//! --fork --mount-proc --kill-child`), with its own state home and workspace: its processes have
//! their own pids and boot id, and cannot see the other machines' processes — exactly what
//! another host would be to proclease. Killing a machine's `unshare` kills every process in it.
//!
//! Needs feature `cluster`, on by default (`cargo test -p proclease --test cluster_cli`),
//! an `etcd` binary (Debian's etcd-server; `PROCLEASE_REQUIRE_ETCD=1` makes its absence a
//! failure) and root for the namespaces (`PROCLEASE_REQUIRE_NAMESPACES=1` likewise). `.ci/run`
//! installs etcd and sets both.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use proclease::cluster::presence::lookup;
use proclease::core::admission::CLAIM_PATH;
use proclease::core::liveness::RemotePresence;
use proclease::core::records::{Owner, export_admission, invocation_lease};

mod common;
#[path = "../../tests/src/etcd_server.rs"]
#[allow(dead_code)] // the harness is shared with proclease-tests, which uses all of it
mod etcd_server;
#[path = "common/machines.rs"]
mod machines;

use common::{PROCLEASE, namespaces_available, processes_running, unique_seconds, wait_for_process};
use etcd_server::Etcd;
use machines::{Machine, machine};

/// The key prefix every machine of a test shares.
const PREFIX: &str = "fleet";

/// Etcd, and whether machines can be simulated here; `None` (after saying why) when a test
/// must skip. The prefix's epoch is settled, as on a cluster in use: the first presence on a
/// new prefix waits out a grace of one TTL, which `a_wiped_etcd_never_lets_two_exports_overlap`
/// tests.
fn cluster() -> Option<Etcd> {
    cluster_with_ttl(2)
}

/// A new etcd whose prefix's epoch was started (its grace waited out) with a TTL of `seconds`:
/// the TTL every process of the test must use (one that differs takes no part).
fn cluster_with_ttl(seconds: u64) -> Option<Etcd> {
    if !namespaces_available(&["--pid", "--mount", "--fork", "--mount-proc"]) {
        return None;
    }
    let etcd = Etcd::start()?;
    proclease::cluster::presence::await_epoch(&etcd.store(PREFIX), Duration::from_secs(seconds)).expect("the prefix's epoch");
    Some(etcd)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Kills a machine: SIGKILL to its `unshare`, which (`--kill-child`) kills its PID 1, and with
/// it every process of the machine.
fn crash(machine: &mut Child) {
    machine.kill().expect("SIGKILL");
    machine.wait().expect("reap");
}

/// The admission held in etcd, if any: its owner and helper.
fn admission(etcd: &Etcd) -> Option<(Owner, Option<Owner>)> {
    let text = etcd.store(PREFIX).read_if_present(CLAIM_PATH, 16_384).expect("etcd answers")?;
    let claim = export_admission::parse_file(&text).expect("a valid admission").record;
    Some((claim.owner, claim.helper_owner))
}

/// Waits until the admission's helper is recorded (the command runs); returns the owner.
fn wait_for_helper(etcd: &Etcd) -> Owner {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((owner, Some(_))) = admission(etcd) {
            return owner;
        }
        assert!(Instant::now() < deadline, "the admission never recorded its helper");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn presence(etcd: &Etcd, owner: &Owner) -> RemotePresence {
    lookup(&etcd.store(PREFIX), owner)
}

/// Three machines race `run --exclusive` ten times each; every command writes `start` and `end`
/// to one shared log around a pause. Never two owners: the log never shows two commands
/// overlapping, and every attempt either ran (0) or was refused as blocked (3).
#[test]
fn racing_exclusive_runs_on_three_machines_never_overlap() {
    let Some(etcd) = cluster() else { return };
    let shared = tempfile::tempdir().expect("shared dir");
    let log = shared.path().join("log");
    let machines: Vec<Machine> = (0..3).map(|_| machine(&etcd.url(PREFIX), "2s")).collect();
    let outcomes: Vec<Vec<Option<i32>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = machines
            .iter()
            .enumerate()
            .map(|(m, machine)| {
                let log = log.clone();
                scope.spawn(move || {
                    (0..10)
                        .map(|round| {
                            let script = format!("echo start {m} >> '{0}'; sleep 0.1; echo end {m} >> '{0}'", log.display());
                            let out = machine.exclusive(&format!("job{round}"), &["sh", "-c", &script]);
                            assert!(matches!(out.status.code(), Some(0 | 3)), "machine {m} round {round}: {out:?}");
                            if out.status.code() == Some(3) {
                                assert!(stderr(&out).contains("another export is active"), "{out:?}");
                            }
                            out.status.code()
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("machine thread")).collect()
    });
    let ran = outcomes.iter().flatten().filter(|c| **c == Some(0)).count();
    println!("{ran} of 30 attempts got the admission");
    assert!(ran >= 1, "some run got the admission: {outcomes:?}");
    let text = std::fs::read_to_string(&log).expect("log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * ran, "each run that got the admission ran once: {text}");
    for pair in lines.chunks(2) {
        let (start, end) = (pair[0].strip_prefix("start "), pair[1].strip_prefix("end "));
        assert!(start.is_some() && start == end, "two commands overlapped: {text}");
    }
    assert!(admission(&etcd).is_none(), "every run released the admission");
}

/// Issue #28, "waiting for a turn": `run --exclusive --wait` on etcd waits for the admission
/// with an etcd watch on the admission and its holder's presence: while another machine's 6 s
/// export runs, the waiter wakes once a second (the watch's cap, so that a signal is heeded and
/// what no key shows is tried again) and, last, because the holder released — the watch saw
/// the change, rather than a pause running out — and then runs.
#[test]
fn a_run_waiting_for_its_turn_on_etcd_is_woken_by_the_release() {
    let Some(etcd) = cluster() else { return };
    // Under the load of the whole suite (several etcd clusters on two cores) the release can
    // fall in the instant a capped watch ends on its own (it failed so once in CI, 2026-12-03),
    // and the waiter then takes the turn on its next try without seeing the change: a second
    // try tells that coincidence from a watch that never sees a release.
    let mut tries = Vec::new();
    for attempt in 0..2 {
        let (first, second) = (machine(&etcd.url(PREFIX), "2s"), machine(&etcd.url(PREFIX), "2s"));
        let mut holder = first.spawn_exclusive(&format!("export{attempt}"), &["sleep", "6"]);
        wait_for_helper(&etcd);
        let workdir = second.root.join(format!("next{attempt}"));
        let out = second
            .command(&["run", "--exclusive", "--wait", "60s", "--workdir", workdir.to_str().expect("utf-8"), "--", "true"])
            .env("RUST_LOG", "warn,proclease::api::supervisor::cluster=debug")
            .output()
            .expect("proclease runs");
        let said = stderr(&out);
        assert!(out.status.success(), "{out:?}");
        assert!(holder.wait().expect("the holder ends").success());
        assert!(said.contains("waiting for its turn"), "{said}");
        let wakes: Vec<&str> = said.lines().filter(|line| line.contains("the export admission's watch ended")).collect();
        assert!(!said.contains("pausing instead"), "the watch worked: {said}");
        assert!((1..=8).contains(&wakes.len()), "one wake a second at most: {said}");
        if wakes.last().is_some_and(|line| line.contains("changed=true")) {
            return;
        }
        tries.push(said);
    }
    panic!("the release woke it in neither of two tries: {tries:#?}");
}

/// Issue #44, "a fair wait that wakes on death", on etcd: `run --exclusive --wait` waiters of
/// two machines take the admission in the order they arrived, `doctor` lists them in that order
/// from a third machine, and a waiter killed in the queue (its machine crashed) loses its place
/// once its presence expires, without holding up the waiters behind it. A stray key in the queue
/// (no lease, no waiter named) holds up no one and doctor names it. Every place is gone at the
/// end.
#[test]
fn waiters_of_several_machines_take_their_turn_in_arrival_order() {
    let Some(etcd) = cluster() else { return };
    let shared = tempfile::tempdir().expect("shared dir");
    let (marks, gate) = (shared.path().join("marks"), shared.path().join("gate"));
    std::fs::write(&gate, "").expect("gate");
    let machines: Vec<Machine> = (0..3).map(|_| machine(&etcd.url(PREFIX), "2s")).collect();
    // A stray key ahead of every waiter (no lease, no waiter in it: an operator's `etcdctl put`):
    // ignored by the waiters, shown by doctor.
    let stray = format!("/{PREFIX}/queues/export-admission/0-stray");
    let etcdctl = |args: &[&str]| {
        let endpoint = format!("127.0.0.1:{}", etcd.client_port);
        let out = Command::new("etcdctl").env("ETCDCTL_API", "3").args(["--endpoints", &endpoint]).args(args).output().expect("etcdctl");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let with_etcdctl = etcd_server::etcdctl_installed();
    if with_etcdctl {
        etcdctl(&["put", &stray, "not a waiter"]);
    }
    let script = format!("echo holder >> {m}; while [ -e {g} ]; do sleep 0.05; done", m = marks.display(), g = gate.display());
    let mut holder = machines[0].spawn_exclusive("holder", &["sh", "-c", &script]);
    wait_for_helper(&etcd);
    // The waiters in line, as doctor on the holder's machine shows them.
    let in_line = || -> usize {
        let out = machines[0].run(&["doctor", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("doctor --json: {out:?}"));
        let rows = doc["entries"].as_array().expect("entries").iter().filter(|e| e["kind"] == "waiter" && e["disposition"] == "waiting");
        rows.count()
    };
    let mut waiters = Vec::new();
    for i in 0..6 {
        let work = machines[1 + i % 2].root.join(format!("w{i}"));
        let mark = format!("echo w{i} >> {}", marks.display());
        // The first waiter's words: it waits for the holder, behind no one (not the stray key).
        let said = if i == 0 { Stdio::piped() } else { Stdio::null() };
        let waiter = machines[1 + i % 2]
            .command(&["run", "--exclusive", "--wait", "120s", "--workdir", work.to_str().expect("utf-8"), "--", "sh", "-c", &mark])
            .stdout(Stdio::null())
            .stderr(said)
            .spawn()
            .expect("a waiter starts");
        waiters.push(waiter);
        let deadline = Instant::now() + Duration::from_secs(30);
        while in_line() < i + 1 {
            assert!(Instant::now() < deadline, "waiter {i} never joined the queue");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let text = String::from_utf8_lossy(&machines[0].run(&["doctor"]).stdout).into_owned();
    assert!(text.contains("export admission, #1 in line") && text.contains("export admission, #6 in line"), "{text}");
    if with_etcdctl {
        assert!(text.contains("export admission, not a place") && text.contains(&format!("etcdctl del {stray}")), "{text}");
    }
    // The third waiter's machine crashes: it is never run, and the others keep their order.
    crash(&mut waiters[2]);
    std::fs::remove_file(&gate).expect("open the gate");
    assert!(holder.wait().expect("the holder ends").success());
    let mut first = String::new();
    std::io::Read::read_to_string(&mut waiters[0].stderr.take().expect("piped"), &mut first).expect("the first waiter's stderr");
    assert!(first.contains("waiting for its turn") && !first.contains("behind"), "{first}");
    for (i, waiter) in waiters.iter_mut().enumerate().filter(|(i, _)| *i != 2) {
        assert!(waiter.wait().expect("a waiter ends").success(), "waiter {i} ran");
    }
    let order = std::fs::read_to_string(&marks).expect("marks");
    assert_eq!(order.split_whitespace().collect::<Vec<_>>(), ["holder", "w0", "w1", "w3", "w4", "w5"], "in arrival order, the crashed one skipped");
    if with_etcdctl {
        assert_eq!(etcdctl(&["get", "--prefix", "--keys-only", &format!("/{PREFIX}/queues/")]).split_whitespace().collect::<Vec<_>>(), [stray.as_str()], "the stray key is left");
        etcdctl(&["del", &stray]);
    }
    let store = etcd.store(PREFIX);
    let queue = proclease::cluster::queue::EtcdQueue::new(&store, "export-admission");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !queue.waiters().expect("etcd answers").0.is_empty() {
        assert!(Instant::now() < deadline, "places left in the queue: {:?}", queue.waiters());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Issue #28, "operator settings": `cluster history` lists the presence history by boot (every
/// process that registered leaves a key), and `cluster forget-boot` deletes a boot's once it
/// ended — refused, deleting nothing, while a process of that boot holds a presence, for the
/// machine's own boot, and for what is not a boot id.
#[test]
fn the_presence_history_of_an_ended_boot_can_be_listed_and_forgotten() {
    let Some(etcd) = cluster() else { return };
    let (first, second) = (machine(&etcd.url(PREFIX), "2s"), machine(&etcd.url(PREFIX), "2s"));
    let boot_of = |machine: &Machine| {
        let out = machine.run(&["identity"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find_map(|line| line.trim().strip_prefix("boot id").map(|rest| rest.trim_start_matches([':', ' ']).to_owned()))
            .unwrap_or_else(|| panic!("no boot id in {text}"))
    };
    let (first_boot, second_boot) = (boot_of(&first), boot_of(&second));
    assert_eq!(first_boot.len(), 64, "{first_boot}");
    let history = |machine: &Machine| -> Vec<serde_json::Value> {
        let out = machine.run(&["cluster", "history", "--json"]);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")["boots"].as_array().cloned().expect("boots")
    };
    let row = |boots: &[serde_json::Value], boot: &str| boots.iter().find(|b| b["bootId"] == boot).cloned();

    // A live run of the first machine: its boot is listed live, and cannot be forgotten.
    let mut holder = first.spawn_exclusive("export", &["sleep", "1000"]);
    wait_for_helper(&etcd);
    assert!(first.exclusive("other", &["true"]).status.code() == Some(3));
    let listed = row(&history(&second), &first_boot).expect("the first machine's boot is listed");
    assert!(listed["registered"].as_u64() >= Some(1) && listed["live"].as_u64() >= Some(1), "{listed}");
    let out = second.run(&["cluster", "forget-boot", &first_boot]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("hold a presence, so it has not ended"), "{out:?}");
    assert_eq!(row(&history(&second), &first_boot).expect("still listed")["registered"], listed["registered"], "nothing was deleted");

    // Its own boot, and what is not a boot id, are refused too.
    let out = second.run(&["cluster", "forget-boot", &second_boot]);
    assert!(stderr(&out).contains("this machine's boot"), "{out:?}");
    for bad in ["", "..", "ABC"] {
        let out = second.run(&["cluster", "forget-boot", bad]);
        assert_eq!(out.status.code(), Some(1), "{bad:?}: {out:?}");
        assert!(stderr(&out).contains("is not a boot id"), "{out:?}");
    }

    // The first machine ends (its processes are gone; their presences revoked or expired):
    // its boot's history goes, and only its.
    crash(&mut holder);
    let deadline = Instant::now() + Duration::from_secs(30);
    let deleted = loop {
        let out = second.run(&["cluster", "forget-boot", &first_boot, "--json"]);
        if out.status.success() {
            break serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")["deleted"].as_u64().expect("a count");
        }
        assert!(stderr(&out).contains("hold a presence"), "{out:?}");
        assert!(Instant::now() < deadline, "the crashed machine's presence never expired");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(deleted >= 1, "{deleted}");
    assert!(row(&history(&second), &first_boot).is_none(), "the ended boot's history is gone");
    assert!(second.exclusive("after", &["true"]).status.success());
    assert!(row(&history(&second), &second_boot).is_some(), "the other machine's history stays");
}

/// A machine holding the admission crashes (every process of it killed). The others are refused
/// while etcd still holds its presence — the TTL has not passed — and take over once etcd
/// expired it, never before.
#[test]
fn a_crashed_machines_admission_is_taken_over_only_after_its_presence_expires() {
    let Some(etcd) = cluster_with_ttl(4) else { return };
    let (first, second) = (machine(&etcd.url(PREFIX), "4s"), machine(&etcd.url(PREFIX), "4s"));
    let mut holder = first.spawn_exclusive("export", &["sleep", "1000"]);
    let owner = wait_for_helper(&etcd);
    assert_eq!(presence(&etcd, &owner), RemotePresence::Registered);
    crash(&mut holder);

    let mut refused = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = second.exclusive(&format!("job{refused}"), &["true"]);
        let after = presence(&etcd, &owner);
        match out.status.code() {
            Some(3) => {
                assert!(stderr(&out).contains("another export is active"), "{out:?}");
                refused += 1;
            }
            Some(0) => {
                // The takeover's own probe found the presence gone; gone is final.
                assert_eq!(after, RemotePresence::Absent, "taken over while the crashed owner's presence was registered");
                break;
            }
            _ => panic!("unexpected outcome: {out:?}"),
        }
        if after == RemotePresence::Registered {
            assert_eq!(out.status.code(), Some(3), "a registered owner's admission was taken");
        }
        assert!(Instant::now() < deadline, "never taken over");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(refused >= 1, "the first attempt, within the TTL, was refused");
    assert!(admission(&etcd).is_none(), "the takeover ran and released");
    // The crashed machine's own directory lease stays in its state home, for its `recover`.
    assert!(first.root.join("export").is_dir());
}

/// Issue #28, input 6: an exclusive run's command gets a fencing token
/// (`PROCLEASE_FENCING_TOKEN`, the etcd revision of the write that made the admission its
/// holder's) greater than every earlier holder's, on any machine — also for a takeover of a
/// crashed machine's admission, which `--wait` waits for instead of polling.
#[test]
fn every_holder_of_the_admission_gets_a_greater_fencing_token() {
    let Some(etcd) = cluster_with_ttl(3) else { return };
    let (first, second) = (machine(&etcd.url(PREFIX), "3s"), machine(&etcd.url(PREFIX), "3s"));
    let token_into = |machine: &Machine, name: &str| format!("echo \"$PROCLEASE_FENCING_TOKEN\" > {}", machine.root.join(name).display());
    assert!(first.exclusive("one", &["sh", "-c", &token_into(&first, "t1")]).status.success());
    assert!(second.exclusive("two", &["sh", "-c", &token_into(&second, "t2")]).status.success());
    // The holder's command checks its own fence, as work does before it writes: the command
    // knows the store from PROCLEASE_FENCING_STORE.
    let inside = first.root.join("inside");
    let script = format!("{}; {PROCLEASE} fence check \"$PROCLEASE_FENCING_TOKEN\" > {1}; echo \"exit $?\" >> {1}; sleep 1000", token_into(&first, "t3"), inside.display());
    let mut holder = first.spawn_exclusive("three", &["sh", "-c", &script]);
    wait_for_helper(&etcd);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&inside).map_or(true, |t| !t.contains("exit ")) {
        assert!(Instant::now() < deadline, "the holder never checked its fence");
        std::thread::sleep(Duration::from_millis(20));
    }
    let said = std::fs::read_to_string(&inside).expect("the check's output");
    assert!(said.contains("is current: its holder") && said.ends_with("exit 0\n"), "the holder's own token is current: {said}");
    let fence_check = |token: i64| {
        let out = Command::new(PROCLEASE).args(["--store", &etcd.url(PREFIX), "fence", "check", &token.to_string()]).output().expect("runs");
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let t3: i64 = std::fs::read_to_string(first.root.join("t3")).expect("t3").trim().parse().expect("a token");
    assert_eq!(fence_check(t3).0, Some(0), "current while its holder runs, from anywhere");
    // Not tokens of this admission: 0 (etcd's "latest"), a revision of another key.
    for bogus in [0, 1, t3 - 1] {
        let (code, said) = fence_check(bogus);
        assert_eq!(code, Some(1), "{bogus}: {said}");
    }
    crash(&mut holder);
    let workdir = second.root.join("four");
    let taken = second.run(&["run", "--exclusive", "--wait", "60s", "--workdir", workdir.to_str().expect("utf-8"), "--", "sh", "-c", &token_into(&second, "t4")]);
    assert!(taken.status.success(), "the takeover waited for its turn: {taken:?}");
    assert!(stderr(&taken).contains("waiting for its turn"), "{taken:?}");
    let token = |machine: &Machine, name: &str| -> i64 {
        let text = std::fs::read_to_string(machine.root.join(name)).expect("token file");
        text.trim().parse().unwrap_or_else(|_| panic!("{name}: not a token: {text:?}"))
    };
    let tokens = [token(&first, "t1"), token(&second, "t2"), token(&first, "t3"), token(&second, "t4")];
    assert!(tokens.windows(2).all(|pair| pair[0] < pair[1]), "tokens must grow with each holder: {tokens:?}");
    // After the takeover the crashed holder's token is stale; so is every released holder's.
    for (token, words) in [(tokens[2], "stale: "), (tokens[3], "stale: the export admission was released"), (tokens[0], "stale: ")] {
        let (code, said) = fence_check(token);
        assert_eq!(code, Some(1), "{token}: {said}");
        assert!(said.contains(words), "{token}: {said}");
    }
    // A holder taken over while the next one runs: stale, naming the later acquire.
    let script = format!("{}; sleep 1000", token_into(&second, "t5"));
    let mut next = second.spawn_exclusive("five", &["sh", "-c", &script]);
    let owner = wait_for_helper(&etcd);
    let (code, said) = fence_check(tokens[3]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("another holder acquired the export admission since"), "{said}");
    // Once a crashed holder's presence expired, its token is stale even before a takeover.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(second.root.join("t5")).map_or(true, |t| !t.ends_with('\n')) {
        assert!(Instant::now() < deadline, "the holder never wrote its token");
        std::thread::sleep(Duration::from_millis(20));
    }
    let t5 = token(&second, "t5");
    assert_eq!(fence_check(t5).0, Some(0));
    crash(&mut next);
    while presence(&etcd, &owner) != RemotePresence::Absent {
        assert!(Instant::now() < deadline, "the crashed holder's presence never expired");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, said) = fence_check(t5);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("its holder's cluster presence expired"), "{said}");
}

/// Two machines on one kernel (containers) share its boot id: each sees the other's processes
/// neither in its state home's witnesses nor in its own PID namespace's /proc. The registry
/// decides for them: refused while the holder lives, taken over once its presence expired after
/// a crash — never judged gone while registered, never stuck as "cannot be inspected".
#[test]
fn machines_sharing_one_boot_id_are_judged_by_their_presence() {
    let Some(etcd) = cluster_with_ttl(3) else { return };
    let (first, second) = (machine(&etcd.url(PREFIX), "3s"), machine(&etcd.url(PREFIX), "3s"));
    std::fs::copy(&first.boot_id, &second.boot_id).expect("one kernel, one boot id");
    let mut holder = first.spawn_exclusive("export", &["sleep", "1000"]);
    let owner = wait_for_helper(&etcd);
    let out = second.exclusive("early", &["true"]);
    assert_eq!(out.status.code(), Some(3), "a live holder on the same boot id blocks: {out:?}");
    crash(&mut holder);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let out = second.exclusive(&format!("job{attempt}"), &["true"]);
        let after = presence(&etcd, &owner);
        match out.status.code() {
            Some(0) => {
                assert_eq!(after, RemotePresence::Absent, "taken over while the holder's presence was registered");
                break;
            }
            Some(3) => assert!(stderr(&out).contains("another export is active"), "{out:?}"),
            _ => panic!("neither refused nor taken over (stuck?): {out:?}"),
        }
        assert!(Instant::now() < deadline, "never taken over");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Killing only the supervisor (SIGKILL, no chance to clean up) takes its command along:
/// the command must not outlive the presence that keeps other machines out.
#[test]
fn a_killed_supervisor_takes_its_command_along() {
    let Some(etcd) = Etcd::start() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("realpath");
    let workdir = root.join("export");
    let mut supervisor = Command::new(PROCLEASE)
        .arg("--state-home")
        .arg(root.join("state"))
        .arg("--workspace-root")
        .arg(&root)
        .args(["--store", &etcd.url(PREFIX), "--cluster-ttl", "2s", "run", "--exclusive", "--workdir"])
        .arg(&workdir)
        .args(["--", "sleep", "1000"])
        .env_remove("PROCLEASE_STORE")
        .spawn()
        .expect("spawn");
    wait_for_helper(&etcd);
    let (_, helper) = admission(&etcd).expect("held");
    let helper = helper.expect("helper recorded").pid;
    assert!(running(helper), "the command runs");
    supervisor.kill().expect("SIGKILL");
    supervisor.wait().expect("reap");
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(helper) {
        assert!(Instant::now() < deadline, "the command outlived its supervisor");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A command tree no `PR_SET_PDEATHSIG` on the command alone can take along: a daemon that
/// double-forks, calls `setsid` and closes its descriptors, a `setsid` sleep, a grandchild (`sh -c 'a; b'`), and a command that changed its uid with `setpriv`
/// (which clears its death signal), beside the command's own `sleep`. Returns the supervisor
/// (a cluster-mode `run --exclusive` outside any machine namespace), the admission's owner and
/// the argv of each process of the tree.
fn spawn_tree(etcd: &Etcd, prefix: &str, root: &std::path::Path) -> (Child, Owner, Vec<Vec<String>>) {
    let [a, b, c, d, e] = [unique_seconds(), unique_seconds(), unique_seconds(), unique_seconds(), unique_seconds()];
    let daemon = format!("import os\nif os.fork(): os._exit(0)\nos.setsid()\nif os.fork(): os._exit(0)\nos.closerange(3, 65536)\nos.execvp('sleep', ['sleep', '{e}'])");
    let script = format!("python3 -c \"$0\"; setsid sleep {a} & setpriv --reuid 65534 --regid 65534 --clear-groups sleep {b} & sh -c 'sleep {c}; true' & sleep {d}");
    let supervisor = Command::new(PROCLEASE)
        .arg("--state-home")
        .arg(root.join("state"))
        .arg("--workspace-root")
        .arg(root)
        .args(["--store", &etcd.url(prefix), "--cluster-ttl", "2s", "run", "--exclusive", "--workdir"])
        .arg(root.join("export"))
        .args(["--", "sh", "-c", &script, &daemon])
        .env_remove("PROCLEASE_STORE")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(30);
    let owner = loop {
        let text = etcd.store(prefix).read_if_present(CLAIM_PATH, 16_384).expect("etcd answers");
        if let Some(claim) = text.map(|t| export_admission::parse_file(&t).expect("a valid admission").record)
            && claim.helper_owner.is_some()
        {
            break claim.owner;
        }
        assert!(Instant::now() < deadline, "the admission never recorded its helper");
        std::thread::sleep(Duration::from_millis(20));
    };
    let tree: Vec<Vec<String>> = [&a, &b, &c, &d, &e].iter().map(|n| vec!["sleep".to_string(), n.to_string()]).collect();
    for argv in &tree {
        wait_for_process(&argv.iter().map(String::as_str).collect::<Vec<_>>());
    }
    assert_eq!(lookup(&etcd.store(prefix), &owner), RemotePresence::Registered, "the supervisor is present while its tree runs");
    (supervisor, owner, tree)
}

/// How many processes of `tree` still run.
fn alive(tree: &[Vec<String>]) -> usize {
    tree.iter().map(|argv| processes_running(&argv.iter().map(String::as_str).collect::<Vec<_>>()).len()).sum()
}

/// Watches the tree and `owner`'s presence from the kill or stop until the tree is empty: no
/// process of `tree` may run while etcd shows the presence absent (another machine could start
/// then). Fails at the first instant both are true; returns the time until the tree was empty.
fn no_process_outlives_the_presence(etcd: &Etcd, prefix: &str, owner: &Owner, tree: &[Vec<String>], start: Instant) -> Duration {
    let deadline = start + Duration::from_secs(30);
    let mut seen = Vec::new();
    loop {
        let running = alive(tree);
        if running == 0 {
            // Processes do not come back: from here on nothing of the tree can overlap.
            return start.elapsed();
        }
        let present = lookup(&etcd.store(prefix), owner);
        seen.push((start.elapsed().as_millis(), running, present));
        seen.dedup_by(|a, b| (a.1, a.2) == (b.1, b.2));
        assert!(present != RemotePresence::Absent, "{running} processes of the tree run while the presence is gone; (ms, running, presence): {seen:?}");
        assert!(Instant::now() < deadline, "the tree never died: (ms, running, presence): {seen:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `count` trials from `variable` (default `default`), for `bench/containment-stress.sh`.
fn trials(variable: &str, default: u64) -> u64 {
    std::env::var(variable).ok().and_then(|n| n.parse().ok()).unwrap_or(default)
}

/// Prints the p50 and p99 of `times`.
fn percentiles(what: &str, mut times: Vec<Duration>) {
    times.sort();
    let at = |q: f64| times.get(((times.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default();
    println!("{what}: {} trials, 0 survivors; time to an empty tree p50 {:?}, p99 {:?}", times.len(), at(0.5), at(0.99));
}

/// Input 5 of issue #26: SIGKILL of the supervisor takes the whole tree along — the
/// descriptor-closing daemon, the `setsid` sleep, the grandchild and the `setpriv` command
/// too — before etcd expires its presence (`PROCLEASE_CLUSTER_KILLS` trials, default 2;
/// `bench/containment-stress.sh` makes 1,000).
#[test]
fn a_killed_supervisor_takes_its_whole_tree_along() {
    let Some(etcd) = cluster() else { return };
    let mut times = Vec::new();
    for trial in 0..trials("PROCLEASE_CLUSTER_KILLS", 2) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("realpath");
        // A prefix each: the killed supervisor's admission stays behind.
        let prefix = format!("killed-{trial}");
        let (mut supervisor, owner, tree) = spawn_tree(&etcd, &prefix, &root);
        let start = Instant::now();
        supervisor.kill().expect("SIGKILL");
        supervisor.wait().expect("reap");
        times.push(no_process_outlives_the_presence(&etcd, &prefix, &owner, &tree, start));
    }
    percentiles("cluster mode, SIGKILL of the supervisor", times);
}

/// Input 6 of issue #26: a SIGSTOPped supervisor cannot fence, so its kernel dead-man timer
/// kills it — and its box with it — before etcd expires its presence. Stops at different
/// instants of the renewal cycle (`PROCLEASE_CLUSTER_STOPS` trials, default 3;
/// `bench/containment-stress.sh` makes 200).
#[test]
fn a_stopped_supervisor_is_killed_with_its_tree_before_its_presence_expires() {
    let Some(etcd) = cluster() else { return };
    let mut times = Vec::new();
    for trial in 0..trials("PROCLEASE_CLUSTER_STOPS", 3) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("realpath");
        let prefix = format!("stopped-{trial}");
        let (mut supervisor, owner, tree) = spawn_tree(&etcd, &prefix, &root);
        // Somewhere in the renewal cycle (a third of the 2 s TTL).
        std::thread::sleep(Duration::from_millis((trial * 97) % 670));
        let pid = rustix::process::Pid::from_raw(supervisor.id() as i32).expect("pid");
        let start = Instant::now();
        rustix::process::kill_process(pid, rustix::process::Signal::STOP).expect("SIGSTOP");
        times.push(no_process_outlives_the_presence(&etcd, &prefix, &owner, &tree, start));
        let status = supervisor.wait().expect("reap");
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(status.signal(), Some(9), "the dead-man timer killed the stopped supervisor");
        // The kill left a record of its likely cause (#45 case 9): `doctor` says it, `recover`
        // forgets it.
        let local = |args: &[&str]| {
            Command::new(PROCLEASE)
                .arg("--state-home")
                .arg(root.join("state"))
                .arg("--workspace-root")
                .arg(&root)
                .args(["--store", &etcd.url(&prefix), "--cluster-ttl", "2s"])
                .args(args)
                .env_remove("PROCLEASE_STORE")
                .output()
                .expect("runs")
        };
        let words = format!("supervisor pid {} died while its cluster dead-man timer was armed (TTL 2s)", supervisor.id());
        let report = local(&["doctor"]);
        assert!(String::from_utf8_lossy(&report.stdout).contains(&words), "doctor says why it died: {report:?}");
        assert!(local(&["recover"]).status.success());
        assert!(!String::from_utf8_lossy(&local(&["doctor"]).stdout).contains("dead-man timer was armed"), "recover forgot the record");
    }
    percentiles("cluster mode, SIGSTOP of the supervisor (time includes the dead-man deadline)", times);
}

/// Whether `pid` is a process that has not exited (absent or a zombie: exited).
fn running(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .is_some_and(|zombie| !zombie)
}

/// etcd stops answering: a running exclusive command is stopped before its presence could
/// expire (the supervisor cannot renew it), a new run fails closed with a clear error and
/// creates nothing, nothing is deleted; once etcd is back (killed and restarted on its data),
/// the stale admission is taken over after its owner's presence expired, and work resumes.
#[test]
fn with_etcd_stopped_everything_fails_closed_and_work_resumes_after_a_restart() {
    let Some(mut etcd) = cluster() else { return };
    let (first, second) = (machine(&etcd.url(PREFIX), "2s"), machine(&etcd.url(PREFIX), "2s"));
    let holder = first.spawn_exclusive("export", &["sleep", "1000"]);
    let owner = wait_for_helper(&etcd);
    etcd.signal("-STOP");

    // The supervisor cannot renew: it stops its command at 3/4 of the TTL and says why. Its
    // leases were lost while the command ran: exit 7 (lock lost), the lease stays.
    let out = holder.wait_with_output().expect("the supervisor exits");
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    assert!(stderr(&out).contains("so the command was stopped and died of signal 15: its work was interrupted"), "the command was stopped with SIGTERM: {out:?}");
    assert!(stderr(&out).contains("keeps what the command wrote, and its lease stays"), "{out:?}");
    assert!(stderr(&out).contains("cluster session lost: etcd at 127.0.0.1:"), "{out:?}");
    assert!(first.root.join("export").is_dir(), "nothing was deleted");

    // A new run fails closed: a clear error, exit 1, nothing created.
    let out = second.exclusive("blocked", &["true"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains(&format!("etcd at 127.0.0.1:{} is unreachable", etcd.client_port)), "{out:?}");
    assert!(!second.root.join("blocked").exists(), "nothing was created");

    etcd.kill();
    etcd.restart();
    let (held, _) = admission(&etcd).expect("the admission survived the outage");
    assert_eq!(held, owner, "and is still the first machine's");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let out = second.exclusive(&format!("job{attempt}"), &["true"]);
        match out.status.code() {
            Some(0) => break,
            Some(3) => assert!(stderr(&out).contains("another export is active"), "{out:?}"),
            _ => panic!("after the restart: {out:?}"),
        }
        assert!(Instant::now() < deadline, "work never resumed");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(presence(&etcd, &owner), RemotePresence::Absent);
    assert!(admission(&etcd).is_none());
}

/// A Ctrl-C while etcd hangs ends a waiting run as a Ctrl-C: exit 130, "interrupted", nothing
/// created. The waiter is the head of the queue when etcd is frozen; its next attempt at the
/// admission hangs until the client's timeout, and before, that attempt's failure ("etcd …
/// is unreachable", exit 1) was reported instead of the user's interruption. Runs without
/// namespaces: one machine, two processes.
#[test]
fn a_ctrl_c_while_etcd_hangs_stops_a_waiting_run_as_interrupted() {
    let Some(etcd) = cluster() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("realpath");
    let url = etcd.url(PREFIX);
    let proclease = |args: &[&str]| {
        let mut command = Command::new(PROCLEASE);
        command
            .arg("--state-home")
            .arg(root.join("state"))
            .arg("--workspace-root")
            .arg(&root)
            .args(["--store", &url, "--cluster-ttl", "2s"])
            .args(args)
            .env_remove("PROCLEASE_STORE")
            .env_remove("PROCLEASE_STATE_HOME")
            .env_remove("GHOSTGET_STATE_HOME");
        command
    };
    let held = root.join("held");
    let mut holder = proclease(&["run", "--exclusive", "--workdir", held.to_str().expect("utf-8"), "--", "sleep", "1000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the holder starts");
    wait_for_helper(&etcd);
    let next = root.join("next");
    let mut waiter = proclease(&["run", "--exclusive", "--wait", "60s", "--workdir", next.to_str().expect("utf-8"), "--", "touch", "ran"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the waiter starts");
    // Its stderr, line by line, until it says it waits (then the rest, for the assertions).
    let (lines, said) = std::sync::mpsc::channel();
    let stderr_pipe = waiter.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr_pipe).lines().map_while(Result::ok) {
            let _ = lines.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let line = said.recv_timeout(deadline.saturating_duration_since(Instant::now())).expect("the waiter says it waits");
        if line.contains("waiting for its turn") {
            break;
        }
    }
    etcd.signal("-STOP");
    // Past the watch's one-second slice: the waiter's next attempt is now hung on etcd.
    std::thread::sleep(Duration::from_millis(1500));
    let pid = rustix::process::Pid::from_raw(i32::try_from(waiter.id()).expect("pid")).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
    let status = waiter.wait().expect("the waiter exits");
    let text = reader.join().expect("stderr read");
    etcd.signal("-CONT");
    crash(&mut holder);
    assert_eq!(status.code(), Some(130), "a Ctrl-C, not etcd's failure: {text}");
    assert!(text.contains("interrupted by signal 2 before the command started"), "{text}");
    assert!(!next.exists(), "nothing was created");
}

/// A lost session is an interruption (#45 case 4): a command that shuts down gracefully on
/// SIGTERM (exit 0) after its supervisor lost its presence has its half-written stage treated
/// as scratch (removed, as a failed command's), never published to `--output`, and the run exits 7 ("lock lost") with the
/// command's own status in words — not "results published, intact".
#[test]
fn a_lost_session_publishes_nothing_and_exits_lock_lost() {
    let Some(etcd) = cluster() else { return };
    let holder = machine(&etcd.url(PREFIX), "2s");
    let (stage, output) = (holder.root.join(".stage"), holder.root.join("v2"));
    let script = "trap 'echo half > part; exit 0' TERM; echo started > begun; while :; do sleep 0.05; done";
    let running = holder
        .command(&["run", "--exclusive", "--stage", stage.to_str().expect("utf-8"), "--output", output.to_str().expect("utf-8"), "--", "sh", "-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_for_helper(&etcd);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !stage.join("begun").exists() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    etcd.signal("-STOP");
    let out = running.wait_with_output().expect("the supervisor exits");
    etcd.signal("-CONT");
    assert_eq!(out.status.code(), Some(7), "lock lost: {out:?}");
    let said = stderr(&out);
    assert!(said.contains("cluster session lost: "), "{said}");
    assert!(said.contains("so the command was stopped and exited 0: its work was interrupted and nothing was published"), "{said}");
    assert!(said.contains("its stage") && said.contains("is scratch"), "{said}");
    assert!(!said.contains("intact"), "{said}");
    assert!(!output.exists(), "the half-written stage was not published");
    assert!(!stage.exists(), "the stage is scratch, removed as a failed command's is");
}

/// etcd's data is wiped while an exclusive command runs (the member started again on an empty
/// data directory: same address, same cluster id, no admission, no presences): the first
/// machine's command is killed once its renewal finds its presence gone, and the second
/// machine's exclusive run, which finds the admission free, first waits out the grace of the
/// new epoch — so the two commands never run at once. The first command writes a tick to a
/// shared log every 20 ms; the second writes `start` and `end` around a pause: no tick may
/// follow `start`. `doctor` meanwhile says that the cluster lost its state.
#[test]
fn a_wiped_etcd_never_lets_two_exports_overlap() {
    let Some(mut etcd) = cluster() else { return };
    let shared = tempfile::tempdir().expect("shared dir");
    let log = shared.path().join("log");
    let (first, second) = (machine(&etcd.url(PREFIX), "2s"), machine(&etcd.url(PREFIX), "2s"));
    let ticking = format!("echo \"$PROCLEASE_FENCING_TOKEN\" > '{}'; while :; do echo tick >> '{}'; sleep 0.02; done", first.root.join("t1").display(), log.display());
    let workdir = first.root.join("export");
    let holder = first
        .command(&["run", "--exclusive", "--workdir", workdir.to_str().expect("utf-8"), "--", "sh", "-c", &ticking])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_for_helper(&etcd);
    etcd.wipe();
    assert!(admission(&etcd).is_none(), "the wipe lost the admission");
    let report = second.run(&["doctor"]);
    assert!(String::from_utf8_lossy(&report.stdout).contains("cluster state: no epoch of this etcd cluster"), "doctor says the state was lost: {report:?}");

    let script = format!("echo \"$PROCLEASE_FENCING_TOKEN\" > '{1}'; echo start >> '{0}'; sleep 0.3; echo end >> '{0}'", log.display(), second.root.join("t2").display());
    let out = second.exclusive("after", &["sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let first_token = read_token(&first.root.join("t1"));
    assert!(read_token(&second.root.join("t2")) > first_token, "tokens keep growing across the wipe, although etcd's revisions started again");
    let first = holder.wait_with_output().expect("the first supervisor ends");
    let text = std::fs::read_to_string(&log).expect("log");
    let start = text.find("start").expect("the second command ran");
    assert!(!text[start..].contains("tick"), "the first command ran on after the second started: {text}");
    assert!(text[start..].contains("end"), "{text}");
    assert!(stderr(&out).contains("held no state of this prefix (new, wiped or restored)"), "it said why it waited: {out:?}");
    assert!(!first.status.success(), "{first:?}");
    let said = stderr(&first);
    // Its renewal finds the state lost, or no renewal is acknowledged in time while etcd
    // restarts: either stops the command.
    assert!(said.contains("cluster state lost: ") || said.contains("cluster session lost: "), "the first machine says why its command was stopped: {said}");
}

/// An exclusive run `name` on `machine` whose command writes its fencing token: the token, and
/// the run's output.
fn exclusive_token(machine: &Machine, name: &str) -> (i64, Output) {
    let file = machine.root.join(format!("{name}.token"));
    let out = machine.exclusive(name, &["sh", "-c", &format!("echo \"$PROCLEASE_FENCING_TOKEN\" > '{}'", file.display())]);
    assert!(out.status.success(), "{out:?}");
    (read_token(&file), out)
}

/// A fencing token a command wrote to `file`.
fn read_token(file: &std::path::Path) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.ends_with('\n') {
            return text.trim().parse().unwrap_or_else(|_| panic!("{}: not a token: {text:?}", file.display()));
        }
        assert!(Instant::now() < deadline, "{} never got a token", file.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The disaster-recovery runbook (#45, cases 1 and 2): `etcdctl snapshot save`, more work, then
/// `snapshot restore` into a cluster of the same id while a holder the backup does not know runs.
/// The restored state has no admission, its own epoch key and the cluster id of before; what
/// gives it away is etcd's raft log, which a restore starts again near 0. The next run finds
/// that, starts a new epoch and waits out its grace, by which time the holder's session found
/// its lease gone and stopped its command: the commands never overlap (the first writes a tick
/// every 20 ms; none may follow the second's `start`). Tokens keep growing although etcd's
/// revisions went back, and the old holder's token is stale.
#[test]
fn a_restored_etcd_never_lets_two_exports_overlap_and_tokens_keep_growing() {
    if !etcd_server::etcdctl_installed() {
        return;
    }
    let Some(mut etcd) = cluster() else { return };
    let shared = tempfile::tempdir().expect("shared dir");
    let (log, backup) = (shared.path().join("log"), shared.path().join("backup.db"));
    let (first, second) = (machine(&etcd.url(PREFIX), "2s"), machine(&etcd.url(PREFIX), "2s"));
    let token_into = |machine: &Machine, name: &str| format!("echo \"$PROCLEASE_FENCING_TOKEN\" > '{}'", machine.root.join(name).display());
    // The prefix in use before the backup: a few runs on both machines.
    for (index, machine) in [&first, &second, &first].into_iter().enumerate() {
        let out = machine.exclusive(&format!("before{index}"), &["sh", "-c", &token_into(machine, "t0")]);
        assert!(out.status.success(), "{out:?}");
    }
    etcd.snapshot(&backup);
    assert!(second.exclusive("between", &["true"]).status.success());
    let ticking = format!("{}; while :; do echo tick >> '{}'; sleep 0.02; done", token_into(&first, "t1"), log.display());
    let workdir = first.root.join("export");
    let holder = first
        .command(&["run", "--exclusive", "--workdir", workdir.to_str().expect("utf-8"), "--", "sh", "-c", &ticking])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_for_helper(&etcd);
    let holder_token = read_token(&first.root.join("t1"));
    etcd.restore(&backup);
    assert!(admission(&etcd).is_none(), "the backup has no admission: its holder acquired after it");
    let report = second.run(&["doctor"]);
    let said = String::from_utf8_lossy(&report.stdout).into_owned();
    assert!(said.contains("cluster state: the etcd cluster was restored from a backup"), "doctor says the state was restored: {report:?}");

    let script = format!("{}; echo start >> '{1}'; sleep 0.3; echo end >> '{1}'", token_into(&second, "t2"), log.display());
    let out = second.exclusive("after", &["sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stderr(&out).contains("was restored from a backup: its raft log is at index"), "it said why it waited: {out:?}");
    let first_run = holder.wait_with_output().expect("the first supervisor ends");
    let text = std::fs::read_to_string(&log).expect("log");
    let start = text.find("start").expect("the second command ran");
    assert!(!text[start..].contains("tick"), "the first command ran on after the second started: {text}");
    assert!(text[start..].contains("end"), "{text}");
    assert!(!first_run.status.success(), "{first_run:?}");
    assert!(stderr(&first_run).contains("cluster state lost: "), "the first machine says why its command was stopped: {}", stderr(&first_run));

    let tokens = [read_token(&first.root.join("t0")), holder_token, read_token(&second.root.join("t2"))];
    assert!(tokens.windows(2).all(|pair| pair[0] < pair[1]), "tokens grow across the restore: {tokens:?}");
    let check = Command::new(PROCLEASE).args(["--store", &etcd.url(PREFIX), "fence", "check", &holder_token.to_string()]).output().expect("runs");
    assert_eq!(check.status.code(), Some(1), "{check:?}");
    assert!(String::from_utf8_lossy(&check.stdout).contains("before etcd's state of this prefix was wiped or restored"), "{check:?}");
}

/// A restore is told however much another tenant of the etcd writes after it (an etcd shared
/// with Kubernetes, or with other prefixes): those writes carry etcd's new raft log past every
/// index this prefix saw before the backup, but not ahead of its revisions again. Without the
/// check of the raft log against the revisions, the next holder's fencing token came out below
/// the tokens handed out between the backup and the restore.
#[test]
fn a_restore_is_told_even_after_other_tenants_write_past_the_prefixs_raft_index() {
    if !etcd_server::etcdctl_installed() {
        return;
    }
    let Some(mut etcd) = cluster() else { return };
    let shared = tempfile::tempdir().expect("shared dir");
    let backup = shared.path().join("backup.db");
    let machine = machine(&etcd.url(PREFIX), "2s");
    let token = |name: &str| exclusive_token(&machine, name);
    let mut tokens = vec![token("before0").0, token("before1").0];
    etcd.snapshot(&backup);
    tokens.extend([token("between0").0, token("between1").0]);
    // Where etcd's raft log stands before the restore, and other tenants' writes after it.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let endpoint = format!("http://127.0.0.1:{}", etcd.client_port);
    let raft_index = |runtime: &tokio::runtime::Runtime| {
        runtime.block_on(async {
            let mut client = etcd_client::Client::connect([endpoint.clone()], None).await.expect("etcd answers");
            client.status().await.expect("status").raft_index()
        })
    };
    let before = raft_index(&runtime);
    etcd.restore(&backup);
    let written = runtime.block_on(async {
        let mut client = etcd_client::Client::connect([endpoint.clone()], None).await.expect("etcd answers");
        let mut written = 0;
        while client.status().await.expect("status").raft_index() <= before + 20 {
            for _ in 0..50 {
                client.put(format!("/another-tenant/key-{written}"), "value", None).await.expect("put");
                written += 1;
            }
        }
        written
    });
    assert!(raft_index(&runtime) > before, "another tenant's {written} writes carried the raft log past where it stood before the restore");
    let (after, out) = token("after");
    assert!(stderr(&out).contains("was restored from a backup: its raft log is at index"), "it told the restore: {out:?}");
    tokens.push(after);
    assert!(tokens.windows(2).all(|pair| pair[0] < pair[1]), "tokens grow across the restore: {tokens:?}");
}

/// A backup taken right after an epoch started on a young raft log — a freshly restored etcd,
/// whose log restarted near 0 — is told when it is restored in turn, although the restored log
/// then runs a hundred entries that write no key (lease grants, as processes that register make)
/// before the next process checks: every epoch start pads etcd's raft log ahead of its mark
/// (`epoch::EPOCH_PADDING`). Without it, a history run saw the next holder's fencing token come
/// out below one handed out between the backup and the restore.
#[test]
fn a_backup_taken_early_in_an_epoch_on_a_young_raft_log_is_told_when_restored() {
    if !etcd_server::etcdctl_installed() {
        return;
    }
    let Some(mut etcd) = cluster() else { return };
    let shared = tempfile::tempdir().expect("shared dir");
    let machine = machine(&etcd.url(PREFIX), "2s");
    let token = |name: &str| exclusive_token(&machine, name);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let endpoint = format!("http://127.0.0.1:{}", etcd.client_port);
    // Entries that write no key, as processes that register make: lease grants.
    let grant_leases = |runtime: &tokio::runtime::Runtime, count: usize| {
        runtime.block_on(async {
            let mut client = etcd_client::Client::connect([endpoint.clone()], None).await.expect("etcd answers");
            for _ in 0..count {
                client.lease_grant(60, None).await.expect("a lease");
            }
        })
    };
    let mut tokens = vec![token("first").0];
    // A restore: the raft log restarts near 0, and the next process starts a new epoch on it.
    let first_backup = shared.path().join("first.db");
    etcd.snapshot(&first_backup);
    etcd.restore(&first_backup);
    let (young, out) = token("young");
    assert!(stderr(&out).contains("was restored from a backup"), "it told the first restore: {out:?}");
    tokens.push(young);
    // A backup taken at once, early in that epoch, then a holder it does not know.
    let backup = shared.path().join("early.db");
    etcd.snapshot(&backup);
    tokens.push(token("between").0);
    etcd.restore(&backup);
    grant_leases(&runtime, 100);
    let (after, out) = token("after");
    assert!(stderr(&out).contains("was restored from a backup: its raft log is at index"), "it told the restore of the early backup: {out:?}");
    tokens.push(after);
    assert!(tokens.windows(2).all(|pair| pair[0] < pair[1]), "tokens grow across both restores: {tokens:?}");
}

/// A process that registered before a backup was restored may not write after it (#45 case 1):
/// the restore brings its lease back with the backup, so the write's fence would pass; the raft
/// index it checks before a shared write, below the highest it saw, tells. (A `--bump-revision`
/// restore hides the revision too; the raft log cannot hide.)
#[test]
fn a_process_registered_before_a_restore_may_not_write_after_it() {
    if !etcd_server::etcdctl_installed() {
        return;
    }
    let Some(mut etcd) = cluster_with_ttl(10) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = dir.path().join("backup.db");
    let host = proclease::Host::builder()
        .state_home(dir.path().join("state"))
        .workspace_root(dir.path())
        .store(etcd.url(PREFIX))
        .cluster_ttl(Duration::from_secs(10))
        .build()
        .expect("a host on etcd");
    let cycle = || host.acquire_admission().expect("acquired").release().expect("released");
    for _ in 0..3 {
        cycle();
    }
    etcd.snapshot(&backup);
    for _ in 0..3 {
        cycle();
    }
    etcd.restore(&backup);
    let refused = host.acquire_admission().err().expect("no write after the restore");
    assert!(refused.to_string().contains("so it may no longer write"), "{refused}");
    assert!(admission(&etcd).is_none(), "nothing was written");
}

/// A holder's token stays current when etcd compacts its history past the token's revision
/// (#45, case 5: auto-compaction, or an etcd shared with Kubernetes): the check reads the
/// admission, the token's record and the holder's presence as they are now.
#[test]
fn a_holders_fencing_token_stays_current_after_etcd_compacts() {
    if !etcd_server::etcdctl_installed() {
        return;
    }
    let Some(etcd) = cluster_with_ttl(3) else { return };
    let holder = machine(&etcd.url(PREFIX), "3s");
    let script = format!("echo \"$PROCLEASE_FENCING_TOKEN\" > '{}'; sleep 1000", holder.root.join("t").display());
    let mut running = holder.spawn_exclusive("long", &["sh", "-c", &script]);
    wait_for_helper(&etcd);
    let token = read_token(&holder.root.join("t"));
    let check = || Command::new(PROCLEASE).args(["--store", &etcd.url(PREFIX), "fence", "check", &token.to_string()]).output().expect("runs");
    assert_eq!(check().status.code(), Some(0), "{:?}", check());
    let compacted = etcd.compact();
    assert!(compacted > token & ((1 << 32) - 1), "the compaction passed the token's revision");
    let after = check();
    assert_eq!(after.status.code(), Some(0), "still current after the compaction: {after:?}");
    crash(&mut running);
}

/// TLS from the command line (#28, input 3): `--etcd-ca`, `--etcd-cert`, `--etcd-key` (or the
/// `PROCLEASE_ETCD_*` variables) against an etcd that requires client certificates; without
/// them the run is refused, saying what to give, and creates nothing.
#[test]
fn the_command_line_speaks_tls_to_etcd_with_flags_or_variables() {
    let Some(etcd) = Etcd::start_tls() else { return };
    let tls = etcd.tls.clone().expect("certificates");
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("realpath");
    let proclease = |args: &[&str]| {
        let mut command = Command::new(PROCLEASE);
        command.arg("--state-home").arg(root.join("state")).arg("--workspace-root").arg(&root);
        command.args(["--store", &etcd.url(PREFIX), "--cluster-ttl", "2s"]).args(args);
        for variable in ["PROCLEASE_STORE", "PROCLEASE_ETCD_CA", "PROCLEASE_ETCD_CERT", "PROCLEASE_ETCD_KEY"] {
            command.env_remove(variable);
        }
        command
    };
    let work = |job: &str| root.join(job).to_str().expect("utf-8").to_owned();

    let out = proclease(&["run", "--exclusive", "--workdir", &work("plain"), "--", "true"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("if it uses TLS") && stderr(&out).contains("--etcd-ca"), "{out:?}");
    assert!(!root.join("plain").exists(), "nothing was created");

    let (ca, cert, key) = (tls.ca.to_str().expect("utf-8"), tls.client_cert.to_str().expect("utf-8"), tls.client_key.to_str().expect("utf-8"));
    let out = proclease(&["--etcd-ca", ca, "--etcd-cert", cert, "--etcd-key", key, "run", "--exclusive", "--workdir", &work("flags"), "--", "true"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    let out = proclease(&["run", "--exclusive", "--workdir", &work("variables"), "--", "true"])
        .env("PROCLEASE_ETCD_CA", ca)
        .env("PROCLEASE_ETCD_CERT", cert)
        .env("PROCLEASE_ETCD_KEY", key)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    let out = proclease(&["--etcd-cert", cert, "doctor"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("no CA: give --etcd-ca"), "{out:?}");
    assert!(admission(&etcd).is_none(), "both runs released the admission");

    // No command dies without a word (#45 case 6; it was SIGPIPE, exit 141): neither without the
    // CA, nor with a CA but no client certificate, which etcd refuses mid-handshake.
    for trust in [&[][..], &["--etcd-ca", ca][..]] {
        for args in [&["doctor"][..], &["recover"], &["cluster", "history"], &["fence", "check", "5"], &["invocations", "list"]] {
            let out = proclease(&[trust, args].concat()).output().expect("runs");
            assert_eq!(out.status.code(), Some(1), "{trust:?} {args:?}: exits, saying why: {out:?}");
            assert!(stderr(&out).contains("etcd"), "{trust:?} {args:?}: {out:?}");
        }
    }
}

/// In cluster mode an exclusive run needs a box (#45 case 8): where none can be made (here a
/// user namespace whose limit of PID namespaces is 0), `--containment auto` refuses before
/// anything is leased, saying what to do; `--containment none` runs it, with a warning that
/// its tree may outlive a stopped supervisor.
#[test]
fn an_exclusive_run_in_cluster_mode_needs_a_box_unless_told_otherwise() {
    let Some(etcd) = cluster() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("realpath");
    let boxless = |containment: &str, job: &str| {
        let workdir = root.join(job);
        let limited = "echo 0 > /proc/sys/user/max_pid_namespaces && exec \"$@\"";
        Command::new("unshare")
            .args(["--user", "--map-root-user", "sh", "-c", limited, "sh", PROCLEASE, "--state-home"])
            .arg(root.join("state"))
            .arg("--workspace-root")
            .arg(&root)
            .args(["--store", &etcd.url(PREFIX), "--cluster-ttl", "2s", "run", "--exclusive", "--containment", containment, "--workdir"])
            .arg(&workdir)
            .args(["--", "true"])
            .env_remove("PROCLEASE_STORE")
            .output()
            .expect("runs")
    };
    let refused = boxless("auto", "auto");
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let said = stderr(&refused);
    assert!(said.contains("in cluster mode an exclusive run's command must die with its supervisor, which needs a box"), "{said}");
    assert!(said.contains("--containment none"), "it says how to go on: {said}");
    assert!(!root.join("auto").exists() && admission(&etcd).is_none(), "nothing was leased or created");
    let ran = boxless("none", "none");
    assert_eq!(ran.status.code(), Some(0), "{ran:?}");
    assert!(stderr(&ran).contains("--containment none in cluster mode: the command runs without a box"), "{ran:?}");
}

/// One hung member while a quorum answers (#45 case 3): a SIGSTOPped member, and an endpoint
/// that accepts connections and never answers, are passed over after the dial timeout instead of
/// failing every run that happens to ask them (before: exit 1 after 5–10 s, "unreachable").
#[test]
fn a_hung_member_is_passed_over() {
    if !namespaces_available(&["--pid", "--mount", "--fork", "--mount-proc"]) {
        return;
    }
    let Some(cluster) = etcd_server::EtcdCluster::start(3) else { return };
    // An endpoint that accepts and never answers, listed first.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    let silent_port = silent.local_addr().expect("its port").port();
    let url = cluster.url(PREFIX).replacen("etcd://", &format!("etcd://127.0.0.1:{silent_port},"), 1);
    proclease::cluster::presence::await_epoch(&cluster.store(PREFIX), Duration::from_secs(2)).expect("the prefix's epoch");
    let machine = machine(&url, "2s");
    let follower = (0..3).find(|&i| Some(i) != cluster.leader()).expect("a follower");
    cluster.signal(follower, "-STOP");
    for job in 0..4 {
        let out = machine.exclusive(&format!("job{job}"), &["true"]);
        assert_eq!(out.status.code(), Some(0), "run {job} with one member stopped and one endpoint silent: {out:?}");
    }
    let report = machine.run(&["doctor"]);
    assert_eq!(report.status.code(), Some(0), "{report:?}");
    cluster.signal(follower, "-CONT");
    drop(silent);
}

/// Operators' mistakes get words that say what to fix (#45 case 9), at once rather than after
/// the request timeout as "unreachable … retry": credentials for an etcd without
/// authentication, `--etcd-ca` against a plain-text etcd, a client key that is not the
/// certificate's; an admission in etcd over the claim's size bound is one `doctor` row, not a
/// failed `doctor`; a `--cluster-ttl` other than the epoch's is told.
#[test]
fn operator_mistakes_get_words_that_say_what_to_fix() {
    if !etcd_server::etcdctl_installed() {
        return;
    }
    let Some(etcd) = cluster() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let proclease = |url: &str, args: &[&str]| {
        let mut command = Command::new(PROCLEASE);
        command.arg("--state-home").arg(dir.path().join("state")).args(["--store", url]).args(args);
        for variable in ["PROCLEASE_STORE", "PROCLEASE_ETCD_CA", "PROCLEASE_ETCD_CERT", "PROCLEASE_ETCD_KEY", "PROCLEASE_ETCD_USER", "PROCLEASE_ETCD_PASSWORD"] {
            command.env_remove(variable);
        }
        command
    };
    let url = etcd.url(PREFIX);
    let out = proclease(&url, &["doctor"]).env("PROCLEASE_ETCD_USER", "fleet").env("PROCLEASE_ETCD_PASSWORD", "pw").output().expect("runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("etcd has authentication disabled, but credentials were given (user \"fleet\")"), "{out:?}");
    let Some(tls_etcd) = Etcd::start_tls() else { return };
    let tls = tls_etcd.tls.clone().expect("certificates");
    let ca = tls.ca.to_str().expect("utf-8").to_owned();
    let out = proclease(&url, &["--etcd-ca", &ca, "doctor"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("it does not speak TLS there (drop --etcd-ca"), "{out:?}");
    let (cert, wrong_key) = (tls.client_cert.to_str().expect("utf-8").to_owned(), tls.mismatched_key());
    let out = proclease(&tls_etcd.url(PREFIX), &["--etcd-ca", &ca, "--etcd-cert", &cert, "--etcd-key", wrong_key.to_str().expect("utf-8"), "doctor"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("is not the key of the certificate in PROCLEASE_ETCD_CERT"), "{out:?}");

    // A 20 KB admission: one row saying so, and how to set it aside.
    let key = format!("/{PREFIX}/f/{CLAIM_PATH}");
    let endpoint = format!("127.0.0.1:{}", etcd.client_port);
    let big = format!("{{\"x\":\"{}\"}}", "a".repeat(20_000));
    let put = Command::new("etcdctl").env("ETCDCTL_API", "3").args(["--endpoints", &endpoint, "put", &key, &big]).output().expect("etcdctl");
    assert!(put.status.success(), "{put:?}");
    let report = proclease(&url, &["doctor"]).output().expect("runs");
    assert_eq!(report.status.code(), Some(0), "doctor still reports: {report:?}");
    let said = String::from_utf8_lossy(&report.stdout);
    assert!(said.contains("is not a valid export admission") && said.contains("larger than 16384 bytes") && said.contains("etcdctl"), "{said}");
    let del = Command::new("etcdctl").env("ETCDCTL_API", "3").args(["--endpoints", &endpoint, "del", &key]).output().expect("etcdctl");
    assert!(del.status.success(), "{del:?}");

    // The epoch was started with a TTL of 2 s; a machine with another takes no part (a grace
    // after a wipe lasts the starter's TTL): it refuses before its command starts.
    let other = machine(&url, "4s");
    let marker = other.root.join("ran");
    let out = other.exclusive("ttl", &["touch", marker.to_str().expect("utf-8")]);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(stderr(&out).contains("--cluster-ttl (4 s) differs from the TTL this prefix's epoch was started with (2 s), so it takes no part"), "{out:?}");
    assert!(stderr(&out).contains("use --cluster-ttl 2s"), "{out:?}");
    assert!(!marker.exists(), "the command never ran");
}

/// The etcd password never reaches the command (#45 case 7): not in its environment, and not in
/// its box's init (`/proc/1/environ`), a fork of the supervisor that never execs and so keeps the
/// environment block the supervisor started with — which `proclease` scrubs first thing.
#[test]
fn the_command_never_sees_the_etcd_password() {
    if !namespaces_available(&["--pid", "--mount", "--fork", "--mount-proc"]) {
        return;
    }
    let Some(etcd) = Etcd::start() else { return };
    etcd.enable_auth("fleet", "fl33t-pw-secret", PREFIX);
    let holder = machine(&etcd.url(PREFIX), "2s");
    let seen = holder.root.join("seen");
    let script = format!("{{ cat /proc/1/comm; tr '\\0' '\\n' < /proc/1/environ; echo ---; env; }} > '{}'", seen.display());
    let workdir = holder.root.join("job");
    let out = holder
        .command(&["run", "--exclusive", "--workdir", workdir.to_str().expect("utf-8"), "--", "sh", "-c", &script])
        .env("PROCLEASE_ETCD_USER", "fleet")
        .env("PROCLEASE_ETCD_PASSWORD", "fl33t-pw-secret")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "the run authenticated: {out:?}");
    let seen = std::fs::read_to_string(&seen).expect("what the command saw");
    assert!(seen.starts_with("proclease-init\n"), "/proc/1 is the box's init, a fork of the supervisor: {seen}");
    assert!(seen.contains("PROCLEASE_ETCD_USER=fleet"), "the init's environment was read: {seen}");
    assert!(!seen.contains("fl33t-pw-secret"), "the password reached the command: {seen}");
}

/// Plugin invocations of three machines race, while a fourth repairs tombstones in a loop:
/// every invocation keeps its own lease from acquire to release (a repair never takes a live
/// machine's lease: each release would fail if it had), and none is left.
#[test]
fn racing_invocations_keep_their_own_leases_while_another_machine_repairs() {
    let Some(etcd) = cluster() else { return };
    let machines: Vec<Machine> = (0..4).map(|_| machine(&etcd.url(PREFIX), "2s")).collect();
    let (runners, repairer) = machines.split_at(3);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let repairs = scope.spawn(|| {
            let mut removed = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                removed += repairer[0].repair_tombstones()["removed"].as_u64().expect("count");
            }
            removed
        });
        let handles: Vec<_> = runners
            .iter()
            .map(|machine| {
                scope.spawn(move || {
                    for round in 0..5 {
                        let out = machine.invocation(&["sleep", "0.3"]).output().expect("runs");
                        assert_eq!(out.status.code(), Some(0), "round {round}: {out:?}");
                        assert!(out.stderr.is_empty(), "cleanup and release succeeded: {}", stderr(&out));
                    }
                })
            })
            .collect();
        // Every runner is joined (and the repairer stopped) before a runner's failure is
        // raised: otherwise the repairer would loop for ever and hide it.
        let outcomes: Vec<_> = handles.into_iter().map(|handle| handle.join()).collect();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        let removed = repairs.join().expect("repairer");
        for outcome in outcomes {
            if let Err(panic) = outcome {
                std::panic::resume_unwind(panic);
            }
        }
        assert_eq!(removed, 0, "the repairer removed a live machine's lease");
    });
    assert!(machines[0].invocation_leases().is_empty(), "every lease was released");
}

/// A machine crashes while a plugin host runs: its lease (host-active, both processes recorded
/// on another boot) is a tombstone the reference would clear in recover mode as "from a previous
/// boot". In cluster mode it stays while the crashed machine's presence is registered, and goes
/// once etcd expired it.
#[test]
fn a_crashed_machines_invocation_tombstone_stays_until_its_presence_expires() {
    let Some(etcd) = cluster_with_ttl(4) else { return };
    let (first, second) = (machine(&etcd.url(PREFIX), "4s"), machine(&etcd.url(PREFIX), "4s"));
    let mut crashed = first.invocation(&["sleep", "1000"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(30);
    let lease = loop {
        if let Some(lease) = second.invocation_leases().into_iter().find(|l| l["containment"] == "host-active") {
            break lease;
        }
        assert!(Instant::now() < deadline, "the host was never recorded");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(lease["ownerStatus"], "exact-live-owner", "another machine's live owner: {lease}");
    let path = format!("{}/{}.json", proclease::core::invocation_leases::DIRECTORY, lease["leaseId"].as_str().expect("id"));
    let text = etcd.store(PREFIX).read_if_present(&path, 32_768).expect("etcd answers").expect("the lease is in etcd");
    let owner = invocation_lease::parse_json(&text).expect("valid").record.owner.process;
    crash(&mut crashed);

    let report = second.repair_tombstones();
    assert_eq!(report["removed"], 0, "removed while the crashed machine's presence was registered: {report}");
    assert_eq!(presence(&etcd, &owner), RemotePresence::Registered, "the TTL had not passed");
    assert_eq!(second.invocation_leases().len(), 1);
    // Its owner's presence expires after the TTL; only then does the tombstone go.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let report = second.repair_tombstones();
        let after = presence(&etcd, &owner);
        if report["removed"] == 1 {
            assert_eq!(after, RemotePresence::Absent, "removed while the owner's presence was registered");
            break;
        }
        assert_eq!(report["removed"], 0, "{report}");
        assert!(Instant::now() < deadline, "the tombstone was never recovered");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(second.invocation_leases().is_empty());
    let out = second.invocation(&["true"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// A machine's processes are invisible to the others: `doctor` there says why the admission is
/// active (the owner's cluster presence) and where the admission lives.
#[test]
fn doctor_on_another_machine_shows_the_cluster_and_why() {
    let Some(etcd) = cluster() else { return };
    let (first, second) = (machine(&etcd.url(PREFIX), "2s"), machine(&etcd.url(PREFIX), "2s"));
    let mut holder = first.spawn_exclusive("export", &["sleep", "1000"]);
    wait_for_helper(&etcd);
    let out = second.run(&["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains(&format!("cluster: etcd://127.0.0.1:{}/{PREFIX}", etcd.client_port)), "{text}");
    assert!(text.contains("it runs on another machine and keeps its cluster presence alive"), "{text}");
    // The holder's machine by name, as its presence records it (the machines share this host's
    // UTS namespace, so its name).
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("host name").trim().to_owned();
    assert!(text.contains(&format!("it runs on host {name}")), "{text}");
    let out = second.run(&["doctor", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(doc["store"], etcd.url(PREFIX));
    let admission = doc["entries"].as_array().and_then(|items| items.iter().find(|i| i["kind"] == "admission")).cloned().expect("the admission row");
    assert_eq!(admission["ownerHost"], name.as_str(), "{doc}");
    crash(&mut holder);
}

/// The README's cluster demo, with this build's binary: machine B is refused while A exports,
/// exports after it, and takes over a crashed A's admission after the TTL.
#[test]
fn the_demo_script_shows_a_refusal_and_a_takeover() {
    if !namespaces_available(&["--pid", "--mount", "--fork", "--mount-proc"]) || Etcd::start().is_none() {
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/cluster-demo.sh");
    let out = Command::new("bash").arg(script).env("PROCLEASE", PROCLEASE).env_remove("PROCLEASE_STORE").output().expect("bash runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for line in [
        "two machines (own PID namespace and boot id each: yes)",
        "machine A: exporting",
        "it runs on another machine and keeps its cluster presence alive",
        "machine B: refused while A exports (exit 3)",
        "machine A: done",
        "machine B: exporting",
        "machine A crashed",
        "machine B: took over the admission",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(!text.contains(" and 0 refusals"), "the takeover waited while the crashed machine's presence lived:\n{text}");
}
