//! A child process for the state-store tests: races compare-and-swap writers against each other
//! and churns records so the parent can SIGKILL it at random instants.
//!
//! Usage:
//!   store_worker race-replace <state-home> <rounds> <id>   print `won <round>` for each win
//!   store_worker race-create <state-home> <rounds> <id>    print `created <round>`
//!   store_worker history <state-home> <count> <id> <seed>  count random operations on one record
//!       (`proclease_tests::linearizability::random_client`), each printed as a line of JSON
//!   store_worker churn <state-home>                        print `ready`, then write, replace, remove forever
//!   store_worker hold-catalog-lock <state-home>            take the catalog lock, print `locked`, sleep
//!   store_worker try-catalog-lock <state-home>             print `acquired` (and release) or `refused: <message>`
//!   store_worker hold-directory-lease <native|portable> <state-home> <root> <dir>
//!       lease the new directory <dir> under the workspace root <root> through the native host or
//!       the portable artifact (`proclease_tests::portable_artifact`), print `leased`, sleep
//!   store_worker increment <state-home> <path> <count>     count times: read {"value":N} (absent: create
//!       {"value":0}), replace it if unchanged with N+1, retrying lost compare-and-swaps, lost
//!       arbitrations and reads that overlapped a replace; then print
//!       {"outcome":"done","successes":S,"retries":R,"value":V} (the peer's format, tests/peer)

use std::path::Path;
use std::sync::Arc;

use proclease::Host;
use proclease::state_store::{SharedStore, StateStore};
use proclease_tests::linearizability;
use proclease_tests::portable_artifact::PortableArtifact;
use proclease_tests::store_fixtures::{churn_record, round_of, round_record};

fn open_host(home: &str) -> Host {
    Host::builder().state_home(Path::new(home)).build().unwrap_or_else(|e| fail(&e.to_string()))
}

fn open(home: &str) -> Arc<StateStore> {
    open_host(home).store().clone()
}

fn fail(message: &str) -> ! {
    eprintln!("store_worker: {message}");
    std::process::exit(3)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).cloned().unwrap_or_else(|| fail("missing argument"));
    match arg(1).as_str() {
        "race-replace" => {
            let store = open(&arg(2));
            let rounds: u64 = arg(3).parse().unwrap_or_else(|_| fail("rounds"));
            let id = arg(4);
            loop {
                let text = store.read_if_present("recovery/race/record.json", 1 << 16).unwrap_or_else(|e| fail(&e.to_string())).unwrap_or_else(|| fail("record vanished"));
                let round = round_of(&text).unwrap_or_else(|| fail(&format!("torn record: {text:?}")));
                if round >= rounds {
                    return;
                }
                let expected = proclease::core::digest::sha256_hex(text.as_bytes());
                let next = round_record(round + 1, &id);
                match store.replace_if_unchanged("recovery/race/record.json", &expected, &next) {
                    Ok(true) => println!("won {round}"),
                    Ok(false) => {}
                    Err(e) => fail(&e.to_string()),
                }
            }
        }
        "history" => {
            let store = open(&arg(2));
            let count: usize = arg(3).parse().unwrap_or_else(|_| fail("count"));
            let seed: u64 = arg(5).parse().unwrap_or_else(|_| fail("seed"));
            let mut register = SharedStore::new(store);
            let history = linearizability::random_client(&mut register, &arg(4), count, seed).unwrap_or_else(|e| fail(&e));
            for operation in &history {
                println!("{}", linearizability::to_json(operation));
            }
        }
        "race-create" => {
            let store = open(&arg(2));
            let rounds: u64 = arg(3).parse().unwrap_or_else(|_| fail("rounds"));
            let id = arg(4);
            for round in 0..rounds {
                let path = format!("recovery/race-create/{round}.json");
                match store.create_if_absent(&path, &round_record(round, &id)) {
                    Ok(true) => println!("created {round}"),
                    Ok(false) => {}
                    Err(e) => fail(&e.to_string()),
                }
            }
        }
        "churn" => {
            let store = open(&arg(2));
            // The parent kills at random instants *of the churn*, not of the start-up.
            println!("ready");
            let mut n: u64 = 0;
            loop {
                for k in 0..4u64 {
                    n += 1;
                    let path = format!("recovery/churn/{k}.json");
                    let current = store.read_if_present(&path, 1 << 20).unwrap_or_else(|e| fail(&e.to_string()));
                    let result = match current {
                        None => store.create_if_absent(&path, &churn_record(k, n)),
                        Some(text) if n.is_multiple_of(7) => store.remove_if_unchanged(&path, &proclease::core::digest::sha256_hex(text.as_bytes())),
                        Some(text) => store.replace_if_unchanged(&path, &proclease::core::digest::sha256_hex(text.as_bytes()), &churn_record(k, n)),
                    };
                    if let Err(e) = result {
                        fail(&e.to_string());
                    }
                }
            }
        }
        "hold-catalog-lock" => {
            let host = open_host(&arg(2));
            host.catalog().lock().unwrap_or_else(|e| fail(&e));
            println!("locked");
            std::thread::sleep(std::time::Duration::from_secs(120));
        }
        "try-catalog-lock" => {
            let host = open_host(&arg(2));
            match host.catalog().lock() {
                Ok(()) => {
                    host.catalog().unlock();
                    println!("acquired");
                }
                Err(message) => println!("refused: {message}"),
            }
        }
        "hold-directory-lease" => {
            let (home, root, dir) = (arg(3), arg(4), arg(5));
            // Held by the handle until the parent kills this process.
            let _lease: Box<dyn std::any::Any> = match arg(2).as_str() {
                "native" => {
                    let host = Host::builder().state_home(Path::new(&home)).workspace_root(Path::new(&root)).build().unwrap_or_else(|e| fail(&e.to_string()));
                    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_millis() as f64);
                    let request = proclease::core::directory_leases::Request {
                        role: proclease::core::records::directory_lease::Role::RawWorking,
                        path: dir,
                        output_root: None,
                        recover_after_ms: now_ms + 60_000.0,
                        now_ms: None,
                    };
                    Box::new((host.lease_new_directory(&request).unwrap_or_else(|e| fail(&e.to_string())), host))
                }
                "portable" => {
                    let mut artifact = PortableArtifact::open(Path::new(&home), &[Path::new(&root)]);
                    let lease = artifact.lease_new_directory(Path::new(&dir)).unwrap_or_else(|e| fail(&e));
                    Box::new((lease, artifact))
                }
                other => fail(&format!("no host {other}")),
            };
            println!("leased");
            std::thread::sleep(std::time::Duration::from_secs(120));
        }
        "increment" => {
            let store = open(&arg(2));
            let path = arg(3);
            let count: u64 = arg(4).parse().unwrap_or_else(|_| fail("count"));
            let (mut successes, mut retries, mut value) = (0u64, 0u64, 0u64);
            while successes < count {
                let text = match store.read_if_present(&path, 1 << 16) {
                    Ok(text) => text,
                    // A read that overlapped a writer's rename (§3.2 stable read): read again.
                    Err(e) if e.to_string().contains("changed while it was read") => {
                        retries += 1;
                        continue;
                    }
                    Err(e) => fail(&e.to_string()),
                };
                let Some(text) = text else {
                    match store.create_if_absent(&path, "{\"value\":0}\n") {
                        Ok(_) | Err(proclease::state_store::StoreError::Contended { .. }) => continue,
                        Err(e) => fail(&e.to_string()),
                    }
                };
                let current: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|_| fail(&format!("torn record {text:?}")));
                let n = current["value"].as_u64().unwrap_or_else(|| fail(&format!("not a counter: {text:?}")));
                let next = format!("{{\"value\":{}}}\n", n + 1);
                match store.replace_if_unchanged(&path, &proclease::core::digest::sha256_hex(text.as_bytes()), &next) {
                    Ok(true) => {
                        successes += 1;
                        value = n + 1;
                    }
                    Ok(false) => retries += 1,
                    Err(e) => fail(&e.to_string()),
                }
            }
            println!("{{\"outcome\":\"done\",\"successes\":{successes},\"retries\":{retries},\"value\":{value}}}");
        }
        other => fail(&format!("unknown mode {other}")),
    }
}
