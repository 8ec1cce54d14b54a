//! The HTTP client of a chart source: the Secret's credentials and trust, bounded reads, and
//! the distribution spec's token flow when a registry answers `401` with a `Bearer` challenge.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::{HttpAuth, MAX_MANIFEST_BYTES, basic_header, read_certificates};
use crate::credentials::{Redactor, SecretString};
use crate::error::{Result, SourceError};

/// The node's HTTP client for one chart source, with its credentials, its trust and a token
/// from a registry's `Bearer` challenge once it has one.
#[derive(Clone)]
pub(super) struct Client {
    agent: ureq::Agent,
    auth: HttpAuth,
    redactor: Redactor,
    registry_token: Arc<std::sync::Mutex<Option<SecretString>>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("auth", &self.auth).finish()
    }
}

impl Client {
    pub(super) fn new(auth: &HttpAuth, timeout: Duration) -> Result<Client> {
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some(pem) = &auth.ca_bundle {
            tls = tls.root_certs(ureq::tls::RootCerts::Specific(Arc::new(read_certificates(
                pem,
            )?)));
        }
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .max_redirects(8)
            .user_agent(concat!("starling/", env!("CARGO_PKG_VERSION")))
            .tls_config(tls.build())
            .build();
        Ok(Client {
            agent: ureq::Agent::new_with_config(config),
            redactor: auth.redactor(),
            auth: auth.clone(),
            registry_token: Arc::default(),
        })
    }

    /// An error with every Secret value (and any registry token) taken out of its text.
    pub(super) fn redacted(&self, error: SourceError) -> SourceError {
        let mut redactor = self.redactor.clone();
        if let Some(token) = self.token() {
            redactor.add_value(token.expose().as_bytes());
        }
        let scrub = |text: String| redactor.scrub(&text);
        match error {
            SourceError::Unreachable { url, message } => SourceError::Unreachable {
                url,
                message: scrub(message),
            },
            SourceError::Auth { url, message } => SourceError::Auth {
                url,
                message: scrub(message),
            },
            SourceError::InvalidPolicy(message) => SourceError::InvalidPolicy(scrub(message)),
            other => other,
        }
    }

    fn token(&self) -> Option<SecretString> {
        self.registry_token
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(super) fn get_bytes(&self, url: &str, accept: Option<&str>, limit: u64) -> Result<Vec<u8>> {
        Ok(self.get(url, accept, limit)?.body)
    }

    pub(super) fn get_with_digest(
        &self,
        url: &str,
        accept: Option<&str>,
        limit: u64,
    ) -> Result<(Vec<u8>, Option<String>)> {
        let fetched = self.get(url, accept, limit)?;
        Ok((fetched.body, fetched.content_digest))
    }

    pub(super) fn get_with_link(&self, url: &str, limit: u64) -> Result<(Vec<u8>, Option<String>)> {
        let fetched = self.get(url, None, limit)?;
        Ok((fetched.body, fetched.next_link))
    }

    /// A GET with the source's credentials; a `401` with a `Bearer` challenge gets a token
    /// from the challenge's realm once, and the request is made again with it.
    fn get(&self, url: &str, accept: Option<&str>, limit: u64) -> Result<Fetched> {
        let authorization = self
            .token()
            .map(|token| format!("Bearer {}", token.expose()))
            .or_else(|| self.auth.header());
        let response = self.send(url, accept, authorization.as_deref())?;
        if response.status().as_u16() == 401
            && let Some(challenge) = response
                .headers()
                .get("www-authenticate")
                .and_then(|value| value.to_str().ok())
                .and_then(BearerChallenge::parse)
        {
            let token = self.fetch_token(url, &challenge)?;
            let header = format!("Bearer {}", token.expose());
            *self
                .registry_token
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(token);
            let response = self.send(url, accept, Some(&header))?;
            return read(url, response, limit);
        }
        read(url, response, limit)
    }

    fn send(
        &self,
        url: &str,
        accept: Option<&str>,
        authorization: Option<&str>,
    ) -> Result<ureq::http::Response<ureq::Body>> {
        let mut request = self.agent.get(url);
        if let Some(accept) = accept {
            request = request.header("Accept", accept);
        }
        if let Some(authorization) = authorization {
            request = request.header("Authorization", authorization);
        }
        request.call().map_err(|error| SourceError::Unreachable {
            url: url.to_owned(),
            message: self.redactor.scrub(&error.to_string()),
        })
    }

    /// The distribution spec's token flow: `GET realm?service=..&scope=..`, with the basic
    /// credentials when the Source has them.
    fn fetch_token(&self, url: &str, challenge: &BearerChallenge) -> Result<SecretString> {
        #[derive(serde::Deserialize)]
        struct TokenReply {
            #[serde(default)]
            token: Option<String>,
            #[serde(default)]
            access_token: Option<String>,
        }
        if !challenge.realm.starts_with("https://") && !challenge.realm.starts_with("http://") {
            return Err(SourceError::Auth {
                url: url.to_owned(),
                message: format!(
                    "the token realm {:?} is not an http(s) url",
                    challenge.realm
                ),
            });
        }
        let mut request = self.agent.get(&challenge.realm);
        if let Some(service) = &challenge.service {
            request = request.query("service", service);
        }
        if let Some(scope) = &challenge.scope {
            request = request.query("scope", scope);
        }
        if let Some((user, password)) = &self.auth.basic {
            request = request.header("Authorization", &basic_header(user, password.expose()));
        }
        let response = request.call().map_err(|error| SourceError::Unreachable {
            url: challenge.realm.clone(),
            message: self.redactor.scrub(&error.to_string()),
        })?;
        let fetched = read(&challenge.realm, response, MAX_MANIFEST_BYTES)?;
        let reply: TokenReply =
            serde_json::from_slice(&fetched.body).map_err(|_| SourceError::Auth {
                url: url.to_owned(),
                message: format!("the token service {} answered no token", challenge.realm),
            })?;
        reply
            .token
            .or(reply.access_token)
            .filter(|token| !token.is_empty())
            .map(SecretString::new)
            .ok_or_else(|| SourceError::Auth {
                url: url.to_owned(),
                message: format!("the token service {} answered no token", challenge.realm),
            })
    }
}

struct Fetched {
    body: Vec<u8>,
    content_digest: Option<String>,
    next_link: Option<String>,
}

fn read(url: &str, response: ureq::http::Response<ureq::Body>, limit: u64) -> Result<Fetched> {
    let status = response.status().as_u16();
    match status {
        200..=299 => {}
        401 | 403 => {
            return Err(SourceError::Auth {
                url: url.to_owned(),
                message: format!("the server answered {status}"),
            });
        }
        404 => {
            return Err(SourceError::NotFound {
                url: url.to_owned(),
                what: "the requested document (404)".into(),
            });
        }
        _ => {
            return Err(SourceError::Unreachable {
                url: url.to_owned(),
                message: format!("the server answered {status}"),
            });
        }
    }
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let content_digest = header("docker-content-digest");
    let next_link = header("link").and_then(|link| next_link(&link));
    let body = response
        .into_body()
        .with_config()
        .limit(limit)
        .read_to_vec()
        .map_err(|error| match error {
            ureq::Error::BodyExceedsLimit(_) => {
                SourceError::LimitExceeded(format!("{url} is larger than {limit} bytes"))
            }
            other => SourceError::Unreachable {
                url: url.to_owned(),
                message: other.to_string(),
            },
        })?;
    Ok(Fetched {
        body,
        content_digest,
        next_link,
    })
}

/// The target of a `Link: <...>; rel="next"` header.
pub(super) fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        let next = params
            .split(';')
            .any(|param| param.trim().replace(' ', "") == "rel=\"next\"");
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        next.then(|| target.to_owned())
    })
}

/// `WWW-Authenticate: Bearer realm="…",service="…",scope="…"`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct BearerChallenge {
    pub(super) realm: String,
    pub(super) service: Option<String>,
    pub(super) scope: Option<String>,
}

impl BearerChallenge {
    pub(super) fn parse(header: &str) -> Option<BearerChallenge> {
        let rest = header.trim();
        let (scheme, params) = rest.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let mut values: BTreeMap<String, String> = BTreeMap::new();
        let mut rest = params.trim();
        while !rest.is_empty() {
            let (key, after) = rest.split_once('=')?;
            let after = after.trim_start();
            let (value, remainder) = if let Some(quoted) = after.strip_prefix('"') {
                let end = quoted.find('"')?;
                (&quoted[..end], &quoted[end + 1..])
            } else {
                let end = after.find(',').unwrap_or(after.len());
                (&after[..end], &after[end..])
            };
            values.insert(key.trim().to_ascii_lowercase(), value.to_owned());
            rest = remainder.trim_start().trim_start_matches(',').trim_start();
        }
        Some(BearerChallenge {
            realm: values.remove("realm")?,
            service: values.remove("service"),
            scope: values.remove("scope"),
        })
    }
}
