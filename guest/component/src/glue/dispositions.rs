//! The `dispositions` export: the pure decision tables, with the probe answers given as facts.
//! The answers are bare statuses, as the reference's injected `inspect` gives them: the tables
//! are the reference's (no witness proofs).

use alloc::vec::Vec;

use proclease_core::dispositions::{self as tables, Probe};
use proclease_core::liveness::{Liveness, OwnerStatus, Spawned};

use super::Component;
use super::bindings::exports::proclease::lease::dispositions as wit;
use super::bindings::proclease::lease::types as t;
use super::convert::{admission_claim_in, directory_lease_claim_in, invocation_lease_in};
use crate::convert::{error_to_wit as error, status_from_wit as status_in, status_to_wit as status};

use crate::convert::disposition_to_wit as disposition;

use crate::convert::probe_to_wit as probe;

/// A probe that answers from the given facts and records the calls.
fn answering<'a>(
    answer: impl Fn(Probe) -> OwnerStatus + 'a,
    calls: &'a mut Vec<t::Probe>,
) -> impl FnMut(Probe, &proclease_core::records::Owner) -> Result<Liveness, core::convert::Infallible> + 'a {
    move |p, _| {
        calls.push(probe(p));
        Ok(Liveness::reference(answer(p)))
    }
}

impl wit::Guest for Component {
    fn judge_owner(owner: t::Owner, facts: super::bindings::proclease::lease::process_identity::OwnerFacts) -> wit::Liveness {
        let owner = crate::convert::owner_from_wit(owner);
        let liveness = proclease_core::liveness::judge(&owner, &crate::convert::facts_from_wit(facts));
        wit::Liveness { status: status(liveness.status), lineage_gone: liveness.lineage_gone(), proof: liveness.proof.words().into() }
    }

    fn admission(claim: t::AdmissionClaim, current_boot_id: alloc::string::String, owner_status: t::OwnerStatus, helper_status: t::OwnerStatus) -> Result<wit::Verdict, t::Error> {
        let claim = admission_claim_in(claim).map_err(error)?;
        let (owner_status, helper_status) = (status_in(owner_status), status_in(helper_status));
        let mut consulted = Vec::new();
        let answer = move |p| if p == Probe::Owner { owner_status } else { helper_status };
        let Ok(d) = tables::admission(&claim, &current_boot_id, &mut answering(answer, &mut consulted));
        Ok(wit::Verdict { disposition: disposition(d), consulted })
    }

    fn raw_lease(claim: t::DirectoryLeaseClaim, now_ms: u64, child_status: t::OwnerStatus) -> Result<wit::Verdict, t::Error> {
        let claim = directory_lease_claim_in(claim).map_err(error)?;
        let child_status = status_in(child_status);
        let mut consulted = Vec::new();
        let Ok(d) = tables::raw_lease(&claim, Spawned::Unproven, now_ms, &mut answering(move |_| child_status, &mut consulted));
        Ok(wit::Verdict { disposition: disposition(d), consulted })
    }

    fn invocation_owner_status(
        lease: t::InvocationLease,
        content_sha256: alloc::string::String,
        parent_status: t::OwnerStatus,
        host_status: t::OwnerStatus,
    ) -> Result<wit::InvocationStatus, t::Error> {
        let lease = invocation_lease_in(lease).map_err(error)?;
        let (parent_status, host_status) = (status_in(parent_status), status_in(host_status));
        let mut calls = Vec::new();
        let result = {
            let mut inspect = |p: Probe, _: &proclease_core::records::Owner| -> Result<Liveness, proclease_core::Error> {
                calls.push(probe(p));
                Ok(Liveness::reference(if p == Probe::Owner { parent_status } else { host_status }))
            };
            tables::invocation_owner_status(&lease, &content_sha256, &mut inspect)
        };
        let (combined, reported) = result.map_err(error)?;
        Ok(wit::InvocationStatus { combined: status(combined), reported: status(reported), consulted: calls })
    }
}
