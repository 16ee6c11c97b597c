//! The same lease logic linked natively (proclease-core over the host's effect implementations)
//! versus called through the component in wasmtime, on tmpfs: record parse + canonicalize,
//! admission acquire + release, and a recovery scan of 64 live directory leases. Read the
//! results as ratios component / native within one run.
//!
//! `cargo bench -p proclease --bench component_overhead`

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use proclease::core::directory_leases::{self, Request};
use proclease::core::records::directory_lease::Role;
use proclease::core::{admission, records};
use proclease::effects::Effects;
use proclease::records::InputMode;
use proclease::{Admission, DirectoryLease, Host, Runtime, recover_directory_leases};

const RECORD: &str = "{\"helperOwner\":null,\"id\":\"11111111-1111-4111-8111-111111111111\",\"kind\":\"beeper-message-like-me-export-admission\",\"owner\":{\"bootId\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\"pid\":4242,\"processStartId\":\"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"},\"phase\":\"parent-owned\",\"revision\":\"22222222-2222-4222-a222-222222222222\",\"schemaVersion\":2}\n";

fn tmpfs() -> &'static Path {
    if Path::new("/dev/shm").is_dir() { Path::new("/dev/shm") } else { Path::new(env!("CARGO_TARGET_TMPDIR")) }
}

struct World {
    _dir: tempfile::TempDir,
    host: Host,
    root: std::path::PathBuf,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir_in(tmpfs()).expect("scratch");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let root = std::fs::canonicalize(dir.path()).expect("realpath");
        let host = Host::builder().state_home(root.join("state")).workspace_root(&root).build().expect("host");
        World { _dir: dir, host, root }
    }

    fn effects(&self) -> Effects {
        self.host.effects()
    }
}

fn bench(c: &mut Criterion) {
    let runtime = Runtime::shared().expect("component");

    // What every typed-API operation pays before it runs: a fresh instance in its own store.
    c.bench_function("instantiate", |b| b.iter(|| runtime.instantiate().expect("instance")));

    let mut group = c.benchmark_group("parse+canonicalize");
    group.bench_function("native", |b| b.iter(|| records::export_admission::parse_file(RECORD).expect("valid")));
    let mut instance = runtime.instantiate().expect("instance");
    group.bench_function("component", |b| b.iter(|| instance.records().parse_export_admission(RECORD, InputMode::File).expect("valid")));
    group.finish();

    let world = World::new();
    let mut group = c.benchmark_group("admission acquire+release (tmpfs)");
    group.sample_size(50);
    group.bench_function("native", |b| {
        b.iter(|| {
            let mut fx = world.effects();
            let mut handle = admission::acquire(&mut *fx.store, &mut *fx.processes, &mut *fx.entropy).expect("acquire");
            admission::release(&mut handle, &mut *fx.store).expect("release");
        })
    });
    group.bench_function("component", |b| {
        b.iter(|| {
            let mut admission = Admission::acquire(runtime, world.effects()).expect("acquire");
            admission.release().expect("release");
        })
    });
    // The bare syscall sequence acquire + release performs on an empty slot: read the absent
    // claim, write a temporary (O_EXCL, write, fsync), link it into place, unlink the temporary,
    // fsync the directory; then open + read + hash the claim, unlink it, fsync the directory.
    let floor_dir = tempfile::tempdir_in(tmpfs()).expect("floor");
    let dir = rustix::fs::open(floor_dir.path(), rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY, rustix::fs::Mode::empty()).expect("dir");
    group.bench_function("floor: bare syscalls", |b| {
        b.iter(|| {
            use rustix::fs::{AtFlags, Mode, OFlags};
            use std::io::{Read as _, Write as _};
            assert!(rustix::fs::openat(&dir, "active.json", OFlags::RDONLY, Mode::empty()).is_err());
            let fd = rustix::fs::openat(&dir, "tmp", OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL, Mode::from_raw_mode(0o600)).expect("temp");
            let mut file = std::fs::File::from(fd);
            file.write_all(RECORD.as_bytes()).expect("write");
            file.sync_all().expect("fsync");
            rustix::fs::linkat(&dir, "tmp", &dir, "active.json", AtFlags::empty()).expect("link");
            rustix::fs::unlinkat(&dir, "tmp", AtFlags::empty()).expect("unlink");
            rustix::fs::fsync(&dir).expect("fsync dir");
            let mut text = Vec::new();
            std::fs::File::from(rustix::fs::openat(&dir, "active.json", OFlags::RDONLY, Mode::empty()).expect("open")).read_to_end(&mut text).expect("read");
            assert_eq!(proclease::core::digest::sha256_hex(&text).len(), 64);
            rustix::fs::unlinkat(&dir, "active.json", AtFlags::empty()).expect("unlink");
            rustix::fs::fsync(&dir).expect("fsync dir");
        })
    });
    group.finish();

    // 64 leases of this (live) process: a recovery run inspects all of them and removes none.
    let world = World::new();
    let parent = world.root.join("work");
    std::fs::create_dir(&parent).expect("parent");
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let mut leases = Vec::new();
    for n in 0..64 {
        let dir = parent.join(format!("lease-{n}"));
        std::fs::create_dir(&dir).expect("dir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let request = Request { role: Role::RawWorking, path: dir.to_str().expect("utf-8").into(), output_root: None, recover_after_ms: 2e12, now_ms: Some(1000.0) };
        leases.push(DirectoryLease::create(runtime, world.effects(), &request).expect("lease"));
    }
    let mut group = c.benchmark_group("recovery scan of 64 live leases (tmpfs)");
    group.sample_size(30);
    group.bench_function("native", |b| {
        b.iter(|| {
            let mut fx = world.effects();
            let effects =
                directory_leases::Effects { store: &mut *fx.store, processes: &mut *fx.processes, workspace: &mut *fx.workspace, clock: &mut *fx.clock, entropy: &mut *fx.entropy };
            let report = directory_leases::recover(Some(5000.0), effects).expect("recover");
            assert_eq!(report.active, 64);
        })
    });
    group.bench_function("component", |b| {
        b.iter(|| {
            let report = recover_directory_leases(runtime, world.effects(), Some(5000.0)).expect("recover");
            assert_eq!(report.active, 64);
        })
    });
    group.finish();
    drop(leases);
}

criterion_group!(benches, bench);
criterion_main!(benches);
