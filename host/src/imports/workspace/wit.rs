//! The `workspace` import's WIT glue: each function forwards to the instance's workspace effect
//! ([`Effects::workspace`](crate::effects::Effects::workspace)), converting with the shared layer.

use crate::bindings::proclease::lease::{types as t, workspace as ws};
use crate::convert::{directory_facts_to_wit, directory_identity_from_wit, failure_to_wit};
use crate::runtime::HostState;
use proclease_core::effects::PathKind;

impl ws::Host for HostState {
    fn inspect(&mut self, path: String) -> Result<ws::DirectoryLookup, ws::Failure> {
        Ok(ws::DirectoryLookup { facts: self.effects.workspace.inspect(&path).map_err(failure_to_wit)?.map(directory_facts_to_wit) })
    }

    fn remove_tree(&mut self, path: String, expected: t::DirectoryIdentity) -> Result<bool, ws::Failure> {
        self.effects.workspace.remove_tree(&path, &directory_identity_from_wit(expected)).map_err(failure_to_wit)
    }

    fn create_private_directory(&mut self, path: String) -> Result<Vec<String>, ws::Failure> {
        self.effects.workspace.create_private_directory(&path).map_err(failure_to_wit)
    }

    fn remove_empty_directory(&mut self, path: String, expected: Option<t::DirectoryIdentity>) -> Result<bool, ws::Failure> {
        let expected = expected.map(directory_identity_from_wit);
        self.effects.workspace.remove_empty_directory(&path, expected.as_ref()).map_err(failure_to_wit)
    }

    fn kind(&mut self, path: String) -> Result<ws::PathKind, ws::Failure> {
        Ok(match self.effects.workspace.kind(&path).map_err(failure_to_wit)? {
            PathKind::Absent => ws::PathKind::Absent,
            PathKind::Directory => ws::PathKind::Directory,
            PathKind::SymbolicLink => ws::PathKind::SymbolicLink,
            PathKind::Other => ws::PathKind::Other,
            PathKind::Unreachable => ws::PathKind::Unreachable,
        })
    }

    fn is_empty_directory(&mut self, path: String) -> Result<bool, ws::Failure> {
        self.effects.workspace.is_empty_directory(&path).map_err(failure_to_wit)
    }
}
