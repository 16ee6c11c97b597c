//! The portable artifact as shipped (`host/component/proclease-portable.wasm`, world
//! `proclease-portable` of `wit/sys.wit`: the component with the portable store inside), run
//! over the same native implementation of the system-call contract as the portable store
//! ([`crate::portable::SysHost`]): what a Python or Node host will load, and all it will have to
//! provide besides (`entropy`; `clock` the portable store imports too).
//!
//! [`PortableArtifact`] calls the component's `directory-leases` exports, so a test can take,
//! release and recover leases through it on the state home and workspace the native host uses.

use std::path::Path;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use ::proclease::wasmtime;
use proclease::Runtime;
use wasmtime::component::{Component, HasSelf, Linker, ResourceAny};

use crate::portable::SysHost;

/// The shipped artifact compiled to native code by `tests/build.rs` with the runtime's engine
/// configuration (the runtime has no compiler).
pub const PRECOMPILED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/proclease-portable.cwasm"));

mod generated {
    ::proclease::wasmtime::component::bindgen!({
        path: "../wit",
        world: "proclease-portable",
        wasmtime_crate: ::proclease::wasmtime,
        imports: { default: trappable },
        // The system-call contract and the identity facts as the portable store's host
        // implements them.
        with: {
            "proclease:lease/sys-fs": crate::portable::generated::proclease::lease::sys_fs,
            "proclease:lease/sys-kernel": crate::portable::generated::proclease::lease::sys_kernel,
            "proclease:lease/process-identity": crate::portable::generated::proclease::lease::process_identity,
            "proclease:lease/types": crate::portable::generated::proclease::lease::types,
            "proclease:lease/clock": crate::portable::generated::proclease::lease::clock,
        },
    });
}

use generated::exports::proclease::lease::directory_leases as dl;
use generated::proclease::lease::entropy;

impl entropy::Host for SysHost {
    fn random_bytes(&mut self, len: u32) -> wasmtime::Result<Vec<u8>> {
        let mut bytes = Vec::with_capacity(len as usize);
        while bytes.len() < len as usize {
            bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        }
        bytes.truncate(len as usize);
        Ok(bytes)
    }
}

/// The engine of a default [`Runtime`], and the artifact loaded into it, once per process.
fn loaded() -> &'static (Runtime, Component) {
    static LOADED: OnceLock<(Runtime, Component)> = OnceLock::new();
    LOADED.get_or_init(|| crate::portable::load(PRECOMPILED))
}

/// What a recovery through the artifact did: (recovered, active) counts of its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Leases whose owner was provably gone, removed (their directory by identity, then the
    /// claim).
    pub recovered: u32,
    /// Leases kept because their owner (or a process it started) is alive.
    pub active: u32,
}

/// A held directory lease, taken through the artifact.
pub struct ArtifactLease(ResourceAny);

/// One instance of the portable artifact on a state home and workspace roots.
pub struct PortableArtifact {
    store: wasmtime::Store<SysHost>,
    instance: generated::ProcleasePortable,
    /// The state home's path, for `lease-new-directory`.
    home: String,
}

/// A refusal or failure of the artifact, as its message (the words a user reads).
pub type Refused = String;

fn message(error: crate::portable::generated::proclease::lease::types::Error) -> Refused {
    use crate::portable::generated::proclease::lease::types::Error;
    match error {
        Error::Lease(refusal) => refusal.message,
        Error::Storage(failure) | Error::System(failure) => failure.message,
    }
}

fn now_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_millis() as f64)
}

impl PortableArtifact {
    /// The artifact on the state home `home` (a directory the caller validated, as the native
    /// `StateHome` does), granted the workspace `roots`.
    pub fn open(home: &Path, roots: &[&Path]) -> PortableArtifact {
        let (runtime, component) = loaded();
        let mut store = crate::portable::store_of(runtime, SysHost::new(home, roots));
        let mut linker = Linker::new(runtime.engine());
        generated::ProcleasePortable::add_to_linker::<SysHost, HasSelf<SysHost>>(&mut linker, |host| host).expect("the imports link");
        let instance = generated::ProcleasePortable::instantiate(&mut store, component, &linker).expect("the portable artifact instantiates");
        PortableArtifact { store, instance, home: home.to_str().expect("a UTF-8 state home").to_string() }
    }

    /// The names the artifact imports and exports, as the component model names them.
    pub fn world() -> (Vec<String>, Vec<String>) {
        crate::portable::world_of(loaded())
    }

    /// `lease-new-directory`, as `run` leases: creates `path` (0700, with its missing ancestors)
    /// or takes it empty, and leases it (`raw-working`) to this process, recoverable once its
    /// owner is gone; refused (the artifact's message) when another lease claims it.
    pub fn lease_new_directory(&mut self, path: &Path) -> Result<ArtifactLease, Refused> {
        let now = now_ms();
        let request = dl::LeaseRequest {
            role: crate::portable::generated::proclease::lease::types::LeaseRole::RawWorking,
            path: path.to_str().expect("a UTF-8 path").to_string(),
            output_root: None,
            recover_after_ms: now,
            now_ms: Some(now),
        };
        let guest = self.instance.proclease_lease_directory_leases();
        match guest.call_lease_new_directory(&mut self.store, &request, &self.home).expect("the artifact does not trap") {
            Ok(lease) => Ok(ArtifactLease(lease)),
            Err(dl::NewDirectoryError::Refused(refused)) => Err(refused.message),
            Err(dl::NewDirectoryError::Failed(error)) => Err(message(error)),
        }
    }

    /// The lease's `release`: removes its claim, never the directory.
    pub fn release(&mut self, lease: ArtifactLease) -> Result<(), Refused> {
        let guest = self.instance.proclease_lease_directory_leases();
        let released = guest.directory_lease().call_release(&mut self.store, lease.0).expect("the artifact does not trap").map_err(message);
        lease.0.resource_drop(&mut self.store).expect("the lease handle drops");
        released
    }

    /// Whether a lease other than this process's claims `path`, and what the artifact makes of
    /// it (`active`, `recoverable`, …), as the native `conflict` check sees it.
    pub fn conflict(&mut self, path: &Path) -> Result<Option<String>, Refused> {
        let guest = self.instance.proclease_lease_directory_leases();
        let path = path.to_str().expect("a UTF-8 path");
        let conflict = guest.call_conflict(&mut self.store, path, None, None).expect("the artifact does not trap").map_err(message)?;
        Ok(conflict.map(|c| {
            match c.kind {
                dl::ConflictKind::Active => "active",
                dl::ConflictKind::Recoverable => "recoverable",
                dl::ConflictKind::Replaced => "replaced",
                dl::ConflictKind::Undecided => "undecided",
            }
            .to_string()
        }))
    }

    /// `recover`: recovers every lease whose owner is provably gone.
    pub fn recover(&mut self) -> Result<Recovered, Refused> {
        let guest = self.instance.proclease_lease_directory_leases();
        let report = guest.call_recover(&mut self.store, None).expect("the artifact does not trap").map_err(message)?;
        Ok(Recovered { recovered: report.recovered, active: report.active })
    }
}
