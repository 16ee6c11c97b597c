//! Reports of what is in a state home and what a recovery did — one model each, printed as text
//! or serialised as JSON (issue #29: one report model, many printers). The command line's
//! `doctor` and `recover` print these; an embedder can show the same.
//!
//! Every report serialises to the document its command prints with `--json`: camelCase keys,
//! pids as numbers, absent values as `null`, and `schemaVersion` [`JSON_SCHEMA_VERSION`].

use serde::Serialize;

mod doctor;
mod invocations;
mod recovery;

pub use doctor::{DoctorReport, Row};
pub use invocations::{InvocationLeaseRow, InvocationList, InvocationRepair, InvocationRow, RepairCounts};
pub use recovery::{CreationRow, DirectoryLeaseRow, DirectoryLeases, InvocationDecision, InvocationLeases, RecoveryReport};

/// The `schemaVersion` of every `--json` document the command line prints (one convention for
/// all commands: pretty-printed, pids as numbers, absent values as `null`).
pub const JSON_SCHEMA_VERSION: u32 = 1;

/// Whether a mechanism is available on this machine, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Availability {
    /// It can be used.
    pub available: bool,
    /// Why not (`null` when available).
    pub reason: Option<String>,
}

impl Availability {
    fn of(probe: Result<(), String>) -> Availability {
        match probe {
            Ok(()) => Availability { available: true, reason: None },
            Err(reason) => Availability { available: false, reason: Some(reason) },
        }
    }
}

/// Lays `rows` out in columns under `header`, each cell padded to its column's width (right-
/// aligned where `right` says) and followed by two spaces: one line per row, the header first.
fn columns<const N: usize>(header: &[String; N], rows: Vec<[String; N]>, right: [bool; N]) -> Vec<String> {
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    std::iter::once(header.clone())
        .chain(rows)
        .map(|cells| {
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
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_pad_text_left_and_numbers_right() {
        let header = ["KIND".to_string(), "PID".to_string()];
        let lines = columns(&header, vec![["admission".into(), "7".into()], ["x".into(), "12345".into()]], [false, true]);
        let (kind, pid) = (9 + 2, 5 + 2);
        assert_eq!(lines, [format!("{:<kind$}{:>5}  ", "KIND", "PID"), format!("{:<kind$}{:>5}  ", "admission", "7"), format!("{:<kind$}{:>5}  ", "x", "12345")]);
        assert_eq!(lines[0].len(), kind + pid);
    }
}
