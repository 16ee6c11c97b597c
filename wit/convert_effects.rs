// The conversions of what the protocols below the system-call seam report (failures, owners
// and their facts, the state store's and the workspace's answers): spliced into `convert.rs`
// with `include!`, and into the portable store (`guest/portable`), whose world exports
// `state-store` and `workspace` where the component imports them. It uses `enum_map!` and
// `struct_map!` (`convert_macros.rs`) and the paths `t` (types), `pi` (process-identity), `ss`
// (state-store) and `ws` (workspace).

// ---------- failures ----------

enum_map!(failure_kind_to_wit, failure_kind_from_wit, FailureKind, t::FailureKind, {
    Io <=> Io, Permission <=> Permission, Unreachable <=> Unreachable, Contended <=> Contended, Refused <=> Refused,
    Unsafe <=> Unsafe, IdentityChanged <=> IdentityChanged, Unavailable <=> Unavailable, Refusal <=> Refusal,
});

struct_map!(failure_to_wit, failure_from_wit, Failure, t::Failure, {
    kind => (failure_kind_to_wit, failure_kind_from_wit), message, errno, path, operation,
});

// ---------- process identity ----------

struct_map!(owner_to_wit, owner_from_wit, Owner, t::Owner, { pid, boot_id, process_start_id });

enum_map!(status_to_wit, status_from_wit, OwnerStatus, t::OwnerStatus, {
    ExactLiveOwner <=> ExactLiveOwner, DifferentOrDead <=> DifferentOrDead, Unknown <=> Unknown,
});

enum_map!(witness_to_wit, witness_from_wit, WitnessState, pi::WitnessState, {
    Absent <=> Absent, Held <=> Held, Free <=> Free, Untestable <=> Untestable,
});

fn proc_read_to_wit(r: ProcRead) -> pi::ProcRead {
    match r {
        ProcRead::Stat(text) => pi::ProcRead::Stat(text),
        ProcRead::Missing => pi::ProcRead::Missing,
        ProcRead::Unreadable => pi::ProcRead::Unreadable,
    }
}

fn proc_read_from_wit(r: pi::ProcRead) -> ProcRead {
    match r {
        pi::ProcRead::Stat(text) => ProcRead::Stat(text),
        pi::ProcRead::Missing => ProcRead::Missing,
        pi::ProcRead::Unreadable => ProcRead::Unreadable,
    }
}

struct_map!(view_to_wit, view_from_wit, ProcView, pi::ProcView, { pid_namespace, boottime_offset_ns, clock_ticks_per_second });

enum_map!(remote_to_wit, remote_from_wit, RemotePresence, pi::RemotePresence, {
    NotClustered <=> NotClustered, Registered <=> Registered, Absent <=> Absent, Unreachable <=> Unreachable,
});

enum_map!(tree_to_wit, tree_from_wit, TreeState, pi::TreeState, {
    Absent <=> Absent, Populated <=> Populated, Empty <=> Empty, Unreadable <=> Unreadable,
});

struct_map!(facts_to_wit, facts_from_wit, OwnerFacts, pi::OwnerFacts, {
    boot_id, witness => (witness_to_wit, witness_from_wit), recorded_pid_namespace, spawned => (witness_to_wit, witness_from_wit), spawned_uncontained,
    stat => (proc_read_to_wit, proc_read_from_wit), tasks, view => (view_to_wit, view_from_wit),
    remote => (remote_to_wit, remote_from_wit), tree => (tree_to_wit, tree_from_wit),
});

// ---------- records the effects report ----------

struct_map!(directory_identity_to_wit, directory_identity_from_wit, DirectoryIdentity, t::DirectoryIdentity, { device, inode, birthtime_ns });

struct_map!(finished_run_to_wit, finished_run_from_wit, FinishedRun, pi::RunOutcome, {
    directory_identity => (directory_identity_to_wit, directory_identity_from_wit), exit_code, signal
});

// ---------- state store ----------

struct_map!(collection_identity_to_wit, collection_identity_from_wit, CollectionIdentity, ss::CollectionIdentity, { device, inode });

enum_map!(entry_kind_to_wit, entry_kind_from_wit, EntryKind, ss::EntryKind, {
    File <=> File, Directory <=> Directory, SymbolicLink <=> SymbolicLink, Other <=> Other,
});

pub(crate) fn snapshot_to_wit(s: CollectionSnapshot) -> ss::CollectionSnapshot {
    ss::CollectionSnapshot {
        identity: collection_identity_to_wit(s.identity),
        entries: s
            .entries
            .into_iter()
            .map(|e| ss::CollectionEntry { name: e.name, kind: entry_kind_to_wit(e.kind), identity: e.identity.map(collection_identity_to_wit) })
            .collect(),
    }
}

pub(crate) fn snapshot_from_wit(s: ss::CollectionSnapshot) -> CollectionSnapshot {
    CollectionSnapshot {
        identity: collection_identity_from_wit(s.identity),
        entries: s
            .entries
            .into_iter()
            .map(|e| CollectionEntry { name: e.name, kind: entry_kind_from_wit(e.kind), identity: e.identity.map(collection_identity_from_wit) })
            .collect(),
    }
}

enum_map!(batch_invalid_to_wit, batch_invalid_from_wit, BatchInvalid, ss::BatchInvalidReason, {
    UnsafeFile <=> UnsafeFile, Unreadable <=> Unreadable, FileByteBound <=> FileByteBound,
    AggregateByteBound <=> AggregateByteBound, ChangedDuringRead <=> ChangedDuringRead, InvalidUtf8 <=> InvalidUtf8,
});

pub(crate) fn batch_to_wit(entries: Vec<(String, BatchStatus)>) -> Vec<ss::BatchEntry> {
    entries
        .into_iter()
        .map(|(name, status)| ss::BatchEntry {
            name,
            status: match status {
                BatchStatus::Present(text) => ss::BatchStatus::Present(text),
                BatchStatus::Absent => ss::BatchStatus::Absent,
                BatchStatus::Invalid(reason) => ss::BatchStatus::Invalid(batch_invalid_to_wit(reason)),
            },
        })
        .collect()
}

pub(crate) fn batch_from_wit(entries: Vec<ss::BatchEntry>) -> Vec<(String, BatchStatus)> {
    entries
        .into_iter()
        .map(|e| {
            let status = match e.status {
                ss::BatchStatus::Present(text) => BatchStatus::Present(text),
                ss::BatchStatus::Absent => BatchStatus::Absent,
                ss::BatchStatus::Invalid(reason) => BatchStatus::Invalid(batch_invalid_from_wit(reason)),
            };
            (e.name, status)
        })
        .collect()
}

// ---------- workspace ----------

struct_map!(directory_facts_to_wit, directory_facts_from_wit, DirectoryFacts, ws::DirectoryFacts, {
    canonical, is_directory, owned, mode, identity => (directory_identity_to_wit, directory_identity_from_wit),
});
