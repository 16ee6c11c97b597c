//! The two ways the runner reaches the lease logic: [`Native`] (proclease-core linked in) and
//! [`ComponentBackend`] (the embedded component through the wasmtime host). Both return the same
//! core types, so one piece of code turns results into the vectors' JSON shapes.

use proclease::records::InputMode;
use proclease::{Admission, ContainmentController, DirectoryLease as HostLease, Instance, Runtime};
use proclease_core::admission::{self, Handle};
use proclease_core::directory_leases::{self, Report, Request};
use proclease_core::dispositions::{self, Disposition, Probe};
use proclease_core::invocation_leases::{self, Controller, Entry, EntryDecision, RepairDecision, RepairReport};
use proclease_core::liveness::{Liveness, OwnerStatus, Spawned};
use proclease_core::records::Owner;
use proclease_core::records::directory_lease::{DirectoryLease as LeaseClaim, Phase as RawPhase};
use proclease_core::records::export_admission::Phase;

use crate::fakes::FakeWorld;
use proclease_core::proc_stat::ProcStat;
use proclease_core::records::invocation_lease::Listed;
use proclease_core::records::{Parsed, directory_lease::DirectoryLease, export_admission::ExportAdmission, invocation_lease::InvocationLease, portable_identity::PortableIdentity};
use proclease_core::{Error, canonical_json, digest, proc_stat, records};

/// A failure of the backend itself (not of the logic under test): the component trapped or
/// could not be instantiated.
pub type Infra<T> = Result<T, String>;

/// §6B.4 invocation owner status: `(combined, reported, probes)`.
pub type InvocationStatus = (OwnerStatus, OwnerStatus, Vec<Probe>);

/// The operations the vector suites exercise.
pub trait Backend {
    /// `native` or `component`.
    fn label(&self) -> &'static str;
    /// Canonical JSON of a JSON text (§1.1).
    fn canonicalize(&mut self, json: &str) -> Infra<Result<String, String>>;
    /// sha256 hex (§1.2).
    fn sha256(&mut self, data: &[u8]) -> Infra<String>;
    /// Identity digest (§2.1).
    fn identity_digest(&mut self, kind: &str, value: &str) -> Infra<String>;
    /// Linux boot id (§2.2).
    fn linux_boot_id(&mut self, raw: &str) -> Infra<Result<String, String>>;
    /// Darwin boot id (§2.2).
    fn darwin_boot_id(&mut self, raw: &str) -> Infra<Result<String, String>>;
    /// Process start id (§2.3).
    fn process_start_id(&mut self, boot_id: &str, raw_start: &str) -> Infra<String>;
    /// `/proc/<pid>/stat` parser (§2.3).
    fn proc_stat(&mut self, stat: &str, boot_id: &str) -> Infra<ProcStat>;
    /// Export admission parse (§6A.3).
    fn export_admission(&mut self, json: &str, mode: InputMode) -> Infra<Result<Parsed<ExportAdmission>, Error>>;
    /// Directory lease parse (§6A.3).
    fn directory_lease(&mut self, json: &str, mode: InputMode, file_name: &str) -> Infra<Result<Parsed<DirectoryLease>, Error>>;
    /// Invocation lease parse, value mode (§6B.2).
    fn invocation_lease(&mut self, json: &str) -> Infra<Result<Parsed<InvocationLease>, Error>>;
    /// Invocation lease listing of one entry (§6B.3).
    fn classify_invocation_entry(&mut self, file_name: &str, text: &str) -> Infra<Listed>;
    /// Portable identity parse (§4).
    fn portable_identity(&mut self, json: &str) -> Infra<Result<PortableIdentity, Error>>;
    /// §6A.5 disposition table, with the probes consulted.
    fn admission_disposition(&mut self, claim: &ExportAdmission, boot_id: &str, owner: OwnerStatus, helper: OwnerStatus) -> Infra<(Disposition, Vec<Probe>)>;
    /// §6B.4 invocation owner status: `(combined, reported, probes)`.
    fn invocation_owner_status(&mut self, lease: &InvocationLease, content_sha256: &str, parent: OwnerStatus, host: OwnerStatus) -> Infra<Result<InvocationStatus, Error>>;
    /// §6A.5 acquire over the fakes of `world`.
    fn admission_acquire(&mut self, world: &FakeWorld) -> Infra<Result<(), Error>>;
    /// A handle resumed on `claim` over the fakes of `world`, to take lifecycle steps.
    fn admission_session(&mut self, world: &FakeWorld, claim: &ExportAdmission, released: bool) -> Infra<Box<dyn AdmissionSession>>;
    /// §6A.6 steps 1–2 over the fakes of `world` (its clock).
    fn directory_request(&mut self, world: &FakeWorld, request: &Request) -> Infra<Result<(), Error>>;
    /// §6A.6 raw-lease disposition table, with the probes consulted.
    fn raw_lease_disposition(&mut self, claim: &LeaseClaim, now_ms: u64, child: OwnerStatus) -> Infra<(Disposition, Vec<Probe>)>;
    /// §6A.6 recovery over the fakes of `world`.
    fn directory_recover(&mut self, world: &FakeWorld, now_ms: Option<f64>) -> Infra<Result<Report, Error>>;
    /// A directory lease handle resumed on `claim` over the fakes of `world`.
    fn lease_session(&mut self, world: &FakeWorld, claim: &LeaseClaim, released: bool) -> Infra<Box<dyn LeaseSession>>;
    /// §6B.5 step c for one entry: `(decision, probes, error)`.
    fn invocation_admission_entry(&mut self, plugin_id: &str, entry: &Entry, parent: OwnerStatus, host: OwnerStatus) -> Infra<(EntryDecision, Vec<Probe>, Option<Error>)>;
    /// §6B.9 repair over the fakes of `world`.
    fn invocation_repair(&mut self, world: &FakeWorld, recover: bool) -> Infra<Result<(RepairReport, Vec<RepairDecision>), Error>>;
    /// A containment controller on `initial` over the fakes of `world`.
    fn containment_session(&mut self, world: &FakeWorld, initial: &Parsed<InvocationLease>) -> Infra<Result<Box<dyn ContainmentSession>, Error>>;
}

/// One containment step (§6B.7), or the release of the current snapshot (§6B.8).
#[derive(Debug, Clone)]
pub enum ContainmentStep {
    /// `hostStarting(host)`.
    HostStarting(Owner),
    /// `hostStarted(host)`.
    HostStarted(Owner),
    /// `cleanupComplete()`.
    CleanupComplete,
    /// `cleanupUnsafe()`.
    CleanupUnsafe,
    /// `release(current)`.
    Release,
}

/// A containment controller that takes steps and shows its current snapshot.
pub trait ContainmentSession {
    /// Takes one step.
    fn step(&mut self, step: &ContainmentStep) -> Infra<Result<(), Error>>;
    /// The controller's current snapshot.
    fn current(&mut self) -> Infra<Parsed<InvocationLease>>;
}

struct NativeContainment {
    controller: Controller,
    world: FakeWorld,
}

impl ContainmentSession for NativeContainment {
    fn step(&mut self, step: &ContainmentStep) -> Infra<Result<(), Error>> {
        let FakeWorld { store, catalog, .. } = &mut self.world;
        let c = &mut self.controller;
        Ok(match step {
            ContainmentStep::HostStarting(host) => c.host_starting(host.clone(), store, catalog),
            ContainmentStep::HostStarted(host) => c.host_started(host.clone(), store, catalog),
            ContainmentStep::CleanupComplete => c.cleanup_complete(store, catalog),
            ContainmentStep::CleanupUnsafe => c.cleanup_unsafe(store, catalog),
            ContainmentStep::Release => invocation_leases::release(&c.current, store, catalog),
        })
    }

    fn current(&mut self) -> Infra<Parsed<InvocationLease>> {
        Ok(self.controller.current.clone())
    }
}

struct ComponentContainment {
    controller: ContainmentController,
    world: FakeWorld,
}

impl ContainmentSession for ComponentContainment {
    fn step(&mut self, step: &ContainmentStep) -> Infra<Result<(), Error>> {
        let c = &mut self.controller;
        split(match step {
            ContainmentStep::HostStarting(host) => c.host_starting(host),
            ContainmentStep::HostStarted(host) => c.host_started(host),
            ContainmentStep::CleanupComplete => c.cleanup_complete(),
            ContainmentStep::CleanupUnsafe => c.cleanup_unsafe(),
            ContainmentStep::Release => {
                let runtime = Runtime::shared().map_err(|e| e.to_string())?;
                let current = c.current().map_err(|e| e.to_string())?;
                proclease::release_invocation_lease(runtime, self.world.effects(), &current)
            }
        })
    }

    fn current(&mut self) -> Infra<Parsed<InvocationLease>> {
        self.controller.current().map_err(|e| e.to_string())
    }
}

/// One step of a held directory lease (§6A.6).
#[derive(Debug, Clone)]
pub enum LeaseStep {
    /// A raw lifecycle step with the optional child pid.
    Update(RawPhase, Option<i64>),
    /// Remove the claim.
    Release,
}

/// A held directory lease that takes steps and shows its state.
pub trait LeaseSession {
    /// Takes one step.
    fn step(&mut self, step: &LeaseStep) -> Infra<Result<(), Error>>;
    /// `(claim, content sha256, released)`.
    fn state(&mut self) -> Infra<(LeaseClaim, String, bool)>;
}

struct NativeLease {
    handle: directory_leases::Handle,
    world: FakeWorld,
}

impl LeaseSession for NativeLease {
    fn step(&mut self, step: &LeaseStep) -> Infra<Result<(), Error>> {
        let FakeWorld { store, processes, .. } = &mut self.world;
        Ok(match step {
            LeaseStep::Update(phase, pid) => directory_leases::update(&mut self.handle, *phase, *pid, store, processes),
            LeaseStep::Release => directory_leases::release(&mut self.handle, store),
        })
    }

    fn state(&mut self) -> Infra<(LeaseClaim, String, bool)> {
        Ok((self.handle.claim.clone(), self.handle.content_sha256.clone(), self.handle.released))
    }
}

struct ComponentLease(HostLease);

impl LeaseSession for ComponentLease {
    fn step(&mut self, step: &LeaseStep) -> Infra<Result<(), Error>> {
        split(match step {
            LeaseStep::Update(phase, pid) => self.0.update(*phase, *pid),
            LeaseStep::Release => self.0.release(),
        })
    }

    fn state(&mut self) -> Infra<(LeaseClaim, String, bool)> {
        let infra = |e: proclease::Error| e.to_string();
        Ok((self.0.claim().map_err(infra)?, self.0.content_sha256().map_err(infra)?, self.0.released().map_err(infra)?))
    }
}

fn native_effects(world: &mut FakeWorld) -> directory_leases::Effects<'_> {
    let FakeWorld { store, processes, workspace, clock, entropy, .. } = world;
    directory_leases::Effects { store, processes, workspace, clock, entropy }
}

/// One lifecycle step of a held admission (§6A.5).
#[derive(Debug, Clone)]
pub enum AdmissionStep {
    /// The generic transition.
    Update(Phase, Option<Owner>),
    /// parent-owned → helper-launching.
    Begin,
    /// helper-launching → helper-active with the captured pid.
    Bind(i64),
    /// → parent-owned.
    Settle,
    /// → cleanup-unsafe.
    MarkCleanupUnsafe,
    /// Remove the claim.
    Release,
}

/// A held admission that takes steps and shows its state.
pub trait AdmissionSession {
    /// Takes one step.
    fn step(&mut self, step: &AdmissionStep) -> Infra<Result<(), Error>>;
    /// `(claim, content sha256, released)`.
    fn state(&mut self) -> Infra<(ExportAdmission, String, bool)>;
}

struct NativeAdmission {
    handle: Handle,
    world: FakeWorld,
}

impl AdmissionSession for NativeAdmission {
    fn step(&mut self, step: &AdmissionStep) -> Infra<Result<(), Error>> {
        let FakeWorld { store, processes, entropy, .. } = &mut self.world;
        let h = &mut self.handle;
        Ok(match step {
            AdmissionStep::Update(phase, helper) => admission::update(h, *phase, helper.clone(), store, entropy),
            AdmissionStep::Begin => admission::begin_helper_launch(h, store, entropy),
            AdmissionStep::Bind(pid) => admission::bind_helper(h, *pid, store, processes, entropy),
            AdmissionStep::Settle => admission::settle_helper(h, store, entropy),
            AdmissionStep::MarkCleanupUnsafe => admission::mark_cleanup_unsafe(h, store, entropy),
            AdmissionStep::Release => admission::release(h, store),
        })
    }

    fn state(&mut self) -> Infra<(ExportAdmission, String, bool)> {
        Ok((self.handle.claim.clone(), self.handle.content_sha256.clone(), self.handle.released))
    }
}

/// A resumed handle; the vector decides what happens to the claim, so dropping the session
/// leaves it as it is ([`Admission::leave`]).
struct ComponentAdmission(Option<Admission>);

impl Drop for ComponentAdmission {
    fn drop(&mut self) {
        if let Some(admission) = self.0.take() {
            admission.leave();
        }
    }
}

impl ComponentAdmission {
    fn handle(&mut self) -> Infra<&mut Admission> {
        self.0.as_mut().ok_or_else(|| "the admission session was already left".to_string())
    }
}

impl AdmissionSession for ComponentAdmission {
    fn step(&mut self, step: &AdmissionStep) -> Infra<Result<(), Error>> {
        let a = self.handle()?;
        split(match step {
            AdmissionStep::Update(phase, helper) => a.update(*phase, helper.as_ref()),
            AdmissionStep::Begin => a.begin_helper_launch(),
            AdmissionStep::Bind(pid) => a.bind_helper(*pid),
            AdmissionStep::Settle => a.settle_helper(),
            AdmissionStep::MarkCleanupUnsafe => a.mark_cleanup_unsafe(),
            AdmissionStep::Release => a.release(),
        })
    }

    fn state(&mut self) -> Infra<(ExportAdmission, String, bool)> {
        let infra = |e: proclease::Error| e.to_string();
        let a = self.handle()?;
        Ok((a.claim().map_err(infra)?, a.content_sha256().map_err(infra)?, a.released().map_err(infra)?))
    }
}

/// A probe answering from the given statuses (owner, then any other role) that records calls.
/// A probe answering as the reference's injected `inspect` does (bare statuses), recording the
/// calls.
fn answering(owner: OwnerStatus, other: OwnerStatus, calls: &mut Vec<Probe>) -> impl FnMut(Probe, &Owner) -> Result<Liveness, Error> + '_ {
    move |probe, _| {
        calls.push(probe);
        Ok(Liveness::reference(if probe == Probe::Owner { owner } else { other }))
    }
}

/// proclease-core linked into this process.
#[derive(Default)]
pub struct Native;

impl Backend for Native {
    fn label(&self) -> &'static str {
        "native"
    }

    fn canonicalize(&mut self, json: &str) -> Infra<Result<String, String>> {
        Ok(canonical_json::parse(json).map_err(|e| e.to_string()).and_then(|v| canonical_json::to_canonical(&v).map_err(String::from)))
    }

    fn sha256(&mut self, data: &[u8]) -> Infra<String> {
        Ok(digest::sha256_hex(data))
    }

    fn identity_digest(&mut self, kind: &str, value: &str) -> Infra<String> {
        Ok(digest::identity_digest(kind, value))
    }

    fn linux_boot_id(&mut self, raw: &str) -> Infra<Result<String, String>> {
        Ok(digest::linux_boot_id(raw).map_err(String::from))
    }

    fn darwin_boot_id(&mut self, raw: &str) -> Infra<Result<String, String>> {
        Ok(digest::darwin_boot_id(raw).map_err(String::from))
    }

    fn process_start_id(&mut self, boot_id: &str, raw_start: &str) -> Infra<String> {
        Ok(digest::process_start_id(boot_id, raw_start))
    }

    fn proc_stat(&mut self, stat: &str, boot_id: &str) -> Infra<ProcStat> {
        Ok(proc_stat::parse(stat, boot_id))
    }

    fn export_admission(&mut self, json: &str, mode: InputMode) -> Infra<Result<Parsed<ExportAdmission>, Error>> {
        Ok(match mode {
            InputMode::Value => records::export_admission::parse_json(json),
            InputMode::File => records::export_admission::parse_file(json),
        })
    }

    fn directory_lease(&mut self, json: &str, mode: InputMode, file_name: &str) -> Infra<Result<Parsed<DirectoryLease>, Error>> {
        Ok(match mode {
            InputMode::Value => records::directory_lease::parse_json(json),
            InputMode::File => records::directory_lease::parse_file(json, file_name),
        })
    }

    fn invocation_lease(&mut self, json: &str) -> Infra<Result<Parsed<InvocationLease>, Error>> {
        Ok(records::invocation_lease::parse_json(json))
    }

    fn classify_invocation_entry(&mut self, file_name: &str, text: &str) -> Infra<Listed> {
        Ok(records::invocation_lease::classify_entry(file_name, text))
    }

    fn portable_identity(&mut self, json: &str) -> Infra<Result<PortableIdentity, Error>> {
        Ok(canonical_json::parse(json)
            .map_err(|_| Error::lease(proclease_core::LeaseCode::PortableOperationIdentityIsNotValidJson))
            .and_then(|v| records::portable_identity::parse_value(&v)))
    }

    fn admission_disposition(&mut self, claim: &ExportAdmission, boot_id: &str, owner: OwnerStatus, helper: OwnerStatus) -> Infra<(Disposition, Vec<Probe>)> {
        let mut calls = Vec::new();
        let disposition = dispositions::admission(claim, boot_id, &mut answering(owner, helper, &mut calls)).map_err(|e| e.to_string())?;
        Ok((disposition, calls))
    }

    fn invocation_owner_status(
        &mut self,
        lease: &InvocationLease,
        content_sha256: &str,
        parent: OwnerStatus,
        host: OwnerStatus,
    ) -> Infra<Result<(OwnerStatus, OwnerStatus, Vec<Probe>), Error>> {
        let mut calls = Vec::new();
        let result = dispositions::invocation_owner_status(lease, content_sha256, &mut answering(parent, host, &mut calls));
        Ok(result.map(|(combined, reported)| (combined, reported, calls)))
    }

    fn admission_acquire(&mut self, world: &FakeWorld) -> Infra<Result<(), Error>> {
        let FakeWorld { mut store, mut processes, mut entropy, .. } = world.clone();
        Ok(admission::acquire(&mut store, &mut processes, &mut entropy).map(|_| ()))
    }

    fn admission_session(&mut self, world: &FakeWorld, claim: &ExportAdmission, released: bool) -> Infra<Box<dyn AdmissionSession>> {
        let handle = Handle::resume(claim.clone(), released).map_err(|e| e.to_string())?;
        Ok(Box::new(NativeAdmission { handle, world: world.clone() }))
    }

    fn directory_request(&mut self, world: &FakeWorld, request: &Request) -> Infra<Result<(), Error>> {
        let mut clock = world.clock.clone();
        Ok(directory_leases::check_request(request, &mut clock).map(|_| ()))
    }

    fn raw_lease_disposition(&mut self, claim: &LeaseClaim, now_ms: u64, child: OwnerStatus) -> Infra<(Disposition, Vec<Probe>)> {
        let mut calls = Vec::new();
        let disposition = dispositions::raw_lease(claim, Spawned::Unproven, now_ms, &mut answering(child, child, &mut calls)).map_err(|e| e.to_string())?;
        Ok((disposition, calls))
    }

    fn directory_recover(&mut self, world: &FakeWorld, now_ms: Option<f64>) -> Infra<Result<Report, Error>> {
        let mut world = world.clone();
        Ok(directory_leases::recover(now_ms, native_effects(&mut world)))
    }

    fn lease_session(&mut self, world: &FakeWorld, claim: &LeaseClaim, released: bool) -> Infra<Box<dyn LeaseSession>> {
        let handle = directory_leases::Handle::resume(claim.clone(), released);
        Ok(Box::new(NativeLease { handle, world: world.clone() }))
    }

    fn invocation_admission_entry(&mut self, plugin_id: &str, entry: &Entry, parent: OwnerStatus, host: OwnerStatus) -> Infra<(EntryDecision, Vec<Probe>, Option<Error>)> {
        let mut calls = Vec::new();
        let (decision, error) = invocation_leases::admission_entry(plugin_id, entry, &mut answering(parent, host, &mut calls)).map_err(|e| e.to_string())?;
        Ok((decision, calls, error))
    }

    fn invocation_repair(&mut self, world: &FakeWorld, recover: bool) -> Infra<Result<(RepairReport, Vec<RepairDecision>), Error>> {
        let FakeWorld { mut store, mut processes, mut catalog, .. } = world.clone();
        let mut decisions = Vec::new();
        let report = invocation_leases::repair(recover, &mut store, &mut processes, &mut catalog, &mut |_, d| decisions.push(d));
        Ok(report.map(|r| (r, decisions)))
    }

    fn containment_session(&mut self, world: &FakeWorld, initial: &Parsed<InvocationLease>) -> Infra<Result<Box<dyn ContainmentSession>, Error>> {
        Ok(Controller::new(initial).map(|controller| Box::new(NativeContainment { controller, world: world.clone() }) as Box<dyn ContainmentSession>))
    }
}

/// The embedded component, through the wasmtime host's typed API.
pub struct ComponentBackend {
    instance: Instance,
}

impl ComponentBackend {
    /// A fresh instance of the shared runtime's component.
    pub fn new() -> Infra<Self> {
        let runtime = Runtime::shared().map_err(|e| e.to_string())?;
        Ok(ComponentBackend { instance: runtime.instantiate().map_err(|e| e.to_string())? })
    }
}

/// Splits the host's error into "the component refused" (a result under test) and "the
/// component broke" (an infrastructure failure).
fn split<T>(result: Result<T, proclease::Error>) -> Infra<Result<T, Error>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(error @ (proclease::Error::Lease(_) | proclease::Error::Storage(_) | proclease::Error::System(_))) => Ok(Err(error.to_core())),
        Err(other) => Err(other.to_string()),
    }
}

impl Backend for ComponentBackend {
    fn label(&self) -> &'static str {
        "component"
    }

    fn canonicalize(&mut self, json: &str) -> Infra<Result<String, String>> {
        self.instance.records().canonicalize(json).map_err(|e| e.to_string())
    }

    fn sha256(&mut self, data: &[u8]) -> Infra<String> {
        self.instance.records().sha256(data).map_err(|e| e.to_string())
    }

    fn identity_digest(&mut self, kind: &str, value: &str) -> Infra<String> {
        self.instance.records().identity_digest(kind, value).map_err(|e| e.to_string())
    }

    fn linux_boot_id(&mut self, raw: &str) -> Infra<Result<String, String>> {
        self.instance.records().linux_boot_id(raw).map_err(|e| e.to_string())
    }

    fn darwin_boot_id(&mut self, raw: &str) -> Infra<Result<String, String>> {
        self.instance.records().darwin_boot_id(raw).map_err(|e| e.to_string())
    }

    fn process_start_id(&mut self, boot_id: &str, raw_start: &str) -> Infra<String> {
        self.instance.records().process_start_id(boot_id, raw_start).map_err(|e| e.to_string())
    }

    fn proc_stat(&mut self, stat: &str, boot_id: &str) -> Infra<ProcStat> {
        self.instance.records().parse_proc_stat(stat, boot_id).map_err(|e| e.to_string())
    }

    fn export_admission(&mut self, json: &str, mode: InputMode) -> Infra<Result<Parsed<ExportAdmission>, Error>> {
        split(self.instance.records().parse_export_admission(json, mode))
    }

    fn directory_lease(&mut self, json: &str, mode: InputMode, file_name: &str) -> Infra<Result<Parsed<DirectoryLease>, Error>> {
        split(self.instance.records().parse_directory_lease(json, mode, file_name))
    }

    fn invocation_lease(&mut self, json: &str) -> Infra<Result<Parsed<InvocationLease>, Error>> {
        split(self.instance.records().parse_invocation_lease(json))
    }

    fn classify_invocation_entry(&mut self, file_name: &str, text: &str) -> Infra<Listed> {
        self.instance.records().classify_invocation_entry(file_name, text).map_err(|e| e.to_string())
    }

    fn portable_identity(&mut self, json: &str) -> Infra<Result<PortableIdentity, Error>> {
        split(self.instance.records().parse_portable_identity(json))
    }

    fn admission_disposition(&mut self, claim: &ExportAdmission, boot_id: &str, owner: OwnerStatus, helper: OwnerStatus) -> Infra<(Disposition, Vec<Probe>)> {
        self.instance.dispositions().admission(claim, boot_id, owner, helper).map_err(|e| e.to_string())
    }

    fn invocation_owner_status(
        &mut self,
        lease: &InvocationLease,
        content_sha256: &str,
        parent: OwnerStatus,
        host: OwnerStatus,
    ) -> Infra<Result<(OwnerStatus, OwnerStatus, Vec<Probe>), Error>> {
        split(self.instance.dispositions().invocation_owner_status(lease, content_sha256, parent, host))
    }

    fn admission_acquire(&mut self, world: &FakeWorld) -> Infra<Result<(), Error>> {
        let runtime = Runtime::shared().map_err(|e| e.to_string())?;
        // The vectors' acquire keeps the claim it wrote: the handle is left, not dropped.
        split(Admission::acquire(runtime, world.effects()).map(Admission::leave))
    }

    fn admission_session(&mut self, world: &FakeWorld, claim: &ExportAdmission, released: bool) -> Infra<Box<dyn AdmissionSession>> {
        let runtime = Runtime::shared().map_err(|e| e.to_string())?;
        let admission = Admission::resume(runtime, world.effects(), claim, released).map_err(|e| e.to_string())?;
        Ok(Box::new(ComponentAdmission(Some(admission))))
    }

    fn directory_request(&mut self, world: &FakeWorld, request: &Request) -> Infra<Result<(), Error>> {
        let runtime = Runtime::shared().map_err(|e| e.to_string())?;
        split(HostLease::check_request(runtime, world.effects(), request))
    }

    fn raw_lease_disposition(&mut self, claim: &LeaseClaim, now_ms: u64, child: OwnerStatus) -> Infra<(Disposition, Vec<Probe>)> {
        self.instance.dispositions().raw_lease(claim, now_ms, child).map_err(|e| e.to_string())
    }

    fn directory_recover(&mut self, world: &FakeWorld, now_ms: Option<f64>) -> Infra<Result<Report, Error>> {
        let runtime = Runtime::shared().map_err(|e| e.to_string())?;
        split(proclease::recover_directory_leases(runtime, world.effects(), now_ms))
    }

    fn lease_session(&mut self, world: &FakeWorld, claim: &LeaseClaim, released: bool) -> Infra<Box<dyn LeaseSession>> {
        let runtime = Runtime::shared().map_err(|e| e.to_string())?;
        let lease = HostLease::resume(runtime, world.effects(), claim, released).map_err(|e| e.to_string())?;
        Ok(Box::new(ComponentLease(lease)))
    }

    fn invocation_admission_entry(&mut self, plugin_id: &str, entry: &Entry, parent: OwnerStatus, host: OwnerStatus) -> Infra<(EntryDecision, Vec<Probe>, Option<Error>)> {
        self.instance.invocation_admission_entry(plugin_id, entry, parent, host).map_err(|e| e.to_string())
    }

    fn invocation_repair(&mut self, world: &FakeWorld, recover: bool) -> Infra<Result<(RepairReport, Vec<RepairDecision>), Error>> {
        let runtime = Runtime::shared().map_err(|e| e.to_string())?;
        split(proclease::repair_invocation_leases(runtime, world.effects(), recover).map(|(r, d)| (r, d.into_iter().map(|(_, d)| d).collect())))
    }

    fn containment_session(&mut self, world: &FakeWorld, initial: &Parsed<InvocationLease>) -> Infra<Result<Box<dyn ContainmentSession>, Error>> {
        let runtime = Runtime::shared().map_err(|e| e.to_string())?;
        Ok(split(ContainmentController::create(runtime, world.effects(), initial))?
            .map(|controller| Box::new(ComponentContainment { controller, world: world.clone() }) as Box<dyn ContainmentSession>))
    }
}
