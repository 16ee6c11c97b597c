//! The `recovery-advice` export: proclease-core's `recovery_advice`, the words of a `recover`
//! that stopped or whose wait reached its bound, for the Python and Node hosts' command lines.

use alloc::string::String;

use proclease_core::recovery_advice as words;

use super::Component;
use super::bindings::exports::proclease::lease::recovery_advice as wit;

impl wit::Guest for Component {
    fn stopped(error: String, cause: Option<String>, dry_run: bool, skip_invalid: bool) -> String {
        words::stopped(&error, cause.as_deref(), dry_run, skip_invalid)
    }

    fn waited_out(error: Option<String>, timeout: String, dry_run: bool) -> String {
        words::waited_out(error.as_deref(), &timeout, dry_run)
    }

    fn stopped_at(step: wit::RecoveryStep, error: String, dry_run: bool) -> String {
        let step = match step {
            wit::RecoveryStep::CreationIntents => words::Step::CreationIntents,
            wit::RecoveryStep::InvocationLeases => words::Step::InvocationLeases,
        };
        words::stopped_at(step, &error, dry_run)
    }

    fn survey_waited_out(timeout: String) -> String {
        words::survey_waited_out(&timeout)
    }
}
