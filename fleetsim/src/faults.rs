//! Per-cluster fault injection: added latency, an error rate (500, 503, 429 with
//! `Retry-After`, or any 4xx/5xx), hanging requests, and "down".
//!
//! "Down" cannot refuse TCP connections because every cluster shares one port, so the
//! server reads the request and then closes the connection without writing a response;
//! clients see "connection closed before message completed" (a reset from their point of
//! view). Open watch streams of a cluster that goes down are cut the same way. A hanging
//! request gets no answer until the client gives up and closes the connection, or until
//! the configured hang limit passes (then 504), or the server shuts down.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{ApiError, FleetSimError};
use crate::ids;

/// A fault to switch on for one cluster. Setting a fault replaces the previous fault of
/// the same kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Fault {
    /// Delay every request by `ms` milliseconds (on top of the global latency).
    Latency { ms: u64 },
    /// Fail a share `rate` (0..=1) of requests with HTTP `code`; 429 and 503 carry
    /// `Retry-After: retry_after_seconds` (default 1).
    Errors {
        rate: f64,
        code: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_seconds: Option<u64>,
    },
    /// Leave a share `rate` (0..=1) of requests unanswered.
    Hang {
        #[serde(default = "always")]
        rate: f64,
    },
    /// Close every connection to this cluster without answering.
    Down,
}

/// The largest latency a fault may add.
const MAX_LATENCY_MS: u64 = 3_600_000;

fn always() -> f64 {
    1.0
}

impl Fault {
    /// A latency fault.
    pub fn latency(delay: Duration) -> Fault {
        Fault::Latency {
            ms: delay.as_millis() as u64,
        }
    }

    /// An error-rate fault.
    pub fn errors(rate: f64, code: u16) -> Fault {
        Fault::Errors {
            rate,
            code,
            retry_after_seconds: None,
        }
    }

    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::Latency { .. } => FaultKind::Latency,
            Fault::Errors { .. } => FaultKind::Errors,
            Fault::Hang { .. } => FaultKind::Hang,
            Fault::Down => FaultKind::Down,
        }
    }

    /// Rejects rates outside 0..=1 and codes that are not errors.
    pub fn validate(&self) -> Result<(), FleetSimError> {
        let rate_ok = |rate: f64| (0.0..=1.0).contains(&rate);
        match self {
            Fault::Errors { rate, code, .. } => {
                if !rate_ok(*rate) {
                    return Err(FleetSimError::InvalidFault(format!(
                        "error rate {rate} is not within 0..=1"
                    )));
                }
                if !(400..=599).contains(code) {
                    return Err(FleetSimError::InvalidFault(format!(
                        "error code {code} is not a 4xx or 5xx status"
                    )));
                }
                Ok(())
            }
            Fault::Hang { rate } if !rate_ok(*rate) => Err(FleetSimError::InvalidFault(format!(
                "hang rate {rate} is not within 0..=1"
            ))),
            Fault::Latency { ms } if *ms > MAX_LATENCY_MS => Err(FleetSimError::InvalidFault(
                format!("latency {ms} ms is above the one hour limit"),
            )),
            _ => Ok(()),
        }
    }
}

/// The kinds of fault, for clearing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    Latency,
    Errors,
    Hang,
    Down,
}

/// The error-rate part of a cluster's faults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorFault {
    pub rate: f64,
    pub code: u16,
    pub retry_after_seconds: u64,
}

/// All faults active on one cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultState {
    pub latency_ms: u64,
    pub errors: Option<ErrorFault>,
    pub hang_rate: f64,
    pub down: bool,
}

/// What to do with one request.
#[derive(Debug, Clone)]
pub(crate) enum Decision {
    Proceed,
    Fail(ApiError),
    Hang,
    Drop,
}

impl FaultState {
    pub fn set(&mut self, fault: &Fault) {
        match fault {
            Fault::Latency { ms } => self.latency_ms = *ms,
            Fault::Errors {
                rate,
                code,
                retry_after_seconds,
            } => {
                self.errors = Some(ErrorFault {
                    rate: *rate,
                    code: *code,
                    retry_after_seconds: retry_after_seconds.unwrap_or(1),
                })
            }
            Fault::Hang { rate } => self.hang_rate = *rate,
            Fault::Down => self.down = true,
        }
    }

    pub fn clear(&mut self, kind: FaultKind) {
        match kind {
            FaultKind::Latency => self.latency_ms = 0,
            FaultKind::Errors => self.errors = None,
            FaultKind::Hang => self.hang_rate = 0.0,
            FaultKind::Down => self.down = false,
        }
    }

    pub fn latency(&self) -> Duration {
        Duration::from_millis(self.latency_ms)
    }

    /// Samples the faults for one request.
    pub(crate) fn decide(&self) -> Decision {
        if self.down {
            return Decision::Drop;
        }
        if self.hang_rate > 0.0 && ids::random_unit() < self.hang_rate {
            return Decision::Hang;
        }
        if let Some(errors) = &self.errors
            && errors.rate > 0.0
            && ids::random_unit() < errors.rate
        {
            let retry_after =
                matches!(errors.code, 429 | 503).then_some(errors.retry_after_seconds);
            return Decision::Fail(ApiError::injected(errors.code, retry_after));
        }
        Decision::Proceed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_follow_the_active_faults() {
        let mut state = FaultState::default();
        assert!(matches!(state.decide(), Decision::Proceed));
        state.set(&Fault::Errors {
            rate: 1.0,
            code: 429,
            retry_after_seconds: Some(7),
        });
        match state.decide() {
            Decision::Fail(error) => {
                assert_eq!(error.code, 429);
                assert_eq!(error.retry_after, Some(7));
            }
            other => panic!("expected an injected failure, got {other:?}"),
        }
        state.set(&Fault::Down);
        assert!(matches!(state.decide(), Decision::Drop));
        state.clear(FaultKind::Down);
        state.clear(FaultKind::Errors);
        state.set(&Fault::Hang { rate: 1.0 });
        assert!(matches!(state.decide(), Decision::Hang));
        assert!(Fault::errors(1.5, 500).validate().is_err());
        assert!(Fault::errors(0.5, 200).validate().is_err());
        let parsed: Fault =
            serde_json::from_str(r#"{"type":"errors","rate":0.5,"code":503}"#).expect("json fault");
        assert_eq!(parsed, Fault::errors(0.5, 503));
    }
}
