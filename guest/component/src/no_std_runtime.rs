//! What a `no_std` component needs from a runtime: a global allocator (dlmalloc),
//! `cabi_realloc`, and a panic handler. Shared with the hostile test component
//! (`tests/hostile-guest`, through `#[path]`).

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
