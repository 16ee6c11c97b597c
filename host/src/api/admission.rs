//! The typed API over the component's `export-admission` export (spec §6A.5): a held export
//! admission, with its helper lifecycle.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let home = tempfile::tempdir()?;
//! let host = proclease::Host::builder().state_home(home.path()).build()?;
//! let mut admission = host.acquire_admission()?;
//! // The helper is recorded; a failed start leaves the admission as it was.
//! let mut helper = admission.launch_helper(host.process_identity(), &mut std::process::Command::new("true"))?;
//! helper.wait()?;
//! admission.settle_helper()?;
//! admission.release()?;
//! # Ok(()) }
//! ```
//!
//! **Dropping a handle** (an early `?`) releases an admission that is `parent-owned` (no
//! helper recorded): the next acquire, in this process or another, succeeds. An admission
//! whose helper may run (`helper-launching`, `helper-active`) is left as it is, with a warning:
//! while this process lives it stays active; once this process is gone, the next acquire
//! judges the helper — started by [`Admission::launch_helper`], it has a witness, so its death
//! is proven and the claim taken over. A `cleanup-unsafe` claim is left too (only a reboot
//! clears it, as in the reference). A handle dropped while its thread panics does the same,
//! unless the panic came out of a component call (a host import that panicked): then the
//! component is not entered again and the claim is left as a crash would leave it. What a drop
//! cannot do is said to the program's global `tracing` subscriber, or on standard error when it
//! installed none.

use std::process::{Child, Command};

use proclease_core::records::Owner;
use proclease_core::records::export_admission::{ExportAdmission, Phase};
use wasmtime::component::ResourceAny;

use crate::api::supervisor::Launch;
use crate::effects::Effects;
use crate::process_identity::{NOT_LIVE, ProcessIdentity};
use crate::runtime::export_call;
use crate::runtime::{Instance, Runtime};
use crate::{Error, convert};

/// A held export admission, living in its own component instance. Every write rotates the
/// claim's revision and is a compare-and-swap on the claim this handle last wrote; a failed
/// write leaves the handle unchanged. Dropped unreleased, it releases a `parent-owned` claim
/// (module docs).
#[must_use = "the admission is held until released (dropping the handle releases it only while no helper is recorded)"]
pub struct Admission {
    instance: Instance,
    resource: ResourceAny,
    /// [`Admission::leave`] was called: the drop leaves the claim.
    left: bool,
    /// The bound of each call's waits for other processes, the drop's release included
    /// ([`HostBuilder::lock_timeout`](crate::HostBuilder::lock_timeout) for a handle of a
    /// [`Host`](crate::Host)).
    bound: std::time::Duration,
}

macro_rules! call {
    ($self:ident, $method:ident $(, $arg:expr)*) => {
        {
            let _operation = crate::lock_wait::Operation::begin($self.bound);
            export_call!($self.instance, [proclease_lease_export_admission, admission] $method($self.resource $(, $arg)*))
        }
    };
}

impl Admission {
    /// Bounds each later call's waits for other processes (kernel locks of the state home,
    /// other programs' mutation claims), the release on drop included, by `bound`; default
    /// [`lock_wait::DEFAULT_BOUND`](crate::lock_wait::DEFAULT_BOUND) (10 s). A handle of a
    /// [`Host`](crate::Host) has the host's
    /// [`lock_timeout`](crate::HostBuilder::lock_timeout). A call made inside an operation
    /// already bounded on this thread ([`lock_wait::Operation`](crate::lock_wait::Operation))
    /// keeps that operation's bound.
    pub fn with_lock_timeout(mut self, bound: std::time::Duration) -> Self {
        self.bound = bound;
        self
    }

    /// Acquires the admission (§6A.5) in a fresh instance served by `effects`.
    ///
    /// Errors: the reference's messages (`… another export is active`, `… prior export owner
    /// cannot be inspected safely`, …) as [`Error::Lease`].
    pub fn acquire(runtime: &Runtime, effects: Effects) -> Result<Admission, Error> {
        let mut instance = runtime.instantiate_with(effects)?;
        let resource = instance.call(|exports, store| exports.proclease_lease_export_admission().call_acquire(store))?;
        Ok(Admission { instance, resource, left: false, bound: crate::lock_wait::DEFAULT_BOUND })
    }

    /// Resumes a handle on `claim` (a current v2 claim) as if this process had written it.
    pub fn resume(runtime: &Runtime, effects: Effects, claim: &ExportAdmission, released: bool) -> Result<Admission, Error> {
        let mut instance = runtime.instantiate_with(effects)?;
        let claim = convert::admission_claim_to_wit(claim.clone());
        let resource = instance.call(|exports, store| exports.proclease_lease_export_admission().admission().call_resume(store, &claim, released))?;
        Ok(Admission { instance, resource, left: false, bound: crate::lock_wait::DEFAULT_BOUND })
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

    /// Starts `command` as the admission's helper (§6A.5: parent-owned → helper-launching →
    /// helper-active, the helper's identity recorded), under a spawn witness of `identity`, so
    /// that its death is proven after a crash. `identity` must be the process identity behind
    /// this admission's effects ([`crate::Host::process_identity`] for
    /// [`crate::Host::acquire_admission`]): the witness is linked to the helper through it.
    ///
    /// - It cannot be started: the admission goes back to parent-owned, and the error says why.
    /// - It started but cannot be recorded: it is killed and the admission goes back to
    ///   parent-owned.
    /// - It exited before it could be recorded (a short helper, or one that daemonized): the
    ///   child is returned and the admission stays `helper-launching` — what it started keeps
    ///   the spawn witness — so settle it as usual ([`Admission::settle_helper`]).
    ///
    /// A settle that itself fails (the claim changed underneath) leaves the admission
    /// `helper-launching`, with a warning.
    ///
    /// Errors: [`Error::Start`] (not found, not executable), [`Error::Identity`] (no witness),
    /// and the admission's own ([`Admission::begin_helper_launch`], [`Admission::bind_helper`]).
    pub fn launch_helper(&mut self, identity: &ProcessIdentity, command: &mut Command) -> Result<Child, Error> {
        self.begin_helper_launch()?;
        let started = Launch::prepare(identity).and_then(|launch| launch.spawn(command));
        let mut child = match started {
            Ok(child) => child,
            Err(e) => {
                // Nothing was started: back to parent-owned.
                self.settle_or_warn();
                return Err(e.for_command(command));
            }
        };
        if let Err(e) = self.bind_helper(i64::from(child.id())) {
            if matches!(&e, Error::System(failure) if failure.message == NOT_LIVE) {
                // It already exited: nothing of it to record, and what it started (if anything)
                // holds the spawn witness of a helper-launching admission.
                return Ok(child);
            }
            // An unrecorded helper must not outlive the admission's say.
            let _ = child.kill();
            let _ = child.wait();
            self.settle_or_warn();
            return Err(e);
        }
        Ok(child)
    }

    /// Gives up this handle and leaves the claim exactly as it is, as if this process had
    /// crashed (no release on drop): for a process that hands the claim on, or a test of what
    /// a crash leaves.
    pub fn leave(mut self) {
        self.left = true;
    }

    fn settle_or_warn(&mut self) {
        if let Err(e) = self.settle_helper() {
            tracing::warn!(error = %e, "the export admission could not go back to parent-owned after its helper failed to start");
        }
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
    /// Releases a `parent-owned` claim this handle holds; leaves one whose helper may run, with
    /// a warning (module docs).
    fn drop(&mut self) {
        // A call abandoned mid-way (a panic out of a host import) leaves the component
        // unusable: the claim is left as a crash would leave it. A panic in the embedder's code
        // does not: a `parent-owned` claim is released, or a process that lives on (the panic
        // caught) would block every exporter.
        if !self.left && !self.instance.usable() {
            super::drop_warning(format_args!(
                "an export admission handle was dropped after a component call was abandoned mid-way: its claim is left (held while this process lives)"
            ));
        }
        let held = !self.left && self.instance.usable() && matches!(self.released(), Ok(false));
        if held {
            match self.claim().map(|claim| claim.phase) {
                Ok(Some(Phase::ParentOwned) | None) => {
                    if let Err(e) = self.release() {
                        super::drop_warning(format_args!(
                            "a dropped export admission handle could not release its claim ({e}): the next acquire judges it once this process is gone"
                        ));
                    }
                }
                Ok(Some(Phase::CleanupUnsafe)) => {
                    super::drop_warning(format_args!("an export admission handle was dropped in cleanup-unsafe: the claim stays until a reboot (§6A.5)"))
                }
                Ok(Some(phase)) => super::drop_warning(format_args!(
                    "an export admission handle was dropped in phase {phase:?} while its helper may run: the claim stays (active while this process lives; judged by the helper's witness once it is gone)"
                )),
                Err(e) => super::drop_warning(format_args!("a dropped export admission handle could not read its claim ({e}): it is left as it is")),
            }
        }
        self.instance.drop_resource(self.resource);
    }
}
