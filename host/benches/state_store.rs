//! Cost of the state-store primitives next to the bare syscall sequence each performs (its
//! durability floor), on tmpfs (`/dev/shm`: shows the code) and on the work disk (the target
//! directory: shows fsync); and the cost of the reference's mutation claims (§3.5), which every
//! mutation takes so that a running ghostget and proclease never lose each other's updates: the
//! same primitive with the claims turned off (`… without claims`). Read the results as ratios
//! within one run: primitive / floor, primitive / primitive without claims.
//!
//! `cargo bench -p proclease --bench state_store`

use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use proclease::core::digest::sha256_hex;
use rustix::fs::{AtFlags, Mode, OFlags};

const CONTENT_A: &str = "{\"helperOwner\":null,\"id\":\"11111111-1111-4111-8111-111111111111\",\"kind\":\"beeper-message-like-me-export-admission\",\"owner\":{\"bootId\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\"pid\":4242,\"processStartId\":\"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"},\"phase\":\"parent-owned\",\"revision\":\"22222222-2222-4222-a222-222222222222\",\"schemaVersion\":2}\n";
const CONTENT_B: &str = "{\"helperOwner\":null,\"id\":\"11111111-1111-4111-8111-111111111111\",\"kind\":\"beeper-message-like-me-export-admission\",\"owner\":{\"bootId\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\"pid\":4242,\"processStartId\":\"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"},\"phase\":\"parent-owned\",\"revision\":\"33333333-3333-4333-a333-333333333333\",\"schemaVersion\":2}\n";

fn places() -> Vec<(&'static str, PathBuf)> {
    let mut places = Vec::new();
    if Path::new("/dev/shm").is_dir() {
        places.push(("tmpfs", PathBuf::from("/dev/shm")));
    }
    places.push(("disk", PathBuf::from(env!("CARGO_TARGET_TMPDIR"))));
    places
}

fn open_dir(path: &Path) -> OwnedFd {
    rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).expect("open dir")
}

/// The floor of create-if-absent: exclusive temp, write, fsync, link, unlink temp, fsync dir.
fn floor_create(dir: &OwnedFd, name: &str, content: &str) {
    let fd = rustix::fs::openat(dir, "tmp", OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC, Mode::from_raw_mode(0o600)).expect("temp");
    let mut file = std::fs::File::from(fd);
    file.write_all(content.as_bytes()).expect("write");
    file.sync_all().expect("fsync");
    rustix::fs::linkat(dir, "tmp", dir, name, AtFlags::empty()).expect("link");
    rustix::fs::unlinkat(dir, "tmp", AtFlags::empty()).expect("unlink");
    rustix::fs::fsync(dir).expect("fsync dir");
}

/// The floor of a compare: open, read, hash.
fn floor_compare(dir: &OwnedFd, name: &str, expected: &str) {
    let fd = rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).expect("open");
    let mut text = Vec::new();
    std::fs::File::from(fd).read_to_end(&mut text).expect("read");
    assert_eq!(sha256_hex(&text), expected);
}

/// The floor of replace-if-unchanged: compare, temp, write, fsync, rename, fsync dir.
fn floor_replace(dir: &OwnedFd, name: &str, expected: &str, content: &str) {
    floor_compare(dir, name, expected);
    let fd = rustix::fs::openat(dir, "tmp", OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC, Mode::from_raw_mode(0o600)).expect("temp");
    let mut file = std::fs::File::from(fd);
    file.write_all(content.as_bytes()).expect("write");
    file.sync_all().expect("fsync");
    rustix::fs::renameat(dir, "tmp", dir, name).expect("rename");
    rustix::fs::fsync(dir).expect("fsync dir");
}

/// The floor of remove-if-unchanged: compare, unlink, fsync dir.
fn floor_remove(dir: &OwnedFd, name: &str, expected: &str) {
    floor_compare(dir, name, expected);
    rustix::fs::unlinkat(dir, name, AtFlags::empty()).expect("unlink");
    rustix::fs::fsync(dir).expect("fsync dir");
}

fn bench(c: &mut Criterion) {
    for (label, base) in places() {
        let scratch = tempfile::tempdir_in(&base).expect("scratch");
        let host = proclease::Host::builder().state_home(scratch.path().join("state")).build().expect("host");
        let store = host.store();
        store.ensure_private_directory("recovery/bench").expect("collection");
        let floor_path = scratch.path().join("floor");
        std::fs::create_dir(&floor_path).expect("floor dir");
        let floor = open_dir(&floor_path);
        let mut group = c.benchmark_group(format!("store-{label}"));
        group.sample_size(30);

        let mut n = 0u64;
        for claims in [true, false] {
            store.benchmark_mutation_claims(claims);
            let name = if claims { "create-if-absent" } else { "create-if-absent without claims" };
            // A collection of its own each, so that both list collections of the same sizes.
            let collection = if claims { "recovery/bench" } else { "recovery/bench-unclaimed" };
            let mut m = 0u64;
            group.bench_function(name, |b| {
                b.iter(|| {
                    m += 1;
                    assert!(store.create_if_absent(&format!("{collection}/c{m}.json"), CONTENT_A).expect("create"));
                })
            });
        }
        store.benchmark_mutation_claims(true);
        group.bench_function("floor/create", |b| {
            b.iter(|| {
                n += 1;
                floor_create(&floor, &format!("c{n}.json"), CONTENT_A);
            })
        });

        store.create_if_absent("recovery/bench-replace/r.json", CONTENT_A).expect("seed");
        let (hash_a, hash_b) = (sha256_hex(CONTENT_A.as_bytes()), sha256_hex(CONTENT_B.as_bytes()));
        let mut flip = false;
        for claims in [true, false] {
            store.benchmark_mutation_claims(claims);
            let name = if claims { "replace-if-unchanged" } else { "replace-if-unchanged without claims" };
            group.bench_function(name, |b| {
                b.iter(|| {
                    let (expected, next) = if flip { (&hash_b, CONTENT_A) } else { (&hash_a, CONTENT_B) };
                    assert!(store.replace_if_unchanged("recovery/bench-replace/r.json", expected, next).expect("replace"));
                    flip = !flip;
                })
            });
        }
        store.benchmark_mutation_claims(true);
        floor_create(&floor, "r.json", CONTENT_A);
        let mut flip = false;
        group.bench_function("floor/replace", |b| {
            b.iter(|| {
                let (expected, next) = if flip { (&hash_b, CONTENT_A) } else { (&hash_a, CONTENT_B) };
                floor_replace(&floor, "r.json", expected, next);
                flip = !flip;
            })
        });

        group.bench_function("remove-if-unchanged", |b| {
            b.iter_batched(
                || {
                    n += 1;
                    let path = format!("recovery/bench-remove/d{n}.json");
                    store.create_if_absent(&path, CONTENT_A).expect("setup");
                    path
                },
                |path| assert!(store.remove_if_unchanged(&path, &hash_a).expect("remove")),
                BatchSize::PerIteration,
            )
        });
        group.bench_function("floor/remove", |b| {
            b.iter_batched(
                || {
                    n += 1;
                    let name = format!("d{n}.json");
                    floor_create(&floor, &name, CONTENT_A);
                    name
                },
                |name| floor_remove(&floor, &name, &hash_a),
                BatchSize::PerIteration,
            )
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
