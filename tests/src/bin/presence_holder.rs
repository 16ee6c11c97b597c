//! Registers this process's presence in etcd, prints its identity (`<pid> <boot id> <start id>`)
//! and renews it until killed (`tests/tests/cluster_presence.rs`). With BOOT_ID, the identity
//! registered carries that boot id instead of this machine's: a process of another machine.
//!
//! `presence_holder etcd://HOST:PORT/PREFIX TTL_SECONDS [BOOT_ID]`

use std::sync::Arc;
use std::time::Duration;

use proclease::cluster::presence::PresenceSession;
use proclease::process_identity::ProcessIdentity;
use proclease::state_store::etcd::EtcdStore;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(url), Some(Ok(ttl))) = (args.get(1), args.get(2).map(|t| t.parse::<u64>())) else {
        eprintln!("usage: presence_holder etcd://HOST:PORT/PREFIX TTL_SECONDS [BOOT_ID]");
        return std::process::ExitCode::from(2);
    };
    let store = match EtcdStore::connect(url) {
        Ok(store) => Arc::new(store),
        Err(e) => {
            eprintln!("presence_holder: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let own = match ProcessIdentity::new().self_identity() {
        Ok(own) => match args.get(3) {
            Some(boot_id) => proclease::core::records::Owner { boot_id: boot_id.clone(), ..own },
            None => own,
        },
        Err(e) => {
            eprintln!("presence_holder: {}", e.0);
            return std::process::ExitCode::from(1);
        }
    };
    let _session = match PresenceSession::open(store, &own, Duration::from_secs(ttl)) {
        Ok(session) => session,
        Err(e) => {
            eprintln!("presence_holder: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    println!("{} {} {}", own.pid, own.boot_id, own.process_start_id);
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
