//! Standard output for the command line: what a reader that went away does to a report.
//!
//! `proclease` leaves SIGPIPE ignored (the Rust runtime's default) in every command, so that a
//! socket closed by etcd mid-handshake is an error the command reports, never a silent death.
//! A closed standard output (`proclease doctor | head -1`) would then make `println!` panic;
//! [`write`] ends the program instead, quietly, with status 141 — what a shell reports for a
//! program that SIGPIPE killed, so pipelines with `set -o pipefail` see what they always saw.

use std::io::Write as _;

/// The exit status of a command whose standard output's reader went away: 128 + SIGPIPE.
pub const EXIT_BROKEN_PIPE: i32 = 128 + libc::SIGPIPE;

/// Writes `args` (and a newline when `newline`) to standard output and flushes it. A broken
/// pipe exits the program with [`EXIT_BROKEN_PIPE`] without a word; another write error exits
/// with status 1, saying why on standard error. (Every step of `recover` is crash-safe, and the
/// supervisors write nothing here while they hold leases.)
pub fn write(args: std::fmt::Arguments<'_>, newline: bool) {
    let mut stdout = std::io::stdout().lock();
    let written = stdout.write_fmt(args).and_then(|()| if newline { stdout.write_all(b"\n") } else { Ok(()) }).and_then(|()| stdout.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(EXIT_BROKEN_PIPE),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "proclease: cannot write to standard output: {e}");
            std::process::exit(1);
        }
    }
}
