//! The `entropy` import: randomness for UUID v4 ids and revisions, from the operating system.

use proclease_core::effects::Entropy;

use crate::bindings::proclease::lease::entropy;
use crate::runtime::HostState;

/// The operating system's random source.
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn random_bytes(&mut self, len: u32) -> Vec<u8> {
        let mut bytes = vec![0u8; len as usize];
        // A failing OS random source is unrecoverable for id generation: panic rather than
        // hand out a weak id. wasmtime does not turn a host panic into a trap: it unwinds
        // through the caller of the export, and the instance is never reused
        // (`runtime::Instance`'s drop).
        getrandom::fill(&mut bytes).expect("the operating system's random source failed");
        bytes
    }
}

impl entropy::Host for HostState {
    fn random_bytes(&mut self, len: u32) -> Vec<u8> {
        // Bounded: ids need 16 bytes; a guest asking for more than 4 KiB gets 4 KiB.
        self.effects.entropy.random_bytes(len.min(4096))
    }
}
