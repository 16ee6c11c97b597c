//! A child process for the export admission tests.
//!
//! Usage:
//!   admission_worker hold-unsafe <state-home>
//!       acquire, begin a helper launch, bind itself as the helper, mark cleanup unsafe, exit 0
//!       silently (§7.1 scenario 10)
//!   admission_worker race <state-home> <go-file> <release-file>
//!       wait for <go-file>, try to acquire; print `acquired` (then hold until <release-file>
//!       exists, and release) or `blocked: <message>`

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proclease::effects::Effects;
use proclease::process_identity::ProcessIdentity;
use proclease::state_home::StateHome;
use proclease::state_store::StateStore;
use proclease::{Admission, Runtime};

fn fail(message: &str) -> ! {
    eprintln!("admission_worker: {message}");
    std::process::exit(3)
}

fn effects(home: &str) -> Effects {
    let home = StateHome::open(Path::new(home)).unwrap_or_else(|e| fail(&e.to_string()));
    let witnesses = proclease::witness::Witnesses::open(&home).unwrap_or_else(|e| fail(&e.to_string()));
    let identity = Arc::new(ProcessIdentity::with_witnesses(witnesses));
    let store = StateStore::open(home, identity.clone()).unwrap_or_else(|e| fail(&e.to_string()));
    Effects::native(Some(Arc::new(store)), identity)
}

fn wait_for(path: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !Path::new(path).exists() {
        if Instant::now() > deadline {
            fail(&format!("{path} never appeared"));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).cloned().unwrap_or_else(|| fail("missing argument"));
    let runtime = Runtime::shared().unwrap_or_else(|e| fail(&e.to_string()));
    match arg(1).as_str() {
        "hold-unsafe" => {
            let mut admission = Admission::acquire(runtime, effects(&arg(2))).unwrap_or_else(|e| fail(&e.to_string()));
            admission.begin_helper_launch().unwrap_or_else(|e| fail(&e.to_string()));
            admission.bind_helper(i64::from(std::process::id())).unwrap_or_else(|e| fail(&e.to_string()));
            admission.mark_cleanup_unsafe().unwrap_or_else(|e| fail(&e.to_string()));
        }
        "race" => {
            let effects = effects(&arg(2));
            wait_for(&arg(3));
            match Admission::acquire(runtime, effects) {
                Ok(mut admission) => {
                    println!("acquired");
                    wait_for(&arg(4));
                    admission.release().unwrap_or_else(|e| fail(&e.to_string()));
                }
                Err(error) => println!("blocked: {error}"),
            }
        }
        other => fail(&format!("unknown mode {other}")),
    }
}
