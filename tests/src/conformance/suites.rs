//! Per-suite evaluation: turns a vector into a call on a [`Backend`] and the result into the
//! JSON shape of that suite's `expect` (`shared/vectors/README.md`, "Suites").

use proclease::records::InputMode;
use proclease_core::Error;
use proclease_core::proc_stat::ProcStat;
use proclease_core::records::Parsed;
use proclease_core::records::invocation_lease::InvalidReason;
use serde_json::{Value, json};

use proclease_core::admission::CLAIM_PATH;
use proclease_core::dispositions::Probe;
use proclease_core::liveness::OwnerStatus;
use proclease_core::records::export_admission::{self, Phase};
use proclease_core::records::{Owner, invocation_lease};

use proclease_core::directory_leases::Request;
use proclease_core::records::directory_lease::{self, Phase as RawPhase, Role};

use proclease_core::invocation_leases::{Entry, lease_path};
use proclease_core::records::invocation_lease::{InvocationLease, Listed};

use super::backend::{AdmissionStep, Backend, ContainmentStep, Infra, LeaseStep};
use crate::fakes::FakeWorld;

/// The marker a handler returns for a vector it cannot express in the typed API (only allowed
/// for vectors tagged `dynamic-type`; the runner counts them as skipped, never as passed).
pub const SKIPPED: &str = "skipped: dynamic-type";

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
    "admission-disposition",
    "admission-transition",
    "invocation-owner-status",
    "directory-lease-request",
    "raw-lease-disposition",
    "raw-lease-transition",
    "admission-entry-decision",
    "repair-decision",
    "containment-transition",
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
        "admission-disposition" => admission_disposition(v, b),
        "admission-transition" => admission_transition(v, b),
        "invocation-owner-status" => invocation_owner_status(v, b),
        "directory-lease-request" => directory_lease_request(v, b),
        "raw-lease-disposition" => raw_lease_disposition(v, b),
        "raw-lease-transition" => raw_lease_transition(v, b),
        "admission-entry-decision" => admission_entry_decision(v, b),
        "repair-decision" => repair_decision(v, b),
        "containment-transition" => containment_transition(v, b),
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
        if let Some(alt) = members.remove("alt_error")
            && actual.get("error") == Some(&alt)
        {
            members.insert("error".into(), alt);
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
    let result = if is_text_input(v) { b.export_admission(text(&v["input"]), InputMode::File)? } else { b.export_admission(&value_text(&v["input"]), InputMode::Value)? };
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

fn status(value: &Value) -> Option<OwnerStatus> {
    value.as_str().and_then(OwnerStatus::from_name)
}

fn probe_names(probes: &[Probe]) -> Vec<&'static str> {
    probes.iter().map(|p| p.name()).collect()
}

/// An owner from the vector's JSON (`{pid, bootId, processStartId}`).
fn owner(value: &Value) -> Option<Owner> {
    Some(Owner { pid: value["pid"].as_u64()?, boot_id: value["bootId"].as_str()?.into(), process_start_id: value["processStartId"].as_str()?.into() })
}

fn malformed(what: &str) -> Infra<Value> {
    Err(format!("malformed vector: {what}"))
}

fn admission_disposition(v: &Value, b: &mut dyn Backend) -> Infra<Value> {
    let Ok(claim) = export_admission::parse_value(&v["claim"]) else { return malformed("claim") };
    let (Some(owner_status), Some(helper_status)) = (status(&v["owner_status"]), status(&v["helper_status"])) else {
        return malformed("statuses");
    };
    let boot_id = text(&v["current_boot_id"]);
    let (disposition, calls) = b.admission_disposition(&claim, boot_id, owner_status, helper_status)?;

    // Acquire with this claim on disk and the same probe answers: the first probe is the
    // owner's, any later one the helper's.
    let mut probes = 0;
    let oracle = Box::new(move |_: &Owner| {
        probes += 1;
        if probes == 1 { owner_status } else { helper_status }
    });
    let world = FakeWorld::with_processes(crate::fakes::ScriptedProcesses::with_oracle(boot_id, oracle));
    world.store.put(CLAIM_PATH, &claim.clone().parsed().canonical);
    let acquire = match b.admission_acquire(&world)? {
        Ok(()) => json!({ "ok": true }),
        Err(error) => failure(&error),
    };
    Ok(json!({ "disposition": disposition.name(), "calls": probe_names(&calls), "acquire": acquire }))
}

/// One step of an admission-transition vector, or `None` when it cannot be expressed.
fn admission_step(step: &Value) -> Option<AdmissionStep> {
    Some(match step["op"].as_str()? {
        "update" => {
            let phase = Phase::from_name(step["phase"].as_str()?)?;
            let helper = if step["helper"].is_null() { None } else { Some(owner(&step["helper"])?) };
            AdmissionStep::Update(phase, helper)
        }
        "begin" => AdmissionStep::Begin,
        "bind" => AdmissionStep::Bind(step["child_pid"].as_i64()?),
        "settle" => AdmissionStep::Settle,
        "mark-cleanup-unsafe" => AdmissionStep::MarkCleanupUnsafe,
        "release" => AdmissionStep::Release,
        _ => return None,
    })
}

fn admission_transition(v: &Value, b: &mut dyn Backend) -> Infra<Value> {
    let Ok(claim) = export_admission::parse_value(&v["claim"]) else { return malformed("claim") };
    let steps = v["steps"].as_array().cloned().unwrap_or_default();
    let Some(parsed_steps) = steps.iter().map(admission_step).collect::<Option<Vec<_>>>() else {
        return Ok(json!(SKIPPED));
    };
    let world = FakeWorld::new(&"a".repeat(64), OwnerStatus::Unknown);
    world.store.put(CLAIM_PATH, &claim.clone().parsed().canonical);
    let mut session = b.admission_session(&world, &claim, v["released"].as_bool().unwrap_or(false))?;
    let mut results = Vec::new();
    for (raw, step) in steps.iter().zip(&parsed_steps) {
        world.processes.script().capture = match raw.get("child_capture") {
            None => None,
            Some(Value::Null) => Some(Err("exact live process identity is unavailable".into())),
            Some(captured) => Some(Ok(owner(captured).ok_or("malformed child_capture")?)),
        };
        world.store.state().fail_next_cas = raw["cas_ok"] == false;
        let (before, before_sha, _) = session.state()?;
        let outcome = session.step(step)?;
        world.store.state().fail_next_cas = false;
        results.push(match outcome {
            Err(error) => failure(&error),
            Ok(()) => {
                let (after, after_sha, released) = session.state()?;
                let rotated = after.revision != before.revision;
                let rotation_ok = !rotated || after.revision.as_deref().is_some_and(proclease_core::js::is_uuid_v4);
                json!({
                    "ok": true,
                    "changed": after_sha != before_sha,
                    "released": released,
                    "phase": after.phase.map(Phase::name),
                    "helperOwner": after.helper_owner.as_ref().map_or(Value::Null, Owner::to_value),
                    "revision_rotated": if rotation_ok { json!(rotated) } else { json!("not a lowercase UUID v4") },
                })
            }
        });
    }
    Ok(json!({ "results": results }))
}

fn invocation_owner_status(v: &Value, b: &mut dyn Backend) -> Infra<Value> {
    let Ok(lease) = invocation_lease::parse_value(&v["lease"]) else { return malformed("lease") };
    let (Some(parent), Some(host)) = (status(&v["parent_status"]), status(&v["host_status"])) else {
        return malformed("statuses");
    };
    let sha = match v.get("content_sha256").and_then(Value::as_str) {
        Some(sha) => sha.to_string(),
        None => lease.clone().parsed().sha256,
    };
    Ok(match b.invocation_owner_status(&lease, &sha, parent, host)? {
        Ok((combined, reported, calls)) => {
            json!({ "ok": true, "combined": combined.name(), "reported": reported.name(), "calls": probe_names(&calls) })
        }
        Err(error) => json!({ "ok": false, "error": error.message(), "calls": [] }),
    })
}

/// A JavaScript-number argument: the typed API takes an `f64`; a JSON value that is not a
/// number is passed as NaN, which no time rule accepts (as the reference rejects a non-number).
fn js_number(value: &Value) -> f64 {
    value.as_f64().unwrap_or(f64::NAN)
}

fn directory_lease_request(v: &Value, b: &mut dyn Backend) -> Infra<Value> {
    let (Some(role), Some(path)) = (v["role"].as_str().and_then(Role::from_name), v["path"].as_str()) else {
        return Ok(json!(SKIPPED));
    };
    let output_root = match v.get("output_root") {
        None => None,
        Some(Value::String(out)) => Some(out.clone()),
        Some(_) => return Ok(json!(SKIPPED)),
    };
    let request = Request { role, path: path.into(), output_root, recover_after_ms: js_number(&v["recover_after_ms"]), now_ms: Some(js_number(&v["now_ms"])) };
    let world = FakeWorld::new(&"a".repeat(64), OwnerStatus::Unknown);
    Ok(match b.directory_request(&world, &request)? {
        Ok(()) => json!({ "ok": true }),
        Err(error) => failure(&error),
    })
}

fn raw_lease_disposition(v: &Value, b: &mut dyn Backend) -> Infra<Value> {
    match text(&v["op"]) {
        "disposition" => {
            let Ok(claim) = directory_lease::parse_value(&v["claim"]) else { return malformed("claim") };
            let (Some(now_ms), Some(child)) = (v["now_ms"].as_u64(), status(&v["child_status"])) else {
                return malformed("now_ms or child_status");
            };
            let (disposition, calls) = b.raw_lease_disposition(&claim, now_ms, child)?;
            Ok(json!({ "disposition": disposition.name(), "calls": probe_names(&calls) }))
        }
        "recovery-time" => {
            let world = FakeWorld::new(&"a".repeat(64), OwnerStatus::Unknown);
            Ok(match b.directory_recover(&world, Some(js_number(&v["now_ms"])))? {
                Ok(report) => json!({ "ok": true, "report": {
                    "recovered": report.recovered, "published": report.published,
                    "active": report.active, "indeterminate": report.indeterminate,
                }}),
                Err(error) => failure(&error),
            })
        }
        other => malformed(&format!("op {other}")),
    }
}

fn lease_step(step: &Value) -> Option<LeaseStep> {
    Some(match step["op"].as_str()? {
        "update" => {
            let phase = RawPhase::from_name(step["phase"].as_str()?)?;
            let pid = match step.get("child_pid") {
                None => None,
                Some(pid) => Some(pid.as_i64()?),
            };
            LeaseStep::Update(phase, pid)
        }
        "release" => LeaseStep::Release,
        _ => return None,
    })
}

fn raw_lease_transition(v: &Value, b: &mut dyn Backend) -> Infra<Value> {
    let Ok(claim) = directory_lease::parse_value(&v["claim"]) else { return malformed("claim") };
    let steps = v["steps"].as_array().cloned().unwrap_or_default();
    let Some(parsed_steps) = steps.iter().map(lease_step).collect::<Option<Vec<_>>>() else {
        return Ok(json!(SKIPPED));
    };
    let world = FakeWorld::new(&"a".repeat(64), OwnerStatus::Unknown);
    world.store.put(&proclease_core::directory_leases::claim_path(&claim.id), &claim.clone().parsed().canonical);
    let mut session = b.lease_session(&world, &claim, v["released"].as_bool().unwrap_or(false))?;
    let mut results = Vec::new();
    for (raw, step) in steps.iter().zip(&parsed_steps) {
        world.processes.script().capture = match raw.get("child_capture") {
            None => None,
            Some(Value::Null) => Some(Err("exact live process identity is unavailable".into())),
            Some(captured) => Some(Ok(owner(captured).ok_or("malformed child_capture")?)),
        };
        world.store.state().fail_next_cas = raw["cas_ok"] == false;
        let (_, before_sha, _) = session.state()?;
        let outcome = session.step(step)?;
        world.store.state().fail_next_cas = false;
        results.push(match outcome {
            Err(error) => failure(&error),
            Ok(()) => {
                let (after, after_sha, released) = session.state()?;
                json!({
                    "ok": true,
                    "changed": after_sha != before_sha,
                    "released": released,
                    "phase": after.phase.name(),
                    "childOwner": after.child_owner.as_ref().map_or(Value::Null, Owner::to_value),
                    "sha256": after_sha,
                })
            }
        });
    }
    Ok(json!({ "results": results }))
}

/// The single entry of an invocation-lease vector: `lease` (valid; its canonical file is the
/// entry) or `lease_id` + `entry_text` (listing as invalid). Also its file name and text.
fn invocation_entry(v: &Value) -> Option<(Entry, String, String)> {
    if let Some(lease) = v.get("lease") {
        let parsed = invocation_lease::parse_value(lease).ok()?.parsed();
        let name = format!("{}.json", parsed.record.lease_id);
        let text = parsed.canonical.clone();
        return Some((Entry::Valid(parsed), name, text));
    }
    let lease_id = v["lease_id"].as_str()?;
    let name = format!("{lease_id}.json");
    let text = v["entry_text"].as_str()?.to_string();
    let entry = match invocation_lease::classify_entry(&name, &text) {
        Listed::Valid(parsed) => Entry::Valid(parsed),
        _ => Entry::Invalid(lease_id.into()),
    };
    Some((entry, name, text))
}

fn admission_entry_decision(v: &Value, b: &mut dyn Backend) -> Infra<Value> {
    let Some((entry, _, _)) = invocation_entry(v) else { return malformed("entry") };
    let (Some(parent), Some(host)) = (status(&v["parent_status"]), status(&v["host_status"])) else { return malformed("statuses") };
    let (decision, calls, error) = b.invocation_admission_entry(text(&v["plugin_id"]), &entry, parent, host)?;
    let mut out = json!({ "decision": decision.name(), "calls": probe_names(&calls) });
    if let Some(error) = error {
        out["error"] = json!(error.message());
    }
    Ok(out)
}

fn repair_decision(v: &Value, b: &mut dyn Backend) -> Infra<Value> {
    let Some((entry, name, text_on_disk)) = invocation_entry(v) else { return malformed("entry") };
    let (Some(parent), Some(host)) = (status(&v["parent_status"]), status(&v["host_status"])) else { return malformed("statuses") };
    let owner = match &entry {
        Entry::Valid(s) => Some(s.record.owner.process.clone()),
        Entry::Invalid(_) => None,
    };
    let recorded_owner = owner.clone();
    let oracle = Box::new(move |o: &Owner| if Some(o) == recorded_owner.as_ref() { parent } else { host });
    let world = FakeWorld::with_processes(crate::fakes::ScriptedProcesses::with_oracle(&"0".repeat(64), oracle));
    world.processes.script().boot_id = match v["current_boot_id"].as_str() {
        Some(boot) => Ok(boot.into()),
        None => Err("system boot identity is unavailable".into()),
    };
    world.store.put(&format!("provider-plugin-state/.invocations/{name}"), &text_on_disk);
    world.store.state().fail_next_cas = v["removal_succeeds"] == false;
    let outcome = b.invocation_repair(&world, v["recover"].as_bool().unwrap_or(false))?;
    let script = world.processes.script();
    let calls: Vec<&str> = script.probed.iter().map(|o| if Some(o) == owner.as_ref() { "owner" } else { "host" }).collect();
    Ok(match outcome {
        Ok((report, decisions)) => json!({
            "decision": decisions.first().map_or("none", |d| d.name()),
            "calls": calls,
            "boot_lookups": script.boot_lookups,
            "report": {
                "inspected": report.inspected, "removed": report.removed, "active": report.active,
                "unknown": report.unknown, "invalid": report.invalid,
            },
        }),
        Err(error) => failure(&error),
    })
}

/// A host argument the typed API can express: exactly `pid`, `bootId`, `processStartId` with a
/// non-negative integer pid and string digests (their values are validated by the component).
fn host_argument(value: &Value) -> Option<Owner> {
    let members = value.as_object()?;
    (members.len() == 3).then_some(())?;
    owner(value)
}

fn containment_step(step: &Value) -> Option<ContainmentStep> {
    Some(match step["method"].as_str()? {
        "hostStarting" => ContainmentStep::HostStarting(host_argument(&step["host"])?),
        "hostStarted" => ContainmentStep::HostStarted(host_argument(&step["host"])?),
        "cleanupComplete" => ContainmentStep::CleanupComplete,
        "cleanupUnsafe" => ContainmentStep::CleanupUnsafe,
        "release" => ContainmentStep::Release,
        _ => return None,
    })
}

fn containment_json(lease: &InvocationLease) -> Value {
    lease.containment.as_ref().map_or(Value::Null, |c| c.to_value())
}

fn containment_transition(v: &Value, b: &mut dyn Backend) -> Infra<Value> {
    let Ok(lease) = invocation_lease::parse_value(&v["lease"]) else { return malformed("lease") };
    let steps = v["steps"].as_array().cloned().unwrap_or_default();
    let Some(parsed_steps) = steps.iter().map(containment_step).collect::<Option<Vec<_>>>() else {
        return Ok(json!(SKIPPED));
    };
    let mut initial = lease.clone().parsed();
    let world = FakeWorld::new(&"a".repeat(64), OwnerStatus::Unknown);
    world.store.put(&lease_path(&lease.lease_id), &initial.canonical);
    if let Some(sha) = v.get("content_sha256").and_then(Value::as_str) {
        initial.sha256 = sha.into();
    }
    let mut session = match b.containment_session(&world, &initial)? {
        Ok(session) => session,
        Err(error) => return Ok(json!({ "constructed": failure(&error), "results": [] })),
    };
    let mut released = false;
    let mut results = Vec::new();
    for (raw, step) in steps.iter().zip(&parsed_steps) {
        world.store.state().fail_next_cas = raw["cas_ok"] == false;
        let before = session.current()?.sha256;
        let outcome = session.step(step)?;
        world.store.state().fail_next_cas = false;
        results.push(match outcome {
            Err(error) => failure(&error),
            Ok(()) => {
                released |= matches!(step, ContainmentStep::Release);
                let current = session.current()?;
                json!({
                    "ok": true,
                    "changed": current.sha256 != before,
                    "released": released,
                    "containment": containment_json(&current.record),
                    "sha256": current.sha256,
                })
            }
        });
    }
    Ok(json!({ "constructed": { "ok": true }, "results": results }))
}
