//! Deliberate bugs that a test build can switch on, one at a time, so that the interleaving
//! explorer (`tests/tests/interleavings.rs`, `docs/reliability.md`) can show that it finds each
//! of them: a checker that never fails proves nothing.
//!
//! Without the `mutations` feature (every shipped build: the component, the host, the CLI) every
//! switch is the constant `false` and the compiler removes the branch. With it, a switch is set
//! per thread ([`set`]), so that tests running side by side in one test binary do not see each
//! other's bugs.

/// A bug that the code once had, or that a plausible edit would bring back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// Directory recovery trusts the claim it read before probing the owner: an owner that
    /// released its lease (its directory kept as the result) and exited in between looks dead
    /// with a stale claim in hand, and its kept directory is deleted (fixed in 96c0d50; §6A.6
    /// recovery, `docs/deviations.md` 23).
    RecoveryTrustsStaleClaim,
    /// Finishing a dead creator's intent trusts the intent it read before probing the creator:
    /// a creator that leased its new directory, removed its intent, released the lease (the
    /// directory stays) and exited in between looks dead with a stale intent in hand, and its
    /// kept, empty directory is removed (found by the explorer, fixed with it).
    CreationRecoveryTrustsStaleIntent,
    /// Directory recovery removes a dead owner's directory without looking, under the
    /// lease-creation lock, for what else claims it now (another lease of the same directory, a
    /// lease inside it, a creation in flight): `docs/deviations.md` 23, 24.
    RecoveryIgnoresOtherClaims,
    /// The admission's takeover of a dead owner's claim compares against the claim as it is
    /// when removing it rather than the one whose owner was judged: a claim another process
    /// wrote meanwhile (after its own takeover) is removed too, and both hold the admission
    /// (§6A.5, §3 compare-and-swap).
    AdmissionTakeoverComparesCurrentClaim,
    /// A conflict check ([`crate::directory_leases::Run::conflict`]) answers "nothing claims
    /// it" when an entry of the lease collection could not be read as a lease (changed during
    /// the read, a newer writer's, cut short): two leases then claim one directory, and the
    /// recovery of one deletes it under the other (the hole `docs/deviations.md` 24 closed).
    ConflictIgnoresUndecidedEntries,
    /// A new lease leaves its directory in a dead creator's intent: released and kept as its
    /// run's result, the (empty) directory is removed by that intent's recovery (the hole
    /// `docs/deviations.md` 27 closed).
    LeaseLeavesDeadCreatorsIntent,
}

#[cfg(feature = "mutations")]
mod switch {
    extern crate std;
    use super::Mutation;
    use core::cell::Cell;

    std::thread_local! {
        static ACTIVE: Cell<Option<Mutation>> = const { Cell::new(None) };
    }

    pub fn set(mutation: Option<Mutation>) {
        ACTIVE.with(|active| active.set(mutation));
    }

    pub fn active(mutation: Mutation) -> bool {
        ACTIVE.with(|active| active.get() == Some(mutation))
    }
}

/// Switches `mutation` on for this thread (`None`: every switch off). Only with the
/// `mutations` feature.
#[cfg(feature = "mutations")]
pub fn set(mutation: Option<Mutation>) {
    switch::set(mutation);
}

/// Whether `mutation` is switched on for this thread: always `false` without the `mutations`
/// feature.
#[inline(always)]
pub fn active(mutation: Mutation) -> bool {
    #[cfg(feature = "mutations")]
    {
        switch::active(mutation)
    }
    #[cfg(not(feature = "mutations"))]
    {
        let _ = mutation;
        false
    }
}
