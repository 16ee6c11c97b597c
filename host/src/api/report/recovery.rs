//! The report of `proclease recover`: what a recovery did (or, dry, would do) to each directory
//! lease, creation intent and invocation lease, and why — built once from a
//! [`Recovery`](crate::Recovery), printed as lines of text or as JSON.

use std::path::{Path, PathBuf};

use proclease_core::LeaseCode;
use proclease_core::directory_leases::{Action, CreationAction, CreationOutcome, Outcome};
use proclease_core::invocation_leases::RepairDecision;
use serde::Serialize;

use super::JSON_SCHEMA_VERSION;
use crate::api::host::{Recovery, set_aside_lease_entry};

/// What a recovery did. Serialised (camelCase) it is `recover --json`'s document.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryReport {
    /// [`JSON_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Nothing was changed: every action is what would be done.
    pub dry_run: bool,
    /// The directory leases (§6A.6).
    pub directory_leases: DirectoryLeases,
    /// The creation intents of crashed creators (directories created and never leased).
    pub directory_creations: Vec<CreationRow>,
    /// The invocation leases' tombstones (§6B.9), when directory recovery did not stop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invocation_leases: Option<InvocationLeases>,
    /// The state home, for the shell commands the text gives.
    #[serde(skip)]
    home: PathBuf,
}

/// The directory leases' part of a recovery.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectoryLeases {
    /// Directories of dead owners removed.
    pub recovered: u32,
    /// Bundle stages found already published.
    pub published: u32,
    /// Leases of live owners, left alone.
    pub active: u32,
    /// Leases whose owners cannot be proven gone, left alone.
    pub indeterminate: u32,
    /// Leases another recoverer recovered meanwhile.
    pub already_recovered: usize,
    /// Entries skipped (`--skip-invalid`).
    pub skipped: usize,
    /// Leases released with their directories kept (`--keep`).
    pub released_kept: usize,
    /// The refusal recovery stopped at (the reference's message), if it stopped.
    pub stopped: Option<String>,
    /// What that refusal wrapped.
    pub cause: Option<String>,
    /// Every entry, in name order.
    pub entries: Vec<DirectoryLeaseRow>,
}

/// One directory lease's outcome.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectoryLeaseRow {
    /// The entry's file name in the collection.
    pub file: String,
    /// The leased directory, when the file is a valid lease.
    pub path: Option<String>,
    /// The lease's id, when valid.
    pub lease_id: Option<String>,
    /// Its disposition, when it could be decided.
    pub disposition: Option<&'static str>,
    /// What was (or would be) done, in words.
    pub action: &'static str,
    /// Whether it was carried out.
    pub done: bool,
    /// The refusal, for a skipped or stopping entry.
    pub error: Option<String>,
    /// Why.
    pub reason: String,
    /// For an entry that is not a valid lease: the shell command that moves it aside.
    pub set_aside: Option<String>,
    /// The outcome, for the text.
    #[serde(skip)]
    outcome: Outcome,
}

/// One creation intent's outcome.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreationRow {
    /// The intent's file name.
    pub file: String,
    /// The directory it was creating, when the intent is valid.
    pub path: Option<String>,
    /// `keep`, `finish` or `skip`.
    pub action: &'static str,
    /// The empty, unleased directories removed (or that would be).
    pub removed: Vec<String>,
    /// Why a skipped intent is not valid.
    pub error: Option<String>,
    /// Whether it was carried out.
    pub done: bool,
    /// Why.
    pub reason: String,
    /// The outcome, for the text.
    #[serde(skip)]
    outcome: CreationOutcome,
}

/// The invocation leases' part of a recovery.
#[derive(Debug, Clone, Serialize)]
pub struct InvocationLeases {
    /// Leases looked at.
    pub inspected: u32,
    /// Removed (or, dry, that would be).
    pub removed: u32,
    /// Kept: an owner or host alive.
    pub active: u32,
    /// Kept: nothing proves the owner gone.
    pub unknown: u32,
    /// Kept: not valid.
    pub invalid: u32,
    /// Each lease's decision.
    pub entries: Vec<InvocationDecision>,
}

/// One invocation lease's decision.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InvocationDecision {
    /// The lease's id.
    pub lease_id: String,
    /// `remove`, `active`, `unknown`, `removal-refused` or `invalid`.
    pub decision: &'static str,
    #[serde(skip)]
    pub(super) repair: RepairDecision,
}

impl InvocationDecision {
    pub(super) fn new(lease_id: &str, repair: RepairDecision) -> InvocationDecision {
        InvocationDecision { lease_id: lease_id.into(), decision: repair.name(), repair }
    }
}

impl RecoveryReport {
    /// The report of `recovery`, run on the state home `home` (`dry_run` as it was run).
    pub fn new(home: &Path, recovery: &Recovery, dry_run: bool) -> RecoveryReport {
        let run = &recovery.directory_leases;
        let report = run.report();
        let count = |action: fn(&Action) -> bool| run.outcomes.iter().filter(|o| action(&o.action)).count();
        let entries = run
            .outcomes
            .iter()
            .map(|o| DirectoryLeaseRow {
                file: o.name.clone(),
                path: o.claim.as_ref().map(|c| c.path.clone()),
                lease_id: o.claim.as_ref().map(|c| c.id.clone()),
                disposition: o.disposition.map(|d| d.name()),
                action: o.action.words(),
                done: o.done,
                error: o.action.refusal().map(|e| e.message().to_string()),
                reason: o.reason.clone(),
                set_aside: (o.claim.is_none() && o.action.refusal().is_some()).then(|| set_aside_lease_entry(home, &o.name)),
                outcome: o.clone(),
            })
            .collect();
        let creations = recovery
            .creations
            .iter()
            .map(|c| CreationRow {
                file: c.name.clone(),
                path: c.path.clone(),
                action: match c.action {
                    CreationAction::Keep => "keep",
                    CreationAction::Finish(_) => "finish",
                    CreationAction::Skip(_) => "skip",
                },
                removed: match &c.action {
                    CreationAction::Finish(removed) => removed.clone(),
                    _ => Vec::new(),
                },
                error: match &c.action {
                    CreationAction::Skip(why) => Some(why.clone()),
                    _ => None,
                },
                done: c.done,
                reason: c.reason.clone(),
                outcome: c.clone(),
            })
            .collect();
        let invocation_leases = recovery.invocations.as_ref().map(|(t, decisions)| InvocationLeases {
            inspected: t.inspected,
            removed: t.removed,
            active: t.active,
            unknown: t.unknown,
            invalid: t.invalid,
            entries: decisions.iter().map(|(id, d)| InvocationDecision::new(id, *d)).collect(),
        });
        RecoveryReport {
            schema_version: JSON_SCHEMA_VERSION,
            dry_run,
            directory_leases: DirectoryLeases {
                recovered: report.recovered,
                published: report.published,
                active: report.active,
                indeterminate: report.indeterminate,
                already_recovered: count(|a| matches!(a, Action::AlreadyRecovered)),
                skipped: count(|a| matches!(a, Action::Skip(_))),
                released_kept: count(|a| matches!(a, Action::KeepDirectory)),
                stopped: run.stopped.as_ref().map(|e| e.message().to_string()),
                cause: run.cause.clone(),
                entries,
            },
            directory_creations: creations,
            invocation_leases,
            home: home.to_path_buf(),
        }
    }

    /// What `recover` prints: one line per directory lease, creation intent and invocation lease
    /// saying what was done and why; then the counts (or, dry, a line when there is nothing).
    /// Ends with a newline unless empty.
    pub fn text(&self) -> String {
        let dry_run = self.dry_run;
        let mut lines: Vec<String> = Vec::new();
        lines.extend(self.directory_leases.entries.iter().map(|row| line(&self.home, &row.outcome, dry_run)));
        lines.extend(self.directory_creations.iter().map(|row| creation_line(&row.outcome, dry_run)));
        if let Some(invocations) = &self.invocation_leases {
            lines.extend(invocations.entries.iter().map(|row| invocation_line(&row.lease_id, row.repair, dry_run)));
        }
        let leases = &self.directory_leases;
        let inspected = self.invocation_leases.as_ref().map_or(0, |t| t.inspected);
        if dry_run {
            // A stop (a held lock, an unreadable collection) is not "nothing": its error follows.
            if leases.entries.is_empty() && leases.stopped.is_none() && self.directory_creations.is_empty() && inspected == 0 {
                lines.push("nothing to recover: no directory leases and no invocation leases".into());
            }
        } else {
            lines.push(format!("recovered: {}", leases.recovered));
            lines.push(format!("published: {}", leases.published));
            lines.push(format!("active: {}", leases.active));
            lines.push(format!("indeterminate: {}", leases.indeterminate));
            for (count, words) in [(leases.released_kept, "released, directory kept"), (leases.already_recovered, "already recovered"), (leases.skipped, "skipped")] {
                if count > 0 {
                    lines.push(format!("{words}: {count}"));
                }
            }
            if let Some(t) = self.invocation_leases.as_ref().filter(|t| t.inspected > 0) {
                lines.push(format!("invocation leases removed: {} (active {}, unknown {}, invalid {})", t.removed, t.active, t.unknown, t.invalid));
            }
        }
        lines.iter().map(|line| format!("{line}\n")).collect()
    }
}

/// What an outcome is about: the leased path, or the entry's name.
fn target(outcome: &Outcome) -> String {
    outcome.claim.as_ref().map_or_else(|| outcome.name.clone(), |c| c.path.clone())
}

/// One line of text for an outcome.
fn line(home: &Path, o: &Outcome, dry_run: bool) -> String {
    let what = target(o);
    let (did, would) = match &o.action {
        Action::RemoveDirectory => ("removed", "would remove"),
        Action::CountPublished => ("released the claim of", "would release the claim of"),
        Action::RemoveClaim => ("released the claim of", "would release the claim of"),
        Action::KeepDirectory => ("released the lease of", "would release the lease of"),
        Action::Keep => ("kept", "would keep"),
        Action::AlreadyRecovered => ("already recovered by another recoverer:", "already recovered:"),
        Action::Skip(_) => ("skipped", "would skip"),
        Action::Stop(_) => ("stopped at", "would stop at"),
    };
    let verb = if dry_run { would } else { did };
    match &o.action {
        Action::Keep => format!("{verb} {what}: {} ({})", o.disposition.map_or("?", |d| d.name()), o.reason),
        Action::CountPublished => {
            let output = o.claim.as_ref().and_then(|c| c.output_root.clone()).unwrap_or_default();
            format!("{verb} {what}: it was already published to {output} ({})", o.reason)
        }
        Action::RemoveClaim => format!("{verb} {what}: its directory was already gone ({})", o.reason),
        Action::KeepDirectory => format!("{verb} {what} and {} the directory ({})", if dry_run { "keep" } else { "kept" }, o.reason),
        Action::Skip(error) | Action::Stop(error) => {
            let replaced = matches!(error.lease_code(), Some(LeaseCode::DirectoryLeaseTargetChangedBeforeRecovery | LeaseCode::DirectoryLeaseParentChangedBeforeRecovery));
            let fix = if o.claim.is_none() {
                format!("; proclease never deletes it: check it, then move it aside: {}", set_aside_lease_entry(home, &o.name))
            } else if replaced {
                format!(
                    "; the directory there now is not the one this lease holds (re-created or replaced), so recovery will never remove it: \
                     check that no run uses it, then move the stale lease record aside: {}",
                    set_aside_lease_entry(home, &o.name)
                )
            } else {
                String::new()
            };
            format!("{verb} {what}: {error} ({}){fix}", o.reason)
        }
        _ => format!("{verb} {what} ({})", o.reason),
    }
}

/// One line of text for a directory-creation intent.
fn creation_line(c: &CreationOutcome, dry_run: bool) -> String {
    let what = c.path.clone().unwrap_or_else(|| c.name.clone());
    match &c.action {
        CreationAction::Keep => format!("kept the creation of {what}: {}", c.reason),
        CreationAction::Finish(removed) if removed.is_empty() => {
            format!("{} the intent to create {what} ({}; nothing it created is left empty and unleased)", if dry_run { "would finish" } else { "finished" }, c.reason)
        }
        CreationAction::Finish(removed) => {
            format!("{} {} ({}: a crashed run created it and never leased it)", if dry_run { "would remove" } else { "removed" }, removed.join(", "), c.reason)
        }
        CreationAction::Skip(why) => format!("skipped the creation intent {}: {why} ({})", c.name, c.reason),
    }
}

/// One line of text for an invocation lease's decision.
fn invocation_line(id: &str, decision: RepairDecision, dry_run: bool) -> String {
    match (decision, dry_run) {
        (RepairDecision::Remove, false) => format!("removed invocation lease {id}: its owner and host are provably gone"),
        (RepairDecision::Remove, true) => format!("would remove invocation lease {id}: its owner and host are provably gone"),
        (RepairDecision::Active, _) => format!("kept invocation lease {id}: its owner or host is alive"),
        (RepairDecision::Unknown, _) => {
            format!("kept invocation lease {id}: its owner or host cannot be proven gone (a tombstone of this boot stays until a reboot)")
        }
        (RepairDecision::RemovalRefused, _) => format!("kept invocation lease {id}: it changed while it was being removed"),
        (RepairDecision::Invalid, _) => {
            format!("kept invocation lease {id}: not a valid lease; it blocks acquires until repaired by hand (`proclease validate` on it says why)")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proclease_core::directory_leases::Run;
    use proclease_core::invocation_leases::RepairReport;

    fn recovery(invocations: Option<(RepairReport, Vec<(String, RepairDecision)>)>) -> Recovery {
        Recovery { directory_leases: Run::default(), creations: Vec::new(), invocations, lock_timeout: None }
    }

    #[test]
    fn an_empty_dry_run_says_so_and_a_real_one_gives_its_counts() {
        let home = Path::new("/state");
        assert_eq!(RecoveryReport::new(home, &recovery(None), true).text(), "nothing to recover: no directory leases and no invocation leases\n");
        assert_eq!(RecoveryReport::new(home, &recovery(None), false).text(), "recovered: 0\npublished: 0\nactive: 0\nindeterminate: 0\n");
    }

    #[test]
    fn a_dry_run_that_stopped_before_any_entry_does_not_say_there_is_nothing() {
        let home = Path::new("/state");
        let stopped = Run { stopped: Some(proclease_core::Error::lease(LeaseCode::DirectoryLeaseRecoveryFailedSafely)), ..Run::default() };
        let recovery = Recovery { directory_leases: stopped, creations: Vec::new(), invocations: None, lock_timeout: None };
        assert_eq!(RecoveryReport::new(home, &recovery, true).text(), "", "the stop's own error says what happened");
    }

    #[test]
    fn the_json_document_has_invocation_leases_only_when_they_were_looked_at() {
        let home = Path::new("/state");
        let value = serde_json::to_value(RecoveryReport::new(home, &recovery(None), true)).expect("serialises");
        assert!(value.get("invocationLeases").is_none(), "{value}");
        assert_eq!(value["directoryLeases"]["entries"], serde_json::json!([]));
        let decisions = vec![("3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d".to_string(), RepairDecision::Remove)];
        let report = RepairReport { inspected: 1, removed: 1, ..RepairReport::default() };
        let value = serde_json::to_value(RecoveryReport::new(home, &recovery(Some((report, decisions))), true)).expect("serialises");
        assert_eq!(value["invocationLeases"]["entries"], serde_json::json!([{"leaseId": "3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d", "decision": "remove"}]));
    }
}
