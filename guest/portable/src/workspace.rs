//! The `workspace` export: each function runs the workspace's protocol
//! ([`WorkspaceProtocol`]: directory facts, private creation, the identity-bound removal through
//! a quarantine, §6A.4) over the roots the host granted (`sys-fs.granted-roots`), on [`SysFs`]
//! and [`SysKernel`]. The roots are taken at the first call and kept.

use alloc::string::String;
use alloc::vec::Vec;

use proclease_protocols::workspace::{GrantedRoot, WorkspaceError, WorkspaceProtocol};

use crate::bindings::proclease::lease::{sys_fs, types as t, workspace as ws, workspace_advice as advice};
use crate::convert::{directory_facts_to_wit, directory_identity_from_wit, failure_to_wit};
use crate::store::PortableStore;
use crate::sys::{SysFs, SysKernel};

static WORKSPACE: spin::Once<WorkspaceProtocol<SysFs, SysKernel>> = spin::Once::new();

/// The workspace over the granted roots, opened once.
fn workspace() -> &'static WorkspaceProtocol<SysFs, SysKernel> {
    WORKSPACE.call_once(|| {
        let roots = sys_fs::granted_roots().into_iter().map(|(path, dir)| GrantedRoot { path, dir }).collect();
        // A removal releases the lease-creation lock once its tree is out of its path, as the
        // native host does (`docs/deviations.md` 24).
        WorkspaceProtocol::new(SysFs, SysKernel, roots, crate::store::release_leasing_lock)
    })
}

fn wit(error: WorkspaceError) -> t::Failure {
    failure_to_wit(error.failure())
}

impl advice::Guest for PortableStore {
    fn why_not_physical(dir: String) -> String {
        workspace().why_not_physical(&dir)
    }
}

impl ws::Guest for PortableStore {
    fn inspect(path: String) -> Result<ws::DirectoryLookup, t::Failure> {
        Ok(ws::DirectoryLookup { facts: workspace().inspect(&path).map_err(wit)?.map(directory_facts_to_wit) })
    }

    fn remove_tree(path: String, expected: t::DirectoryIdentity) -> Result<bool, t::Failure> {
        workspace().remove_tree(&path, &directory_identity_from_wit(expected)).map_err(wit)
    }

    fn create_private_directory(path: String) -> Result<Vec<String>, t::Failure> {
        workspace().create_private_directory(&path).map_err(wit)
    }

    fn remove_empty_directory(path: String, expected: Option<t::DirectoryIdentity>) -> Result<bool, t::Failure> {
        let expected = expected.map(directory_identity_from_wit);
        workspace().remove_empty_directory(&path, expected.as_ref()).map_err(wit)
    }

    fn kind(path: String) -> Result<ws::PathKind, t::Failure> {
        use proclease_protocols::workspace::PathKind;
        Ok(match workspace().kind(&path).map_err(wit)? {
            PathKind::Absent => ws::PathKind::Absent,
            PathKind::Directory => ws::PathKind::Directory,
            PathKind::SymbolicLink => ws::PathKind::SymbolicLink,
            PathKind::Other => ws::PathKind::Other,
            PathKind::Unreachable => ws::PathKind::Unreachable,
        })
    }

    fn is_empty_directory(path: String) -> Result<bool, t::Failure> {
        workspace().is_empty_directory(&path).map_err(wit)
    }
}
