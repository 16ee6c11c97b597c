//! The two ways the runner reaches the lease logic: [`Native`] (proclease-core linked in) and
//! [`ComponentBackend`] (the embedded component through the wasmtime host). Both return the same
//! core types, so one piece of code turns results into the vectors' JSON shapes.

use proclease::records::InputMode;
use proclease::{Instance, Runtime};
use proclease_core::proc_stat::ProcStat;
use proclease_core::records::invocation_lease::Listed;
use proclease_core::records::{
    Parsed, directory_lease::DirectoryLease, export_admission::ExportAdmission, invocation_lease::InvocationLease,
    portable_identity::PortableIdentity,
};
use proclease_core::{Error, canonical_json, digest, proc_stat, records};

/// A failure of the backend itself (not of the logic under test): the component trapped or
/// could not be instantiated.
pub type Infra<T> = Result<T, String>;

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
    fn directory_lease(
        &mut self,
        json: &str,
        mode: InputMode,
        file_name: &str,
    ) -> Infra<Result<Parsed<DirectoryLease>, Error>>;
    /// Invocation lease parse, value mode (§6B.2).
    fn invocation_lease(&mut self, json: &str) -> Infra<Result<Parsed<InvocationLease>, Error>>;
    /// Invocation lease listing of one entry (§6B.3).
    fn classify_invocation_entry(&mut self, file_name: &str, text: &str) -> Infra<Listed>;
    /// Portable identity parse (§4).
    fn portable_identity(&mut self, json: &str) -> Infra<Result<PortableIdentity, Error>>;
}

/// proclease-core linked into this process.
#[derive(Default)]
pub struct Native;

impl Backend for Native {
    fn label(&self) -> &'static str {
        "native"
    }

    fn canonicalize(&mut self, json: &str) -> Infra<Result<String, String>> {
        Ok(canonical_json::parse(json)
            .map_err(|e| e.to_string())
            .and_then(|v| canonical_json::to_canonical(&v).map_err(String::from)))
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

    fn directory_lease(
        &mut self,
        json: &str,
        mode: InputMode,
        file_name: &str,
    ) -> Infra<Result<Parsed<DirectoryLease>, Error>> {
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
            .map_err(|_| Error::lease("portable operation identity is not valid JSON"))
            .and_then(|v| records::portable_identity::parse_value(&v)))
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
        Err(proclease::Error::Rule(error)) => Ok(Err(error)),
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

    fn directory_lease(
        &mut self,
        json: &str,
        mode: InputMode,
        file_name: &str,
    ) -> Infra<Result<Parsed<DirectoryLease>, Error>> {
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
}
