//! Per-suite evaluation: turns a vector into a call on a [`Backend`] and the result into the
//! JSON shape of that suite's `expect` (`shared/vectors/README.md`, "Suites").

use proclease::records::InputMode;
use proclease_core::Error;
use proclease_core::proc_stat::ProcStat;
use proclease_core::records::Parsed;
use proclease_core::records::invocation_lease::{InvalidReason, Listed};
use serde_json::{Value, json};

use super::backend::{Backend, Infra};

/// Suites this runner evaluates.
pub const HANDLED: &[&str] = &[
    "canonical-json",
    "sha256",
    "identity-digest",
    "proc-stat",
    "export-admission-parse",
    "directory-lease-parse",
    "invocation-lease-parse",
    "portable-identity-parse",
];

/// Suites of the public set whose operations have not landed yet, with the issue that adds
/// them. The runner reports them by name; it never passes them silently.
pub const PENDING: &[(&str, &str)] = &[
    ("admission-disposition", "export admission (issue 4)"),
    ("admission-transition", "export admission (issue 4)"),
    ("directory-lease-request", "directory leases (issue 5)"),
    ("raw-lease-disposition", "directory leases (issue 5)"),
    ("raw-lease-transition", "directory leases (issue 5)"),
    ("invocation-owner-status", "invocation leases (issue 6)"),
    ("repair-decision", "invocation leases (issue 6)"),
    ("admission-entry-decision", "invocation leases (issue 6)"),
    ("containment-transition", "invocation leases (issue 6)"),
];

/// The actual result of one vector, or `None` for a suite the runner does not handle.
pub fn evaluate(suite: &str, v: &Value, b: &mut dyn Backend) -> Option<Infra<Value>> {
    Some(match suite {
        "canonical-json" => canonical_json(v, b),
        "sha256" => b.sha256(text(&v["input"]).as_bytes()).map(|hex| json!({ "hex": hex })),
        "identity-digest" => identity_digest(v, b),
        "proc-stat" => b.proc_stat(text(&v["input"]), text(&v["boot_id"])).map(|s| proc_stat(&s)),
        "export-admission-parse" => export_admission(v, b),
        "directory-lease-parse" => directory_lease(v, b),
        "invocation-lease-parse" => invocation_lease(v, b),
        "portable-identity-parse" => portable_identity(v, b),
        _ => return None,
    })
}

/// Whether `actual` satisfies `expected`. A `js-date-rangeerror` vector carries the engine's
/// `RangeError` in `error` and the spec's recommended message in `alt_error`: either is
/// accepted (`error_class` describes the engine's throw and is not compared).
pub fn matches(expected: &Value, actual: &Value) -> bool {
    let mut expected = expected.clone();
    if let Some(members) = expected.as_object_mut() {
        members.remove("error_class");
        if let Some(alt) = members.remove("alt_error") {
            if actual.get("error") == Some(&alt) {
                members.insert("error".into(), alt);
            }
        }
    }
    super::json_eq(&expected, actual)
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

/// The JSON text to hand a value-mode parser: the vector's `input` re-serialised.
fn value_text(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn is_text_input(v: &Value) -> bool {
    v["input_kind"] == "text"
}

fn failure(error: &Error) -> Value {
    json!({ "ok": false, "error": error.message() })
}

fn canonical_json(v: &Value, b: &mut dyn Backend) -> Infra<Value> {
    let input = if is_text_input(v) { text(&v["input"]).to_string() } else { value_text(&v["input"]) };
    Ok(match b.canonicalize(&input)? {
        Ok(text) => json!({ "ok": true, "text": text }),
        Err(error) => json!({ "ok": false, "error": error }),
    })
}

fn identity_digest(v: &Value, b: &mut dyn Backend) -> Infra<Value> {
    let boot = |r: Result<String, String>| match r {
        Ok(boot_id) => json!({ "ok": true, "bootId": boot_id }),
        Err(error) => json!({ "ok": false, "error": error }),
    };
    Ok(match text(&v["op"]) {
        "digest" => json!({ "hex": b.identity_digest(text(&v["kind"]), text(&v["value"]))? }),
        "linux-boot" => boot(b.linux_boot_id(text(&v["raw"]))?),
        "darwin-boot" => boot(b.darwin_boot_id(text(&v["raw"]))?),
        "process-start" => json!({ "processStartId": b.process_start_id(text(&v["bootId"]), text(&v["rawStart"]))? }),
        other => json!({ "unknown op": other }),
    })
}

fn proc_stat(status: &ProcStat) -> Value {
    match status {
        ProcStat::Alive { raw_start, process_start_id } => {
            json!({ "status": "alive", "rawStart": raw_start, "processStartId": process_start_id })
        }
        ProcStat::Dead => json!({ "status": "dead" }),
        ProcStat::Unknown => json!({ "status": "unknown" }),
    }
}

fn parsed_fields<T>(parsed: &Parsed<T>, record_key: &str, record: Value) -> Value {
    json!({ "ok": true, record_key: record, "canonical": parsed.canonical, "sha256": parsed.sha256 })
}

fn export_admission(v: &Value, b: &mut dyn Backend) -> Infra<Value> {
    let result = if is_text_input(v) {
        b.export_admission(text(&v["input"]), InputMode::File)?
    } else {
        b.export_admission(&value_text(&v["input"]), InputMode::Value)?
    };
    Ok(match result {
        Ok(parsed) => {
            let mut out = parsed_fields(&parsed, "claim", parsed.record.to_value());
            out["variant"] = json!(parsed.record.schema.name());
            out
        }
        Err(error) => failure(&error),
    })
}

fn directory_lease(v: &Value, b: &mut dyn Backend) -> Infra<Value> {
    let result = if is_text_input(v) {
        b.directory_lease(text(&v["input"]), InputMode::File, text(&v["file_name"]))?
    } else {
        b.directory_lease(&value_text(&v["input"]), InputMode::Value, "")?
    };
    Ok(match result {
        Ok(parsed) => parsed_fields(&parsed, "claim", parsed.record.to_value()),
        Err(error) => failure(&error),
    })
}

fn invocation_lease(v: &Value, b: &mut dyn Backend) -> Infra<Value> {
    if !is_text_input(v) {
        return Ok(match b.invocation_lease(&value_text(&v["input"]))? {
            Ok(parsed) => parsed_fields(&parsed, "lease", parsed.record.to_value()),
            Err(error) => failure(&error),
        });
    }
    Ok(match b.classify_invocation_entry(text(&v["file_name"]), text(&v["input"]))? {
        Listed::Ignored => json!({ "listed": "ignored" }),
        Listed::Invalid { lease_id, reason } => {
            let mut out = json!({ "listed": "invalid", "leaseId": lease_id, "reason": reason.name() });
            if let InvalidReason::ParseError(error) = reason {
                out["error"] = json!(error.message());
            }
            out
        }
        Listed::Valid(parsed) => {
            let mut out = parsed_fields(&parsed, "lease", parsed.record.to_value());
            let members = out.as_object_mut().expect("json! object");
            members.remove("ok");
            members.insert("listed".into(), json!("valid"));
            members.insert("leaseId".into(), json!(parsed.record.lease_id));
            out
        }
    })
}

fn portable_identity(v: &Value, b: &mut dyn Backend) -> Infra<Value> {
    Ok(match b.portable_identity(&value_text(&v["input"]))? {
        Ok(identity) => json!({ "ok": true, "identity": identity.to_value() }),
        Err(error) => failure(&error),
    })
}
