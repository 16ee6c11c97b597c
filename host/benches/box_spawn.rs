//! What starting a command in a box costs as the supervisor's heap grows (issue #44: "the box's
//! spawn cost flat (± 10 %) from a 1 MiB to a 64 MiB supervisor heap").
//!
//! For a heap of 1 and 64 MiB (a ballast allocated and touched, so that its pages are mapped),
//! three ways to start `true` and wait for it:
//! - `std::process::Command` alone: glibc's `posix_spawn` (`CLONE_VM | CLONE_VFORK`), whose cost
//!   does not grow with the heap: the anchor;
//! - `containment::spawn` with `Containment::None`: the same command, as proclease starts it
//!   without a box;
//! - `containment::spawn` with `Containment::Required`: the box (a PID namespace with its own
//!   `/proc`, proclease's init). Today the init is a `fork` of the supervisor and the command a
//!   `fork` of the init (`containment.rs`), so each copies the supervisor's page tables.
//!
//! Read the box's row against the anchor of the same heap, and each row's 64 MiB time against its
//! 1 MiB time. Needs what a box needs (root, or unprivileged user namespaces); without it the box
//! rows are skipped and say so.
//!
//! `cargo bench -p proclease --bench box_spawn`

use std::hint::black_box;
use std::process::Command;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use proclease::containment::{self, BoxOptions, Containment};

/// A heap ballast of `mib` MiB, every page written once.
fn ballast(mib: usize) -> Vec<u8> {
    let mut heap = vec![0u8; mib << 20];
    for page in heap.chunks_mut(4096) {
        page[0] = 1;
    }
    heap
}

fn run_in(containment: Containment) {
    let mut command = Command::new("true");
    let mut tree = containment::spawn(&mut command, &BoxOptions { containment, ..BoxOptions::default() }).expect("spawn");
    let status = tree.wait().expect("wait");
    assert!(status.success(), "true failed: {status}");
}

fn bench(c: &mut Criterion) {
    let boxed = containment::available();
    if let Err(reason) = &boxed {
        eprintln!("box rows skipped: no box can be made here ({reason})");
    }
    let mut group = c.benchmark_group("start `true` and wait");
    group.sample_size(50);
    for mib in [1usize, 64] {
        let heap = ballast(mib);
        group.bench_with_input(BenchmarkId::new("anchor: std Command (posix_spawn)", format!("{mib} MiB heap")), &mib, |b, _| {
            b.iter(|| {
                let status = Command::new("true").status().expect("spawn");
                assert!(status.success());
            })
        });
        group.bench_with_input(BenchmarkId::new("containment::spawn, no box", format!("{mib} MiB heap")), &mib, |b, _| b.iter(|| run_in(Containment::None)));
        if boxed.is_ok() {
            group.bench_with_input(BenchmarkId::new("containment::spawn, box", format!("{mib} MiB heap")), &mib, |b, _| b.iter(|| run_in(Containment::Required)));
        }
        black_box(&heap);
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
