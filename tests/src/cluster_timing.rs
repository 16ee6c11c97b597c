//! A model of cluster mode's timed rules, checked by Stateright (issue #42; `docs/cluster.md`,
//! "The timed rules, checked").
//!
//! One owner holds the fleet's admission: its supervisor runs the command under a presence
//! session in etcd, renews it, and stops the command by the rules of
//! `proclease::cluster::self_fencing` — the *shipped* functions: the dead-man deadline
//! ([`self_fencing::dead_man_deadline`]) and the standing ([`self_fencing::standing`]: lapse at
//! 3/4 of the TTL, then SIGKILL after a grace of 1/8). Another machine takes the admission over
//! from the earliest instant the rules let it: when etcd expires the owner's presence, or — after
//! etcd's data was wiped or restored from a backup whose record names someone else — when the
//! new epoch's grace (one TTL, `epoch.rs`) ends. The property: **the owner's command is gone
//! before that instant** (never two holders).
//!
//! The adversary acts at every step (a `1/steps_per_ttl` TTL grid): it sends, delivers, answers
//! or loses renewals (any delay, reordering by loss and resend, no bound), stops and continues the
//! supervisor (SIGSTOP: it neither renews nor polls nor kills; the kernel's dead-man timer still
//! runs), SIGKILLs it (the box's init then kills the command), wipes or restores etcd once, and
//! starts the new epoch at any step after that. The clocks run at constant rates chosen at the
//! start from `1 − ρ` and `1 + ρ` of real time (the owner's `CLOCK_BOOTTIME`, etcd's leader's
//! clock): each rule measures one interval on one clock from one instant, so a rate that varies
//! within those bounds is never worse than the extreme it stays under. Timers and expiries fire at
//! their exact instants (exact rationals, not the grid), and a SIGKILL takes the command's whole
//! tree after the kill latency `L`. A state holds every instant relative to *now* (how long ago,
//! how long until), so time is explored without a horizon: renewing for ever is a cycle of
//! finitely many states.
//!
//! What the model takes as given (each is tested on the real system, `docs/cluster.md`): etcd's
//! compare-and-swap is linearizable; etcd never expires a lease earlier than its TTL after the
//! last renewal *reached* it (measured on its leader's clock; a new leader extends); a restore is
//! told (the epoch check of `epoch.rs`), and every process of a prefix uses the same TTL (a
//! process whose TTL differs from its epoch's refuses to register). A running supervisor polls
//! its standing at least once a step. Not run here: the renewal loop of `presence.rs` (that a
//! renewal's instant is read before it is sent, that only a confirmed acknowledgement moves the
//! dead man), which the model restates.

use std::cmp::Ordering;
use std::fmt;
use std::time::Duration;

use proclease::cluster::self_fencing::{self, Standing};
use stateright::{Checker, HasDiscoveries, Model, Property};

/// The TTL the shipped rules are asked about, and in which traces give instants (the default).
pub const REFERENCE_TTL: Duration = Duration::from_secs(10);

/// An exact non-negative rational number: an instant or a length, in TTLs.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ratio {
    num: i128,
    den: i128,
}

impl Ratio {
    /// Zero.
    pub const ZERO: Ratio = Ratio { num: 0, den: 1 };
    /// One TTL.
    pub const ONE: Ratio = Ratio { num: 1, den: 1 };

    /// `num / den`, reduced. Panics on a zero denominator (a bug of the model's caller).
    pub fn new(num: i128, den: i128) -> Ratio {
        assert!(den != 0, "a ratio with a zero denominator");
        let (num, den) = if den < 0 { (-num, -den) } else { (num, den) };
        let divisor = gcd(num.abs(), den).max(1);
        Ratio { num: num / divisor, den: den / divisor }
    }

    /// `part / whole`, exactly (nanoseconds).
    pub fn of(part: Duration, whole: Duration) -> Ratio {
        Ratio::new(part.as_nanos() as i128, whole.as_nanos() as i128)
    }

    /// This many TTLs of `ttl` as a duration (rounded to the nanosecond).
    pub fn of_ttl(self, ttl: Duration) -> Duration {
        let nanos = self.num * ttl.as_nanos() as i128 / self.den;
        Duration::from_nanos(u64::try_from(nanos.max(0)).unwrap_or(u64::MAX))
    }

    /// As milliseconds of the [`REFERENCE_TTL`], for traces.
    pub fn millis(self) -> f64 {
        self.num as f64 * REFERENCE_TTL.as_millis() as f64 / self.den as f64
    }

    /// `self + other`.
    pub fn plus(self, other: Ratio) -> Ratio {
        Ratio::new(self.num * other.den + other.num * self.den, self.den * other.den)
    }
    /// `self − other`.
    pub fn minus(self, other: Ratio) -> Ratio {
        Ratio::new(self.num * other.den - other.num * self.den, self.den * other.den)
    }
    /// `self × other`.
    pub fn times(self, other: Ratio) -> Ratio {
        Ratio::new(self.num * other.num, self.den * other.den)
    }
    /// `self ÷ other`.
    pub fn over(self, other: Ratio) -> Ratio {
        Ratio::new(self.num * other.den, self.den * other.num)
    }
}

fn gcd(mut a: i128, mut b: i128) -> i128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Ord for Ratio {
    fn cmp(&self, other: &Ratio) -> Ordering {
        (self.num * other.den).cmp(&(other.num * self.den))
    }
}
impl PartialOrd for Ratio {
    fn partial_cmp(&self, other: &Ratio) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl fmt::Debug for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} TTL ({:.3} ms of {} s)", self.num, self.den, self.millis(), REFERENCE_TTL.as_secs())
    }
}

/// The timed rules under check: the shipped ones ([`Rules::shipped`]), or a mutation of them.
#[derive(Clone, Copy)]
pub struct Rules {
    /// When the kernel's dead-man timer kills the supervisor, after the send of the last renewal
    /// etcd acknowledged, in TTLs of the owner's clock; `None`: no dead man.
    pub dead_man: Option<Ratio>,
    /// How the supervisor stands after a silence (`self_fencing::standing(silence, ttl, expired,
    /// lost)`).
    pub standing: fn(Duration, Duration, bool, bool) -> Standing,
    /// How long a new epoch's grace runs on etcd's clock, in TTLs of the process that starts it.
    pub epoch_grace: Ratio,
    /// Whether an acknowledgement from a restored etcd pushes the dead man back (shipped: no, the
    /// session is lost).
    pub counts_acknowledgements_after_restore: bool,
}

impl Rules {
    /// The rules proclease ships: `self_fencing`'s dead man and standing, asked at
    /// [`REFERENCE_TTL`]; a grace of one TTL (`epoch::await_epoch` starts it under an etcd lease
    /// of the starter's TTL); a restored etcd's acknowledgement loses the session
    /// (`presence.rs`, `check_state`).
    pub fn shipped() -> Rules {
        Rules {
            dead_man: Some(Ratio::of(self_fencing::dead_man_deadline(Duration::ZERO, REFERENCE_TTL), REFERENCE_TTL)),
            standing: self_fencing::standing,
            epoch_grace: Ratio::ONE,
            counts_acknowledgements_after_restore: false,
        }
    }
}

impl fmt::Debug for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rules")
            .field("dead_man", &self.dead_man)
            .field("epoch_grace", &self.epoch_grace)
            .field("counts_acknowledgements_after_restore", &self.counts_acknowledgements_after_restore)
            .finish_non_exhaustive()
    }
}

/// One configuration to check.
#[derive(Clone, Debug)]
pub struct Timing {
    /// The rules.
    pub rules: Rules,
    /// From a SIGKILL (the dead man's, the supervisor's own, the box init's death signal) until
    /// the last process of the command is gone, in TTLs.
    pub kill_latency: Ratio,
    /// ρ: each clock runs at a constant rate within `1 ± ρ` of real time.
    pub drift: Ratio,
    /// The adversary's grid: how many steps a TTL has.
    pub steps_per_ttl: u16,
    /// Whether etcd's data may be wiped or restored (once).
    pub state_faults: bool,
    /// The TTL of the process that starts a new epoch, in the owner's TTLs (the docs require 1).
    pub starter_ttl: Ratio,
}

impl Timing {
    /// The shipped rules with kill latency `kill_latency` and drift `drift`, with a wipe or
    /// restore, on a grid of 16 steps a TTL — 8 where clocks drift, since their rates multiply
    /// the distinct instants (about 2.1 M states at ρ = 0, 0.6 M with drift).
    pub fn shipped(kill_latency: Ratio, drift: Ratio) -> Timing {
        Timing { rules: Rules::shipped(), kill_latency, drift, steps_per_ttl: if drift == Ratio::ZERO { 16 } else { 8 }, state_faults: true, starter_ttl: Ratio::ONE }
    }

    /// One step of real time, in TTLs.
    fn step(&self) -> Ratio {
        Ratio::new(1, self.steps_per_ttl.into())
    }
}

/// The largest kill latency (TTLs) with which `rules` keep one holder when every clock runs
/// within `1 ± drift` of real time: the dead man fires at most `dead_man / (1 − ρ)` after the
/// last acknowledged renewal was sent, etcd expires the presence — and a grace started after it
/// ends — at least `1 / (1 + ρ)` (`epoch_grace / (1 + ρ)`) after; the command must be gone in the
/// difference. Negative: no latency suffices. `None` without a dead man.
pub fn kill_latency_bound(rules: &Rules, drift: Ratio) -> Option<Ratio> {
    let slow = Ratio::ONE.minus(drift);
    let fast = Ratio::ONE.plus(drift);
    let dead_man = rules.dead_man?.over(slow);
    Some(Ratio::ONE.min(rules.epoch_grace).over(fast).minus(dead_man))
}

/// The supervisor process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Supervisor {
    /// Renews, polls its standing, kills.
    Running,
    /// SIGSTOPped: does nothing; its dead-man timer still runs in the kernel.
    Stopped,
    /// Gone (SIGKILLed, or exited after stopping its command).
    Dead,
}

/// The owner's command (with its whole tree).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// Runs; nothing kills it yet.
    Running,
    /// Killed: its last process is gone this long from now (real time, TTLs; ≤ 0: gone).
    GoneIn(Ratio),
}

/// What etcd answered a renewal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// The lease was renewed; `restored`: by an etcd restored from a backup (a new epoch).
    Renewed { restored: bool },
    /// The lease is gone (TTL 0): expired, or etcd's data wiped.
    NotFound,
}

/// The renewal in flight: sent this long ago on the owner's clock, answered or not yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Renewal {
    sent_ago: Ratio,
    answer: Option<Answer>,
}

/// etcd's view; instants are real time from now, in TTLs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Etcd {
    /// The state the owner registered in; its presence expires in this long (`None`: expired).
    Serving { presence_in: Option<Ratio> },
    /// Wiped or restored: the owner's lease as restored (`None`: absent or expired), and the new
    /// epoch's grace, once a process started it, ending in this long (0: ended).
    Replaced { wiped: bool, presence_in: Option<Ratio>, grace_in: Option<Ratio> },
}

/// One state of the model: every instant relative to now.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct World {
    /// The owner's clock rate against real time.
    pub owner_rate: Ratio,
    /// etcd's clock rate against real time.
    pub etcd_rate: Ratio,
    /// The supervisor.
    pub supervisor: Supervisor,
    /// The command.
    pub command: Command,
    /// On the owner's clock, how long ago the last renewal etcd acknowledged was sent.
    pub silence: Ratio,
    /// On the owner's clock, how long ago the supervisor sent SIGTERM at the lapse.
    pub sigterm_ago: Option<Ratio>,
    /// The renewal in flight.
    pub renewal: Option<Renewal>,
    /// etcd.
    pub etcd: Etcd,
    /// In how long (real time; ≤ 0: since how long) another machine may take the admission over.
    pub takeover_in: Option<Ratio>,
    /// Whether the wipe or restore is still to come.
    pub fault_left: bool,
    /// Whether etcd acknowledged a renewal after the registration (for the check's sanity).
    pub renewed: bool,
}

/// What the adversary or a process does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Real time runs one step; timers and expiries due in it fire at their instants.
    Tick,
    /// The supervisor sends a renewal.
    Send,
    /// The renewal reaches etcd, which answers.
    Deliver,
    /// The renewal or its answer is lost (the client's attempt timed out).
    Lose,
    /// The supervisor reads etcd's answer.
    Receive,
    /// The supervisor polls its standing and acts on it.
    Poll,
    /// SIGSTOP to the supervisor.
    Stop,
    /// SIGCONT.
    Continue,
    /// SIGKILL to the supervisor.
    Kill,
    /// etcd's data is wiped.
    Wipe,
    /// etcd is restored from a backup whose admission record names another, expired, holder;
    /// `with_lease`: the backup holds the owner's lease (etcd renews it to a full TTL).
    Restore { with_lease: bool },
    /// Another process finds the state new and starts an epoch and its grace.
    StartEpoch,
}

/// Past this silence (owner's clock, TTLs) every standing is the same: values are capped there
/// so that a model without a dead man stays finite.
const SILENCE_CAP: Ratio = Ratio { num: 2, den: 1 };

impl Timing {
    /// The supervisor kills the command now (or it was already killed earlier).
    fn kill_now(&self, world: &mut World) {
        self.kill(world, self.kill_latency);
    }

    /// The supervisor dies, and the command (unless already killed) is gone in `gone_in`.
    fn kill(&self, world: &mut World, gone_in: Ratio) {
        if world.command == Command::Running {
            world.command = Command::GoneIn(gone_in);
        }
        world.supervisor = Supervisor::Dead;
        world.renewal = None;
        world.sigterm_ago = None;
    }

    /// What polling the standing now would do: `None` if nothing.
    fn poll(&self, world: &World) -> Option<World> {
        let mut next = world.clone();
        match (self.rules.standing)(world.silence.of_ttl(REFERENCE_TTL), REFERENCE_TTL, false, false) {
            Standing::Live => return None,
            Standing::Lapsing { grace } => match world.sigterm_ago {
                None => next.sigterm_ago = Some(Ratio::ZERO),
                Some(ago) if ago >= Ratio::of(grace, REFERENCE_TTL) => self.kill_now(&mut next),
                Some(_) => return None,
            },
            Standing::Overran | Standing::Lost => self.kill_now(&mut next),
        }
        Some(next)
    }

    /// Whether the owner's command is gone by the instant another machine may take over.
    pub fn one_holder(&self, world: &World) -> bool {
        match world.takeover_in {
            // At the takeover's very instant a running supervisor may still poll and kill.
            Some(takeover) if takeover == Ratio::ZERO && self.poll_due(world) => true,
            Some(takeover) if takeover <= Ratio::ZERO => matches!(world.command, Command::GoneIn(gone) if gone <= takeover),
            _ => true,
        }
    }

    /// Whether the running supervisor has something to do about its standing now.
    fn poll_due(&self, world: &World) -> bool {
        world.supervisor == Supervisor::Running && world.command == Command::Running && self.poll(world).is_some()
    }

    /// Checks every behaviour: the first violation's trace, or none, with the count of states.
    pub fn check(self) -> Verdict {
        let checker = self.clone().checker().spawn_bfs().join();
        let states = checker.unique_state_count();
        let unreached: Vec<&'static str> = REACHABLE.iter().copied().filter(|name| checker.discovery(name).is_none()).collect();
        let violation = checker.discovery(ONE_HOLDER).map(|path| self.explain(&path.into_vec()));
        Verdict { states, violation, unreached }
    }

    /// Looks for a violation only, stopping at the first (a mutation's check).
    pub fn find_violation(self) -> Option<String> {
        let checker = self.clone().checker().finish_when(HasDiscoveries::AnyFailures).spawn_bfs().join();
        checker.discovery(ONE_HOLDER).map(|path| self.explain(&path.into_vec()))
    }

    /// The steps of a path, in words, with real instants in ms of a [`REFERENCE_TTL`] from its
    /// start.
    fn explain(&self, path: &[(World, Option<Action>)]) -> String {
        let mut out = String::new();
        let mut now = Ratio::ZERO;
        if let Some((first, _)) = path.first() {
            out += &format!(
                "clock rates: owner {}, etcd {}; kill latency {:.3} ms (TTL {} s)\n",
                first.owner_rate,
                first.etcd_rate,
                self.kill_latency.millis(),
                REFERENCE_TTL.as_secs()
            );
        }
        for window in path.windows(2) {
            let (before, action, after) = (&window[0].0, window[0].1, &window[1].0);
            let Some(action) = action else { continue };
            let last = std::ptr::eq(after, &path[path.len() - 1].0);
            if action == Action::Tick {
                now = now.plus(self.step());
                if !last && after.command == before.command && after.takeover_in.is_some() == before.takeover_in.is_some() {
                    continue;
                }
            }
            out += &format!("  at {:>9.3} ms: {:?}", now.millis(), action);
            if after.sigterm_ago.is_some() && before.sigterm_ago.is_none() {
                out += " → SIGTERM (the lapse)";
            }
            if let (Command::Running, Command::GoneIn(gone)) = (before.command, after.command) {
                let by = if action == Action::Tick { "the dead man fired: " } else { "SIGKILL: " };
                out += &format!(" → {by}the command is gone at {:.3} ms", now.plus(gone).millis());
            }
            if after.silence < before.silence {
                let fires = self.rules.dead_man.map(|d| now.plus(d.minus(after.silence).over(after.owner_rate)));
                out += &format!(" → dead man at {}", fires.map_or("never".into(), |at| format!("{:.3} ms", at.millis())));
            }
            if after.etcd != before.etcd {
                out += &format!(" → etcd {}", describe(&after.etcd, now));
            }
            if let (true, Some(takeover)) = (after.takeover_in != before.takeover_in, after.takeover_in) {
                out += &format!(" → another machine may take over at {:.3} ms", now.plus(takeover).millis());
            }
            if last && !self.one_holder(after) {
                out += " → two holders: the command still runs";
            }
            out += "\n";
        }
        out
    }
}

fn describe(etcd: &Etcd, now: Ratio) -> String {
    let at = |r: Option<Ratio>| r.map_or("none".to_string(), |r| format!("{:.3} ms", now.plus(r).millis()));
    match etcd {
        Etcd::Serving { presence_in } => format!("keeps the presence until {}", at(*presence_in)),
        Etcd::Replaced { wiped, presence_in, grace_in } => {
            format!("{}: the owner's lease until {}, a grace until {}", if *wiped { "wiped" } else { "restored" }, at(*presence_in), at(*grace_in))
        }
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.num, self.den)
    }
}

/// The property: never two holders.
pub const ONE_HOLDER: &str = "the owner's command is gone before another machine may take over";
const TAKEN_OVER: &str = "another machine takes over after the owner's command is gone";
const RENEWED: &str = "an acknowledged renewal pushes the dead man back";
const GRACE_ENDS: &str = "a new epoch's grace ends after a wipe or restore";
const DEAD_MAN_FIRES: &str = "the dead man kills a supervisor that could not stop its command";
const LAPSE_STOPS: &str = "a running supervisor stops its command at the lapse";
/// What every check must reach (else it proves nothing).
const REACHABLE: [&str; 5] = [TAKEN_OVER, RENEWED, GRACE_ENDS, DEAD_MAN_FIRES, LAPSE_STOPS];

/// A check's outcome.
#[derive(Debug)]
pub struct Verdict {
    /// Distinct states explored.
    pub states: usize,
    /// The first violation (a shortest path), in words.
    pub violation: Option<String>,
    /// Which sanity properties no state reached (a vacuous check).
    pub unreached: Vec<&'static str>,
}

impl Model for Timing {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        // The extremes only: a rule measures one interval on one clock, so a clock between them
        // is never worse than one at them (and ρ = 0 leaves one pair).
        let rates = [Ratio::ONE.minus(self.drift), Ratio::ONE.plus(self.drift)];
        let mut worlds = Vec::new();
        for owner_rate in rates {
            for etcd_rate in rates {
                let world = World {
                    owner_rate,
                    etcd_rate,
                    supervisor: Supervisor::Running,
                    command: Command::Running,
                    // The registration was sent now and reached etcd at once: its lease runs a
                    // TTL of etcd's clock from now.
                    silence: Ratio::ZERO,
                    sigterm_ago: None,
                    renewal: None,
                    etcd: Etcd::Serving { presence_in: Some(Ratio::ONE.over(etcd_rate)) },
                    takeover_in: None,
                    fault_left: self.state_faults,
                    renewed: false,
                };
                if !worlds.contains(&world) {
                    worlds.push(world);
                }
            }
        }
        worlds
    }

    fn actions(&self, world: &World, actions: &mut Vec<Action>) {
        // Once the command is gone, nothing can make two holders any more; once another machine
        // took over, the property has been checked.
        let poll_due = self.poll_due(world);
        if matches!(world.command, Command::GoneIn(gone) if gone <= Ratio::ZERO) {
            return;
        }
        match world.takeover_in {
            Some(takeover) if takeover < Ratio::ZERO => return,
            Some(takeover) if takeover == Ratio::ZERO => {
                if poll_due {
                    actions.push(Action::Poll);
                }
                return;
            }
            _ => {}
        }
        let running = world.supervisor == Supervisor::Running;
        // A running supervisor polls its standing at least once a step (it polls every few ms
        // while its command runs): time runs on only once it acted on what it found.
        if poll_due {
            actions.push(Action::Poll);
        } else {
            actions.push(Action::Tick);
        }
        match world.renewal {
            None if running && world.command == Command::Running => actions.push(Action::Send),
            None => {}
            Some(Renewal { answer: None, .. }) => actions.extend([Action::Deliver, Action::Lose]),
            Some(Renewal { answer: Some(_), .. }) => {
                actions.push(Action::Lose);
                if running {
                    actions.push(Action::Receive);
                }
            }
        }
        match world.supervisor {
            Supervisor::Running => actions.extend([Action::Stop, Action::Kill]),
            Supervisor::Stopped => actions.extend([Action::Continue, Action::Kill]),
            Supervisor::Dead => {}
        }
        if world.fault_left && matches!(world.etcd, Etcd::Serving { .. }) {
            actions.extend([Action::Wipe, Action::Restore { with_lease: false }, Action::Restore { with_lease: true }]);
        }
        if matches!(world.etcd, Etcd::Replaced { grace_in: None, .. }) {
            actions.push(Action::StartEpoch);
        }
    }

    fn next_state(&self, world: &World, action: Action) -> Option<World> {
        let mut next = world.clone();
        match action {
            Action::Tick => {
                let real = self.step();
                let owner = real.times(world.owner_rate);
                // A dead supervisor's silence stays as it was when it died.
                if world.supervisor != Supervisor::Dead {
                    next.silence = world.silence.plus(owner).min(SILENCE_CAP);
                }
                next.sigterm_ago = world.sigterm_ago.map(|ago| ago.plus(owner).min(SILENCE_CAP));
                if let Some(renewal) = next.renewal.as_mut() {
                    renewal.sent_ago = renewal.sent_ago.plus(owner).min(SILENCE_CAP);
                }
                if let Command::GoneIn(gone) = world.command {
                    next.command = Command::GoneIn(gone.minus(real));
                }
                next.takeover_in = world.takeover_in.map(|t| t.minus(real));
                // The dead man fires at its instant, this long before the step's end.
                if let (Some(dead_man), Command::Running, false) = (self.rules.dead_man, world.command, world.supervisor == Supervisor::Dead)
                    && next.silence >= dead_man
                {
                    let fired_ago = next.silence.minus(dead_man).over(world.owner_rate);
                    self.kill(&mut next, self.kill_latency.minus(fired_ago));
                }
                match &mut next.etcd {
                    Etcd::Serving { presence_in } => {
                        if let Some(until) = presence_in.map(|until| until.minus(real)) {
                            if until <= Ratio::ZERO {
                                *presence_in = None;
                                next.takeover_in = Some(next.takeover_in.map_or(until, |t| t.min(until)));
                            } else {
                                *presence_in = Some(until);
                            }
                        }
                    }
                    Etcd::Replaced { presence_in, grace_in, .. } => {
                        *presence_in = presence_in.map(|until| until.minus(real)).filter(|until| *until > Ratio::ZERO);
                        *grace_in = grace_in.map(|until| until.minus(real).max(Ratio::ZERO));
                    }
                }
            }
            Action::Send => next.renewal = Some(Renewal { sent_ago: Ratio::ZERO, answer: None }),
            Action::Deliver => {
                let renewal = next.renewal.as_mut()?;
                let renewed = Ratio::ONE.over(world.etcd_rate);
                renewal.answer = Some(match &mut next.etcd {
                    Etcd::Serving { presence_in: Some(until) } => {
                        *until = renewed;
                        Answer::Renewed { restored: false }
                    }
                    Etcd::Replaced { wiped: false, presence_in: Some(until), .. } => {
                        *until = renewed;
                        Answer::Renewed { restored: true }
                    }
                    _ => Answer::NotFound,
                });
            }
            Action::Lose => next.renewal = None,
            Action::Receive => {
                let renewal = next.renewal.take()?;
                match renewal.answer? {
                    Answer::Renewed { restored } if !restored || self.rules.counts_acknowledgements_after_restore => {
                        next.silence = next.silence.min(renewal.sent_ago);
                        next.renewed = true;
                    }
                    Answer::Renewed { .. } | Answer::NotFound => self.kill_now(&mut next),
                }
            }
            Action::Poll => return self.poll(world),
            Action::Stop => next.supervisor = Supervisor::Stopped,
            Action::Continue => next.supervisor = Supervisor::Running,
            Action::Kill => self.kill_now(&mut next),
            Action::Wipe | Action::Restore { .. } => {
                next.fault_left = false;
                let (wiped, presence_in) = match action {
                    Action::Restore { with_lease: true } => (false, Some(Ratio::ONE.over(world.etcd_rate))),
                    Action::Restore { with_lease: false } => (false, None),
                    _ => (true, None),
                };
                next.etcd = Etcd::Replaced { wiped, presence_in, grace_in: None };
            }
            Action::StartEpoch => {
                let ends = self.starter_ttl.times(self.rules.epoch_grace).over(world.etcd_rate);
                if let Etcd::Replaced { grace_in, .. } = &mut next.etcd {
                    *grace_in = Some(ends);
                }
                next.takeover_in = Some(next.takeover_in.map_or(ends, |t| t.min(ends)));
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_HOLDER, |model: &Timing, world: &World| model.one_holder(world)),
            Property::sometimes(TAKEN_OVER, |model: &Timing, world: &World| world.takeover_in.is_some_and(|t| t <= Ratio::ZERO) && model.one_holder(world)),
            Property::sometimes(RENEWED, |_, world: &World| world.renewed),
            Property::sometimes(GRACE_ENDS, |_, world: &World| matches!(world.etcd, Etcd::Replaced { grace_in: Some(Ratio::ZERO), .. })),
            Property::sometimes(DEAD_MAN_FIRES, |model: &Timing, world: &World| {
                world.supervisor == Supervisor::Dead && model.rules.dead_man.is_some_and(|d| world.silence >= d) && world.command != Command::Running
            }),
            Property::sometimes(LAPSE_STOPS, |_, world: &World| world.sigterm_ago.is_some_and(|ago| ago > Ratio::ZERO) && world.command == Command::Running),
        ]
    }
}
