//! Export admission acquire + release on etcd, through the component, against etcd's own
//! transaction round trip (create-if-absent as `If(CreateRevision == 0) Then(Put)`, then a
//! delete): read the result as a ratio within one run. Starts its own etcd (Debian's
//! etcd-server) on free loopback ports.
//!
//! `cargo bench -p proclease-tests --bench cluster`

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use proclease::core::digest::sha256_hex;
use proclease::effects::Effects;
use proclease::process_identity::ProcessIdentity;
use proclease::state_store::etcd::{EtcdStore, SharedEtcdStore};
use proclease::{Admission, Runtime};
use proclease_tests::etcd_server::Etcd;

fn bench(c: &mut Criterion) {
    let Some(etcd) = Etcd::start() else { return };
    let runtime = Runtime::shared().expect("component");
    let store = Arc::new(etcd.store("bench"));
    let floor_store: EtcdStore = etcd.store("floor");
    let processes = Arc::new(ProcessIdentity::new());
    let effects = || Effects { store: Box::new(SharedEtcdStore(store.clone())), ..Effects::native(None, processes.clone()) };
    let mut group = c.benchmark_group("admission on etcd");
    // The floor: the same two writes as bare etcd transactions through the same client.
    group.bench_function("floor: create + remove transactions", |b| {
        b.iter(|| {
            assert!(floor_store.create_if_absent("recovery/floor/active.json", "{}\n").expect("create"));
            assert!(floor_store.remove_if_unchanged("recovery/floor/active.json", &sha256_hex(b"{}\n")).expect("remove"));
        })
    });
    group.bench_function("admission acquire + release (component)", |b| {
        b.iter(|| {
            let mut admission = Admission::acquire(runtime, effects()).expect("acquire");
            admission.release().expect("release");
        })
    });
    // What a user of cluster mode runs: the facade on `--store etcd://…`, whose writes go through
    // the presence session's check and are fenced by its key (one more compare per transaction).
    let home = tempfile::tempdir().expect("state home");
    let host = proclease::Host::builder().state_home(home.path().join("state")).store(etcd.url("host")).build().expect("cluster host");
    group.bench_function("admission acquire + release (cluster-mode host, fenced)", |b| {
        b.iter(|| {
            let mut admission = host.acquire_admission().expect("acquire");
            admission.release().expect("release");
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
