//! `proclease fence check TOKEN`: whether an exclusive run's fencing token is still its
//! holder's (`docs/cluster.md`, "Fencing tokens"): on etcd in cluster mode, on the state home's
//! counter otherwise.

use std::process::ExitCode;

use clap::Subcommand;
use proclease::Fence;
use serde_json::json;

use super::{Failure, Global};

/// What `fence` does.
#[derive(Subcommand)]
pub enum FenceCommand {
    /// Exit 0 only while TOKEN's holder still holds the export admission: 1 once it was
    /// released or another holder (on any machine) acquired it, and when that cannot be told.
    Check {
        /// The token (`$PROCLEASE_FENCING_TOKEN` in an exclusive run's command).
        token: i64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// The help's examples.
pub const HELP: &str = "Examples:\n  proclease fence check \"$PROCLEASE_FENCING_TOKEN\" && upload results/\n\n\
    An exclusive run's command gets PROCLEASE_FENCING_TOKEN, which grows with every holder of the export admission \
    (on any machine in cluster mode; on this state home's counter otherwise), and PROCLEASE_FENCING_STORE, so that \
    `fence check` inside it asks the same etcd or state home (TLS and credentials come from PROCLEASE_ETCD_* variables; the command does not inherit \
    PROCLEASE_ETCD_PASSWORD: use PROCLEASE_ETCD_PASSWORD_FILE). A check just before a write narrows the window in which a holder that lost the admission (a paused \
    machine) could still write; only a resource that compares tokens itself closes it (docs/cluster.md).\n\n\
    Exit status: 0 current; 1 stale, or cannot be told (etcd unreachable, a token etcd compacted away, an \
    unreadable counter); 2 usage.";

/// Runs `fence`: asks the store the exclusive run named in `PROCLEASE_FENCING_STORE` (an etcd,
/// or `file:` and a state home), else the one of `--store` (or `PROCLEASE_STORE`), else the
/// state home. A failure prints a JSON
/// document too with `--json` (`current` false, `error`).
pub fn run(global: &Global, command: FenceCommand) -> Result<ExitCode, Failure> {
    let FenceCommand::Check { token, json } = command;
    // The run's own store first: an inherited PROCLEASE_STORE may name another prefix or
    // another state home. Then --store / PROCLEASE_STORE; then this state home.
    let address = std::env::var_os(proclease::cluster::FENCING_STORE_VARIABLE)
        .filter(|address| !address.is_empty())
        .or_else(|| global.store.clone().filter(|address| !address.is_empty()).map(Into::into))
        .unwrap_or_else(|| "file".into());
    let fence = match check(global, &address, token) {
        Ok(fence) => fence,
        Err(e) => {
            let message = format!("fencing token {token} cannot be checked, so it counts as stale: {e}");
            if json {
                super::print_json(&json!({"schemaVersion": super::JSON_SCHEMA_VERSION, "token": token, "current": false, "holderPid": null, "why": null, "error": message}));
            }
            return Err(Failure::new(message));
        }
    };
    if json {
        let doc = match &fence {
            Fence::Current { holder_pid } => {
                json!({"schemaVersion": super::JSON_SCHEMA_VERSION, "token": token, "current": true, "holderPid": holder_pid, "why": null, "error": null})
            }
            Fence::Stale(why) => json!({"schemaVersion": super::JSON_SCHEMA_VERSION, "token": token, "current": false, "holderPid": null, "why": why, "error": null}),
        };
        super::print_json(&doc);
    } else {
        match &fence {
            Fence::Current { holder_pid } => outln!("fencing token {token} is current: its holder (pid {holder_pid}) holds the export admission"),
            Fence::Stale(why) => outln!("fencing token {token} is stale: {why}"),
        }
    }
    Ok(match fence {
        Fence::Current { .. } => ExitCode::SUCCESS,
        Fence::Stale(_) => ExitCode::from(1),
    })
}

/// [`proclease::api::fencing::check_file_fence`] on the state home of `address` (`file:PATH`,
/// PATH absolute, or `file`: the one of `--state-home` and the environment), else
/// [`proclease::cluster::check_fence`] on its etcd. A check writes nothing: a path that
/// holds no fencing counter is answered "stale" before any state home is opened.
fn check(global: &Global, address: &std::ffi::OsStr, token: i64) -> Result<Fence, String> {
    use std::os::unix::ffi::OsStrExt as _;
    let prefix = proclease::api::fencing::FILE_PREFIX.as_bytes();
    let home = if let Some(path) = address.as_bytes().strip_prefix(prefix) {
        let path = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(path));
        if !path.is_absolute() {
            return Err(format!("{}: a file fencing store names its state home by an absolute path", address.to_string_lossy()));
        }
        path
    } else if address == "file" {
        proclease::state_home::StateHome::select(global.state_home.as_deref()).map_err(|e| e.to_string())?.0
    } else {
        let address = address.to_str().ok_or_else(|| format!("{}: not a store address", address.to_string_lossy()))?;
        return check_etcd(global, address, token);
    };
    use proclease::state_store::fencing::{COUNTER, ROOT};
    if !home.join(ROOT).join(COUNTER).is_file() {
        return Ok(Fence::Stale(format!("no fencing token was handed out in the state home {}", home.display())));
    }
    let host = proclease::Host::builder().store("file").state_home(home).lock_timeout(global.lock_timeout).build().map_err(|e| e.to_string())?;
    host.fence(token).map_err(|e| e.to_string())
}

/// [`proclease::cluster::check_fence`] on the etcd of `address`, with the TLS files and
/// credentials of the flags and the environment.
#[cfg(feature = "cluster")]
fn check_etcd(global: &Global, address: &str, token: i64) -> Result<Fence, String> {
    use proclease::state_store::etcd::{EtcdStore, EtcdTlsFiles};
    let tls = EtcdTlsFiles::from_parts(global.etcd_ca.clone(), global.etcd_cert.clone(), global.etcd_key.clone())?;
    let store = EtcdStore::connect_configured(address, tls.as_ref()).map_err(|e| e.to_string())?;
    let runtime = proclease::Runtime::shared().map_err(|e| e.to_string())?;
    proclease::cluster::check_fence(runtime, &store, token).map_err(|e| e.to_string())
}

#[cfg(not(feature = "cluster"))]
fn check_etcd(_: &Global, address: &str, _: i64) -> Result<Fence, String> {
    Err(proclease::cluster::ClusterError::NotBuilt { address: address.into() }.to_string())
}
