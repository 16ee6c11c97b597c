//! A child process for the export admission tests.
//!
//! Usage:
//!   admission_worker hold-unsafe <state-home>
//!       acquire, begin a helper launch, bind itself as the helper, mark cleanup unsafe, exit 0
//!       silently (§7.1 scenario 10)
//!   admission_worker helper-then-exit <state-home> <pid-file>
//!       acquire, start `sleep 600` as the helper (`launch_helper`), write its pid to
//!       <pid-file>, and exit without releasing (the handle is dropped with the helper running)
//!   admission_worker race <state-home> <go-file> <release-file>
//!       wait for <go-file>, try to acquire; print `acquired` (then hold until <release-file>
//!       exists, and release) or `blocked: <message>`

use std::path::Path;
use std::time::{Duration, Instant};

use proclease::Host;

fn fail(message: &str) -> ! {
    eprintln!("admission_worker: {message}");
    std::process::exit(3)
}

fn open(home: &str) -> Host {
    Host::builder().state_home(Path::new(home)).build().unwrap_or_else(|e| fail(&e.to_string()))
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
    match arg(1).as_str() {
        "hold-unsafe" => {
            let mut admission = open(&arg(2)).acquire_admission().unwrap_or_else(|e| fail(&e.to_string()));
            admission.begin_helper_launch().unwrap_or_else(|e| fail(&e.to_string()));
            admission.bind_helper(i64::from(std::process::id())).unwrap_or_else(|e| fail(&e.to_string()));
            admission.mark_cleanup_unsafe().unwrap_or_else(|e| fail(&e.to_string()));
        }
        "helper-then-exit" => {
            let host = open(&arg(2));
            let mut admission = host.acquire_admission().unwrap_or_else(|e| fail(&e.to_string()));
            let mut sleep = std::process::Command::new("sleep");
            // Not holding the worker's output open: the test reads it to its end.
            sleep.arg("600").stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
            // Never waited for: the worker exits leaving its helper running, which is the case
            // the test makes.
            #[allow(clippy::zombie_processes)]
            let helper = admission.launch_helper(host.process_identity(), &mut sleep).unwrap_or_else(|e| fail(&e.to_string()));
            std::fs::write(arg(3), helper.id().to_string()).unwrap_or_else(|e| fail(&e.to_string()));
        }
        "race" => {
            let host = open(&arg(2));
            wait_for(&arg(3));
            match host.acquire_admission() {
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
