//! `-v`/`-q` and `RUST_LOG`: the library's `tracing` events on standard error.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

/// Installs the subscriber: `RUST_LOG` when set (any `EnvFilter` directive), else warnings and
/// errors, `-v` info (what was probed and which proof decided), `-vv` debug (store and /proc
/// steps), `-vvv` everything; `-q` errors only.
pub fn init(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "proclease=info,warn",
        (false, 2) => "proclease=debug,warn",
        (false, _) => "proclease=trace,info",
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.is_empty() => EnvFilter::try_new(&directives).unwrap_or_else(|error| {
            eprintln!("proclease: RUST_LOG={directives:?} is not a valid filter ({error}); using {default:?}");
            EnvFilter::new(default)
        }),
        _ => EnvFilter::new(default),
    };
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(std::io::stderr().is_terminal()).with_target(true).without_time().try_init();
}
