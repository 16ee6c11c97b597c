//! The typed API over the component's `records` export (WIT interface `records`): canonical
//! JSON, digests, the `/proc` stat parser and record validation, returning `proclease-core`
//! types. Each call runs inside the component.

use proclease_core::proc_stat::ProcStat;
use proclease_core::records::detect::{FileVerdict, RecordKind};
use proclease_core::records::invocation_lease::{InvalidReason, Listed};
use proclease_core::records::{Parsed, directory_lease::DirectoryLease, export_admission::ExportAdmission, invocation_lease::InvocationLease, portable_identity::PortableIdentity};

use crate::bindings::exports::proclease::lease::records as wit;
use crate::bindings::proclease::lease::types as t;
use crate::runtime::Instance;
use crate::runtime::export_call;
use crate::{Error, convert};

/// How a parse function treats its JSON text (WIT `input-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputMode {
    /// Structural validation of the decoded value only.
    Value,
    /// A reader of the state home: validation, then the text must be exactly canonical
    /// JSON + `\n` (spec §1.5).
    File,
}

/// The `records` export of one [`Instance`].
pub struct Records<'a> {
    pub(crate) instance: &'a mut Instance,
}

macro_rules! call {
    ($self:ident, $method:ident $(, $arg:expr)*) => {
        export_call!(*$self.instance, [proclease_lease_records] $method($($arg),*))
    };
}

fn mode(mode: InputMode) -> t::InputMode {
    match mode {
        InputMode::Value => t::InputMode::Value,
        InputMode::File => t::InputMode::File,
    }
}

impl Records<'_> {
    /// Canonical JSON (no trailing newline) of a JSON text (§1.1). The inner error is the JSON
    /// parser's description.
    pub fn canonicalize(&mut self, json: &str) -> Result<Result<String, String>, Error> {
        call!(self, call_canonicalize, json)
    }

    /// Lowercase hex sha256 (§1.2).
    pub fn sha256(&mut self, data: &[u8]) -> Result<String, Error> {
        call!(self, call_sha256, data)
    }

    /// sha256(kind ‖ 0 ‖ value), lowercase hex (§2.1).
    pub fn identity_digest(&mut self, kind: &str, value: &str) -> Result<String, Error> {
        call!(self, call_identity_digest, kind, value)
    }

    /// Boot id from `/proc/sys/kernel/random/boot_id` content (§2.2); inner error
    /// `system boot identity is malformed`.
    pub fn linux_boot_id(&mut self, raw: &str) -> Result<Result<String, String>, Error> {
        call!(self, call_linux_boot_id, raw)
    }

    /// Boot id from Darwin's `kern.bootsessionuuid` (§2.2).
    pub fn darwin_boot_id(&mut self, raw: &str) -> Result<Result<String, String>, Error> {
        call!(self, call_darwin_boot_id, raw)
    }

    /// Process start id (§2.3).
    pub fn process_start_id(&mut self, boot_id: &str, raw_start: &str) -> Result<String, Error> {
        call!(self, call_process_start_id, boot_id, raw_start)
    }

    /// What a `/proc/<pid>/stat` text says (§2.3).
    pub fn parse_proc_stat(&mut self, stat: &str, boot_id: &str) -> Result<ProcStat, Error> {
        Ok(match call!(self, call_parse_proc_stat, stat, boot_id)? {
            wit::ProcStat::Alive(a) => ProcStat::Alive { raw_start: a.raw_start, process_start_id: a.process_start_id },
            wit::ProcStat::Dead => ProcStat::Dead,
            wit::ProcStat::Unknown => ProcStat::Unknown,
        })
    }

    /// `parseExportAdmission` (§6A.3), plus the canonical check in file mode.
    pub fn parse_export_admission(&mut self, json: &str, input: InputMode) -> Result<Parsed<ExportAdmission>, Error> {
        let (claim, form) = call!(self, call_parse_export_admission, json, mode(input))?.map_err(convert::error_from_wit)?;
        Ok(convert::parsed_from_wit(convert::admission_claim_from_wit(claim), form))
    }

    /// `parseClaim` (§6A.3), plus in file mode the file name and canonical checks.
    pub fn parse_directory_lease(&mut self, json: &str, input: InputMode, file_name: &str) -> Result<Parsed<DirectoryLease>, Error> {
        let (claim, form) = call!(self, call_parse_directory_lease, json, mode(input), file_name)?.map_err(convert::error_from_wit)?;
        Ok(convert::parsed_from_wit(convert::directory_lease_claim_from_wit(claim), form))
    }

    /// `parsePortableProviderPluginInvocationLease` (§6B.2), value mode.
    pub fn parse_invocation_lease(&mut self, json: &str) -> Result<Parsed<InvocationLease>, Error> {
        let (lease, form) = call!(self, call_parse_invocation_lease, json)?.map_err(convert::error_from_wit)?;
        Ok(convert::parsed_from_wit(convert::invocation_lease_from_wit(lease), form))
    }

    /// How one entry of the invocation-lease collection lists (§6B.3).
    pub fn classify_invocation_entry(&mut self, file_name: &str, text: &str) -> Result<Listed, Error> {
        Ok(match call!(self, call_classify_invocation_entry, file_name, text)? {
            wit::ListedEntry::Ignored => Listed::Ignored,
            wit::ListedEntry::Invalid((lease_id, reason)) => Listed::Invalid {
                lease_id,
                reason: match reason {
                    wit::InvalidReason::InvalidJson => InvalidReason::InvalidJson,
                    wit::InvalidReason::ParseError(e) => InvalidReason::ParseError(convert::error_from_wit(e)),
                    wit::InvalidReason::LeaseIdMismatch => InvalidReason::LeaseIdMismatch,
                    wit::InvalidReason::NotCanonical => InvalidReason::NotCanonical,
                },
            },
            wit::ListedEntry::Valid((lease, form)) => Listed::Valid(convert::parsed_from_wit(convert::invocation_lease_from_wit(lease), form)),
        })
    }

    /// `parsePortableOperationIdentityV1` (§4), value mode.
    pub fn parse_portable_identity(&mut self, json: &str) -> Result<PortableIdentity, Error> {
        let identity = call!(self, call_parse_portable_identity, json)?.map_err(convert::error_from_wit)?;
        Ok(convert::portable_identity_from_wit(identity))
    }

    /// Tells the kind of a record file and checks it as the reference's reader would; the kind
    /// comes from the content, else the name.
    pub fn inspect_file(&mut self, file_name: &str, text: &str) -> Result<FileVerdict, Error> {
        self.inspect_file_in("", file_name, text)
    }

    /// [`Records::inspect_file`] for a file of a known collection: `collection` is the name of
    /// the directory it lives in (`beeper-message-like-me-directory-leases` makes it a
    /// directory lease whatever its content says, as the reference's reader of that collection
    /// takes it).
    pub fn inspect_file_in(&mut self, collection: &str, file_name: &str, text: &str) -> Result<FileVerdict, Error> {
        let v = call!(self, call_inspect_file, collection, file_name, text)?;
        Ok(FileVerdict {
            kind: v.kind.map(|k| match k {
                wit::RecordKind::ExportAdmission => RecordKind::ExportAdmission,
                wit::RecordKind::DirectoryLease => RecordKind::DirectoryLease,
                wit::RecordKind::InvocationLease => RecordKind::InvocationLease,
                wit::RecordKind::PortableIdentity => RecordKind::PortableIdentity,
                wit::RecordKind::StateHomeMarker => RecordKind::StateHomeMarker,
            }),
            schema: v.schema,
            sha256: v.sha256,
            canonical: v.canonical,
            error: v.error.map(convert::error_from_wit),
            hint: v.hint,
        })
    }
}
