//! What a sync's result records in the replicated state ([`SyncOutcome`]): the engine's
//! report or failure turned into an outcome and the error class that picks the retry, and the
//! redaction of its messages. The replica's shard workers and the pull agents share it.

use fleet::resources::ObjectRef;
use fleet::state::SyncOutcome;
use starling_secret::Redactor;

use crate::engine::{SyncFailure, SyncReport};
use crate::error::ErrorClass;

/// The outcome with every value `redactor` knows replaced by `***` in its messages.
pub fn redact_outcome(outcome: SyncOutcome, redactor: &Redactor) -> SyncOutcome {
    if redactor.is_empty() {
        return outcome;
    }
    match outcome {
        SyncOutcome::Failed {
            class,
            message,
            inventory,
        } => SyncOutcome::Failed {
            class,
            message: redactor.scrub(&message),
            inventory,
        },
        SyncOutcome::Abandoned {
            reason,
            inventory,
            applied,
        } => SyncOutcome::Abandoned {
            reason: redactor.scrub(&reason),
            inventory,
            applied,
        },
        SyncOutcome::Succeeded {
            inventory,
            health,
            drift,
        } => SyncOutcome::Succeeded {
            inventory,
            health,
            drift: drift.map(|drift| redactor.scrub(&drift)),
        },
    }
}

/// What a sync engine's result records: the outcome, and the error class of a failure. The
/// agents of pull clusters use it too.
pub fn outcome_of(result: Result<SyncReport, SyncFailure>) -> (SyncOutcome, Option<ErrorClass>) {
    match result {
        Ok(report) => {
            let drift = report.drift_message();
            (
                SyncOutcome::Succeeded {
                    inventory: report.inventory,
                    health: report.health,
                    drift,
                },
                None,
            )
        }
        Err(failure) if failure.class() == ErrorClass::Cancelled => {
            tracing::info!(error = %failure.error, "sync abandoned");
            let inventory: Option<Vec<ObjectRef>> = failure.inventory.clone();
            (
                SyncOutcome::Abandoned {
                    reason: failure.error.to_string(),
                    inventory,
                    applied: failure.applied_all,
                },
                Some(ErrorClass::Cancelled),
            )
        }
        Err(failure) => {
            let class = failure.class();
            tracing::warn!(class = class.as_str(), error = %failure.error, "sync failed");
            let inventory: Option<Vec<ObjectRef>> = failure.inventory.clone();
            (
                SyncOutcome::Failed {
                    class: class.as_str().into(),
                    message: failure.error.to_string(),
                    inventory,
                },
                Some(class),
            )
        }
    }
}

/// The class a recorded failure names (`unreachable`, `not-ready`, …); `invalid` for a name
/// this version does not know.
pub fn class_named(name: &str) -> ErrorClass {
    ErrorClass::ALL
        .into_iter()
        .find(|class| class.as_str() == name)
        .unwrap_or(ErrorClass::Invalid)
}
