//! A kernel dead-man timer (`docs/containment.md`, "Cluster mode"): a POSIX timer on
//! `CLOCK_BOOTTIME` that sends SIGKILL to this process at a deadline, which the holder pushes
//! back while it is well. A process that cannot run — SIGSTOPped, stopped by a debugger,
//! frozen by a cgroup freezer, or a machine suspended (boot time counts suspend) — cannot push
//! it back, and the kernel kills it: nothing in user space has to run for the kill to happen.
//!
//! Cluster mode arms one while a supervised command runs, with the deadline just before the
//! presence could expire in etcd (15/16 of the TTL after the last acknowledged renewal was
//! sent); the supervisor's death then takes its box along (`PR_SET_PDEATHSIG` on the init).

use std::time::Duration;

/// A timer that kills this process (SIGKILL) when its deadline passes; deleted on drop.
pub struct DeadMan {
    timer: libc::timer_t,
}

// SAFETY: a timer_t is a kernel timer id (an integer in a pointer), valid from any thread of
// the process that created it.
unsafe impl Send for DeadMan {}
// SAFETY: as above; timer_settime on one id from several threads is safe (the kernel serialises).
unsafe impl Sync for DeadMan {}

impl std::fmt::Debug for DeadMan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeadMan")
    }
}

impl DeadMan {
    /// A disarmed timer (`timer_create(CLOCK_BOOTTIME, SIGEV_SIGNAL, SIGKILL)`).
    ///
    /// Errors: the kernel refused the timer (`EAGAIN`: too many timers; `EINVAL`).
    pub fn new() -> std::io::Result<DeadMan> {
        // SAFETY: a zeroed sigevent is valid; the fields set are the documented ones.
        unsafe {
            let mut event: libc::sigevent = std::mem::zeroed();
            event.sigev_notify = libc::SIGEV_SIGNAL;
            event.sigev_signo = libc::SIGKILL;
            let mut timer: libc::timer_t = std::mem::zeroed();
            if libc::timer_create(libc::CLOCK_BOOTTIME, &mut event, &mut timer) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(DeadMan { timer })
        }
    }

    /// Arms (or re-arms) the timer to fire at `deadline` on `CLOCK_BOOTTIME` (time since
    /// boot, suspend included); a deadline already past fires at once.
    pub fn arm_at(&self, deadline: Duration) {
        let value = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: libc::time_t::try_from(deadline.as_secs()).unwrap_or(libc::time_t::MAX),
                // Never 0:0, which would disarm it.
                tv_nsec: libc::c_long::from(deadline.subsec_nanos().max(1)),
            },
        };
        // SAFETY: `self.timer` is a live timer of this process.
        unsafe {
            libc::timer_settime(self.timer, libc::TIMER_ABSTIME, &value, std::ptr::null_mut());
        }
    }
}

impl Drop for DeadMan {
    fn drop(&mut self) {
        // SAFETY: deletes the timer this value owns, once.
        unsafe {
            libc::timer_delete(self.timer);
        }
    }
}

/// `CLOCK_BOOTTIME` now.
pub fn boottime() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    Duration::new(u64::try_from(now.tv_sec).unwrap_or(0), u32::try_from(now.tv_nsec).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_pushed_back_in_time_never_fires() {
        // Armed far ahead and re-armed further: this test process must survive it.
        let timer = DeadMan::new().expect("timer_create");
        timer.arm_at(boottime() + Duration::from_secs(3600));
        timer.arm_at(boottime() + Duration::from_secs(7200));
        drop(timer);
    }
}
