//! Values that enter the component through a typed argument, converted by the shared layer
//! (`wit/convert.rs`) and then re-validated by the reference's parsers, so that no malformed
//! record gets in; and the invocation-lease snapshot shapes of the `invocation-leases` export.

use proclease_core::Error;
use proclease_core::records::{Parsed, directory_lease as dl, export_admission as ea, invocation_lease as il};

use super::bindings::exports::proclease::lease::invocation_leases::Snapshot;
use super::bindings::exports::proclease::lease::records as wit;
use super::bindings::proclease::lease::types as t;
use crate::convert::{admission_claim_from_wit, directory_lease_claim_from_wit, form_to_wit, invocation_lease_from_wit, invocation_lease_to_wit};

/// An admission claim from the boundary, re-validated by `parseExportAdmission`.
pub(crate) fn admission_claim_in(c: t::AdmissionClaim) -> Result<ea::ExportAdmission, Error> {
    ea::parse_value(&admission_claim_from_wit(c).to_value())
}

/// A directory lease claim from the boundary, re-validated by `parseClaim`.
pub(crate) fn directory_lease_claim_in(c: t::DirectoryLeaseClaim) -> Result<dl::DirectoryLease, Error> {
    dl::parse_value(&directory_lease_claim_from_wit(c).to_value())
}

/// An invocation lease from the boundary, re-validated by the lease parser.
pub(crate) fn invocation_lease_in(l: t::InvocationLease) -> Result<il::InvocationLease, Error> {
    il::parse_value(&invocation_lease_from_wit(l).to_value())
}

/// A lease with its canonical form.
pub(crate) fn invocation_parsed(p: Parsed<il::InvocationLease>) -> (t::InvocationLease, wit::CanonicalForm) {
    let f = form_to_wit(&p);
    (invocation_lease_to_wit(p.record), f)
}

pub(crate) fn snapshot(p: Parsed<il::InvocationLease>) -> Snapshot {
    Snapshot { content_sha256: p.sha256, lease: invocation_lease_to_wit(p.record) }
}

/// A snapshot from the boundary: the lease re-validated, with the hash it was given (the
/// content-bound check then compares it with the lease's own).
pub(crate) fn snapshot_in(s: Snapshot) -> Result<Parsed<il::InvocationLease>, Error> {
    let lease = invocation_lease_in(s.lease)?;
    let canonical = proclease_core::canonical_json::to_canonical_file(&lease.to_value()).unwrap_or_default();
    Ok(Parsed { record: lease, canonical, sha256: s.content_sha256 })
}
