//! A linearizability checker for histories of one record of a compare-and-swap store (issue
//! #42): every operation's invocation and return instants, what it asked and what it answered,
//! checked against a register with compare-and-swap — the §3 contract of `create-if-absent`,
//! `replace-if-unchanged` and `remove-if-unchanged`, and reads.
//!
//! The search is Wing and Gong's, with Lowe's memo of states already tried (G. Lowe,
//! "Testing for linearizability", 2017): an operation may go next when no operation still to be
//! placed returned before it was invoked; it must answer what the register answers; a set of
//! placed operations with the same register state is never tried twice. An operation that never
//! returned (its process was killed) is not part of a history: a checker of such histories must
//! let it take effect or not, which this one does not do yet.

use std::collections::HashSet;

use proclease::core::digest::sha256_hex;
use proclease::core::effects::Store;

/// What an operation asked of the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `read-if-present`.
    Read,
    /// `create-if-absent` with this content.
    CreateIfAbsent(String),
    /// `replace-if-unchanged`: the content's sha256 (hex) that must be there, and the new content.
    ReplaceIfUnchanged { expected_sha256: String, content: String },
    /// `remove-if-unchanged`: the content's sha256 (hex) that must be there.
    RemoveIfUnchanged { expected_sha256: String },
}

/// What an operation answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A read's content (`None`: absent).
    Read(Option<String>),
    /// A compare-and-swap's outcome: whether it wrote.
    Swapped(bool),
}

/// One completed operation of a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// Which process (or thread) ran it: for messages.
    pub process: String,
    /// When it was invoked, in ns of a clock every process shares (`CLOCK_MONOTONIC`).
    pub invoked_ns: u64,
    /// When it returned, same clock; at least `invoked_ns`.
    pub returned_ns: u64,
    /// What it asked.
    pub action: Action,
    /// What it answered.
    pub answer: Answer,
}

/// The register's answer to `action` on `state` (`None`: absent), and the state after it.
pub fn apply(state: &Option<String>, action: &Action) -> (Answer, Option<String>) {
    let holds = |expected: &str| state.as_deref().is_some_and(|content| sha256_hex(content.as_bytes()) == expected);
    match action {
        Action::Read => (Answer::Read(state.clone()), state.clone()),
        Action::CreateIfAbsent(content) if state.is_none() => (Answer::Swapped(true), Some(content.clone())),
        Action::ReplaceIfUnchanged { expected_sha256, content } if holds(expected_sha256) => (Answer::Swapped(true), Some(content.clone())),
        Action::RemoveIfUnchanged { expected_sha256 } if holds(expected_sha256) => (Answer::Swapped(true), None),
        _ => (Answer::Swapped(false), state.clone()),
    }
}

/// Checks `history` (in any order), starting from `initial`: `Ok` with the indices of `history`
/// in an order that explains every answer and keeps every operation that returned before
/// another was invoked before it; `Err` with the longest prefix of operations that could be
/// explained and the operations none of which could go next.
pub fn check(initial: Option<String>, history: &[Operation]) -> Result<Vec<usize>, String> {
    let mut order: Vec<usize> = (0..history.len()).collect();
    order.sort_by_key(|&i| (history[i].invoked_ns, history[i].returned_ns));
    let mut search = Search { history, order, placed: vec![false; history.len()], tried: HashSet::new(), path: Vec::new(), best: Vec::new(), stuck: Vec::new() };
    if search.extend(initial) {
        return Ok(search.path);
    }
    let stuck: Vec<String> = search.stuck.iter().map(|&i| format!("{:?}", history[i])).collect();
    let explained: Vec<String> = search.best.iter().map(|&i| format!("{:?}", history[i])).collect();
    Err(format!("not linearizable: after {} of {} operations\n  {}\nnone of these can go next:\n  {}", explained.len(), history.len(), explained.join("\n  "), stuck.join("\n  ")))
}

struct Search<'a> {
    history: &'a [Operation],
    /// Indices of `history` by invocation.
    order: Vec<usize>,
    placed: Vec<bool>,
    /// (placed set, register state) pairs from which no linearization exists.
    tried: HashSet<(Vec<bool>, Option<String>)>,
    path: Vec<usize>,
    /// The longest `path` reached, and the operations that could have gone next there (for
    /// the message).
    best: Vec<usize>,
    stuck: Vec<usize>,
}

impl Search<'_> {
    /// The operations that may go next: not placed, invoked before every unplaced operation's
    /// return.
    fn candidates(&self) -> Vec<usize> {
        let unplaced = || self.order.iter().copied().filter(|&i| !self.placed[i]);
        let Some(first_return) = unplaced().map(|i| self.history[i].returned_ns).min() else { return Vec::new() };
        unplaced().filter(|&i| self.history[i].invoked_ns <= first_return).collect()
    }

    /// Whether the unplaced operations can all be placed from `state`.
    fn extend(&mut self, state: Option<String>) -> bool {
        if self.path.len() == self.history.len() {
            return true;
        }
        if self.path.len() > self.best.len() || self.best.is_empty() {
            self.best = self.path.clone();
            self.stuck = self.candidates();
        }
        if self.tried.contains(&(self.placed.clone(), state.clone())) {
            return false;
        }
        for i in self.candidates() {
            let (answer, next) = apply(&state, &self.history[i].action);
            if answer != self.history[i].answer {
                continue;
            }
            self.placed[i] = true;
            self.path.push(i);
            if self.extend(next) {
                return true;
            }
            self.path.pop();
            self.placed[i] = false;
        }
        self.tried.insert((self.placed.clone(), state));
        false
    }
}

/// The record every client of [`random_client`] works on.
pub const RECORD: &str = "recovery/linearizability/record.json";

/// A store of one record, as [`random_client`] uses it: the §3 operations, `Err` with a
/// message on a failure. Every store of the effect boundary ([`Store`]: the file store's
/// `SharedStore`, the etcd store's `SharedEtcdStore`) is one, on [`RECORD`].
pub trait Register {
    /// `read-if-present`.
    fn read(&mut self) -> Result<Option<String>, String>;
    /// `create-if-absent`.
    fn create_if_absent(&mut self, content: &str) -> Result<bool, String>;
    /// `replace-if-unchanged`.
    fn replace_if_unchanged(&mut self, expected_sha256: &str, content: &str) -> Result<bool, String>;
    /// `remove-if-unchanged`.
    fn remove_if_unchanged(&mut self, expected_sha256: &str) -> Result<bool, String>;
}

impl<S: Store> Register for S {
    fn read(&mut self) -> Result<Option<String>, String> {
        self.read_if_present(RECORD, 1 << 16).map_err(|f| f.message)
    }
    fn create_if_absent(&mut self, content: &str) -> Result<bool, String> {
        Store::create_if_absent(self, RECORD, content).map_err(|f| f.message)
    }
    fn replace_if_unchanged(&mut self, expected_sha256: &str, content: &str) -> Result<bool, String> {
        Store::replace_if_unchanged(self, RECORD, expected_sha256, content).map_err(|f| f.message)
    }
    fn remove_if_unchanged(&mut self, expected_sha256: &str) -> Result<bool, String> {
        Store::remove_if_unchanged(self, RECORD, expected_sha256).map_err(|f| f.message)
    }
}

/// How much a history raced: compare-and-swaps that won and lost, and operations that
/// overlapped another process's.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Races {
    /// Compare-and-swaps (creates, replaces, removes) that wrote.
    pub won: usize,
    /// Compare-and-swaps that did not.
    pub lost: usize,
    /// Operations whose interval overlapped one of another process's.
    pub overlapping: usize,
}

impl Races {
    /// Adds `history`'s counts.
    pub fn add(&mut self, history: &[Operation]) {
        for operation in history {
            match (&operation.action, &operation.answer) {
                (Action::Read, _) => {}
                (_, Answer::Swapped(true)) => self.won += 1,
                (_, _) => self.lost += 1,
            }
        }
        self.overlapping += history.iter().filter(|a| history.iter().any(|b| b.process != a.process && b.invoked_ns < a.returned_ns && a.invoked_ns < b.returned_ns)).count();
    }
}

/// `CLOCK_MONOTONIC` in ns: one clock for every process of the machine.
pub fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(now.tv_sec).unwrap_or(0).saturating_mul(1_000_000_000).saturating_add(u64::try_from(now.tv_nsec).unwrap_or(0))
}

/// Runs `count` operations of client `name` on `register`, chosen by `seed`: reads, creates,
/// and replaces and removes that expect what the client read last (so that most of them race
/// another client's write). Every operation's invocation and return, on [`monotonic_ns`].
///
/// Errors: the register's first failure.
pub fn random_client(register: &mut dyn Register, name: &str, count: usize, seed: u64) -> Result<Vec<Operation>, String> {
    let mut random = seed.max(1);
    let mut next = move || {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        random
    };
    let mut last_read: Option<String> = None;
    let mut history = Vec::with_capacity(count);
    for n in 0..count {
        let content = format!("{{\"by\":\"{name}\",\"n\":{n}}}");
        let expected = sha256_hex(last_read.as_deref().unwrap_or("").as_bytes());
        let action = match next() % 4 {
            0 => Action::Read,
            1 => Action::CreateIfAbsent(content),
            2 => Action::ReplaceIfUnchanged { expected_sha256: expected, content },
            _ => Action::RemoveIfUnchanged { expected_sha256: expected },
        };
        let invoked_ns = monotonic_ns();
        let answer = match &action {
            Action::Read => Answer::Read(register.read()?),
            Action::CreateIfAbsent(content) => Answer::Swapped(register.create_if_absent(content)?),
            Action::ReplaceIfUnchanged { expected_sha256, content } => Answer::Swapped(register.replace_if_unchanged(expected_sha256, content)?),
            Action::RemoveIfUnchanged { expected_sha256 } => Answer::Swapped(register.remove_if_unchanged(expected_sha256)?),
        };
        let returned_ns = monotonic_ns();
        if let Answer::Read(seen) = &answer {
            last_read.clone_from(seen);
        }
        history.push(Operation { process: name.into(), invoked_ns, returned_ns, action, answer });
    }
    Ok(history)
}

/// One operation as a line of JSON (what `store_worker history` prints), and back.
pub fn to_json(operation: &Operation) -> serde_json::Value {
    let (op, content, expected) = match &operation.action {
        Action::Read => ("read", None, None),
        Action::CreateIfAbsent(content) => ("create", Some(content), None),
        Action::ReplaceIfUnchanged { expected_sha256, content } => ("replace", Some(content), Some(expected_sha256)),
        Action::RemoveIfUnchanged { expected_sha256 } => ("remove", None, Some(expected_sha256)),
    };
    let answer = match &operation.answer {
        Answer::Read(seen) => serde_json::json!({ "read": seen }),
        Answer::Swapped(swapped) => serde_json::json!({ "swapped": swapped }),
    };
    serde_json::json!({
        "process": operation.process, "invoked": operation.invoked_ns, "returned": operation.returned_ns,
        "op": op, "content": content, "expected": expected, "answer": answer,
    })
}

/// The inverse of [`to_json`]; `None` for anything else.
pub fn from_json(value: &serde_json::Value) -> Option<Operation> {
    let text = |key: &str| value.get(key).and_then(serde_json::Value::as_str).map(String::from);
    let action = match value.get("op")?.as_str()? {
        "read" => Action::Read,
        "create" => Action::CreateIfAbsent(text("content")?),
        "replace" => Action::ReplaceIfUnchanged { expected_sha256: text("expected")?, content: text("content")? },
        "remove" => Action::RemoveIfUnchanged { expected_sha256: text("expected")? },
        _ => return None,
    };
    let answer = value.get("answer")?;
    let answer = match (answer.get("read"), answer.get("swapped")) {
        (Some(seen), None) => Answer::Read(if seen.is_null() { None } else { Some(seen.as_str()?.to_owned()) }),
        (None, Some(swapped)) => Answer::Swapped(swapped.as_bool()?),
        _ => return None,
    };
    Some(Operation { process: text("process")?, invoked_ns: value.get("invoked")?.as_u64()?, returned_ns: value.get("returned")?.as_u64()?, action, answer })
}
