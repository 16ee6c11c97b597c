//! The typed API over the component's `dispositions` export: the pure decision tables with the
//! probe answers given as facts, returning the disposition and the probes it consulted.

use proclease_core::dispositions::{Disposition, Probe};

use proclease_core::liveness::OwnerStatus;
use proclease_core::records::directory_lease::DirectoryLease;
use proclease_core::records::export_admission::ExportAdmission;
use proclease_core::records::invocation_lease::InvocationLease;

use crate::runtime::Instance;
use crate::{Error, convert};

/// The `dispositions` export of one [`Instance`].
pub struct Dispositions<'a> {
    pub(crate) instance: &'a mut Instance,
}

use crate::convert::{disposition_from_wit as disposition, probe_from_wit};
use crate::runtime::export_call;

pub(crate) fn probes(consulted: Vec<crate::bindings::proclease::lease::types::Probe>) -> Vec<Probe> {
    consulted.into_iter().map(probe_from_wit).collect()
}

macro_rules! call {
    ($self:ident, $method:ident $(, $arg:expr)*) => {
        export_call!(*$self.instance, [proclease_lease_dispositions] $method($($arg),*))
    };
}

impl Dispositions<'_> {
    /// §6A.5: the disposition of an observed admission and the probes consulted (owner, then
    /// helper only where the table needs it).
    pub fn admission(&mut self, claim: &ExportAdmission, current_boot_id: &str, owner: OwnerStatus, helper: OwnerStatus) -> Result<(Disposition, Vec<Probe>), Error> {
        let claim = convert::admission_claim_to_wit(claim.clone());
        let verdict = call!(self, call_admission, &claim, current_boot_id, convert::status_to_wit(owner), convert::status_to_wit(helper))?.map_err(convert::error_from_wit)?;
        Ok((disposition(verdict.disposition), probes(verdict.consulted)))
    }

    /// §6A.6: the disposition of a raw-working lease whose owner is dead, at `now_ms`.
    pub fn raw_lease(&mut self, claim: &DirectoryLease, now_ms: u64, child: OwnerStatus) -> Result<(Disposition, Vec<Probe>), Error> {
        let claim = convert::directory_lease_claim_to_wit(claim.clone());
        let verdict = call!(self, call_raw_lease, &claim, now_ms, convert::status_to_wit(child))?.map_err(convert::error_from_wit)?;
        Ok((disposition(verdict.disposition), probes(verdict.consulted)))
    }

    /// §6B.4: `(combined, reported, probes)` for an invocation lease snapshot.
    ///
    /// Errors: `portable invocation lease snapshot is not content-bound`.
    pub fn invocation_owner_status(
        &mut self,
        lease: &InvocationLease,
        content_sha256: &str,
        parent: OwnerStatus,
        host: OwnerStatus,
    ) -> Result<(OwnerStatus, OwnerStatus, Vec<Probe>), Error> {
        let lease = convert::invocation_lease_to_wit(lease.clone());
        let status =
            call!(self, call_invocation_owner_status, &lease, content_sha256, convert::status_to_wit(parent), convert::status_to_wit(host))?.map_err(convert::error_from_wit)?;
        Ok((convert::status_from_wit(status.combined), convert::status_from_wit(status.reported), probes(status.consulted)))
    }
}
