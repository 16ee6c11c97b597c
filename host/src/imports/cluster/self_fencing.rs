//! Self-fencing (`docs/cluster.md`, "Self-fencing"): what a process in cluster mode does as the
//! last renewal of its presence that etcd acknowledged grows old. Pure: the silence (time since
//! that renewal was sent, on `CLOCK_BOOTTIME`), the TTL and what etcd said are passed in; the
//! presence session ([`super::presence`]) measures them and the supervisor acts on the answer.
//!
//! The thresholds are ordered so that the command is stopped before the kernel's dead-man timer
//! fires, and the timer fires before etcd can expire the presence (TTL after the renewal was
//! sent) and let another machine take over:
//! `lapse (3/4 TTL) + grace (1/8 TTL) = 7/8 TTL < dead man (15/16 TTL) < TTL`.

use std::time::Duration;

/// How a process stands with etcd, from the age of its last acknowledged renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// A renewal was acknowledged less than [`lapse`] ago: the process may act.
    Live,
    /// Silent for [`lapse`] or more, less than the TTL: stop the command now — SIGTERM, then
    /// SIGKILL to the whole tree after `grace` — before etcd can expire the presence.
    Lapsing {
        /// How long the command gets after SIGTERM (an eighth of the TTL).
        grace: Duration,
    },
    /// Silent for the whole TTL, or etcd said the lease expired: another machine may already
    /// have taken over; kill at once.
    Overran,
    /// etcd answered from another cluster, with an older revision, or without the lease: its
    /// state or this presence is lost; kill at once.
    Lost,
}

/// The silence after which a process stops acting: three quarters of `ttl`.
pub fn lapse(ttl: Duration) -> Duration {
    ttl - ttl / 4
}

/// How `silence` (since the last acknowledged renewal was sent), `ttl`, and etcd's word — the
/// lease `expired`, the session `lost` — leave the process. `lost` comes first, then `expired`
/// or a whole TTL of silence, then [`lapse`].
pub fn standing(silence: Duration, ttl: Duration, expired: bool, lost: bool) -> Standing {
    if lost {
        Standing::Lost
    } else if expired || silence >= ttl {
        Standing::Overran
    } else if silence >= lapse(ttl) {
        Standing::Lapsing { grace: ttl / 8 }
    } else {
        Standing::Live
    }
}

/// When the kernel's dead-man timer fires (on `CLOCK_BOOTTIME`): fifteen sixteenths of `ttl`
/// after the acknowledged renewal sent at `sent`, before the earliest instant etcd can expire
/// the presence (`sent + ttl`).
pub fn dead_man_deadline(sent: Duration, ttl: Duration) -> Duration {
    sent + ttl - ttl / 16
}

/// How often the presence is renewed: every third of `ttl`.
pub fn renewal_interval(ttl: Duration) -> Duration {
    ttl / 3
}

/// The pause before the next renewal after one that failed, given the `previous` pause: 100 ms
/// after an acknowledged renewal (whose pause is `interval`), then doubling up to `interval`, so
/// that a member's death or an election costs a retry, not a third of the TTL.
pub fn retry_pause(previous: Duration, interval: Duration) -> Duration {
    if previous >= interval { Duration::from_millis(100).min(interval) } else { (previous * 2).min(interval) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);
    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_process_stands_by_the_age_of_its_last_acknowledged_renewal() {
        assert_eq!(standing(MS(0), TTL, false, false), Standing::Live);
        assert_eq!(standing(MS(7_499), TTL, false, false), Standing::Live);
        assert_eq!(standing(MS(7_500), TTL, false, false), Standing::Lapsing { grace: MS(1_250) });
        assert_eq!(standing(MS(9_999), TTL, false, false), Standing::Lapsing { grace: MS(1_250) });
        assert_eq!(standing(MS(10_000), TTL, false, false), Standing::Overran);
        assert_eq!(standing(Duration::from_secs(3_600), TTL, false, false), Standing::Overran, "a suspended machine");
    }

    #[test]
    fn what_etcd_said_outranks_the_clock() {
        assert_eq!(standing(MS(0), TTL, true, false), Standing::Overran, "an expired lease, however fresh the renewal");
        assert_eq!(standing(MS(0), TTL, true, true), Standing::Lost);
        assert_eq!(standing(Duration::from_secs(60), TTL, false, true), Standing::Lost);
    }

    #[test]
    fn the_command_stops_before_the_dead_man_fires_and_the_dead_man_before_etcd_can_expire() {
        for ttl in [Duration::from_secs(2), Duration::from_secs(10), MS(2_345), Duration::from_secs(3_600)] {
            let Standing::Lapsing { grace } = standing(lapse(ttl), ttl, false, false) else { panic!("lapsing at the lapse") };
            let sent = Duration::from_secs(1_000);
            let killed_by_supervisor = sent + lapse(ttl) + grace;
            let dead_man = dead_man_deadline(sent, ttl);
            assert!(killed_by_supervisor < dead_man, "{ttl:?}: the supervisor's kill comes first");
            assert!(dead_man < sent + ttl, "{ttl:?}: the dead man fires before etcd can expire the presence");
            assert!(renewal_interval(ttl) * 2 < lapse(ttl), "{ttl:?}: two renewals may fail before the lapse");
        }
    }

    #[test]
    fn a_failed_renewal_is_retried_soon_then_less_often_up_to_the_interval() {
        let interval = renewal_interval(TTL);
        let mut pause = interval;
        let mut pauses = Vec::new();
        for _ in 0..8 {
            pause = retry_pause(pause, interval);
            pauses.push(pause.as_millis());
        }
        assert_eq!(pauses, [100, 200, 400, 800, 1_600, 3_200, 3_333, 100]);
        assert_eq!(retry_pause(MS(1_000), MS(50)), MS(50), "never longer than the interval");
    }
}
