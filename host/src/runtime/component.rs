//! The component embedded in this crate: the exact bytes that `proclease component` writes and
//! that other runtimes (Node through jco, Python through `wasmtime`) load.

/// The component (`guest/component` built for `wasm32-wasip2`, stripped).
pub const BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/proclease.wasm"));

/// [`BYTES`] compiled to native code at build time by an engine configured as the runtime's
/// (`Engine::precompile_component`), as the binary holds it: page-aligned in its read-only data,
/// so that the runtime can make its text executable where it lies (`runtime::code_image`).
/// wasmtime refuses it on a host whose CPU features or wasmtime build differ. Crate-private: it
/// is loaded once per process (`runtime::code_image`), and a second load of the same pages
/// would collide in wasmtime's registry of code addresses.
pub(crate) static PRECOMPILED: &[u8] = &PRECOMPILED_IMAGE.0;

/// A value aligned to a page (4 KiB), so that page protections can be changed on its parts.
#[repr(C, align(4096))]
pub(crate) struct PageAligned<T: ?Sized>(pub(crate) T);

const PRECOMPILED_LEN: usize = include_bytes!(concat!(env!("OUT_DIR"), "/proclease.cwasm")).len();

/// The one copy of the precompiled component in the binary.
pub(crate) static PRECOMPILED_IMAGE: PageAligned<[u8; PRECOMPILED_LEN]> = PageAligned(*include_bytes!(concat!(env!("OUT_DIR"), "/proclease.cwasm")));

/// Lowercase hex sha256 of [`BYTES`], computed at build time.
pub const SHA256: &str = env!("PROCLEASE_COMPONENT_SHA256");

/// The WIT package the component implements, name and version (`proclease:lease@0.3.0`), read
/// from `wit/proclease.wit` at build time.
pub const WIT_PACKAGE: &str = env!("PROCLEASE_WIT_PACKAGE");

/// The portable artifact (world `proclease-portable` of `wit/sys.wit`): [`BYTES`] with the
/// portable store (`guest/portable`) plugged into its `state-store` and `workspace` imports, for
/// runtimes without this host. It imports the system-call contract (`sys-fs`, `sys-kernel`),
/// `process-identity`, `plugin-catalog`, `clock` and `entropy`, and exports what [`BYTES`]
/// exports plus the portable store's `state-store` and `workspace` (for its host's own use).
/// `proclease component --portable` writes it; this crate does not load it.
pub const PORTABLE_BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/proclease-portable.wasm"));

/// Lowercase hex sha256 of [`PORTABLE_BYTES`], computed at build time.
pub const PORTABLE_SHA256: &str = env!("PROCLEASE_PORTABLE_SHA256");

/// The interfaces [`PORTABLE_BYTES`] imports, in its order (`proclease:lease/sys-fs@0.3.0`, …),
/// read from its bytes at build time.
pub fn portable_imports() -> impl Iterator<Item = &'static str> {
    PORTABLE_INTERFACES.lines().filter_map(|line| line.strip_prefix("import "))
}

/// The interfaces [`PORTABLE_BYTES`] exports, in its order.
pub fn portable_exports() -> impl Iterator<Item = &'static str> {
    PORTABLE_INTERFACES.lines().filter_map(|line| line.strip_prefix("export "))
}

const PORTABLE_INTERFACES: &str = include_str!(concat!(env!("OUT_DIR"), "/proclease-portable.interfaces"));
