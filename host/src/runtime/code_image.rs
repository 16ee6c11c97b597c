//! The component's native code, loaded where the binary holds it (issue #30).
//!
//! `host/build.rs` precompiles the component with the runtime's engine configuration
//! (`host/build-support/engine_config.rs`) and the binary embeds the result page-aligned in its
//! read-only data ([`component::PRECOMPILED`]). wasmtime's `Component::deserialize` would copy
//! those 1.4 MB into fresh anonymous memory before making its text executable — about a quarter
//! of a `proclease` start. Instead, the engine gets a code-memory handler
//! (`Config::with_custom_code_memory`, [`InPlace`]) that changes the protection of the text
//! section where it lies, and the component is loaded with `Component::deserialize_raw`: no
//! copy, no file, no cache to trust. The artifact needs no relocations (wasmtime checks), so
//! nothing is ever written to it; wasmtime still checks its header (wasmtime version, compiler
//! settings, CPU features) against this engine and this machine.
//!
//! x86-64 Linux with 4 KiB pages only: there a protection change needs no instruction-cache
//! maintenance. Elsewhere, or where the kernel refuses to make those pages executable (a
//! hardened kernel), the runtime copies as wasmtime does by default ([`LoadedFrom::Copied`]).

use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

use rustix::mm::MprotectFlags;
use wasmtime::component::Component;
use wasmtime::{Config, CustomCodeMemory, Engine};

use super::{LoadedFrom, component};
use crate::error::Error;

/// Makes the text of loaded code executable where it lies (`mprotect`), for the embedded image
/// and for copies alike; on unload, a copy goes back to read-write (what wasmtime expects of
/// memory it owns) and the embedded image to read-only. The image is loaded once per process
/// ([`shared`]): wasmtime registers code by address, so two live loads of the same pages would
/// collide.
struct InPlace;

/// The page size this module supports: the embedded image is aligned to it.
const PAGE: usize = 4096;

fn image_range() -> std::ops::Range<usize> {
    let start = component::PRECOMPILED.as_ptr() as usize;
    start..start + component::PRECOMPILED.len()
}

fn protect(ptr: *const u8, len: usize, flags: MprotectFlags) -> wasmtime::Result<()> {
    // SAFETY: wasmtime passes the page-aligned text range of code memory it loaded (the embedded
    // image, which lives as long as the process, or a mapping it owns); no Rust reference
    // writes to either while its protection changes.
    unsafe { rustix::mm::mprotect(ptr.cast_mut().cast(), len, flags) }.map_err(|errno| wasmtime::Error::msg(format!("mprotect of the component's code failed: {errno}")))
}

impl CustomCodeMemory for InPlace {
    fn required_alignment(&self) -> usize {
        PAGE
    }

    fn publish_executable(&self, ptr: *const u8, len: usize) -> wasmtime::Result<()> {
        protect(ptr, len, MprotectFlags::READ | MprotectFlags::EXEC)
    }

    fn unpublish_executable(&self, ptr: *const u8, len: usize) -> wasmtime::Result<()> {
        let in_image = image_range().contains(&(ptr as usize));
        protect(ptr, len, if in_image { MprotectFlags::READ } else { MprotectFlags::READ | MprotectFlags::WRITE })
    }
}

/// The process's engine and the component loaded into it, made on first use and shared by every
/// [`super::Runtime`]: the engine configuration is the same for all (their limits are per store),
/// and the in-place image can be loaded only once. The engine's epoch ticker starts with it and
/// runs (one wake-up per 50 ms) for the rest of the process. A failure is kept too: the binary
/// or the machine is wrong, which a retry does not mend.
///
/// Errors: [`Error::Component`] as [`load`]'s, or if wasmtime cannot make the engine.
pub(super) fn shared() -> Result<(Engine, Component, LoadedFrom), Error> {
    static SHARED: OnceLock<Result<(Engine, Component, LoadedFrom), String>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let mut config = super::engine_config::engine_config();
            let in_place = configure(&mut config);
            let engine = Engine::new(&config).map_err(|e| Error::component(e).to_string())?;
            super::start_epoch_ticker(&engine);
            let (component, loaded_from) = load(&engine, in_place).map_err(|e| e.to_string())?;
            Ok((engine, component, loaded_from))
        })
        .clone()
        .map_err(Error::Component)
}

/// Gives `config` the in-place code-memory handler where this module supports the machine;
/// returns whether it did. Not part of the build script's configuration: it changes how code is
/// published, not what is compiled (wasmtime's compatibility check ignores it).
fn configure(config: &mut Config) -> bool {
    let supported = cfg!(all(target_arch = "x86_64", target_os = "linux")) && rustix::param::page_size() == PAGE && (component::PRECOMPILED.as_ptr() as usize).is_multiple_of(PAGE);
    if supported {
        config.with_custom_code_memory(Some(Arc::new(InPlace)));
    }
    supported
}

/// The embedded component loaded into `engine`: in place when `in_place` (the engine was given
/// [`configure`]'s handler), else copied.
///
/// Errors: [`Error::Component`] when wasmtime refuses the artifact — a binary built on a machine
/// whose CPU features or wasmtime differ — saying to build proclease on this machine.
fn load(engine: &Engine, in_place: bool) -> Result<(Component, LoadedFrom), Error> {
    if in_place {
        let image = NonNull::from(component::PRECOMPILED);
        // SAFETY: `deserialize_raw` needs memory that outlives the component and is never
        // modified: the image is an immutable static of this binary, and the artifact needs no
        // relocations, so wasmtime only reads it and changes the protection of its text.
        match unsafe { Component::deserialize_raw(engine, image) } {
            Ok(component) => return Ok((component, LoadedFrom::InPlace)),
            Err(error) => tracing::info!(error = %format!("{error:#}"), "the precompiled component cannot run where it lies; copying it"),
        }
    }
    // SAFETY: the bytes were produced by `Engine::precompile_component` in this crate's build
    // script and embedded in this binary; wasmtime checks their header (wasmtime version,
    // compiler flags, CPU features) against this engine and refuses a mismatch.
    match unsafe { Component::deserialize(engine, component::PRECOMPILED) } {
        Ok(component) => Ok((component, LoadedFrom::Copied)),
        Err(error) => Err(Error::Component(format!(
            "wasmtime refused the component precompiled into this binary ({error:#}): a proclease binary runs on \
             CPUs with the features of the machine that built it, with the wasmtime it was built with; build it \
             here from its source (`cargo install --path host`, or `cargo build --release -p proclease`)"
        ))),
    }
}
