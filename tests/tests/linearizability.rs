//! Linearizability of the file store's compare-and-swap (issue #42): processes race random
//! reads, creates, replaces and removes on one record, and their history (invocation and return
//! on `CLOCK_MONOTONIC`) must be explained by a register with compare-and-swap
//! (`tests/src/linearizability.rs`). The checker itself is checked: on hand-made histories, and
//! on a store double that skips the compare.

use std::process::{Command, Stdio};
use std::sync::Arc;

use proclease::core::digest::sha256_hex;
use proclease::process_identity::ProcessIdentity;
use proclease::state_home::StateHome;
use proclease::state_store::{SharedStore, StateStore};
use proclease_tests::linearizability::{Action, Answer, Operation, RECORD, Races, Register, check, from_json, random_client};

fn open(home: &std::path::Path) -> StateStore {
    StateStore::open(StateHome::open(home).expect("state home opens"), Arc::new(ProcessIdentity::new())).expect("store opens")
}

fn op(process: &str, invoked_ns: u64, returned_ns: u64, action: Action, answer: Answer) -> Operation {
    Operation { process: process.into(), invoked_ns, returned_ns, action, answer }
}

fn create(content: &str) -> Action {
    Action::CreateIfAbsent(content.into())
}

fn replace(expected: &str, content: &str) -> Action {
    Action::ReplaceIfUnchanged { expected_sha256: sha256_hex(expected.as_bytes()), content: content.into() }
}

fn read(seen: Option<&str>) -> Answer {
    Answer::Read(seen.map(String::from))
}

#[test]
fn a_sequential_history_that_follows_the_contract_is_linearizable() {
    let history = [
        op("a", 0, 1, create("x"), Answer::Swapped(true)),
        op("b", 2, 3, create("y"), Answer::Swapped(false)),
        op("a", 4, 5, replace("x", "z"), Answer::Swapped(true)),
        op("b", 6, 7, replace("x", "w"), Answer::Swapped(false)),
        op("b", 8, 9, Action::Read, read(Some("z"))),
    ];
    assert_eq!(check(None, &history), Ok(vec![0, 1, 2, 3, 4]));
}

#[test]
fn overlapping_operations_may_take_effect_in_either_order() {
    // b's create overlaps a's and wins; a's read, after both, sees b's.
    let history = [op("a", 0, 10, create("x"), Answer::Swapped(false)), op("b", 5, 6, create("y"), Answer::Swapped(true)), op("a", 11, 12, Action::Read, read(Some("y")))];
    assert_eq!(check(None, &history), Ok(vec![1, 0, 2]));
}

#[test]
fn two_winners_of_one_compare_are_not_linearizable() {
    let history =
        [op("seed", 0, 1, create("x"), Answer::Swapped(true)), op("a", 2, 10, replace("x", "a"), Answer::Swapped(true)), op("b", 3, 9, replace("x", "b"), Answer::Swapped(true))];
    let refused = check(None, &history).expect_err("two replaces of x both won");
    assert!(refused.contains("not linearizable: after 2 of 3 operations"), "{refused}");
    // The one left, which cannot go next: the loser of the two.
    let stuck = refused.split("none of these can go next:").nth(1).expect("the stuck operations");
    assert_eq!(stuck.matches("Operation {").count(), 1, "{refused}");
}

#[test]
fn a_read_of_a_write_not_yet_invoked_is_not_linearizable() {
    let history = [op("a", 0, 1, Action::Read, read(Some("x"))), op("b", 2, 3, create("x"), Answer::Swapped(true))];
    assert!(check(None, &history).is_err());
}

#[test]
fn a_write_that_returned_is_seen_by_every_later_read() {
    let history = [op("a", 0, 1, create("x"), Answer::Swapped(true)), op("b", 2, 3, Action::Read, read(None))];
    assert!(check(None, &history).is_err());
}

/// A store double that skips the compare: every replace and remove of a present record
/// succeeds, whatever was expected.
#[derive(Default)]
struct SkipsTheCompare(Option<String>);

impl Register for SkipsTheCompare {
    fn read(&mut self) -> Result<Option<String>, String> {
        Ok(self.0.clone())
    }
    fn create_if_absent(&mut self, content: &str) -> Result<bool, String> {
        let absent = self.0.is_none();
        if absent {
            self.0 = Some(content.into());
        }
        Ok(absent)
    }
    fn replace_if_unchanged(&mut self, _expected_sha256: &str, content: &str) -> Result<bool, String> {
        let present = self.0.is_some();
        if present {
            self.0 = Some(content.into());
        }
        Ok(present)
    }
    fn remove_if_unchanged(&mut self, _expected_sha256: &str) -> Result<bool, String> {
        Ok(self.0.take().is_some())
    }
}

#[test]
fn a_store_that_skips_the_compare_fails_the_check() {
    // Two clients take turns on the double, one operation each: what each expects is what it read
    // last, so the second of two replaces after one read must lose, and with the double wins.
    let mut double = SkipsTheCompare(Some("start".into()));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for round in 0..20 {
        a.extend(random_client(&mut double, "a", 1, 7 + round).expect("the double never fails"));
        b.extend(random_client(&mut double, "b", 1, 1_000 + round).expect("the double never fails"));
    }
    let history: Vec<Operation> = a.into_iter().chain(b).collect();
    let refused = check(Some("start".into()), &history).expect_err("a store that skips the compare is not a compare-and-swap register");
    assert!(refused.contains("not linearizable"), "{refused}");
}

/// The real store passes the same client against itself, run alone (a sanity check of the
/// clients: they race nobody).
#[test]
fn a_lone_client_of_the_file_store_is_linearizable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("state");
    let store = open(&home);
    assert!(store.create_if_absent(RECORD, "start").expect("seed"));
    let mut register = SharedStore::new(Arc::new(store));
    let history = random_client(&mut register, "alone", 200, 3).expect("the store works");
    check(Some("start".into()), &history).expect("one client's history is linearizable");
}

/// Four processes race 150 random operations each on one record of the file store, several
/// times: every history is linearizable, and the races happened (compare-and-swaps both won
/// and lost).
#[test]
fn racing_processes_on_the_file_store_make_a_linearizable_history() {
    const PROCESSES: u64 = 4;
    const OPERATIONS: usize = 150;
    let mut races = Races::default();
    for trial in 0..5u64 {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("state");
        let store = open(&home);
        assert!(store.create_if_absent(RECORD, "start").expect("seed"));
        let home = home.to_str().expect("utf-8").to_string();
        let children: Vec<_> = (0..PROCESSES)
            .map(|i| {
                let seed = 1 + trial * PROCESSES + i;
                Command::new(env!("CARGO_BIN_EXE_store_worker"))
                    .args(["history", &home, &OPERATIONS.to_string(), &format!("p{i}"), &seed.to_string()])
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("spawn")
            })
            .collect();
        let mut history = Vec::new();
        for child in children {
            let output = child.wait_with_output().expect("wait");
            assert!(output.status.success(), "worker failed: {output:?}");
            for line in String::from_utf8_lossy(&output.stdout).lines() {
                let value: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
                history.push(from_json(&value).unwrap_or_else(|| panic!("not an operation: {line}")));
            }
        }
        assert_eq!(history.len(), (PROCESSES as usize) * OPERATIONS);
        races.add(&history);
        if let Err(why) = check(Some("start".into()), &history) {
            panic!("trial {trial}: {why}");
        }
    }
    let Races { won, lost, overlapping } = races;
    eprintln!("{won} compare-and-swaps won, {lost} lost; {overlapping} operations overlapped another process's");
    assert!(won > 0 && lost > 0, "no race happened: {won} compare-and-swaps won, {lost} lost");
    assert!(overlapping > 0, "no operation overlapped another process's: the processes did not race");
}
