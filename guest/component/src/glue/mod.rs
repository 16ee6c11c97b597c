//! Export implementations and import adapters (the no_std runtime pieces are in
//! `no_std_runtime.rs`).

mod admission;
mod convert;
mod directory_leases;
mod dispositions;
mod imports;
mod invocation_leases;
mod records;
mod recovery_advice;
mod run_refusals;

pub(crate) mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "proclease",
        generate_all,
    });
}

/// The type every export is implemented on.
pub(crate) struct Component;

bindings::export!(Component with_types_in bindings);
