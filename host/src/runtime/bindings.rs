//! The generated host bindings of world `proclease`, kept out of sight: the rest of the crate
//! exposes Rust types (mostly those of `proclease-core`) instead.

wasmtime::component::bindgen!({
    path: "wit",
    world: "proclease",
});
