//! The reports of `proclease invocations list` and `invocations repair`: the invocation-lease
//! collection with each owner's status (§6B.3, §6B.4), and what a repair decided (§6B.9) —
//! printed as text or as JSON.

use proclease_core::invocation_leases::{Entry, RepairDecision, RepairReport};
use serde::Serialize;

use super::JSON_SCHEMA_VERSION;
use crate::api::host::Host;
use crate::error::Error;

/// The invocation-lease collection. Serialised it is `invocations list --json`'s document.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InvocationList {
    /// [`JSON_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Every entry, in name order.
    pub invocation_leases: Vec<InvocationRow>,
}

/// One entry of the collection.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum InvocationRow {
    /// A valid lease.
    Valid(InvocationLeaseRow),
    /// Not a valid canonical lease.
    Invalid {
        /// The entry's id (its file name without `.json`).
        #[serde(rename = "leaseId")]
        lease_id: String,
        /// Always `true`.
        invalid: bool,
    },
}

/// One valid invocation lease.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InvocationLeaseRow {
    /// The lease's id.
    pub lease_id: String,
    /// The plugin.
    pub plugin_id: String,
    /// The operation it runs.
    pub operation: String,
    /// The run's id.
    pub run_id: String,
    /// The owner's pid.
    pub owner_pid: u64,
    /// When it was acquired (ISO 8601, the record's text).
    pub acquired_at: String,
    /// The record's schema version (1 or 2).
    pub schema_version: u64,
    /// The containment status (schema 2), `null` for schema 1.
    pub containment: Option<&'static str>,
    /// The plugin host's pid, when recorded.
    pub host_pid: Option<u64>,
    /// The owner's status (§6B.4).
    pub owner_status: &'static str,
}

impl InvocationList {
    /// Lists `host`'s invocation leases, each with its owner's status.
    ///
    /// Errors: those of [`Host::invocation_leases`] and [`Host::invocation_status`].
    pub fn build(host: &Host) -> Result<InvocationList, Error> {
        let mut rows = Vec::new();
        for entry in host.invocation_leases()? {
            rows.push(match &entry {
                Entry::Invalid(id) => InvocationRow::Invalid { lease_id: id.clone(), invalid: true },
                Entry::Valid(s) => {
                    let l = &s.record;
                    InvocationRow::Valid(InvocationLeaseRow {
                        lease_id: l.lease_id.clone(),
                        plugin_id: l.identity.plugin_id.clone(),
                        operation: l.identity.operation.clone(),
                        run_id: l.run_id.clone(),
                        owner_pid: l.owner.process.pid,
                        acquired_at: l.acquired_at.clone(),
                        schema_version: u64::from(l.schema_version),
                        containment: l.containment.as_ref().map(|c| c.status.name()),
                        host_pid: l.containment.as_ref().and_then(|c| c.host.as_ref()).map(|h| h.pid),
                        owner_status: host.invocation_status(s)?.name(),
                    })
                }
            });
        }
        Ok(InvocationList { schema_version: JSON_SCHEMA_VERSION, invocation_leases: rows })
    }

    /// The table `invocations list` prints (`LEASE PLUGIN OPERATION OWNER CONTAINMENT HOST
    /// ACQUIRED STATUS`), or a line saying there are none. Ends with a newline.
    pub fn text(&self) -> String {
        if self.invocation_leases.is_empty() {
            return "no invocation leases\n".into();
        }
        let mut out = format!("{:<36}  {:<20} {:<18} {:>7} {:<16} {:>7} {:<24} STATUS\n", "LEASE", "PLUGIN", "OPERATION", "OWNER", "CONTAINMENT", "HOST", "ACQUIRED");
        for row in &self.invocation_leases {
            out += &match row {
                InvocationRow::Invalid { lease_id, .. } => format!("{lease_id:<36}  invalid: not a valid canonical lease (run `proclease validate` on it)\n"),
                InvocationRow::Valid(r) => format!(
                    "{:<36}  {:<20} {:<18} {:>7} {:<16} {:>7} {:<24} {}\n",
                    r.lease_id,
                    r.plugin_id,
                    r.operation,
                    r.owner_pid,
                    r.containment.unwrap_or("(v1)"),
                    r.host_pid.map_or_else(|| "-".to_string(), |pid| pid.to_string()),
                    r.acquired_at,
                    r.owner_status
                ),
            };
        }
        out
    }
}

/// What a repair of the collection decided. Serialised it is `invocations repair --json`'s
/// document.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InvocationRepair {
    /// [`JSON_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The counts.
    pub report: RepairCounts,
    /// Each lease's decision.
    pub decisions: Vec<super::InvocationDecision>,
}

/// A repair's counts (§6B.9).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RepairCounts {
    /// Entries looked at (invalid ones included).
    pub inspected: u32,
    /// Leases removed.
    pub removed: u32,
    /// Kept: an owner or host alive.
    pub active: u32,
    /// Kept: nothing proves the owner gone.
    pub unknown: u32,
    /// Invalid entries, and leases found changed while being removed.
    pub invalid: u32,
}

impl From<RepairReport> for RepairCounts {
    fn from(r: RepairReport) -> RepairCounts {
        RepairCounts { inspected: r.inspected, removed: r.removed, active: r.active, unknown: r.unknown, invalid: r.invalid }
    }
}

impl InvocationRepair {
    /// The report of a repair that counted `report` and decided `decisions`.
    pub fn new(report: RepairReport, decisions: &[(String, RepairDecision)]) -> InvocationRepair {
        InvocationRepair { schema_version: JSON_SCHEMA_VERSION, report: report.into(), decisions: decisions.iter().map(|(id, d)| super::InvocationDecision::new(id, *d)).collect() }
    }

    /// One line per lease (`ID: what was done`), then the counts as `name: count` lines.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for decision in &self.decisions {
            let verb = match decision.repair {
                RepairDecision::Remove => "removed",
                RepairDecision::Active => "kept: owner or host alive",
                RepairDecision::Unknown => "kept: not provably gone",
                RepairDecision::RemovalRefused => "kept: changed while it was removed",
                RepairDecision::Invalid => "kept: invalid (inspect it by hand)",
            };
            out += &format!("{}: {verb}\n", decision.lease_id);
        }
        out + &self.report.text()
    }
}

impl RepairCounts {
    /// The counts as `name: count` lines.
    pub fn text(&self) -> String {
        format!("inspected: {}\nremoved: {}\nactive: {}\nunknown: {}\ninvalid: {}\n", self.inspected, self.removed, self.active, self.unknown, self.invalid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repair_report_prints_each_decision_then_the_counts() {
        let report = RepairReport { inspected: 2, removed: 1, active: 1, ..RepairReport::default() };
        let repair = InvocationRepair::new(report, &[("a".into(), RepairDecision::Remove), ("b".into(), RepairDecision::Active)]);
        assert_eq!(repair.text(), "a: removed\nb: kept: owner or host alive\ninspected: 2\nremoved: 1\nactive: 1\nunknown: 0\ninvalid: 0\n");
        let value = serde_json::to_value(&repair).expect("serialises");
        assert_eq!(value["decisions"], serde_json::json!([{"leaseId": "a", "decision": "remove"}, {"leaseId": "b", "decision": "active"}]));
        assert_eq!(value["report"]["inspected"], 2);
    }

    #[test]
    fn an_invalid_entry_is_its_id_and_a_flag() {
        let row = InvocationRow::Invalid { lease_id: "x".into(), invalid: true };
        assert_eq!(serde_json::to_value(&row).expect("serialises"), serde_json::json!({"leaseId": "x", "invalid": true}));
    }
}
