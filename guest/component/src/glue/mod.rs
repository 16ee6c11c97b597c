//! Export implementations, import adapters, and the no_std runtime pieces (allocator, panic
//! handler, `cabi_realloc`).

mod admission;
mod convert;
mod directory_leases;
mod dispositions;
mod imports;
mod invocation_leases;
mod records;

pub(crate) mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "proclease",
        generate_all,
    });
}

#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

/// The canonical ABI's allocation entry point. On wasm32-wasip2 wit-bindgen leaves it to libc,
/// which a `no_std` guest does not link, so the component exports its own over the global
/// allocator (the same contract as wit-bindgen's p1 implementation).
///
/// # Safety
/// Called only by the component model runtime with a pointer/length it got from this function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cabi_realloc(old_ptr: *mut u8, old_len: usize, align: usize, new_len: usize) -> *mut u8 {
    use alloc::alloc::{Layout, alloc, realloc};
    let ptr = unsafe {
        if old_len == 0 {
            if new_len == 0 {
                return align as *mut u8;
            }
            alloc(Layout::from_size_align_unchecked(new_len, align))
        } else {
            realloc(old_ptr, Layout::from_size_align_unchecked(old_len, align), new_len)
        }
    };
    if ptr.is_null() {
        core::arch::wasm32::unreachable();
    }
    ptr
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

/// The type every export is implemented on.
pub(crate) struct Component;

bindings::export!(Component with_types_in bindings);
