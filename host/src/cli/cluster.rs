//! `proclease cluster history` and `proclease cluster forget-boot BOOT_ID`: the presence history
//! an etcd prefix keeps (`docs/cluster.md`, "Presence history"), listed by boot, and deleted for
//! a boot that ended.

use std::process::ExitCode;

use clap::Subcommand;
#[cfg(feature = "cluster")]
use serde_json::json;

use super::{Failure, Global};

/// What `cluster` does.
#[derive(Subcommand)]
pub enum ClusterCommand {
    /// List every boot id with presence history on the prefix: how many of its processes ever
    /// registered, and how many hold a presence now. Changes nothing.
    History {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Delete the presence history of BOOT_ID, a boot that ended (its machine rebooted or is
    /// gone). Refused for this machine's own boot and for a boot with a live presence.
    ForgetBoot {
        /// The boot id, as `proclease cluster history` lists it.
        boot_id: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// The help's examples.
pub const HELP: &str = "Examples:\n  proclease --store etcd://10.0.0.1:2379/fleet cluster history\n  \
    proclease --store etcd://10.0.0.1:2379/fleet cluster forget-boot 3f1c…\n\n\
    Every process that registers a presence leaves one small history key (P/presence-history/BOOT/PID-START), \
    which keeps a presence that lapsed from coming back. Keys of a boot that ended guard nothing: its processes \
    can never run again. Delete them per boot once the machine rebooted or is gone.\n\n\
    Exit status: 0 done; 1 refused or etcd unreachable; 2 usage.";

/// Runs `cluster`, on the etcd of `--store` (or `PROCLEASE_STORE`).
pub fn run(global: &Global, command: ClusterCommand) -> Result<ExitCode, Failure> {
    let Some(address) = global.store.clone().filter(|address| !address.is_empty() && address != "file") else {
        return Err(Failure::new("`proclease cluster` works on an etcd store: give --store etcd://HOST:PORT/PREFIX (or PROCLEASE_STORE)"));
    };
    enabled::run(global, &address, command)
}

#[cfg(feature = "cluster")]
mod enabled {
    use super::*;
    use proclease::cluster::presence::{forget_boot, presence_history};
    use proclease::state_store::etcd::{EtcdStore, EtcdTlsFiles};

    pub fn run(global: &Global, address: &str, command: ClusterCommand) -> Result<ExitCode, Failure> {
        let tls = EtcdTlsFiles::from_parts(global.etcd_ca.clone(), global.etcd_cert.clone(), global.etcd_key.clone()).map_err(Failure::new)?;
        let store = EtcdStore::connect_configured(address, tls.as_ref()).map_err(|e| Failure::new(e.to_string()))?;
        let this_boot = proclease::process_identity::ProcessIdentity::new().current_boot_id().map_err(|e| Failure::new(e.to_string()))?;
        match command {
            ClusterCommand::History { json } => {
                let boots = presence_history(&store).map_err(|e| Failure::new(e.to_string()))?;
                if json {
                    let rows: Vec<_> = boots
                        .iter()
                        .map(|boot| json!({"bootId": boot.boot_id, "registered": boot.registered, "live": boot.live, "thisMachine": boot.boot_id == this_boot}))
                        .collect();
                    super::super::print_json(&json!({"schemaVersion": super::super::JSON_SCHEMA_VERSION, "store": store.address(), "boots": rows}));
                } else {
                    outln!("cluster: {}", store.address());
                    outln!("{:<64}  {:>10}  {:>5}", "BOOT ID", "REGISTERED", "LIVE");
                    for boot in &boots {
                        let mark = if boot.boot_id == this_boot { "  (this machine)" } else { "" };
                        outln!("{:<64}  {:>10}  {:>5}{mark}", boot.boot_id, boot.registered, boot.live);
                    }
                    if boots.is_empty() {
                        outln!("(no presence history)");
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            ClusterCommand::ForgetBoot { boot_id, json } => {
                let deleted = forget_boot(&store, &boot_id, &this_boot).map_err(|e| Failure::new(e.to_string()))?;
                if json {
                    super::super::print_json(&json!({"schemaVersion": super::super::JSON_SCHEMA_VERSION, "store": store.address(), "bootId": boot_id, "deleted": deleted}));
                } else {
                    outln!("deleted {deleted} presence-history key(s) of boot {boot_id} from {}", store.address());
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

#[cfg(not(feature = "cluster"))]
mod enabled {
    use super::*;

    pub fn run(_: &Global, address: &str, _: ClusterCommand) -> Result<ExitCode, Failure> {
        Err(Failure::new(proclease::cluster::ClusterError::NotBuilt { address: address.into() }.to_string()))
    }
}
