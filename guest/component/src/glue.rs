//! Export implementations and the no_std runtime pieces (allocator, panic handler).

extern crate alloc;

use alloc::string::String;
use alloc::vec::Vec;

use proclease_core::records::{self as core_records, Parsed};
use proclease_core::{Error, canonical_json, digest, proc_stat};

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "proclease",
        generate_all,
    });
}

use bindings::exports::proclease::lease::records as wit;
use bindings::proclease::lease::types as t;

#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

/// The canonical ABI's allocation entry point. On wasm32-wasip2 wit-bindgen leaves it to libc,
/// which a `no_std` guest does not link, so the component exports its own over the global
/// allocator (the same contract as wit-bindgen's p1 implementation).
///
/// # Safety
/// Called only by the component model runtime with a pointer/length it got from this function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cabi_realloc(old_ptr: *mut u8, old_len: usize, align: usize, new_len: usize) -> *mut u8 {
    use alloc::alloc::{Layout, alloc, realloc};
    let ptr = unsafe {
        if old_len == 0 {
            if new_len == 0 {
                return align as *mut u8;
            }
            alloc(Layout::from_size_align_unchecked(new_len, align))
        } else {
            realloc(old_ptr, Layout::from_size_align_unchecked(old_len, align), new_len)
        }
    };
    if ptr.is_null() {
        core::arch::wasm32::unreachable();
    }
    ptr
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

struct Component;

bindings::export!(Component with_types_in bindings);

fn error(e: Error) -> t::Error {
    match e {
        Error::Lease(m) => t::Error::Lease(m),
        Error::Storage(m) => t::Error::Storage(m),
        Error::System(m) => t::Error::System(m),
        _ => t::Error::System(String::from(e.message())),
    }
}

fn owner(o: core_records::Owner) -> t::Owner {
    t::Owner { pid: o.pid, boot_id: o.boot_id, process_start_id: o.process_start_id }
}

fn directory_identity(d: core_records::DirectoryIdentity) -> t::DirectoryIdentity {
    t::DirectoryIdentity { device: d.device, inode: d.inode, birthtime_ns: d.birthtime_ns }
}

fn form<T>(p: &Parsed<T>) -> wit::CanonicalForm {
    wit::CanonicalForm { canonical: p.canonical.clone(), sha256: p.sha256.clone() }
}

fn admission_claim(c: core_records::export_admission::ExportAdmission) -> t::AdmissionClaim {
    use core_records::export_admission::{Phase, Schema};
    t::AdmissionClaim {
        schema: match c.schema {
            Schema::V1 => t::AdmissionSchema::V1,
            Schema::V2PreRevision => t::AdmissionSchema::V2PreRevision,
            Schema::V2 => t::AdmissionSchema::V2,
        },
        id: c.id,
        owner: owner(c.owner),
        helper_owner: c.helper_owner.map(owner),
        phase: c.phase.map(|p| match p {
            Phase::ParentOwned => t::AdmissionPhase::ParentOwned,
            Phase::HelperLaunching => t::AdmissionPhase::HelperLaunching,
            Phase::HelperActive => t::AdmissionPhase::HelperActive,
            Phase::CleanupUnsafe => t::AdmissionPhase::CleanupUnsafe,
        }),
        revision: c.revision,
    }
}

fn directory_lease_claim(c: core_records::directory_lease::DirectoryLease) -> t::DirectoryLeaseClaim {
    use core_records::directory_lease::{Phase, Role};
    t::DirectoryLeaseClaim {
        id: c.id,
        role: match c.role {
            Role::RawWorking => t::LeaseRole::RawWorking,
            Role::BundleStage => t::LeaseRole::BundleStage,
        },
        path: c.path,
        parent_path: c.parent_path,
        parent_identity: directory_identity(c.parent_identity),
        directory_identity: directory_identity(c.directory_identity),
        output_root: c.output_root,
        owner: owner(c.owner),
        child_owner: c.child_owner.map(owner),
        phase: match c.phase {
            Phase::Preparing => t::RawPhase::Preparing,
            Phase::Launching => t::RawPhase::Launching,
            Phase::Running => t::RawPhase::Running,
            Phase::Settled => t::RawPhase::Settled,
        },
        created_at_ms: c.created_at_ms,
        recover_after_ms: c.recover_after_ms,
    }
}

fn portable_identity(i: core_records::portable_identity::PortableIdentity) -> t::PortableIdentity {
    use core_records::portable_identity::Transport;
    t::PortableIdentity {
        plugin_id: i.plugin_id,
        plugin_version: i.plugin_version,
        host_api_version: i.host_api_version,
        bundle_sha256: i.bundle_sha256,
        manifest_sha256: i.manifest_sha256,
        descriptor_sha256: i.descriptor_sha256,
        adapter_id: i.adapter_id,
        transport: match i.transport {
            Transport::ProviderApi => t::Transport::ProviderApi,
            Transport::WebSessionApi => t::Transport::WebSessionApi,
            Transport::LinkedDevice => t::Transport::LinkedDevice,
        },
        surface_id: i.surface_id,
        operation: i.operation,
        contract_version: i.contract_version,
    }
}

fn invocation_lease(l: core_records::invocation_lease::InvocationLease) -> t::InvocationLease {
    use core_records::invocation_lease::ContainmentStatus as S;
    t::InvocationLease {
        schema_version: l.schema_version,
        lease_id: l.lease_id,
        run_id: l.run_id,
        identity: portable_identity(l.identity),
        owner: t::LeaseOwner { process: owner(l.owner.process), token: l.owner.token },
        acquired_at: l.acquired_at,
        containment: l.containment.map(|c| t::Containment {
            status: match c.status {
                S::ParentOwned => t::ContainmentStatus::ParentOwned,
                S::HostStarting => t::ContainmentStatus::HostStarting,
                S::HostActive => t::ContainmentStatus::HostActive,
                S::CleanupComplete => t::ContainmentStatus::CleanupComplete,
                S::CleanupUnsafe => t::ContainmentStatus::CleanupUnsafe,
            },
            host: c.host.map(owner),
        }),
    }
}

fn invocation_parsed(p: Parsed<core_records::invocation_lease::InvocationLease>) -> (t::InvocationLease, wit::CanonicalForm) {
    let f = form(&p);
    (invocation_lease(p.record), f)
}

impl wit::Guest for Component {
    fn canonicalize(json: String) -> Result<String, String> {
        let value = canonical_json::parse(&json).map_err(|e| alloc::format!("{e}"))?;
        canonical_json::to_canonical(&value).map_err(String::from)
    }

    fn sha256(data: Vec<u8>) -> String {
        digest::sha256_hex(&data)
    }

    fn identity_digest(kind: String, value: String) -> String {
        digest::identity_digest(&kind, &value)
    }

    fn linux_boot_id(raw: String) -> Result<String, String> {
        digest::linux_boot_id(&raw).map_err(String::from)
    }

    fn darwin_boot_id(raw: String) -> Result<String, String> {
        digest::darwin_boot_id(&raw).map_err(String::from)
    }

    fn process_start_id(boot_id: String, raw_start: String) -> String {
        digest::process_start_id(&boot_id, &raw_start)
    }

    fn parse_proc_stat(stat: String, boot_id: String) -> wit::ProcStat {
        match proc_stat::parse(&stat, &boot_id) {
            proc_stat::ProcStat::Alive { raw_start, process_start_id } => {
                wit::ProcStat::Alive(wit::AliveProcess { raw_start, process_start_id })
            }
            proc_stat::ProcStat::Dead => wit::ProcStat::Dead,
            proc_stat::ProcStat::Unknown => wit::ProcStat::Unknown,
        }
    }

    fn parse_export_admission(json: String, mode: t::InputMode) -> Result<(t::AdmissionClaim, wit::CanonicalForm), t::Error> {
        use core_records::export_admission as ea;
        let parsed = match mode {
            t::InputMode::Value => ea::parse_json(&json),
            t::InputMode::File => ea::parse_file(&json),
        }
        .map_err(error)?;
        let f = form(&parsed);
        Ok((admission_claim(parsed.record), f))
    }

    fn parse_directory_lease(
        json: String,
        mode: t::InputMode,
        file_name: String,
    ) -> Result<(t::DirectoryLeaseClaim, wit::CanonicalForm), t::Error> {
        use core_records::directory_lease as dl;
        let parsed = match mode {
            t::InputMode::Value => dl::parse_json(&json),
            t::InputMode::File => dl::parse_file(&json, &file_name),
        }
        .map_err(error)?;
        let f = form(&parsed);
        Ok((directory_lease_claim(parsed.record), f))
    }

    fn parse_invocation_lease(json: String) -> Result<(t::InvocationLease, wit::CanonicalForm), t::Error> {
        core_records::invocation_lease::parse_json(&json).map(invocation_parsed).map_err(error)
    }

    fn classify_invocation_entry(file_name: String, text: String) -> wit::ListedEntry {
        use core_records::invocation_lease::{InvalidReason as R, Listed};
        match core_records::invocation_lease::classify_entry(&file_name, &text) {
            Listed::Ignored => wit::ListedEntry::Ignored,
            Listed::Invalid { lease_id, reason } => {
                let reason = match reason {
                    R::Unreadable | R::InvalidJson => wit::InvalidReason::InvalidJson,
                    R::ParseError(e) => wit::InvalidReason::ParseError(error(e)),
                    R::LeaseIdMismatch => wit::InvalidReason::LeaseIdMismatch,
                    R::NotCanonical => wit::InvalidReason::NotCanonical,
                };
                wit::ListedEntry::Invalid((lease_id, reason))
            }
            Listed::Valid(parsed) => wit::ListedEntry::Valid(invocation_parsed(parsed)),
        }
    }

    fn parse_portable_identity(json: String) -> Result<t::PortableIdentity, t::Error> {
        let value = canonical_json::parse(&json)
            .map_err(|_| t::Error::Lease(String::from("portable operation identity is not valid JSON")))?;
        core_records::portable_identity::parse_value(&value).map(portable_identity).map_err(error)
    }

    fn inspect_file(file_name: String, text: String) -> wit::FileVerdict {
        use core_records::detect::{self, RecordKind as K};
        let v = detect::inspect_file(&file_name, &text);
        wit::FileVerdict {
            kind: v.kind.map(|k| match k {
                K::ExportAdmission => wit::RecordKind::ExportAdmission,
                K::DirectoryLease => wit::RecordKind::DirectoryLease,
                K::InvocationLease => wit::RecordKind::InvocationLease,
                K::PortableIdentity => wit::RecordKind::PortableIdentity,
            }),
            schema: v.schema,
            sha256: v.sha256,
            canonical: v.canonical,
            error: v.error.map(error),
        }
    }
}
