//! Signal forwarding (feature `signals`): the signals that stop a run (SIGINT, SIGTERM, SIGHUP,
//! SIGQUIT) are caught from the start, passed on to the command once it runs, and stop a run
//! cleanly before it does. Without the feature, nothing is caught.

#[cfg(feature = "signals")]
mod forwarding {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

    /// The signals that stop a run.
    const STOPPING: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

    /// What the handlers share with the supervisor.
    struct State {
        /// The box's init (or relay, or the uncontained command); 0 before it started and once
        /// the run is over.
        target: AtomicI32,
        /// The command exited: a stopping signal now kills what it left running.
        stopping: AtomicBool,
        /// The first stopping signal that arrived before the command started (0: none).
        pending: AtomicI32,
        /// Whether the command started (`pending` is only recorded before).
        started: AtomicBool,
        /// The first stopping signal that arrived while the command ran (0: none): the run was
        /// interrupted, whatever status the command then exits with.
        interrupted: AtomicI32,
    }

    impl State {
        /// Takes the signal that arrived before the command started, if any, records that it
        /// interrupted the run, and sends it to `target`. Async-signal-safe (atomics and kill(2)).
        fn forward_pending(&self, target: i32) {
            let pending = self.pending.swap(0, Ordering::SeqCst);
            if pending > 0 {
                let _ = self.interrupted.compare_exchange(0, pending, Ordering::SeqCst, Ordering::SeqCst);
                // SAFETY: kill(2) of the process this run started.
                unsafe {
                    libc::kill(target, pending);
                }
            }
        }
    }

    /// Forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH and SIGALRM that
    /// another process sent this one to the command's box while the command runs (a terminal's
    /// own signals reached the command already: it is in the terminal's process group, and a
    /// second copy would make a program that aborts on a second Ctrl-C abort on the first).
    /// Once the command exited, SIGINT, SIGTERM, SIGHUP or SIGQUIT kill what it left running at
    /// once. Until dropped; afterwards this process ignores them (signal-hook keeps its
    /// handlers installed: signal-hook-registry never uninstalls one).
    pub(in crate::api::supervisor) struct Forwarder {
        ids: Vec<signal_hook_registry::SigId>,
        state: Arc<State>,
    }

    impl Forwarder {
        /// The command started as `target`: signals go to it from now on, and one that arrived
        /// in between is passed on.
        pub(in crate::api::supervisor) fn started(&self, target: u32) {
            let Ok(target) = i32::try_from(target) else { return };
            self.state.target.store(target, Ordering::SeqCst);
            self.state.started.store(true, Ordering::SeqCst);
            // A signal that arrived while the command was being started interrupted the run
            // as much as one that arrives later: it is recorded, then passed on.
            self.state.forward_pending(target);
        }

        /// The stopping signal that arrived before the command started, if any.
        pub(in crate::api::supervisor) fn pending(&self) -> Option<i32> {
            Some(self.state.pending.load(Ordering::SeqCst)).filter(|&signal| signal > 0)
        }

        /// Whether a stopping signal arrived before the command started, as a check that
        /// outlives this borrow (for `lock_wait::stop_waits_when`): an atomic load.
        pub(in crate::api::supervisor) fn pending_check(&self) -> impl Fn() -> bool + 'static {
            let state = Arc::clone(&self.state);
            move || state.pending.load(Ordering::SeqCst) > 0
        }

        /// The first stopping signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) that arrived while the
        /// command ran, from another process or from the terminal, if any.
        pub(in crate::api::supervisor) fn interrupted(&self) -> Option<i32> {
            Some(self.state.interrupted.load(Ordering::SeqCst)).filter(|&signal| signal > 0)
        }

        /// The command exited: a stopping signal now kills the rest of the box.
        pub(in crate::api::supervisor) fn stopping(&self) {
            self.state.stopping.store(true, Ordering::SeqCst);
        }
    }

    impl Drop for Forwarder {
        fn drop(&mut self) {
            self.state.target.store(0, Ordering::SeqCst);
            for id in self.ids.drain(..) {
                signal_hook_registry::unregister(id);
            }
        }
    }

    /// Catches the forwarded signals from now on; [`Forwarder::started`] names where they go.
    pub(in crate::api::supervisor) fn forward() -> Option<Forwarder> {
        let state = Arc::new(State {
            target: AtomicI32::new(0),
            stopping: AtomicBool::new(false),
            pending: AtomicI32::new(0),
            started: AtomicBool::new(false),
            interrupted: AtomicI32::new(0),
        });
        let mut ids = Vec::new();
        for signal in crate::containment::FORWARDED {
            let state = state.clone();
            // SAFETY: the action only loads atomics and calls kill(2), which is async-signal-safe.
            let id = unsafe {
                signal_hook_registry::register_sigaction(signal, move |info: &libc::siginfo_t| {
                    let target = state.target.load(Ordering::SeqCst);
                    if target <= 0 {
                        if !state.started.load(Ordering::SeqCst) && STOPPING.contains(&signal) {
                            let _ = state.pending.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
                            // `started` may have run since the target was read: whichever of the
                            // two takes the pending signal passes it on, so none is lost.
                            let target = state.target.load(Ordering::SeqCst);
                            if target > 0 {
                                state.forward_pending(target);
                            }
                        }
                        return;
                    }
                    if state.stopping.load(Ordering::SeqCst) {
                        if STOPPING.contains(&signal) {
                            libc::kill(target, libc::SIGKILL);
                        }
                    } else {
                        if STOPPING.contains(&signal) {
                            let _ = state.interrupted.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
                        }
                        if info.si_code <= 0 {
                            libc::kill(target, signal);
                        }
                    }
                })
            };
            match id {
                Ok(id) => ids.push(id),
                Err(e) => tracing::warn!(signal, error = %e, "cannot forward this signal to the command"),
            }
        }
        Some(Forwarder { ids, state })
    }
}

#[cfg(not(feature = "signals"))]
mod forwarding {
    pub(in crate::api::supervisor) struct Forwarder;

    impl Forwarder {
        pub(in crate::api::supervisor) fn started(&self, _: u32) {}

        pub(in crate::api::supervisor) fn pending(&self) -> Option<i32> {
            None
        }

        pub(in crate::api::supervisor) fn pending_check(&self) -> impl Fn() -> bool + 'static {
            || false
        }

        pub(in crate::api::supervisor) fn interrupted(&self) -> Option<i32> {
            None
        }

        pub(in crate::api::supervisor) fn stopping(&self) {}
    }

    pub(in crate::api::supervisor) fn forward() -> Option<Forwarder> {
        None
    }
}

pub(in crate::api::supervisor) use forwarding::*;
