//! The typed API over the component's `export-admission` export (spec §6A.5): a held export
//! admission, with its helper lifecycle.
//!
//! ```no_run
//! # fn main() -> Result<(), proclease::Error> {
//! # let effects = proclease::effects::Effects::native(None, std::sync::Arc::new(proclease::process_identity::ProcessIdentity::new()));
//! let runtime = proclease::Runtime::shared()?;
//! let mut admission = proclease::Admission::acquire(runtime, effects)?;
//! admission.begin_helper_launch()?;
//! // … spawn the helper …
//! # let helper_pid = 0;
//! admission.bind_helper(helper_pid)?;
//! // … wait for it …
//! admission.settle_helper()?;
//! admission.release()?;
//! # Ok(()) }
//! ```

use proclease_core::records::Owner;
use proclease_core::records::export_admission::{ExportAdmission, Phase};
use wasmtime::component::ResourceAny;

use crate::effects::Effects;
use crate::runtime::{Instance, Runtime};
use crate::{Error, convert};
use crate::runtime::export_call;

/// A held export admission, living in its own component instance. Every write rotates the
/// claim's revision and is a compare-and-swap on the claim this handle last wrote; a failed
/// write leaves the handle unchanged.
pub struct Admission {
    instance: Instance,
    resource: ResourceAny,
}

macro_rules! call {
    ($self:ident, $method:ident $(, $arg:expr)*) => {
        export_call!($self.instance, [proclease_lease_export_admission, admission] $method($self.resource $(, $arg)*))
    };
}

impl Admission {
    /// Acquires the admission (§6A.5) in a fresh instance served by `effects`.
    ///
    /// Errors: the reference's messages (`… another export is active`, `… prior export owner
    /// cannot be inspected safely`, …) as [`Error::Lease`].
    pub fn acquire(runtime: &Runtime, effects: Effects) -> Result<Admission, Error> {
        let mut instance = runtime.instantiate_with(effects)?;
        let resource = instance.call(|exports, store| exports.proclease_lease_export_admission().call_acquire(store))?;
        Ok(Admission { instance, resource })
    }

    /// Resumes a handle on `claim` (a current v2 claim) as if this process had written it.
    pub fn resume(runtime: &Runtime, effects: Effects, claim: &ExportAdmission, released: bool) -> Result<Admission, Error> {
        let mut instance = runtime.instantiate_with(effects)?;
        let claim = convert::admission_claim_to_wit(claim.clone());
        let resource = instance.call(|exports, store| exports.proclease_lease_export_admission().admission().call_resume(store, &claim, released))?;
        Ok(Admission { instance, resource })
    }

    /// The claim this handle last wrote.
    pub fn claim(&mut self) -> Result<ExportAdmission, Error> {
        Ok(convert::admission_claim_from_wit(call!(self, call_claim)?))
    }

    /// sha256 of that claim's file text.
    pub fn content_sha256(&mut self) -> Result<String, Error> {
        call!(self, call_content_sha256)
    }

    /// Whether this handle released the admission.
    pub fn released(&mut self) -> Result<bool, Error> {
        call!(self, call_released)
    }

    /// The generic lifecycle transition (§6A.5 table).
    pub fn update(&mut self, phase: Phase, helper: Option<&Owner>) -> Result<(), Error> {
        let helper = helper.cloned().map(convert::owner_to_wit);
        call!(self, call_update, convert::admission_phase_to_wit(phase), helper.as_ref())?.map_err(|e| convert::error_from_wit(e).into())
    }

    /// parent-owned → helper-launching.
    pub fn begin_helper_launch(&mut self) -> Result<(), Error> {
        call!(self, call_begin_helper_launch)?.map_err(|e| convert::error_from_wit(e).into())
    }

    /// helper-launching → helper-active, recording the live process `pid`.
    pub fn bind_helper(&mut self, pid: i64) -> Result<(), Error> {
        call!(self, call_bind_helper, pid)?.map_err(|e| convert::error_from_wit(e).into())
    }

    /// helper-launching / helper-active → parent-owned.
    pub fn settle_helper(&mut self) -> Result<(), Error> {
        call!(self, call_settle_helper)?.map_err(|e| convert::error_from_wit(e).into())
    }

    /// helper-launching / helper-active → cleanup-unsafe (keeps the recorded helper).
    pub fn mark_cleanup_unsafe(&mut self) -> Result<(), Error> {
        call!(self, call_mark_cleanup_unsafe)?.map_err(|e| convert::error_from_wit(e).into())
    }

    /// Removes the claim (parent-owned only); a no-op once released.
    pub fn release(&mut self) -> Result<(), Error> {
        call!(self, call_release)?.map_err(|e| convert::error_from_wit(e).into())
    }
}

/// Reads and judges the admission without changing anything (`None` when no claim is held),
/// in a fresh instance served by `effects`.
pub fn survey_admission(runtime: &Runtime, effects: Effects) -> Result<Option<proclease_core::admission::Survey>, Error> {
    let mut instance = runtime.instantiate_with(effects)?;
    let survey = instance.call(|exports, store| exports.proclease_lease_export_admission().call_survey(store))?;
    Ok(survey.map(|s| proclease_core::admission::Survey {
        claim: convert::admission_claim_from_wit(s.claim),
        disposition: convert::disposition_from_wit(s.disposition),
        reason: s.reason,
    }))
}

impl Drop for Admission {
    fn drop(&mut self) {
        // Dropping the handle never releases the admission: only `release` does.
        self.instance.drop_resource(self.resource);
    }
}
