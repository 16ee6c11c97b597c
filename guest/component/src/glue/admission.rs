//! The `export-admission` export: the admission operations of `proclease-core` over the
//! imported store, process identity and entropy.

use core::cell::RefCell;

use proclease_core::admission::{self, Handle};

use super::Component;
use super::bindings::exports::proclease::lease::export_admission as wit;
use super::bindings::proclease::lease::types as t;
use super::convert::admission_claim_in;
use super::imports::{ImportedEntropy, ImportedProcesses, ImportedStore};
use crate::convert::{admission_claim_to_wit as admission_claim, admission_phase_from_wit as admission_phase_in, error_to_wit as error, owner_from_wit as owner_in};

/// A held admission (WIT resource `admission`).
pub(crate) struct AdmissionResource {
    handle: RefCell<Handle>,
}

impl AdmissionResource {
    fn with<T>(&self, operation: impl FnOnce(&mut Handle) -> Result<T, proclease_core::Error>) -> Result<T, t::Error> {
        operation(&mut self.handle.borrow_mut()).map_err(error)
    }
}

impl wit::Guest for Component {
    type Admission = AdmissionResource;

    fn survey() -> Result<Option<wit::AdmissionSurvey>, t::Error> {
        let survey = admission::survey(&mut ImportedStore, &mut ImportedProcesses).map_err(error)?;
        Ok(survey.map(|s| wit::AdmissionSurvey { claim: admission_claim(s.claim), disposition: crate::convert::disposition_to_wit(s.disposition), reason: s.reason }))
    }

    fn acquire() -> Result<wit::Admission, t::Error> {
        let handle = admission::acquire(&mut ImportedStore, &mut ImportedProcesses, &mut ImportedEntropy).map_err(error)?;
        Ok(wit::Admission::new(AdmissionResource { handle: RefCell::new(handle) }))
    }
}

impl wit::GuestAdmission for AdmissionResource {
    fn resume(claim: t::AdmissionClaim, released: bool) -> Result<wit::Admission, t::Error> {
        let claim = admission_claim_in(claim).map_err(error)?;
        let handle = Handle::resume(claim, released).map_err(error)?;
        Ok(wit::Admission::new(AdmissionResource { handle: RefCell::new(handle) }))
    }

    fn claim(&self) -> t::AdmissionClaim {
        admission_claim(self.handle.borrow().claim.clone())
    }

    fn content_sha256(&self) -> alloc::string::String {
        self.handle.borrow().content_sha256.clone()
    }

    fn released(&self) -> bool {
        self.handle.borrow().released
    }

    fn update(&self, phase: t::AdmissionPhase, helper: Option<t::Owner>) -> Result<(), t::Error> {
        self.with(|h| admission::update(h, admission_phase_in(phase), helper.map(owner_in), &mut ImportedStore, &mut ImportedEntropy))
    }

    fn begin_helper_launch(&self) -> Result<(), t::Error> {
        self.with(|h| admission::begin_helper_launch(h, &mut ImportedStore, &mut ImportedEntropy))
    }

    fn bind_helper(&self, pid: i64) -> Result<(), t::Error> {
        self.with(|h| admission::bind_helper(h, pid, &mut ImportedStore, &mut ImportedProcesses, &mut ImportedEntropy))
    }

    fn settle_helper(&self) -> Result<(), t::Error> {
        self.with(|h| admission::settle_helper(h, &mut ImportedStore, &mut ImportedEntropy))
    }

    fn mark_cleanup_unsafe(&self) -> Result<(), t::Error> {
        self.with(|h| admission::mark_cleanup_unsafe(h, &mut ImportedStore, &mut ImportedEntropy))
    }

    fn release(&self) -> Result<(), t::Error> {
        self.with(|h| admission::release(h, &mut ImportedStore))
    }
}
