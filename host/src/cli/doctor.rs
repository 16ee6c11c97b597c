//! `proclease doctor`: every claim and lease in the state home, with its disposition and why.

use std::process::ExitCode;

use clap::Args;
use proclease::core::dispositions::Disposition;
use proclease::core::invocation_leases::{Entry, RepairDecision};
use proclease::core::liveness::OwnerStatus;
use proclease::process_identity::cgroup_tree::CgroupTree;
use serde_json::{Value, json};

use super::{Failure, Global};

/// Arguments of `doctor`.
#[derive(Args)]
pub struct DoctorArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// One row of the report.
struct Row {
    kind: &'static str,
    what: String,
    owner: Option<u64>,
    phase: String,
    age: String,
    disposition: String,
    reason: String,
    action: Option<String>,
    child: Option<u64>,
}

fn age(now_ms: u64, created_ms: u64) -> String {
    let seconds = now_ms.saturating_sub(created_ms) / 1000;
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// Runs `doctor`.
pub fn run(global: &Global, args: &DoctorArgs) -> Result<ExitCode, Failure> {
    let host = super::open(global)?;
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let survey = host.survey()?;
    let mut rows = Vec::new();
    // Cluster mode: the machine the admission's holder runs on, as its presence records it.
    let holder_host = match &survey.admission {
        Ok(Some(s)) => holder_host(&host, &s.claim.owner),
        _ => None,
    };
    match survey.admission {
        Ok(Some(s)) => rows.push(Row {
            kind: "admission",
            what: s.claim.id.clone(),
            owner: Some(s.claim.owner.pid),
            phase: s.claim.phase.map_or("v1", |p| p.name()).to_string(),
            age: "-".into(),
            disposition: s.disposition.name().into(),
            child: s.claim.helper_owner.as_ref().map(|h| h.pid),
            reason: if s.disposition == Disposition::Indeterminate {
                format!(
                    "{}; new --exclusive runs are refused until a reboot proves it gone, or until you remove {} by hand after checking no helper runs",
                    s.reason,
                    host.record_location(proclease::core::admission::CLAIM_PATH)
                )
            } else {
                s.reason
            } + &holder_host.as_ref().map(|name| format!(" — it runs on host {name}")).unwrap_or_default(),
            action: None,
        }),
        Ok(None) => {}
        Err(invalid) => rows.push(Row {
            kind: "admission",
            what: "active.json".into(),
            owner: None,
            phase: "-".into(),
            age: "-".into(),
            disposition: "invalid".into(),
            reason: format!(
                "{} is not a valid export admission ({}): no --exclusive run can start while it is there, and proclease never deletes it; \
                 check that no export runs, then move it aside: {}",
                invalid.path.display(),
                invalid.error,
                invalid.set_aside
            ),
            action: None,
            child: None,
        }),
    }
    let run = &survey.recovery.directory_leases;
    let bound = proclease::core::directory_leases::MAX_CLAIMS;
    let over_bound = (run.outcomes.len() > bound).then(|| {
        format!(
            "directory leases: {} entries, over the reference's bound of {bound}: ghostget's recovery refuses the whole collection and \
             new leases are refused; `proclease recover` recovers the dead ones, oldest first",
            run.outcomes.len()
        )
    });
    if let (Some(stop), None) = (&run.stopped, run.outcomes.iter().find(|o| o.action.refusal().is_some())) {
        // Stopped before any entry (the collection itself).
        rows.push(Row {
            kind: "lease-entry",
            what: proclease::core::directory_leases::DIRECTORY.into(),
            owner: None,
            phase: "-".into(),
            age: "-".into(),
            disposition: "invalid".into(),
            reason: format!("recover would stop: {stop}{}", run.cause.as_ref().map(|c| format!(" ({c})")).unwrap_or_default()),
            action: Some("stop".into()),
            child: None,
        });
    }
    for e in &run.outcomes {
        let stop = e.action.refusal().map(|error| format!("; recover would stop: {error} (`recover --skip-invalid` recovers the others)"));
        rows.push(match &e.claim {
            Some(c) => Row {
                kind: if c.role == proclease::core::records::directory_lease::Role::BundleStage { "bundle-stage" } else { "raw-working" },
                what: c.path.clone(),
                owner: Some(c.owner.pid),
                phase: c.phase.name().into(),
                age: age(now_ms, c.created_at_ms),
                disposition: e.disposition.map_or("invalid", |d| d.name()).into(),
                reason: format!("{}{}", e.reason, stop.unwrap_or_default()),
                action: Some(e.action.words().into()),
                child: c.child_owner.as_ref().map(|o| o.pid),
            },
            None => Row {
                kind: "lease-entry",
                what: e.name.clone(),
                owner: None,
                phase: "-".into(),
                age: "-".into(),
                disposition: "invalid".into(),
                reason: format!("{}{}", e.reason, stop.unwrap_or_default()),
                action: Some(e.action.words().into()),
                child: None,
            },
        });
    }
    for i in &survey.invocations {
        rows.push(match &i.entry {
            Entry::Invalid(id) => Row {
                kind: "invocation",
                what: id.clone(),
                owner: None,
                phase: "-".into(),
                age: "-".into(),
                disposition: "invalid".into(),
                reason: "not a valid canonical lease: blocks every plugin's acquire until repaired by hand".into(),
                action: None,
                child: None,
            },
            Entry::Valid(s) => {
                let status = i.status.unwrap_or(OwnerStatus::Unknown);
                let l = &s.record;
                let containment = l.containment.as_ref().map_or("v1", |c| c.status.name());
                let disposition = i.disposition();
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
                    what: format!("{} {} ({})", l.identity.plugin_id, l.identity.operation, l.lease_id),
                    owner: Some(l.owner.process.pid),
                    phase: containment.into(),
                    age: "-".into(),
                    disposition: disposition.map_or("invalid", |d| d.name()).into(),
                    reason,
                    action: i.decision.map(|d| d.name().to_string()),
                    child: l.containment.as_ref().and_then(|c| c.host.as_ref()).map(|h| h.pid),
                }
            }
        });
    }
    if args.json {
        let items: Vec<Value> = rows
            .iter()
            .map(|r| {
                json!({
                    "kind": r.kind, "target": r.what, "ownerPid": r.owner, "childPid": r.child, "phase": r.phase, "age": r.age,
                    "disposition": r.disposition, "reason": r.reason, "recoverAction": r.action,
                    "ownerHost": if r.kind == "admission" { holder_host.clone() } else { None },
                })
            })
            .collect();
        let containment = match proclease::supervisor::containment_available() {
            Ok(()) => json!({ "available": true, "reason": null }),
            Err(reason) => json!({ "available": false, "reason": reason }),
        };
        let cgroup = match CgroupTree::available() {
            Ok(()) => json!({ "available": true, "reason": null }),
            Err(reason) => json!({ "available": false, "reason": reason }),
        };
        let doc = json!({
            "schemaVersion": super::JSON_SCHEMA_VERSION, "stateHome": host.state_home().display().to_string(), "store": host.store_address(),
            "containment": containment, "cgroup": cgroup, "entries": items, "overBound": over_bound, "clusterState": host.cluster_epoch_warning(),
        });
        super::print_json(&doc);
        return Ok(ExitCode::SUCCESS);
    }
    println!("state home: {}", host.state_home().display());
    if host.cluster().is_some() {
        println!("cluster: {} (the admission and invocation leases; directory leases are this machine's)", host.store_address());
        if let Some(words) = host.cluster_epoch_warning() {
            println!("{words}");
        }
    }
    if let Err(reason) = proclease::supervisor::containment_available() {
        match CgroupTree::available() {
            Ok(()) => println!(
                "containment: cgroup only, because {reason} (docs/containment.md: the lease stays active while any process of the command's tree runs; in cluster mode, a killed supervisor's grandchildren are not stopped)"
            ),
            Err(_) => println!("containment: none, because {reason} (docs/containment.md: a command's detached processes are covered only while they keep its witness)"),
        }
    }
    if let Some(words) = &over_bound {
        println!("{words}");
    }
    if rows.is_empty() {
        println!("no admission claim, directory leases or invocation leases");
        return Ok(ExitCode::SUCCESS);
    }
    let pid = |p: Option<u64>| p.map_or_else(|| "-".to_string(), |p| p.to_string());
    let table: Vec<[String; 7]> =
        rows.iter().map(|r| [r.kind.to_string(), r.what.clone(), pid(r.owner), pid(r.child), r.phase.clone(), r.age.clone(), r.disposition.clone()]).collect();
    let header = ["KIND", "TARGET", "OWNER", "CHILD", "PHASE", "AGE", "DISPOSITION"].map(String::from);
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &table {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    // Text columns left-aligned, numbers right-aligned; WHY last, unpadded.
    let right = [false, false, true, true, false, true, false];
    let line = |cells: &[String; 7], why: &str| {
        let mut out = String::new();
        for ((cell, width), right) in cells.iter().zip(widths).zip(right) {
            let pad = " ".repeat(width - cell.chars().count());
            if right {
                out.push_str(&pad);
                out.push_str(cell);
            } else {
                out.push_str(cell);
                out.push_str(&pad);
            }
            out.push_str("  ");
        }
        out.push_str(why);
        out
    };
    println!("{}", line(&header, "WHY"));
    for (r, cells) in rows.iter().zip(&table) {
        println!("{}", line(cells, &r.reason));
    }
    Ok(ExitCode::SUCCESS)
}

/// In cluster mode, the host name `owner`'s presence records when it runs on another machine
/// (`None` on this machine, without cluster mode, or when it holds no presence).
#[cfg(feature = "cluster")]
fn holder_host(host: &proclease::Host, owner: &proclease::core::records::Owner) -> Option<String> {
    let cluster = host.cluster()?;
    let here = host.process_identity().current_boot_id().ok()?;
    (owner.boot_id != here).then(|| proclease::process_identity::cluster_presence::presence_host(cluster.store(), owner)).flatten()
}

#[cfg(not(feature = "cluster"))]
fn holder_host(_: &proclease::Host, _: &proclease::core::records::Owner) -> Option<String> {
    None
}
