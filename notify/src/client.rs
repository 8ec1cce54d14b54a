//! The HTTP client of one Provider: its trust, its proxy and its time limit, and what a
//! response means for a retry.

use std::sync::Arc;
use std::time::Duration;

use crate::payload::Request;
use crate::target::{Target, TargetError};

/// Bytes of a response body read (for an error message), at most.
const RESPONSE_BYTES: u64 = 4 * 1024;
/// Characters of a response body put in an error message, at most.
const RESPONSE_CHARS: usize = 300;

/// Why a request did not go through.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Worth trying again: a 5xx, a 408 or 429, a timeout or a refused connection.
    /// `retry_after` is the receiver's `Retry-After`, when it gave one.
    #[error("{message}")]
    Retryable {
        message: String,
        retry_after: Option<Duration>,
    },
    /// Not worth trying again: the receiver refused the request (another 4xx), or the
    /// Provider cannot send at all.
    #[error("{message}")]
    Permanent { message: String },
}

impl SendError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, SendError::Retryable { .. })
    }
}

impl From<TargetError> for SendError {
    fn from(error: TargetError) -> SendError {
        SendError::Permanent {
            message: error.to_string(),
        }
    }
}

/// Sends the requests of one Provider. Blocking: [`crate::deliver`] runs it off the async
/// workers.
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
    target: Arc<Target>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("target", &self.target)
            .finish()
    }
}

impl Client {
    /// A client for `target`, after [`Target::validate`].
    pub fn new(target: Target) -> Result<Client, TargetError> {
        target.validate()?;
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some(pem) = &target.ca_pem {
            tls = tls.root_certs(ureq::tls::RootCerts::Specific(Arc::new(certificates(pem)?)));
        }
        let proxy = match &target.proxy {
            Some(proxy) => Some(ureq::Proxy::new(proxy).map_err(|_| TargetError::NotHttp {
                field: "proxy",
                found: " (it is not a proxy URL)".into(),
            })?),
            // Only what the Provider names: no proxy taken from the environment.
            None => None,
        };
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(target.timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .proxy(proxy)
            .user_agent(crate::payload::user_agent())
            .tls_config(tls.build())
            .build();
        Ok(Client {
            agent: ureq::Agent::new_with_config(config),
            target: Arc::new(target),
        })
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// POSTs `request` once, and says whether a failure is worth a retry. Error messages
    /// never hold the token or the address.
    pub fn send(&self, request: &Request) -> Result<(), SendError> {
        let mut builder = self.agent.post(&request.url);
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        let mut response = match builder.send(&request.body[..]) {
            Ok(response) => response,
            Err(error) => {
                return Err(SendError::Retryable {
                    message: self.target.scrub(&format!(
                        "the {} receiver did not answer: {error}",
                        self.target.kind
                    )),
                    retry_after: None,
                });
            }
        };
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(());
        }
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = response
            .body_mut()
            .with_config()
            .limit(RESPONSE_BYTES)
            .read_to_string()
            .unwrap_or_default();
        let message = self.target.scrub(&format!(
            "the {} receiver answered {status}: {}",
            self.target.kind,
            crate::compose::clip(body.trim(), RESPONSE_CHARS)
        ));
        if status >= 500 || status == 408 || status == 429 {
            Err(SendError::Retryable {
                message,
                retry_after,
            })
        } else {
            Err(SendError::Permanent { message })
        }
    }
}

/// The certificates of a PEM bundle.
pub(crate) fn certificates(
    pem: &[u8],
) -> Result<Vec<ureq::tls::Certificate<'static>>, TargetError> {
    let mut certificates = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(certificate)) => certificates.push(certificate),
            Ok(_) => {}
            Err(error) => return Err(TargetError::BadCa(error.to_string())),
        }
    }
    if certificates.is_empty() {
        return Err(TargetError::BadCa("it holds no certificate".into()));
    }
    Ok(certificates)
}
