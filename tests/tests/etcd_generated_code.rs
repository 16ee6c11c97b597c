//! The etcd client's gRPC code is generated once and checked in (`vendor/etcd-client`, issue
//! #30), so that building proclease — cluster mode included — needs no `protoc`. This test
//! regenerates it from the crate's `proto/` files the way etcd-client 0.21.1's own build script
//! did (`tonic_prost_build`, client only) with the protoc shipped in `protoc-bin-vendored`, and
//! requires the checked-in files to be byte for byte what comes out.
//!
//! After upgrading the vendored crate, write the new files with
//! `PROCLEASE_REGENERATE_ETCD_CODE=1 cargo test -p proclease-tests --test etcd_generated_code`.

use std::path::{Path, PathBuf};

/// The files etcd-client's `src/rpc/pb.rs` includes, one per proto package.
const PACKAGES: [&str; 5] = ["authpb", "etcdserverpb", "mvccpb", "v3electionpb", "v3lockpb"];

/// The proto files etcd-client's build script compiled (its `build.rs`, 0.21.1).
const PROTOS: [&str; 5] = [
    "proto/etcd/api/authpb/auth.proto",
    "proto/etcd/api/etcdserverpb/rpc.proto",
    "proto/etcd/api/mvccpb/kv.proto",
    "proto/etcd/server/etcdserver/api/v3election/v3electionpb/v3election.proto",
    "proto/etcd/server/etcdserver/api/v3lock/v3lockpb/v3lock.proto",
];

fn vendored_crate() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ lives in the workspace root").join("vendor/etcd-client")
}

#[test]
fn the_checked_in_etcd_grpc_code_is_what_its_protos_generate() {
    let crate_dir = vendored_crate();
    let out = tempfile::tempdir().expect("a temporary directory");
    let protoc = protoc_bin_vendored::protoc_bin_path().expect("protoc-bin-vendored ships a protoc for this platform");
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc);
    let protos: Vec<PathBuf> = PROTOS.iter().map(|p| crate_dir.join(p)).collect();
    tonic_prost_build::configure()
        .build_server(false)
        .emit_rerun_if_changed(false)
        .out_dir(out.path())
        .compile_with_config(config, &protos, &[crate_dir.join("proto")])
        .expect("the etcd protos compile");
    let checked_in = crate_dir.join("src/rpc/generated");
    let regenerate = std::env::var_os("PROCLEASE_REGENERATE_ETCD_CODE").is_some();
    for package in PACKAGES {
        let file = format!("{package}.rs");
        let generated = std::fs::read(out.path().join(&file)).unwrap_or_else(|e| panic!("{file} was not generated: {e}"));
        if regenerate {
            std::fs::write(checked_in.join(&file), &generated).expect("write the regenerated file");
            continue;
        }
        let kept = std::fs::read(checked_in.join(&file)).unwrap_or_else(|e| panic!("vendor/etcd-client/src/rpc/generated/{file}: {e}"));
        assert!(
            kept == generated,
            "vendor/etcd-client/src/rpc/generated/{file} differs from what its protos generate: regenerate it \
             (PROCLEASE_REGENERATE_ETCD_CODE=1 cargo test -p proclease-tests --test etcd_generated_code)"
        );
    }
    // (The protos also generate `google.api.rs` and `grpc.gateway.…options.rs`, for their HTTP
    // annotations; etcd-client never included them.)
}
