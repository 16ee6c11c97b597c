//! The portable artifact (world `proclease-portable` of `wit/sys.wit`): the proclease component
//! with the portable store (`guest/portable`) plugged into its `state-store` and `workspace`
//! imports, composed with `wac-graph` (the Bytecode Alliance's composition library, what
//! `wac plug` runs). Used by `host/build.rs`.

use wac_graph::types::Package;
use wac_graph::{CompositionGraph, EncodeOptions};

/// The interfaces the portable store provides to the component: after composing, the artifact
/// must import neither (else a runtime would have to provide them, which is what it is for).
const PLUGGED: [&str; 2] = ["state-store", "workspace"];

/// `component` (the proclease component) with `store` (the portable store) plugged into its
/// imports, encoded and validated. Panics with a one-line reason when they do not fit: a change
/// to `wit/` that only one of them was rebuilt for.
pub fn compose(component: &[u8], store: &[u8]) -> Vec<u8> {
    let mut graph = CompositionGraph::new();
    let socket =
        Package::from_bytes("proclease:component", None, component.to_vec(), graph.types_mut()).unwrap_or_else(|e| panic!("the component does not parse as a package: {e:#}"));
    let socket = graph.register_package(socket).unwrap_or_else(|e| panic!("registering the component: {e:#}"));
    let plug = Package::from_bytes("proclease:portable-store", None, store.to_vec(), graph.types_mut())
        .unwrap_or_else(|e| panic!("the portable store does not parse as a package: {e:#}"));
    let plug = graph.register_package(plug).unwrap_or_else(|e| panic!("registering the portable store: {e:#}"));
    wac_graph::plug(&mut graph, vec![plug], socket).unwrap_or_else(|e| panic!("the portable store does not plug into the component: {e:#}"));
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
