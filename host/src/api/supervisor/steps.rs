//! The supervisor's decisions, as functions of what it found: which lease a target asks for and
//! what refuses it before anything is written, what the lease would create, how hard to retry
//! settling after the command, what becomes of a stage, and what an unfinished run leaves for
//! `recover`. [`Supervisor::run`](super::Supervisor::run) does the effects in order around them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use proclease_core::records::directory_lease::Role;

use super::{Target, Unreleased};
use crate::error::Refusal;
use crate::workspace::PathKind;

/// What a target leases: its role, its directory and a stage's output, absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Plan {
    pub(super) role: Role,
    pub(super) dir: PathBuf,
    pub(super) output: Option<PathBuf>,
}

/// The plan for `target`, its paths made absolute by `absolute`, refused before anything is
/// written when a stage's output is not the stage's sibling or when something is at the output
/// already (`output_kind`: what the workspace finds there, `None` when it cannot tell — then
/// the stage's lease refuses in its own words).
///
/// Errors: `absolute`'s; [`Refusal::OutputNotSibling`]; [`Refusal::OutputExists`].
pub(super) fn plan<E: From<Refusal>>(target: &Target, absolute: impl Fn(&Path) -> Result<PathBuf, E>, output_kind: impl Fn(&Path) -> Option<PathKind>) -> Result<Plan, E> {
    let plan = match target {
        Target::Workdir(dir) => Plan { role: Role::RawWorking, dir: absolute(dir)?, output: None },
        Target::Stage { stage, output } => Plan { role: Role::BundleStage, dir: absolute(stage)?, output: Some(absolute(output)?) },
    };
    if let Some(output) = &plan.output {
        if output.parent() != plan.dir.parent() {
            return Err(Refusal::OutputNotSibling { output: output.clone(), stage: plan.dir.clone() }.into());
        }
        // A symbolic link or anything else at the output is something there too.
        if matches!(output_kind(output), Some(PathKind::Directory | PathKind::SymbolicLink | PathKind::Other)) {
            return Err(Refusal::OutputExists { output: output.clone() }.into());
        }
    }
    Ok(plan)
}

/// The directories a lease of `dir` creates — `dir` and its missing ancestors, innermost first
/// — to remove again if the command never runs: the ancestors `kind` finds absent, up to the
/// first that is there (or cannot be told).
pub(super) fn created_by_lease(dir: &Path, kind: impl Fn(&Path) -> Option<PathKind>) -> Vec<PathBuf> {
    dir.ancestors().take_while(|path| kind(path) == Some(PathKind::Absent)).map(Path::to_path_buf).collect()
}

/// How long to retry settling and releasing after the command: `release_retry`, except with a
/// cluster session (`fenced`) and a problem already (a lost session is not a state home that
/// may take writes again): not at all.
pub(super) fn settle_retry(fenced: bool, problems: bool, release_retry: Duration) -> Duration {
    if fenced && problems { Duration::ZERO } else { release_retry }
}

/// What becomes of a stage's directory once its command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StageEnd {
    /// It succeeded: publish the stage to its output.
    Publish,
    /// It failed: the stage is garbage; remove it by its leased identity.
    Remove,
}

/// What becomes of the directory of a run of `role` whose command `succeeded`: `None` for a
/// working directory, which stays.
pub(super) fn stage_end(role: Role, succeeded: bool) -> Option<StageEnd> {
    match role {
        Role::BundleStage if succeeded => Some(StageEnd::Publish),
        Role::BundleStage => Some(StageEnd::Remove),
        Role::RawWorking => None,
    }
}

/// What a run that could not settle or release everything leaves for `recover`: where its
/// results are (the output a stage was `published` to, else the leased `dir`), whether the run
/// journal recorded the end, and whether it is a failed stage (scratch). `None` when nothing was
/// left (`problems` false).
pub(super) fn unreleased(problems: bool, plan: &Plan, succeeded: bool, published: bool, journaled: bool) -> Option<Unreleased> {
    if !problems {
        return None;
    }
    let directory = match (&plan.output, published) {
        (Some(output), true) => output.clone(),
        _ => plan.dir.clone(),
    };
    Some(Unreleased { directory, journaled, marker: None, scratch: plan.role == Role::BundleStage && !succeeded, published })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(path: &Path) -> Result<PathBuf, Refusal> {
        Ok(path.to_path_buf())
    }

    fn stage(stage: &str, output: &str) -> Target {
        Target::Stage { stage: stage.into(), output: output.into() }
    }

    #[test]
    fn a_workdir_is_a_raw_working_lease_and_a_stage_a_bundle_stage_with_its_output() {
        let work = plan(&Target::Workdir("/w/job".into()), identity, |_| None).expect("a plan");
        assert_eq!(work, Plan { role: Role::RawWorking, dir: "/w/job".into(), output: None });
        let staged = plan(&stage("/w/.stage", "/w/out"), identity, |_| Some(PathKind::Absent)).expect("a plan");
        assert_eq!(staged, Plan { role: Role::BundleStage, dir: "/w/.stage".into(), output: Some("/w/out".into()) });
    }

    #[test]
    fn a_stage_s_output_must_be_a_free_sibling() {
        let refused = plan(&stage("/w/a/.stage", "/w/b/out"), identity, |_| Some(PathKind::Absent)).expect_err("not a sibling");
        assert!(matches!(refused, Refusal::OutputNotSibling { .. }), "{refused:?}");
        for there in [PathKind::Directory, PathKind::SymbolicLink, PathKind::Other] {
            let refused = plan(&stage("/w/.stage", "/w/out"), identity, |_| Some(there)).expect_err("something is there");
            assert!(matches!(refused, Refusal::OutputExists { .. }), "{there:?}: {refused:?}");
        }
        // What the workspace cannot tell (outside the granted roots) is left to the lease.
        for unknown in [None, Some(PathKind::Unreachable)] {
            assert!(plan(&stage("/w/.stage", "/w/out"), identity, |_| unknown).is_ok(), "{unknown:?}");
        }
    }

    #[test]
    fn the_lease_creates_the_missing_ancestors_innermost_first() {
        let absent = |path: &Path| Some(if path.starts_with("/w/new") { PathKind::Absent } else { PathKind::Directory });
        assert_eq!(created_by_lease(Path::new("/w/new/a/job"), absent), [PathBuf::from("/w/new/a/job"), "/w/new/a".into(), "/w/new".into()]);
        assert!(created_by_lease(Path::new("/w/job"), |_| Some(PathKind::Directory)).is_empty());
        assert!(created_by_lease(Path::new("/w/job"), |_| None).is_empty(), "what cannot be told is never removed");
    }

    #[test]
    fn a_lost_cluster_session_stops_the_retries_and_nothing_else_does() {
        let retry = Duration::from_secs(30);
        assert_eq!(settle_retry(true, true, retry), Duration::ZERO);
        assert_eq!(settle_retry(true, false, retry), retry);
        assert_eq!(settle_retry(false, true, retry), retry);
    }

    #[test]
    fn a_stage_is_published_when_its_command_succeeded_and_removed_when_it_failed() {
        assert_eq!(stage_end(Role::BundleStage, true), Some(StageEnd::Publish));
        assert_eq!(stage_end(Role::BundleStage, false), Some(StageEnd::Remove));
        assert_eq!(stage_end(Role::RawWorking, true), None);
        assert_eq!(stage_end(Role::RawWorking, false), None);
    }

    #[test]
    fn an_unfinished_run_points_recover_at_its_results() {
        let work = Plan { role: Role::RawWorking, dir: "/w/job".into(), output: None };
        assert!(unreleased(false, &work, true, false, true).is_none(), "nothing left");
        let left = unreleased(true, &work, false, false, true).expect("left");
        assert_eq!((left.directory, left.scratch, left.journaled), (PathBuf::from("/w/job"), false, true), "a failed command's workdir is its result");
        let staged = Plan { role: Role::BundleStage, dir: "/w/.stage".into(), output: Some("/w/out".into()) };
        let left = unreleased(true, &staged, true, true, false).expect("left");
        assert_eq!((left.directory, left.scratch, left.published), (PathBuf::from("/w/out"), false, true), "published: the output");
        let left = unreleased(true, &staged, false, false, true).expect("left");
        assert_eq!((left.directory, left.scratch), (PathBuf::from("/w/.stage"), true), "a failed stage is scratch");
    }
}
