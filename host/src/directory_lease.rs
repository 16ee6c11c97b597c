//! The typed API over the component's `directory-leases` export (spec §6A.6): leasing a
//! working or staging directory, its raw lifecycle, release, and recovery.

use proclease_core::directory_leases::{Report, Request};
use proclease_core::records::directory_lease::{DirectoryLease as Claim, Phase, Role};
use wasmtime::component::ResourceAny;

use crate::bindings::exports::proclease::lease::directory_leases as wit;
use crate::bindings::proclease::lease::types as t;
use crate::effects::Effects;
use crate::runtime::{Instance, Runtime};
use crate::{Error, convert};

/// A held directory lease in its own component instance.
pub struct DirectoryLease {
    instance: Instance,
    resource: ResourceAny,
}

fn request(r: &Request) -> wit::LeaseRequest {
    wit::LeaseRequest {
        role: match r.role {
            Role::RawWorking => t::LeaseRole::RawWorking,
            Role::BundleStage => t::LeaseRole::BundleStage,
        },
        path: r.path.clone(),
        output_root: r.output_root.clone(),
        recover_after_ms: r.recover_after_ms,
        now_ms: r.now_ms,
    }
}

fn phase(p: Phase) -> t::RawPhase {
    match p {
        Phase::Preparing => t::RawPhase::Preparing,
        Phase::Launching => t::RawPhase::Launching,
        Phase::Running => t::RawPhase::Running,
        Phase::Settled => t::RawPhase::Settled,
    }
}

macro_rules! call {
    ($self:ident, $method:ident $(, $arg:expr)*) => {{
        let instance = &mut $self.instance;
        instance
            .bindings
            .proclease_lease_directory_leases()
            .directory_lease()
            .$method(&mut instance.store, $self.resource $(, $arg)*)
            .map_err(Error::component)
    }};
}

impl DirectoryLease {
    /// The request checks made before any filesystem work (§6A.6 steps 1–2), in a fresh
    /// instance served by `effects` (only its clock is used).
    pub fn check_request(runtime: &Runtime, effects: Effects, r: &Request) -> Result<(), Error> {
        let mut instance = runtime.instantiate_with(effects)?;
        instance
            .bindings
            .proclease_lease_directory_leases()
            .call_check_request(&mut instance.store, &request(r))
            .map_err(Error::component)?
            .map_err(|e| convert::error(e).into())
    }

    /// Creates a lease (§6A.6) in a fresh instance served by `effects`.
    ///
    /// As in the reference, nothing stops two leases from claiming one directory; then the
    /// recovery of one (its owner gone) deletes the directory the other may still be using. A
    /// caller that does not create a fresh directory itself must first check that no lease
    /// claims it ([`survey_directory_leases`]), holding one lock of its own across that check
    /// and this call, as `proclease run` does (`.proclease/locks/directory-lease-creation.lock`).
    pub fn create(runtime: &Runtime, effects: Effects, r: &Request) -> Result<DirectoryLease, Error> {
        let mut instance = runtime.instantiate_with(effects)?;
        let resource = instance
            .bindings
            .proclease_lease_directory_leases()
            .call_create(&mut instance.store, &request(r))
            .map_err(Error::component)?
            .map_err(convert::error)?;
        Ok(DirectoryLease { instance, resource })
    }

    /// Resumes a handle on `claim` as if this process had written it.
    pub fn resume(runtime: &Runtime, effects: Effects, claim: &Claim, released: bool) -> Result<DirectoryLease, Error> {
        let mut instance = runtime.instantiate_with(effects)?;
        let claim = convert::directory_lease_claim_out(claim.clone());
        let resource = instance
            .bindings
            .proclease_lease_directory_leases()
            .directory_lease()
            .call_resume(&mut instance.store, &claim, released)
            .map_err(Error::component)?
            .map_err(convert::error)?;
        Ok(DirectoryLease { instance, resource })
    }

    /// The claim this handle last wrote.
    pub fn claim(&mut self) -> Result<Claim, Error> {
        Ok(convert::directory_lease_claim(call!(self, call_claim)?))
    }

    /// sha256 of that claim's file text.
    pub fn content_sha256(&mut self) -> Result<String, Error> {
        call!(self, call_content_sha256)
    }

    /// Whether this handle released the lease.
    pub fn released(&mut self) -> Result<bool, Error> {
        call!(self, call_released)
    }

    /// A raw lifecycle step; `child_pid` exactly for [`Phase::Running`].
    pub fn update(&mut self, to: Phase, child_pid: Option<i64>) -> Result<(), Error> {
        call!(self, call_update, phase(to), child_pid)?.map_err(|e| convert::error(e).into())
    }

    /// Removes the claim (never the directory); a no-op once released.
    pub fn release(&mut self) -> Result<(), Error> {
        call!(self, call_release)?.map_err(|e| convert::error(e).into())
    }
}

impl Drop for DirectoryLease {
    fn drop(&mut self) {
        // Dropping the handle never releases the lease: only `release` does.
        let _ = self.resource.resource_drop(&mut self.instance.store);
    }
}

/// Recovers every directory lease whose owner is provably gone (§6A.6), at `now_ms` (the
/// clock when `None`), in a fresh instance served by `effects`.
pub fn recover_directory_leases(runtime: &Runtime, effects: Effects, now_ms: Option<f64>) -> Result<Report, Error> {
    let mut instance = runtime.instantiate_with(effects)?;
    let report = instance
        .bindings
        .proclease_lease_directory_leases()
        .call_recover(&mut instance.store, now_ms)
        .map_err(Error::component)?
        .map_err(convert::error)?;
    Ok(Report { recovered: report.recovered, published: report.published, active: report.active, indeterminate: report.indeterminate })
}

/// What a recovery at `now_ms` would decide for each entry of the lease collection, without
/// changing anything, in a fresh instance served by `effects`.
pub fn survey_directory_leases(runtime: &Runtime, effects: Effects, now_ms: Option<f64>) -> Result<Vec<proclease_core::directory_leases::Survey>, Error> {
    let mut instance = runtime.instantiate_with(effects)?;
    let entries = instance
        .bindings
        .proclease_lease_directory_leases()
        .call_survey(&mut instance.store, now_ms)
        .map_err(Error::component)?
        .map_err(convert::error)?;
    Ok(entries
        .into_iter()
        .map(|e| proclease_core::directory_leases::Survey {
            name: e.file_name,
            claim: e.claim.map(convert::directory_lease_claim),
            disposition: e.disposition.map(convert::disposition),
            action: e.action,
            reason: e.reason,
        })
        .collect())
}
