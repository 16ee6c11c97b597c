//! Cluster mode's timed rules, model-checked (`tests/src/cluster_timing.rs`; `docs/cluster.md`,
//! "The timed rules, checked"): the shipped dead man, lapse and epoch grace keep one holder over
//! drifting clocks, renewals delayed without bound, stops, kills, a wipe or a restore, exactly
//! up to the kill-latency bound they are documented with — and the model finds the second holder
//! just past it, and in each rule's mutation.

use proclease_tests::cluster_timing::{ONE_HOLDER, Ratio, Rules, Timing, kill_latency_bound};

/// ρ = 100 ppm: a free-running quartz; NTP keeps a clock's rate within 500 ppm.
fn ppm(n: i128) -> Ratio {
    Ratio::new(n, 1_000_000)
}

fn holds(timing: Timing) {
    let label = format!("{timing:?}");
    let verdict = timing.check();
    assert!(verdict.unreached.is_empty(), "a vacuous check, never reached: {:?} ({label})", verdict.unreached);
    if let Some(trace) = verdict.violation {
        panic!("{ONE_HOLDER}: violated ({label}):\n{trace}");
    }
    eprintln!("{} states, no violation: {label}", verdict.states);
}

/// The violation's trace, which must exist.
fn violated(timing: Timing) -> String {
    let label = format!("{timing:?}");
    let trace = timing.find_violation().unwrap_or_else(|| panic!("no violation found: {label}"));
    eprintln!("{ONE_HOLDER}: violated, as expected ({label}):\n{trace}");
    trace
}

#[test]
fn the_shipped_rules_keep_one_holder_up_to_the_kill_latency_bound() {
    for drift in [Ratio::ZERO, ppm(100), ppm(500), Ratio::new(1, 100)] {
        let bound = kill_latency_bound(&Rules::shipped(), drift).expect("the shipped rules have a dead man");
        assert!(bound > Ratio::ZERO, "{drift:?}");
        holds(Timing::shipped(bound, drift));
    }
}

#[test]
fn a_kill_latency_past_the_bound_lets_another_machine_take_over_while_the_command_runs() {
    for drift in [Ratio::ZERO, ppm(100), ppm(500), Ratio::new(1, 100)] {
        let bound = kill_latency_bound(&Rules::shipped(), drift).expect("a dead man");
        // 0.1 ms past the bound at a 10 s TTL.
        let trace = violated(Timing::shipped(bound.plus(Ratio::new(1, 100_000)), drift));
        // The shortest path: no renewal reaches etcd after the first, the dead man fires on the
        // owner's slow clock, etcd expires the presence on its fast one, the kill is not done.
        let worst = format!("owner {}, etcd {}", Ratio::ONE.minus(drift), Ratio::ONE.plus(drift));
        assert!(trace.contains(&worst), "the worst clocks, {worst}: {trace}");
        assert!(trace.contains("the dead man fired") && trace.contains("two holders"), "{trace}");
    }
}

#[test]
fn the_bound_at_the_default_ttl_is_the_one_the_docs_state() {
    let millis = |drift| kill_latency_bound(&Rules::shipped(), drift).expect("a dead man").millis().floor();
    // docs/cluster.md, "The timed rules, checked": TTL 10 s.
    assert_eq!(millis(Ratio::ZERO), 625.0);
    assert_eq!(millis(ppm(100)), 623.0);
    assert_eq!(millis(ppm(500)), 615.0);
    assert_eq!(millis(Ratio::new(1, 100)), 431.0);
    // The drift no kill latency survives: (15/16)(1 + ρ) = 1 − ρ, ρ = 1/31.
    assert!(kill_latency_bound(&Rules::shipped(), Ratio::new(1, 31)).expect("a dead man") == Ratio::ZERO);
}

#[test]
fn clocks_drifting_past_one_part_in_thirty_one_make_two_holders_even_with_instant_kills() {
    holds(Timing::shipped(Ratio::ZERO, Ratio::new(1, 32)));
    let trace = violated(Timing::shipped(Ratio::ZERO, Ratio::new(1, 30)));
    assert!(trace.contains("owner 29/30") && trace.contains("etcd 31/30"), "{trace}");
}

#[test]
fn a_dead_man_at_the_whole_ttl_is_found_late() {
    let rules = Rules { dead_man: Some(Ratio::ONE), ..Rules::shipped() };
    violated(Timing { rules, ..Timing::shipped(Ratio::new(1, 1_000), Ratio::ZERO) });
}

#[test]
fn without_a_dead_man_a_stopped_supervisor_makes_two_holders() {
    let rules = Rules { dead_man: None, ..Rules::shipped() };
    let trace = violated(Timing { rules, ..Timing::shipped(Ratio::ZERO, Ratio::ZERO) });
    assert!(trace.contains("Stop"), "only a stopped supervisor fails to stop its command: {trace}");
}

#[test]
fn an_acknowledgement_from_a_restored_etcd_must_not_keep_the_owner_acting() {
    let rules = Rules { counts_acknowledgements_after_restore: true, ..Rules::shipped() };
    let trace = violated(Timing { rules, ..Timing::shipped(Ratio::ZERO, Ratio::ZERO) });
    assert!(trace.contains("Restore { with_lease: true }") && trace.contains("StartEpoch"), "{trace}");
}

#[test]
fn an_epoch_grace_shorter_than_the_ttl_makes_two_holders_after_a_wipe_or_restore() {
    let rules = Rules { epoch_grace: Ratio::new(7, 8), ..Rules::shipped() };
    let trace = violated(Timing { rules, ..Timing::shipped(Ratio::ZERO, Ratio::ZERO) });
    assert!(trace.contains("StartEpoch"), "{trace}");
}

#[test]
fn an_epoch_started_by_a_process_with_a_shorter_ttl_makes_two_holders() {
    // Why docs/cluster.md requires one TTL for every machine of a prefix.
    let trace = violated(Timing { starter_ttl: Ratio::new(1, 2), ..Timing::shipped(Ratio::ZERO, Ratio::ZERO) });
    assert!(trace.contains("StartEpoch"), "{trace}");
}
