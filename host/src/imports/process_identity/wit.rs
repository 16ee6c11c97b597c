//! The `process-identity` import's WIT glue: each function forwards to the instance's process
//! effect ([`Effects::processes`](crate::effects::Effects::processes)).

use crate::bindings::proclease::lease::{process_identity as pi, types as t};
use crate::convert::{facts_to_wit, finished_run_to_wit, owner_from_wit, owner_to_wit};
use crate::runtime::HostState;

impl pi::Host for HostState {
    fn current_boot_id(&mut self) -> Result<String, String> {
        self.effects.processes.current_boot_id()
    }

    fn self_identity(&mut self) -> Result<t::Owner, String> {
        self.effects.processes.self_identity().map(owner_to_wit)
    }

    fn capture(&mut self, pid: u64) -> Result<t::Owner, String> {
        self.effects.processes.capture(pid).map(owner_to_wit)
    }

    fn probe(&mut self, owner: t::Owner) -> Result<pi::OwnerFacts, String> {
        self.effects.processes.probe(&owner_from_wit(owner)).map(facts_to_wit)
    }

    fn finished_run(&mut self, lease_id: String) -> Result<pi::FinishedRunEntry, String> {
        self.effects.processes.finished_run(&lease_id).map(|run| pi::FinishedRunEntry { outcome: run.map(finished_run_to_wit) })
    }

    fn forget_run(&mut self, lease_id: String) {
        self.effects.processes.forget_run(&lease_id)
    }
}
