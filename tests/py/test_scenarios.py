"""Lease scenarios through the component in Python, against the in-memory host."""

from __future__ import annotations

import pytest

from component import ComponentError, Rec
from memory_host import owner

ADMISSION_CLAIM = "recovery/beeper-message-like-me-export-admission/active.json"
DIRECTORY_LEASES = "recovery/beeper-message-like-me-directory-leases/"
INVOCATIONS = "provider-plugin-state/.invocations/"


@pytest.fixture
def p(harness):
    return harness.p


def test_admission_lifecycle(harness, p):
    """Acquire, refuse a second acquirer, walk the helper lifecycle, release."""
    world = harness.fresh(status=lambda _o, _n: "exact-live-owner")
    admission = p.resource("export-admission", "admission", p.export_admission.acquire())
    try:
        assert ADMISSION_CLAIM in world.store.files
        assert admission.claim().owner == world.processes.me
        assert admission.claim().phase == "parent-owned"

        with pytest.raises(ComponentError) as refused:
            p.export_admission.acquire()
        assert (refused.value.kind, refused.value.code, refused.value.message) == (
            "lease",
            "another-export-is-active",
            "Beeper Message Like Me recovery: another export is active",
        )

        survey = p.export_admission.survey()
        assert (survey.disposition, survey.claim.id) == ("active", admission.claim().id)

        first_revision = admission.claim().revision
        admission.begin_helper_launch()
        assert admission.claim().phase == "helper-launching"
        world.processes.captured = owner(777, world.processes.boot_id, "d" * 64)
        admission.bind_helper(777)
        claim = admission.claim()
        assert (claim.phase, claim.helper_owner.pid) == ("helper-active", 777)
        admission.settle_helper()
        assert admission.claim().phase == "parent-owned"
        assert admission.claim().revision != first_revision, "every write rotates the revision"

        on_disk = world.store.files[ADMISSION_CLAIM]
        assert p.records.sha256(on_disk.encode()) == admission.content_sha256()

        admission.release()
        assert admission.released() is True
        assert ADMISSION_CLAIM not in world.store.files
        assert p.export_admission.survey() is None
    finally:
        admission.drop()


def test_directory_recovery_removes_exactly_the_dead_owners_directories(harness, p):
    """Two leases, one owner alive and one dead: the survey and the recovery agree, and only the
    dead owner's directory and claim go."""
    world = harness.fresh(status=lambda o, _n: "exact-live-owner" if o.pid == 1 else "different-or-dead")
    world.clock.now = 1000
    for path, inode in (("/work", 10), ("/work/live", 11), ("/work/dead", 12)):
        world.workspace.add(path, inode)
    handles = []
    for pid, path in ((1, "/work/live"), (2, "/work/dead")):
        world.processes.me = owner(pid, world.processes.boot_id, "f" * 64)
        request = Rec(role="raw-working", path=path, output_root=None, recover_after_ms=2000.0, now_ms=None)
        handles.append(p.resource("directory-leases", "directory-lease", p.directory_leases.create(request)))
    try:
        claims = {h.claim().path: h.claim() for h in handles}
        assert claims["/work/dead"].directory_identity == world.workspace.directories["/work/dead"].identity
        assert claims["/work/live"].created_at_ms == 1000

        dry_run = p.directory_leases.recover_each(None, Rec(dry_run=True, skip_invalid=False, concurrent=False, keep=[], past_bound=False))
        assert dry_run.stopped is None
        survey = {o.claim.path: o for o in dry_run.outcomes}
        assert {path: o.action.tag for path, o in survey.items()} == {"/work/live": "keep", "/work/dead": "remove-directory"}
        assert (survey["/work/live"].disposition, survey["/work/dead"].disposition) == ("active", "recoverable")
        assert not any(o.done for o in dry_run.outcomes) and "/work/dead" in world.workspace.directories

        report = p.directory_leases.recover(None)
        assert (report.recovered, report.published, report.active, report.indeterminate) == (1, 0, 1, 0)
        assert "/work/live" in world.workspace.directories
        assert "/work/dead" not in world.workspace.directories
        left = [k for k in world.store.files if k.startswith(DIRECTORY_LEASES)]
        assert left == [f"{DIRECTORY_LEASES}{claims['/work/live'].id}.json"]
    finally:
        for h in handles:
            h.drop()


PLUGIN = dict(plugin_id="portable-test", plugin_version="1.0.0", bundle_sha256="a" * 64, manifest_sha256="b" * 64)
RUN_ID = "55555555-5555-4555-8555-555555555555"


def identity() -> Rec:
    return Rec(
        host_api_version=1,
        descriptor_sha256="c" * 64,
        adapter_id="portable-test",
        transport="provider-api",
        surface_id="portable-test",
        operation="records.read",
        contract_version=1,
        **PLUGIN,
    )


def test_invocation_lease_lifecycle_under_the_catalog_lock(harness, p):
    """The plugin catalog and its lock resource: acquire needs the exact installed identity,
    fails fast while another process holds the lock, and every lock the component takes is
    dropped again; then containment and release."""
    world = harness.fresh(status=lambda _o, _n: "exact-live-owner")
    world.clock.now = 1_700_000_000_000
    catalog = world.plugin_catalog

    with pytest.raises(ComponentError) as absent:
        p.invocation_leases.acquire(identity(), RUN_ID)
    assert absent.value.message == "portable provider plugin portable-test changed or was disabled before execution; retry from current capabilities"

    catalog.install(PLUGIN["plugin_id"], PLUGIN["plugin_version"], PLUGIN["bundle_sha256"], PLUGIN["manifest_sha256"])
    catalog.held_elsewhere = True
    with pytest.raises(ComponentError) as locked:
        p.invocation_leases.acquire(identity(), RUN_ID)
    assert (locked.value.kind, locked.value.message) == ("lease", "portable plugin catalog mutation is already locked")
    catalog.held_elsewhere = False

    taken = catalog.acquisitions
    snapshot = p.invocation_leases.acquire(identity(), RUN_ID)
    assert catalog.acquisitions > taken, "acquire takes the catalog lock"
    assert (catalog.depth, p.live_host_resources) == (0, 0), "and drops every level it took"
    lease = snapshot.lease
    assert (lease.schema_version, lease.run_id, lease.acquired_at) == (2, RUN_ID, "2023-11-14T22:13:20.000Z")
    assert lease.owner.process == world.processes.me
    assert lease.containment.status == "parent-owned"
    path = f"{INVOCATIONS}{lease.lease_id}.json"
    assert p.records.sha256(world.store.files[path].encode()) == snapshot.content_sha256
    listed = p.invocation_leases.list()
    assert [e.lease.lease_id for e in listed] == [lease.lease_id]
    assert p.invocation_leases.lease_status(snapshot) == "exact-live-owner"

    controller = p.resource("invocation-leases", "containment-controller", p.invocation_leases.static("containment-controller", "create", snapshot))
    try:
        helper = owner(777, world.processes.boot_id, "d" * 64)
        controller.host_starting(helper)
        controller.host_started(helper)
        assert controller.current().lease.containment == Rec(status="host-active", host=helper)
        controller.cleanup_complete()
        assert controller.current().lease.containment.status == "cleanup-complete"
        p.invocation_leases.release(controller.current())
    finally:
        controller.drop()
    assert path not in world.store.files
    assert (catalog.depth, p.live_host_resources) == (0, 0)
