//! The portable store (issue #41): the protocols of `proclease-protocols` that keep data safe —
//! the state store's compare-and-swap of records, ghostget's mutation claims and their
//! arbitration (§3.5), the collection recovery (§3.9), and the workspace's identity-bound
//! removal (§6A.4) — as a WebAssembly component (world `portable-store` of `wit/`). It imports
//! only the system-call contract (`wit/sys.wit`: `sys-fs`, `sys-kernel`), the host's
//! `process-identity` facts and its `clock`, and exports the `state-store`, `workspace` and
//! `plugin-catalog` interfaces `proclease.wasm` imports (the last: the state home's catalog and
//! the catalog mutation lock of §5), for the state home and the workspace roots the host grants. A
//! runtime that cannot run the protocols natively loads it instead of carrying its own copy;
//! the protocols are the native host's, byte for byte.
//!
//! `no_std`, like the component, so that it imports exactly what its world names. On any other
//! target than `wasm32` the crate is empty.
#![no_std]

#[cfg(target_arch = "wasm32")]
extern crate alloc;

#[cfg(target_arch = "wasm32")]
mod generated {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "portable-store",
        generate_all,
    });
}

/// The generated bindings under the paths the shared conversions expect
/// (`crate::bindings::proclease::lease::{types, process_identity, state_store, workspace}`):
/// this world exports `state-store` and `workspace` where the component imports them.
#[cfg(target_arch = "wasm32")]
mod bindings {
    pub mod proclease {
        pub mod lease {
            pub use crate::generated::exports::proclease::lease::{recovery_turn, state_store, store_advice, workspace, workspace_advice};
            pub use crate::generated::proclease::lease::{clock, process_identity, sys_fs, sys_kernel, types};
        }
    }
}

/// The conversions between core and WIT types that this world shares with the component
/// (`wit/convert_effects.rs`).
#[cfg(target_arch = "wasm32")]
#[allow(dead_code)]
mod convert {
    use alloc::string::String;
    use alloc::vec::Vec;

    use proclease_core::effects::{BatchInvalid, BatchStatus, CollectionEntry, CollectionIdentity, CollectionSnapshot, DirectoryFacts, EntryKind, FinishedRun};
    use proclease_core::liveness::{OwnerFacts, OwnerStatus, ProcRead, ProcView, RemotePresence, TreeState, WitnessState};
    use proclease_core::records::{DirectoryIdentity, Owner};
    use proclease_core::{Failure, FailureKind};

    use crate::bindings::proclease::lease::{process_identity as pi, state_store as ss, types as t, workspace as ws};

    include!("../../../wit/convert_macros.rs");
    include!("../../../wit/convert_effects.rs");
}

#[cfg(target_arch = "wasm32")]
#[path = "../../component/src/no_std_runtime.rs"]
mod no_std_runtime;

#[cfg(target_arch = "wasm32")]
mod catalog;
#[cfg(target_arch = "wasm32")]
mod store;
#[cfg(target_arch = "wasm32")]
mod sys;
#[cfg(target_arch = "wasm32")]
mod workspace;

/// `memcmp`, which the protocols' orderings of names and strings call (sorting, `BTreeSet`)
/// and which a `no_std` guest gets from no C library: WebAssembly has no instruction for it.
/// The reads are volatile, so that the compiler cannot turn the loop back into a call to
/// `memcmp` itself. Names compared here are short; speed does not matter.
///
/// # Safety
/// `a` and `b` are valid for reads of `n` bytes (the C contract).
#[cfg(target_arch = "wasm32")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    for i in 0..n {
        // SAFETY: i < n, and the caller guarantees n readable bytes at each.
        let (x, y) = unsafe { (core::ptr::read_volatile(a.add(i)), core::ptr::read_volatile(b.add(i))) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
    }
    0
}
