//! `proclease`: crash-safe, process-owned leases on shared local state.
//!
//! Exit status: 0 success; 1 an error or an invalid record; 2 a usage error; 3 refused because
//! a live owner holds the admission; 4 refused because a prior owner cannot be proven dead.
//! `run` exits with the command's own status once the command ran.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
