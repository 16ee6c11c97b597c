//! The portable artifact (world `proclease-portable` of `wit/sys.wit`): the proclease component
//! with the portable store (`guest/portable`) plugged into its `state-store` and `workspace`
//! imports, composed with `wac-graph` (the Bytecode Alliance's composition library, what
//! `wac plug` runs). Used by `host/build.rs`.

use wac_graph::types::Package;
use wac_graph::{CompositionGraph, EncodeOptions};

/// The interfaces the portable store provides to the component: after composing, the artifact
/// must import neither (else a runtime would have to provide them, which is what it is for).
/// It also exports both, for its host's own use of the same protocols (a directory's facts
/// before leasing it, the lease-creation lock, a run's marker directories): a host that loads
/// the artifact needs no store or workspace code of its own.
const PLUGGED: [&str; 3] = ["state-store", "workspace", "plugin-catalog"];

/// `component` (the proclease component) with `store` (the portable store) plugged into its
/// imports, and the component's exports and the store's (those [`PLUGGED`] in, and its own
/// such as `workspace-advice`) exported, encoded and
/// validated. What `wac_graph::plug` does, plus the store's exports. Panics with a one-line
/// reason when they do not fit: a change to `wit/` that only one of them was rebuilt for.
pub fn compose(component: &[u8], store: &[u8]) -> Vec<u8> {
    let mut graph = CompositionGraph::new();
    let socket =
        Package::from_bytes("proclease:component", None, component.to_vec(), graph.types_mut()).unwrap_or_else(|e| panic!("the component does not parse as a package: {e:#}"));
    let socket = graph.register_package(socket).unwrap_or_else(|e| panic!("registering the component: {e:#}"));
    let plug = Package::from_bytes("proclease:portable-store", None, store.to_vec(), graph.types_mut())
        .unwrap_or_else(|e| panic!("the portable store does not parse as a package: {e:#}"));
    let plug = graph.register_package(plug).unwrap_or_else(|e| panic!("registering the portable store: {e:#}"));

    let socket_instance = graph.instantiate(socket);
    let store_instance = graph.instantiate(plug);
    let store_exports: Vec<String> = graph.types()[graph[plug].ty()].exports.keys().cloned().collect();
    for name in &store_exports {
        let mut cache = Default::default();
        let mut checker = wac_graph::types::SubtypeChecker::new(&mut cache);
        let (export_ty, import_ty) = (graph.types()[graph[plug].ty()].exports[name], graph.types()[graph[socket].ty()].imports.get(name).copied());
        let Some(import_ty) = import_ty else {
            // The store's own (`workspace-advice`): exported below, plugged into nothing.
            assert!(!PLUGGED.contains(&name.as_str()), "the component imports no `{name}`, which the portable store exports (rebuild both from one `wit/`)");
            continue;
        };
        if let Err(e) = checker.is_subtype(export_ty, graph.types(), import_ty, graph.types()) {
            panic!("the portable store's `{name}` does not plug into the component's import: {e:#}");
        }
        let export = graph.alias_instance_export(store_instance, name).unwrap_or_else(|e| panic!("the portable store's `{name}`: {e:#}"));
        graph.set_instantiation_argument(socket_instance, name, export).unwrap_or_else(|e| panic!("plugging `{name}`: {e:#}"));
    }
    let component_exports: Vec<String> = graph.types()[graph[socket].ty()].exports.keys().cloned().collect();
    for (instance, name) in component_exports.iter().map(|n| (socket_instance, n)).chain(store_exports.iter().map(|n| (store_instance, n))) {
        let export = graph.alias_instance_export(instance, name).unwrap_or_else(|e| panic!("exporting `{name}`: {e:#}"));
        graph.export(export, name).unwrap_or_else(|e| panic!("exporting `{name}`: {e:#}"));
    }

    let bytes = graph.encode(EncodeOptions::default()).unwrap_or_else(|e| panic!("encoding the portable artifact: {e:#}"));
    let interfaces = interfaces(&bytes);
    for name in PLUGGED {
        let import = format!("import proclease:lease/{name}@");
        assert!(
            !interfaces.lines().any(|line| line.starts_with(&import)),
            "the portable artifact still imports `{name}`: the portable store's export does not match the component's import (rebuild both from one `wit/`)"
        );
    }
    bytes
}

/// What the artifact `bytes` imports and exports, one line each (`import NAME`, then
/// `export NAME`), in the component's order.
pub fn interfaces(bytes: &[u8]) -> String {
    let mut graph = CompositionGraph::new();
    let package = Package::from_bytes("proclease:portable", None, bytes.to_vec(), graph.types_mut()).unwrap_or_else(|e| panic!("the portable artifact does not parse: {e:#}"));
    let world = &graph.types()[package.ty()];
    let imports = world.imports.keys().map(|name| format!("import {name}\n"));
    let exports = world.exports.keys().map(|name| format!("export {name}\n"));
    imports.chain(exports).collect()
}
