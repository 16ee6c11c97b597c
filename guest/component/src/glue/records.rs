//! The `records` export: pure record functions over `proclease-core`.

use alloc::string::String;
use alloc::vec::Vec;

use proclease_core::records as core_records;
use proclease_core::{canonical_json, digest, proc_stat};

use super::Component;
use super::bindings::exports::proclease::lease::records as wit;
use super::bindings::proclease::lease::types as t;
use super::convert::invocation_parsed;
use crate::convert::{
    admission_claim_to_wit as admission_claim, directory_lease_claim_to_wit as directory_lease_claim, error_to_wit as error, form_to_wit as form,
    portable_identity_to_wit as portable_identity,
};

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
            proc_stat::ProcStat::Alive { raw_start, process_start_id } => wit::ProcStat::Alive(wit::AliveProcess { raw_start, process_start_id }),
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

    fn parse_directory_lease(json: String, mode: t::InputMode, file_name: String) -> Result<(t::DirectoryLeaseClaim, wit::CanonicalForm), t::Error> {
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
        let value = canonical_json::parse(&json).map_err(|_| error(proclease_core::Error::lease(proclease_core::LeaseCode::PortableOperationIdentityIsNotValidJson)))?;
        core_records::portable_identity::parse_value(&value).map(portable_identity).map_err(error)
    }

    fn inspect_file(collection: String, file_name: String, text: String) -> wit::FileVerdict {
        use core_records::detect::{self, RecordKind as K};
        let v = detect::inspect_file_in(&collection, &file_name, &text);
        wit::FileVerdict {
            kind: v.kind.map(|k| match k {
                K::ExportAdmission => wit::RecordKind::ExportAdmission,
                K::DirectoryLease => wit::RecordKind::DirectoryLease,
                K::InvocationLease => wit::RecordKind::InvocationLease,
                K::PortableIdentity => wit::RecordKind::PortableIdentity,
                K::StateHomeMarker => wit::RecordKind::StateHomeMarker,
            }),
            schema: v.schema,
            sha256: v.sha256,
            canonical: v.canonical,
            error: v.error.map(error),
            hint: v.hint,
        }
    }
}
