//! The exports.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Debug;

mod bindings {
    wit_bindgen::generate!({
        path: ["../../wit", "wit"],
        world: "proclease:hostile/hostile",
        generate_all,
    });
}

use bindings::proclease::lease::state_store as ss;
use bindings::proclease::lease::types::{DirectoryIdentity, Failure, FailureKind};
use bindings::proclease::lease::workspace as ws;

/// A failure's kind as the WIT names it.
fn kind_name(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::Io => "io",
        FailureKind::Permission => "permission",
        FailureKind::Unreachable => "unreachable",
        FailureKind::Contended => "contended",
        FailureKind::Refused => "refused",
        FailureKind::Unsafe => "unsafe",
        FailureKind::IdentityChanged => "identity-changed",
        FailureKind::Unavailable => "unavailable",
        FailureKind::Refusal => "refusal",
    }
}

fn store_outcome<T: Debug>(function: &str, result: Result<T, Failure>) -> String {
    workspace_outcome(function, &result)
}

fn workspace_outcome<T: Debug>(function: &str, result: &Result<T, Failure>) -> String {
    match result {
        Ok(value) => format!("{function}: ok {value:?}"),
        Err(failure) => format!("{function}: {} {}", kind_name(failure.kind), failure.message),
    }
}

/// sha256 of the empty string: a plausible `expected` for the compare-and-swap functions.
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct Hostile;

impl bindings::Guest for Hostile {
    fn spin() {
        let mut n: u64 = 0;
        loop {
            n = core::hint::black_box(n.wrapping_add(1));
        }
    }

    fn spin_on_imports(path: String) {
        loop {
            let _ = core::hint::black_box(ss::read_if_present(&path, 64));
        }
    }

    fn hoard() -> u64 {
        const CHUNK: usize = 1 << 20;
        let mut kept: Vec<Vec<u8>> = Vec::new();
        let mut held: u64 = 0;
        loop {
            let mut chunk = Vec::new();
            if chunk.try_reserve_exact(CHUNK).is_err() || kept.try_reserve(1).is_err() {
                return held;
            }
            chunk.resize(CHUNK, 0xA5);
            held += CHUNK as u64;
            kept.push(core::hint::black_box(chunk));
        }
    }

    fn hoard_locks() -> String {
        let mut held = Vec::new();
        loop {
            match bindings::proclease::lease::plugin_catalog::lock() {
                Ok(lock) => held.push(lock),
                Err(message) => return format!("{}: {message}", held.len()),
            }
        }
    }

    fn escape_store(path: String) -> String {
        let identity = ss::CollectionIdentity { device: "0".into(), inode: "0".into() };
        let lines = [
            store_outcome("read-if-present", ss::read_if_present(&path, 1 << 20)),
            store_outcome("create-if-absent", ss::create_if_absent(&path, "written by the hostile guest\n")),
            store_outcome("replace-if-unchanged", ss::replace_if_unchanged(&path, EMPTY_SHA256, "replaced by the hostile guest\n")),
            store_outcome("remove-if-unchanged", ss::remove_if_unchanged(&path, EMPTY_SHA256)),
            store_outcome("ensure-private-directory", ss::ensure_private_directory(&path)),
            store_outcome("snapshot", ss::snapshot(&path, true)),
            store_outcome("read-batch", ss::read_batch(&path, &[String::from("x")], 1 << 20, 1 << 20, &identity)),
        ];
        lines.join("\n")
    }

    fn escape_workspace(path: String, expected: Option<DirectoryIdentity>) -> String {
        let inspected = ws::inspect(&path);
        let identity = expected.or_else(|| inspected.as_ref().ok().and_then(|facts| facts.facts.as_ref().map(|f| f.identity.clone()))).unwrap_or(DirectoryIdentity {
            device: "1".into(),
            inode: "1".into(),
            birthtime_ns: "1".into(),
        });
        let removed = ws::remove_tree(&path, &identity);
        format!("{}\n{}", workspace_outcome("inspect", &inspected), workspace_outcome("remove-tree", &removed))
    }
}

bindings::export!(Hostile with_types_in bindings);
