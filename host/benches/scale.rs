//! list / repair of 100, 1,000 and 10,000 invocation leases through the component, against a
//! read-all-files floor (readdir, read every file, sha256 it) and a native-validation floor (the
//! same listing natively: same store, every record validated), on tmpfs. Read the results as
//! time per lease and as ratios to the floor within one run.
//!
//! `cargo bench -p proclease --bench scale`

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use proclease::core::digest::sha256_hex;
use proclease::core::invocation_leases::{self, lease_path};
use proclease::core::records::invocation_lease::{Containment, ContainmentStatus, InvocationLease, LeaseOwner};
use proclease::core::records::portable_identity;
use proclease::state_store::SharedStore;
use proclease::{Host, Runtime, list_invocation_leases, repair_invocation_leases};

fn tmpfs() -> &'static Path {
    if Path::new("/dev/shm").is_dir() { Path::new("/dev/shm") } else { Path::new(env!("CARGO_TARGET_TMPDIR")) }
}

fn floor(dir: &Path) -> usize {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).expect("list") {
        let mut text = Vec::new();
        std::fs::File::open(entry.expect("entry").path()).expect("open").read_to_end(&mut text).expect("read");
        total += sha256_hex(&text).len();
    }
    total
}

fn bench(c: &mut Criterion) {
    let runtime = Runtime::shared().expect("component");
    let own = proclease::process_identity::ProcessIdentity::new().self_identity().expect("own");
    let template = portable_identity::parse_value(&serde_json::json!({
        "pluginId": "portable-test", "pluginVersion": "1.0.0", "hostApiVersion": 1, "bundleSha256": "a".repeat(64),
        "manifestSha256": "b".repeat(64), "adapterId": "portable-test", "transport": "provider-api",
        "surfaceId": "portable-test", "operation": "records.read", "contractVersion": 1, "descriptorSha256": "c".repeat(64),
    }))
    .expect("identity");
    // What the host pays per listed lease after the component returns it: the lease crosses
    // as a structured record and the host re-derives its canonical text (`Parsed::canonical`).
    let one = InvocationLease {
        schema_version: 2,
        lease_id: "00000001-0000-4000-8000-000000000001".into(),
        run_id: "00000001-0000-4000-8000-000000000001".into(),
        identity: template.clone(),
        owner: LeaseOwner { process: own.clone(), token: "00000001-0000-4000-8000-000000000001".into() },
        acquired_at: "2026-07-25T12:00:00.000Z".into(),
        containment: Some(Containment { status: ContainmentStatus::ParentOwned, host: None }),
    };
    c.bench_function("host: canonical text of one listed lease", |b| b.iter(|| proclease::core::canonical_json::to_canonical_file(&one.to_value()).expect("canonical")));
    let mut group = c.benchmark_group("invocation leases at scale (tmpfs)");
    group.sample_size(10);
    for n in [100u64, 1000, 10_000] {
        let dir = tempfile::tempdir_in(tmpfs()).expect("scratch");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let host = Host::builder().state_home(dir.path().join("state")).build().expect("host");
        let store = host.store().clone();
        for i in 0..n {
            let id = format!("{:08x}-0000-4000-8000-{:012x}", i, i);
            let lease = InvocationLease {
                schema_version: 2,
                lease_id: id.clone(),
                run_id: id.clone(),
                identity: template.clone(),
                owner: LeaseOwner { process: own.clone(), token: id.clone() },
                acquired_at: "2026-07-25T12:00:00.000Z".into(),
                containment: Some(Containment { status: ContainmentStatus::ParentOwned, host: None }),
            }
            .parsed();
            store.create_if_absent(&lease_path(&id), &lease.canonical).expect("write");
        }
        let effects = || host.effects();
        let collection = dir.path().join("state/provider-plugin-state/.invocations");
        group.throughput(Throughput::Elements(n));
        group.bench_with_input(BenchmarkId::new("floor: read+hash all files", n), &n, |b, _| b.iter(|| floor(&collection)));
        group.bench_with_input(BenchmarkId::new("snapshot + batch read (store only)", n), &n, |b, _| {
            b.iter(|| {
                let snapshot = store.snapshot("provider-plugin-state/.invocations", false).expect("snapshot").expect("present");
                let names: Vec<String> = snapshot.entries.iter().map(|e| e.name.clone()).collect();
                let mut read = 0;
                for chunk in names.chunks(1000) {
                    read += store.read_batch("provider-plugin-state/.invocations", chunk, 32_768, 32_768 * chunk.len() as u32, &snapshot.identity).expect("batch").len();
                }
                assert_eq!(read as u64, n);
            })
        });
        // The fair floor: the same listing (same store, same validation of every record) in
        // native code, then a repair over it.
        group.bench_with_input(BenchmarkId::new("floor: native list (same store, native validation)", n), &n, |b, _| {
            b.iter(|| {
                let mut store = SharedStore::new(store.clone());
                assert_eq!(invocation_leases::list(&mut store).expect("list").len() as u64, n)
            })
        });
        group.bench_with_input(BenchmarkId::new("native repair", n), &n, |b, _| {
            b.iter(|| {
                let effects = host.effects();
                let (mut store, mut processes, mut catalog) = (effects.store, effects.processes, effects.catalog);
                let report = invocation_leases::repair(false, &mut *store, &mut *processes, &mut *catalog, &mut |_, _| {}).expect("repair");
                assert_eq!(u64::from(report.active), n)
            })
        });
        group.bench_with_input(BenchmarkId::new("list", n), &n, |b, _| b.iter(|| assert_eq!(list_invocation_leases(runtime, effects()).expect("list").len() as u64, n)));
        group.bench_with_input(BenchmarkId::new("repair", n), &n, |b, _| {
            b.iter(|| assert_eq!(u64::from(repair_invocation_leases(runtime, effects(), false).expect("repair").0.active), n))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
