//! The `clock` import: the system's wall clock (the component's only notion of time, so a host can
//! fix it for deterministic tests).

use proclease_core::effects::Clock;

use crate::bindings::proclease::lease::clock;
use crate::runtime::HostState;

/// The system's wall clock: milliseconds since the Unix epoch (0 before it).
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&mut self) -> u64 {
        let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
    }
}

impl clock::Host for HostState {
    fn now_ms(&mut self) -> u64 {
        self.effects.clock.now_ms()
    }
}
