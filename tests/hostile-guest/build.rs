//! A `no_std` guest on wasm32-wasip2 still needs `memcpy`, `memcmp` and friends, which that
//! target takes from wasi-libc. Link the target's own self-contained `libc.a` so the linker
//! pulls in just those leaf functions (they import nothing).
fn main() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-link-arg=-lc");
    }
}
