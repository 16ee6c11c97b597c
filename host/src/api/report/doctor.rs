//! The report of `proclease doctor`: every claim and lease in the state home, with its
//! disposition and why, built once from a [`Survey`](crate::Survey) and printed as a table or as
//! JSON.

use proclease_core::dispositions::Disposition;
use proclease_core::invocation_leases::{Entry, RepairDecision};
use proclease_core::liveness::OwnerStatus;
use proclease_core::records::directory_lease::Role;
use serde::Serialize;

use super::{Availability, JSON_SCHEMA_VERSION, columns};
use crate::api::host::{Host, Survey};
use crate::error::Error;

/// What `doctor` shows. Serialised (camelCase) it is `doctor --json`'s document.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DoctorReport {
    /// [`JSON_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The state home's path.
    pub state_home: String,
    /// The store's address (the state home's path, or `etcd://…`).
    pub store: String,
    /// Whether a supervised command can run in a box (PID namespace; `docs/containment.md`).
    pub containment: Availability,
    /// Whether a supervised command's tree can get its own cgroup v2.
    pub cgroup: Availability,
    /// One row per claim, lease and invocation lease, in that order.
    pub entries: Vec<Row>,
    /// Said when the directory-lease collection is over the reference's bound.
    pub over_bound: Option<String>,
    /// Cluster mode: what the epoch check says about the cluster's state, when it says something.
    pub cluster_state: Option<String>,
    /// Cluster mode is on (the table says what the cluster holds).
    #[serde(skip)]
    pub clustered: bool,
    /// Supervisors of this state home that died while their cluster dead-man timer was armed
    /// (`supervisor::dead_man_record`): each may have been killed by it.
    pub dead_man_kills: Vec<crate::supervisor::dead_man_record::Armed>,
}

/// One claim or lease of the report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// `admission`, `waiter` (a process in the admission's wait queue, `wait_queue`),
    /// `raw-working`, `bundle-stage`, `lease-entry` (not a valid lease) or `invocation`.
    pub kind: &'static str,
    /// The leased path, the claim's id or file name, or the invocation's plugin and operation.
    pub target: String,
    /// The owner's pid, when the record names one.
    pub owner_pid: Option<u64>,
    /// The recorded child's (or helper's, or plugin host's) pid.
    pub child_pid: Option<u64>,
    /// The lifecycle phase (`-` when none).
    pub phase: String,
    /// How long ago the lease was created (`42s`, `5m`, `3h`, `2d`; `-` when unknown).
    pub age: String,
    /// `active`, `recoverable`, `indeterminate`, … or `invalid`.
    pub disposition: String,
    /// Why, and what the user can do.
    pub reason: String,
    /// What `recover` would do with it.
    pub recover_action: Option<String>,
    /// Cluster mode: the machine the admission's holder runs on, when another.
    pub owner_host: Option<String>,
}

impl DoctorReport {
    /// Surveys `host`'s state home (changing nothing) and builds the report at `now_ms` (ms
    /// since the epoch, for the ages).
    ///
    /// Errors: those of [`Host::survey`].
    pub fn build(host: &Host, now_ms: u64) -> Result<DoctorReport, Error> {
        let survey = host.survey()?;
        Ok(Self::from_survey(host, survey, now_ms))
    }

    /// The report of `survey`, taken from `host`.
    pub fn from_survey(host: &Host, survey: Survey, now_ms: u64) -> DoctorReport {
        let mut entries = Vec::new();
        admission_rows(host, survey.admission, &mut entries);
        match host.cluster() {
            None => waiter_rows(host, now_ms, &mut entries),
            #[cfg(feature = "cluster")]
            Some(cluster) => cluster_waiter_rows(host, cluster, now_ms, &mut entries),
            #[cfg(not(feature = "cluster"))]
            Some(_) => {}
        }
        let run = &survey.recovery.directory_leases;
        let bound = proclease_core::directory_leases::MAX_CLAIMS;
        let over_bound = (run.outcomes.len() > bound).then(|| {
            format!(
                "directory leases: {} entries, over the reference's bound of {bound}: ghostget's recovery refuses the whole collection and \
                 new leases are refused; `proclease recover` recovers the dead ones, oldest first",
                run.outcomes.len()
            )
        });
        if let (Some(stop), None) = (&run.stopped, run.outcomes.iter().find(|o| o.action.refusal().is_some())) {
            // Stopped before any entry (the collection itself).
            let cause = run.cause.as_ref().map(|c| format!(" ({c})")).unwrap_or_default();
            entries.push(Row::invalid("lease-entry", proclease_core::directory_leases::DIRECTORY.into(), format!("recover would stop: {stop}{cause}"), Some("stop".into())));
        }
        for e in &run.outcomes {
            let stop = e.action.refusal().map(|error| format!("; recover would stop: {error} (`recover --skip-invalid` recovers the others)"));
            let reason = format!("{}{}", e.reason, stop.unwrap_or_default());
            entries.push(match &e.claim {
                Some(c) => Row {
                    kind: if c.role == Role::BundleStage { "bundle-stage" } else { "raw-working" },
                    target: c.path.clone(),
                    owner_pid: Some(c.owner.pid),
                    child_pid: c.child_owner.as_ref().map(|o| o.pid),
                    phase: c.phase.name().into(),
                    age: age(now_ms, c.created_at_ms),
                    disposition: e.disposition.map_or("invalid", |d| d.name()).into(),
                    reason,
                    recover_action: Some(e.action.words().into()),
                    owner_host: None,
                },
                None => Row::invalid("lease-entry", e.name.clone(), reason, Some(e.action.words().into())),
            });
        }
        for i in &survey.invocations {
            entries.push(match &i.entry {
                Entry::Invalid(id) => Row::invalid("invocation", id.clone(), "not a valid canonical lease: blocks every plugin's acquire until repaired by hand".into(), None),
                Entry::Valid(s) => {
                    let status = i.status.unwrap_or(OwnerStatus::Unknown);
                    let l = &s.record;
                    let acquired = &l.acquired_at;
                    let reason = match i.decision {
                        Some(RepairDecision::Remove) => {
                            format!("its owner (pid {}) and host are provably gone; `proclease recover` removes it (acquired {acquired})", l.owner.process.pid)
                        }
                        Some(RepairDecision::Active) => format!("its owner or host is alive (owner status {}; acquired {acquired})", status.name()),
                        Some(RepairDecision::Unknown) => format!(
                            "its owner or host cannot be proven gone (owner status {}): kept; a tombstone of this boot (cleanup never completed \
                             after plugin code ran) stays until a reboot (acquired {acquired})",
                            status.name()
                        ),
                        _ => format!("owner status {} (acquired {acquired})", status.name()),
                    };
                    Row {
                        kind: "invocation",
                        target: format!("{} {} ({})", l.identity.plugin_id, l.identity.operation, l.lease_id),
                        owner_pid: Some(l.owner.process.pid),
                        child_pid: l.containment.as_ref().and_then(|c| c.host.as_ref()).map(|h| h.pid),
                        phase: l.containment.as_ref().map_or("v1", |c| c.status.name()).into(),
                        age: "-".into(),
                        disposition: i.disposition().map_or("invalid", |d| d.name()).into(),
                        reason,
                        recover_action: i.decision.map(|d| d.name().to_string()),
                        owner_host: None,
                    }
                }
            });
        }
        DoctorReport {
            schema_version: JSON_SCHEMA_VERSION,
            state_home: host.state_home().display().to_string(),
            store: host.store_address(),
            containment: Availability::of(crate::containment::available()),
            cgroup: Availability::of(crate::process_identity::cgroup_tree::CgroupTree::available()),
            entries,
            over_bound,
            cluster_state: host.cluster_epoch_warning(),
            clustered: host.cluster().is_some(),
            dead_man_kills: host.dead_man_leftovers().into_iter().map(|(_, armed)| armed).collect(),
        }
    }

    /// The table `doctor` prints: what the state home is, what limits this machine's
    /// containment, then one row per entry (`KIND TARGET OWNER CHILD PHASE AGE DISPOSITION WHY`),
    /// or a line saying there is nothing. Ends with a newline.
    pub fn text(&self) -> String {
        let mut out = format!("state home: {}\n", self.state_home);
        if self.clustered {
            out += &format!("cluster: {} (the admission and invocation leases; directory leases are this machine's)\n", self.store);
            if let Some(words) = &self.cluster_state {
                out += &format!("{words}\n");
            }
        }
        if let Some(reason) = &self.containment.reason {
            out += &match self.cgroup.available {
                true => format!(
                    "containment: cgroup only, because {reason} (docs/containment.md: the lease stays active while any process of the command's tree runs; in cluster mode, a killed supervisor's grandchildren are not stopped)\n"
                ),
                false => format!("containment: none, because {reason} (docs/containment.md: a command's detached processes are covered only while they keep its witness)\n"),
            };
        }
        if let Some(words) = &self.over_bound {
            out += &format!("{words}\n");
        }
        for armed in &self.dead_man_kills {
            out += &format!("{}\n", armed.words());
        }
        if self.entries.is_empty() {
            out += "no admission claim, directory leases or invocation leases\n";
            return out;
        }
        let pid = |p: Option<u64>| p.map_or_else(|| "-".to_string(), |p| p.to_string());
        let rows = self.entries.iter().map(|r| [r.kind.to_string(), r.target.clone(), pid(r.owner_pid), pid(r.child_pid), r.phase.clone(), r.age.clone(), r.disposition.clone()]);
        let header = ["KIND", "TARGET", "OWNER", "CHILD", "PHASE", "AGE", "DISPOSITION"].map(String::from);
        // Text columns left-aligned, numbers right-aligned; WHY last, unpadded.
        let right = [false, false, true, true, false, true, false];
        let reasons = std::iter::once("WHY").chain(self.entries.iter().map(|r| r.reason.as_str()));
        for (line, why) in columns(&header, rows.collect(), right).into_iter().zip(reasons) {
            out += &format!("{line}{why}\n");
        }
        out
    }
}

/// The rows of the export admission's wait queue (`run --exclusive --wait` on the file store),
/// in order: the processes waiting for their turn, and the places of waiters that are gone.
fn waiter_rows(host: &Host, now_ms: u64, rows: &mut Vec<Row>) {
    let Some(queue) = crate::wait_queue::WaitQueue::open_if_present(host.state_home(), crate::wait_queue::EXPORT_ADMISSION) else { return };
    let mut place = 0;
    for waiter in queue.waiters() {
        let state = match (waiter.stopped, waiter.waiting) {
            (true, _) => WaiterState::Stopped,
            (false, true) => WaiterState::Waiting,
            (false, false) => {
                WaiterState::Gone(format!("its waiter left or died (its ticket {} is free): it is skipped, and removed by the next waiter to join or pass it", waiter.ticket))
            }
        };
        rows.push(waiter_row(state, &mut place, waiter.pid, waiter.enqueued_at_ms, None, now_ms));
    }
}

/// Cluster mode: the rows of etcd's wait queue of the export admission, in order, waiters of
/// every machine. A waiter of this machine is judged through `/proc` (stopped, gone); one of
/// another machine is shown waiting until its place goes (it leaves, or its presence expires).
#[cfg(feature = "cluster")]
fn cluster_waiter_rows(host: &Host, cluster: &crate::cluster::Cluster, now_ms: u64, rows: &mut Vec<Row>) {
    use crate::cluster::queue::{Ahead, EtcdQueue, judge};
    let queue = EtcdQueue::new(cluster.store(), crate::wait_queue::EXPORT_ADMISSION);
    let waiters = match queue.waiters() {
        Ok((waiters, _)) => waiters,
        Err(error) => {
            // Said, not dropped: a queue that cannot be read is no evidence that none waits.
            let reason = format!("the wait queue could not be read ({error}): who waits for the admission is not shown; run `proclease doctor` again");
            rows.push(Row { disposition: "unknown".into(), ..Row::invalid("waiter", "export admission, the wait queue".into(), reason, None) });
            return;
        }
    };
    let boot_id = host.process_identity().current_boot_id().ok();
    let mut place = 0;
    for waiter in waiters {
        let state = if !waiter.is_place() {
            WaiterState::Stray(waiter.key.clone())
        } else {
            match judge(host.process_identity(), boot_id.as_deref(), &waiter).0 {
                Ahead::Waiting => WaiterState::Waiting,
                Ahead::Stopped => WaiterState::Stopped,
                Ahead::Gone => WaiterState::Gone(format!(
                    "its waiter, on this machine, is gone: it is skipped, and its place ({}) removed by the next waiter to pass it, or when its presence expires",
                    waiter.key
                )),
            }
        };
        let pid = waiter.owner.as_ref().map(|owner| owner.pid);
        let machine = (!waiter.host.is_empty()).then(|| waiter.host.clone());
        let mut row = waiter_row(state, &mut place, pid, waiter.enqueued_at_ms, machine.clone(), now_ms);
        if let (Some(machine), true) = (machine, waiter.is_place()) {
            row.target = format!("{}, on {machine}", row.target);
        }
        if row.disposition == "stopped" {
            row.reason += "; in cluster mode a waiter stopped longer than the TTL loses its presence, and with it its place: continued, it ends with an error";
        }
        rows.push(row);
    }
}

/// A waiter's state, as a queue's row shows it.
enum WaiterState {
    Waiting,
    Stopped,
    /// Gone, and why its place is still there.
    Gone(String),
    /// Not a waiter's place (cluster mode: the etcd key): waiters ignore it.
    Stray(String),
}

/// One row of a wait queue: `place` counts the waiting ones so far.
fn waiter_row(state: WaiterState, place: &mut usize, pid: Option<u64>, enqueued_at_ms: Option<u64>, owner_host: Option<String>, now_ms: u64) -> Row {
    let (target, disposition, reason) = match state {
        WaiterState::Stopped => (
            "export admission, passed over".to_string(),
            "stopped",
            "a `run --exclusive --wait` stopped where it waits (Ctrl-Z, SIGSTOP): the waiters behind it go first while it is stopped; \
             continue it (`kill -CONT PID`, or `fg` in its terminal) or end it"
                .to_string(),
        ),
        WaiterState::Waiting => {
            *place += 1;
            (
                format!("export admission, #{place} in line"),
                "waiting",
                "a `run --exclusive --wait` waiting for its turn: it takes the admission once the waiters ahead of it have had theirs".to_string(),
            )
        }
        WaiterState::Gone(why) => ("export admission, a place left".to_string(), "gone", why),
        WaiterState::Stray(key) => (
            "export admission, not a place".to_string(),
            "ignored",
            format!(
                "a key in the wait queue that is not a waiter's place as proclease writes it (no lease, or a value naming no waiter): waiters ignore it; remove it with etcdctl del {key}"
            ),
        ),
    };
    Row {
        kind: "waiter",
        target,
        owner_pid: pid,
        child_pid: None,
        phase: "queued".into(),
        age: enqueued_at_ms.map_or_else(|| "-".into(), |at| age(now_ms, at)),
        disposition: disposition.into(),
        reason,
        recover_action: None,
        owner_host,
    }
}

/// The admission's row: its claim, or the file a reader refuses.
fn admission_rows(host: &Host, admission: Result<Option<proclease_core::admission::Survey>, crate::InvalidFile>, rows: &mut Vec<Row>) {
    match admission {
        Ok(Some(s)) => {
            // Cluster mode: the machine the admission's holder runs on, as its presence records it.
            let owner_host = holder_host(host, &s.claim.owner);
            let mut reason = if s.disposition == Disposition::Indeterminate {
                format!(
                    "{}; new --exclusive runs are refused until a reboot proves it gone, or until you remove {} by hand after checking no helper runs",
                    s.reason,
                    host.record_location(proclease_core::admission::CLAIM_PATH)
                )
            } else {
                s.reason
            };
            if let Some(name) = &owner_host {
                reason += &format!(" — it runs on host {name}");
            }
            rows.push(Row {
                kind: "admission",
                target: s.claim.id.clone(),
                owner_pid: Some(s.claim.owner.pid),
                child_pid: s.claim.helper_owner.as_ref().map(|h| h.pid),
                phase: s.claim.phase.map_or("v1", |p| p.name()).to_string(),
                age: "-".into(),
                disposition: s.disposition.name().into(),
                reason,
                recover_action: None,
                owner_host,
            });
        }
        Ok(None) => {}
        Err(invalid) => rows.push(Row::invalid(
            "admission",
            "active.json".into(),
            format!(
                "{} is not a valid export admission ({}): no --exclusive run can start while it is there, and proclease never deletes it; \
                 check that no export runs, then move it aside: {}",
                invalid.path.display(),
                invalid.error,
                invalid.set_aside
            ),
            None,
        )),
    }
}

impl Row {
    /// A row for what is not a valid record.
    fn invalid(kind: &'static str, target: String, reason: String, recover_action: Option<String>) -> Row {
        Row { kind, target, owner_pid: None, child_pid: None, phase: "-".into(), age: "-".into(), disposition: "invalid".into(), reason, recover_action, owner_host: None }
    }
}

/// How long ago `created_ms` was: `42s`, `5m`, `3h`, `2d`.
fn age(now_ms: u64, created_ms: u64) -> String {
    let seconds = now_ms.saturating_sub(created_ms) / 1000;
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// In cluster mode, the host name `owner`'s presence records when it runs on another machine
/// (`None` on this machine, without cluster mode, or when it holds no presence).
#[cfg(feature = "cluster")]
fn holder_host(host: &Host, owner: &proclease_core::records::Owner) -> Option<String> {
    let cluster = host.cluster()?;
    let here = host.process_identity().current_boot_id().ok()?;
    (owner.boot_id != here).then(|| crate::cluster::presence::presence_host(cluster.store(), owner)).flatten()
}

#[cfg(not(feature = "cluster"))]
fn holder_host(_: &Host, _: &proclease_core::records::Owner) -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_said_in_the_largest_unit_that_keeps_two_digits() {
        assert_eq!(age(119_999, 0), "119s");
        assert_eq!(age(120_000, 0), "2m");
        assert_eq!(age(7_200_000, 0), "2h");
        assert_eq!(age(172_800_000, 0), "2d");
        assert_eq!(age(0, 5_000), "0s", "a lease created after now (clock skew) is 0s old");
    }

    #[test]
    fn the_json_document_keeps_the_command_line_s_field_names() {
        let row = Row::invalid("lease-entry", "x.json".into(), "why".into(), Some("stop".into()));
        let value = serde_json::to_value(&row).expect("a row serialises");
        let keys: Vec<&str> = value.as_object().expect("an object").keys().map(String::as_str).collect();
        assert_eq!(keys, ["age", "childPid", "disposition", "kind", "ownerHost", "ownerPid", "phase", "reason", "recoverAction", "target"]);
    }
}
