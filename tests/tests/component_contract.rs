//! The component's boundary is exactly its WIT world: it imports nothing the world does not
//! declare (no ambient authority, no stray `wasi:*` interfaces) and exports what it declares.

use std::path::Path;

use proclease::Runtime;
use wit_parser::{Resolve, WorldItem, WorldKey};

/// The world `proclease` of `wit/`, resolved: (imports, exports) as component-model names.
fn world_items() -> (Vec<String>, Vec<String>) {
    world_items_of("proclease")
}

/// The world `name` of `wit/`, resolved: (imports, exports) as component-model names, sorted.
fn world_items_of(name: &str) -> (Vec<String>, Vec<String>) {
    let mut resolve = Resolve::default();
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    let (package, _) = resolve.push_dir(&wit).expect("wit/ parses");
    let world = resolve.select_world(&[package], Some(name)).unwrap_or_else(|e| panic!("world {name} exists: {e}"));
    let names = |items: &wit_parser::IndexMap<WorldKey, WorldItem>| {
        let mut names: Vec<String> = items
            .iter()
            .filter_map(|(key, item)| match (key, item) {
                (WorldKey::Interface(id), WorldItem::Interface { .. }) => resolve.id_of(*id),
                (WorldKey::Name(name), _) => Some(name.clone()),
                _ => None,
            })
            .collect();
        names.sort();
        names
    };
    let world = &resolve.worlds[world];
    (names(&world.imports), names(&world.exports))
}

#[test]
fn component_imports_exactly_what_the_world_declares() {
    let runtime = Runtime::shared().expect("component compiles");
    let (imports, _) = world_items();
    assert_eq!(runtime.import_names(), imports, "component imports vs world `proclease` imports");
    assert!(runtime.import_names().iter().all(|name| name.starts_with("proclease:lease/")), "the component must not import wasi or other interfaces: {:?}", runtime.import_names());
}

#[test]
fn component_exports_exactly_what_the_world_declares() {
    let runtime = Runtime::shared().expect("component compiles");
    let (_, exports) = world_items();
    assert_eq!(runtime.export_names(), exports);
}

/// The WIT enum `lease-code` is proclease-core's `LeaseCode`, case for case and in order (both
/// are generated from `guest/core/src/error.rs` by `scripts/lease_codes.py`), so that every
/// refusal crosses the boundary with its code.
#[test]
fn the_wit_lease_codes_are_the_cores() {
    let mut resolve = Resolve::default();
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    resolve.push_dir(&wit).expect("wit/ parses");
    let codes = resolve
        .types
        .iter()
        .find(|(_, ty)| ty.name.as_deref() == Some("lease-code"))
        .map(|(_, ty)| match &ty.kind {
            wit_parser::TypeDefKind::Enum(e) => e.cases.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
            other => panic!("lease-code is not an enum: {other:?}"),
        })
        .expect("types.lease-code");
    let core: Vec<&str> = proclease::core::LeaseCode::ALL.iter().map(|c| c.name()).collect();
    assert_eq!(codes, core, "run scripts/lease_codes.py after changing the core's codes");
}

/// The binary carries the component's native code, compiled at build time with the runtime's
/// engine configuration, and the runtime has no compiler (issue #30): a start loads that code,
/// on x86-64 Linux where the binary holds it. Were the build script's engine configured
/// differently from the runtime's, wasmtime would refuse the artifact and the runtime fail.
#[test]
fn a_start_loads_the_precompiled_component_where_the_binary_holds_it() {
    let runtime = Runtime::new(proclease::RuntimeConfig::default()).expect("runtime");
    let expected = if cfg!(all(target_arch = "x86_64", target_os = "linux")) { proclease::LoadedFrom::InPlace } else { proclease::LoadedFrom::Copied };
    assert_eq!(runtime.loaded_from(), expected);
    // And the precompiled component is the embedded one: it instantiates and answers, from
    // several runtimes — also after another runtime of the process was dropped (they share the
    // process's one engine and loaded component, which a dropped runtime must not take along).
    let answers = |runtime: &Runtime| {
        let mut instance = runtime.instantiate().expect("instantiate");
        let verdict = instance.records().inspect_file(".io-state.json", "{\"kind\":\"io-state\",\"schemaVersion\":1}\n").expect("inspect");
        assert!(verdict.error.is_none(), "{verdict:?}");
    };
    let second = Runtime::new(proclease::RuntimeConfig::default()).expect("a second runtime");
    answers(&runtime);
    answers(&second);
    drop(runtime);
    answers(&second);
    drop(second);
    answers(&Runtime::new(proclease::RuntimeConfig::default()).expect("a runtime after the others were dropped"));
}

/// A package of the `proclease` crate carries its component prebuilt (`host/component/`), since
/// no guest source or wasm target comes with it (`host/build.rs`, issue #30). In the workspace
/// the component is built from source; this requires the shipped one to be exactly that build,
/// byte for byte (the guest build is reproducible: pinned toolchain, locked dependencies, no
/// paths in the stripped artifact).
#[test]
fn the_shipped_component_is_the_one_built_from_source() {
    let prebuilt = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/component/proclease.wasm");
    let shipped = std::fs::read(&prebuilt).expect("host/component/proclease.wasm is readable");
    assert!(
        shipped == proclease::component::BYTES,
        "host/component/proclease.wasm ({} bytes) is not the component built from this source ({} bytes, sha256 {}): \
         refresh it with `cargo run -p proclease -- component --force -o host/component/proclease.wasm` and commit it",
        shipped.len(),
        proclease::component::BYTES.len(),
        proclease::component::SHA256
    );
}

/// The portable artifact (`host/component/proclease-portable.wasm`, what `proclease component
/// --portable` writes) is likewise the one built from this source: the component and the
/// portable store, composed by `host/build.rs`.
#[test]
fn the_shipped_portable_artifact_is_the_one_built_from_source() {
    let prebuilt = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/component/proclease-portable.wasm");
    let shipped = std::fs::read(&prebuilt).expect("host/component/proclease-portable.wasm is readable");
    assert!(
        shipped == proclease::component::PORTABLE_BYTES,
        "host/component/proclease-portable.wasm ({} bytes) is not the artifact built from this source ({} bytes, sha256 {}): \
         refresh it with `cargo run -p proclease -- component --portable --force -o host/component/proclease-portable.wasm` and commit it",
        shipped.len(),
        proclease::component::PORTABLE_BYTES.len(),
        proclease::component::PORTABLE_SHA256
    );
}

/// The portable artifact's boundary is exactly world `proclease-portable`: the system-call
/// contract and the effects not on it yet in; the component's exports, and the portable
/// store's `state-store`, `workspace` and `plugin-catalog` (and its own `workspace-advice` and
/// `store-advice`, for its host's messages, and `recovery-turn`), out; none of the three imported
/// (the portable store inside provides them), no WASI.
#[test]
fn the_portable_artifact_imports_and_exports_exactly_what_its_world_declares() {
    let (imports, exports) = world_items_of("proclease-portable");
    let mut shipped_imports: Vec<String> = proclease::component::portable_imports().map(String::from).collect();
    shipped_imports.sort();
    assert_eq!(shipped_imports, imports);
    let mut shipped_exports: Vec<String> = proclease::component::portable_exports().map(String::from).collect();
    shipped_exports.sort();
    assert_eq!(shipped_exports, exports);
    let mut component_and_store = world_items().1;
    component_and_store
        .extend(["state-store", "workspace", "plugin-catalog", "workspace-advice", "store-advice", "recovery-turn"].map(|name| format!("proclease:lease/{name}@0.3.0")));
    component_and_store.sort();
    assert_eq!(component_and_store, exports, "the component's exports and the store's");
    assert!(!imports.iter().any(|i| i.contains("/state-store@") || i.contains("/workspace@") || i.contains("/plugin-catalog@")), "{imports:?}");
}
