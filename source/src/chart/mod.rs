//! Chart sources (`Source.spec.helm` and `Source.spec.oci`): a chart followed in a Helm
//! repository or an OCI registry, fetched over HTTP(S) with the node's own client and stored
//! as it is, addressed by the archive's sha256, like a git artifact.
//!
//! ```text
//!  Helm repository: GET <url>/index.yaml ─▶ helm_repo::select(chart, version policy)
//!      ─▶ revision `<chart>@<version>` ─▶ GET archive (digest checked against the index's)
//!  OCI registry:    GET /v2/<repo>/tags/list (semver) ─▶ GET /v2/<repo>/manifests/<tag>
//!      ─▶ revision `<tag>@sha256:<manifest>` ─▶ the chart layer (or the one tar.gz layer)
//!      ─▶ GET /v2/<repo>/blobs/<digest> (checked against the layer's digest)
//!  either ─▶ ArtifactStore (digest = sha256 of the archive) ─▶ SourceResolved
//! ```
//!
//! A poll whose revision is the one in use downloads nothing. A chart archive holds the chart
//! in one top directory; the renderer takes that directory when a Sync names no path.
//! Registries that answer `401` with a `Bearer` challenge get the token flow of the
//! distribution spec (with the Secret's credentials, if any). Every body read is bounded, and
//! the Secret's values never reach an error or a log line.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use semver::Version;
use sha2::{Digest as _, Sha256};

use crate::credentials::{Redactor, SecretBytes, SecretString};
use crate::error::{ErrorStatus, Result, SourceError};
use crate::helm_repo::{self, VersionPolicy};
use crate::store::{ArtifactStore, Digest, StoredArtifact};
use crate::watcher::{PollOutcome, jittered_interval};

mod client;

use client::Client;
#[cfg(test)]
use client::{BearerChallenge, next_link};

/// The media type of a Helm chart's content layer in an OCI manifest.
pub const HELM_CHART_LAYER: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
/// Largest manifest or tag list read from a registry.
const MAX_MANIFEST_BYTES: u64 = 4 * 1024 * 1024;
/// Most pages of a registry's tag list that are read.
const MAX_TAG_PAGES: usize = 64;
const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

/// Which chart a Source follows, and where.
#[derive(Clone, Debug)]
pub enum ChartOrigin {
    /// A chart in a Helm repository.
    HelmRepository {
        url: String,
        chart: String,
        policy: VersionPolicy,
    },
    /// An artifact in an OCI registry.
    Oci {
        /// `https://HOST[:PORT]` (`http://` when the Source says `insecure`).
        registry: String,
        repository: String,
        reference: OciReference,
    },
}

/// The tag an OCI Source follows.
#[derive(Clone, Debug)]
pub enum OciReference {
    Tag(String),
    /// The highest tag in the range (pre-releases only when the range names one). Helm
    /// writes a version's `+` as `_` in a tag; both read as the same version.
    Range(semver::VersionReq),
}

impl ChartOrigin {
    /// Reads `oci://HOST[:PORT]/REPOSITORY`.
    pub fn oci(url: &str, reference: OciReference, insecure: bool) -> Result<ChartOrigin> {
        let rest = url
            .strip_prefix("oci://")
            .ok_or_else(|| SourceError::InvalidPolicy(format!("{url:?} is not an oci:// url")))?;
        let (host, repository) = rest
            .split_once('/')
            .filter(|(host, repository)| !host.is_empty() && !repository.is_empty())
            .ok_or_else(|| {
                SourceError::InvalidPolicy(format!("{url:?} needs oci://HOST/REPOSITORY"))
            })?;
        let scheme = if insecure { "http" } else { "https" };
        Ok(ChartOrigin::Oci {
            registry: format!("{scheme}://{host}"),
            repository: repository.trim_end_matches('/').to_owned(),
            reference,
        })
    }

    /// How logs and errors name it.
    pub fn describe(&self) -> String {
        match self {
            ChartOrigin::HelmRepository { url, chart, .. } => format!("chart {chart} of {url}"),
            ChartOrigin::Oci {
                registry,
                repository,
                ..
            } => format!("{registry}/{repository}"),
        }
    }
}

/// Credentials and trust for a chart source, read from the Source's Secret: `username` and
/// `password`, or `token` (a bearer token); `ca.crt`, a PEM bundle the server's certificate
/// must chain to (the public roots when absent).
#[derive(Clone, Default)]
pub struct HttpAuth {
    basic: Option<(String, SecretString)>,
    token: Option<SecretString>,
    ca_bundle: Option<Vec<u8>>,
}

impl std::fmt::Debug for HttpAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpAuth")
            .field("basic", &self.basic.as_ref().map(|(user, _)| user))
            .field("token", &self.token.is_some())
            .field("ca_bundle", &self.ca_bundle.is_some())
            .finish()
    }
}

impl HttpAuth {
    pub fn anonymous() -> Self {
        HttpAuth::default()
    }

    /// Reads a Secret's data (the keys above; anything else is ignored).
    pub fn from_secret_data(data: &BTreeMap<String, SecretBytes>) -> Result<HttpAuth> {
        let text = |key: &str| -> Result<Option<String>> {
            data.get(key)
                .map(|value| {
                    String::from_utf8(value.expose().to_vec()).map_err(|_| {
                        SourceError::InvalidPolicy(format!("secret key {key:?} is not utf-8"))
                    })
                })
                .transpose()
        };
        let basic = match (text("username")?, text("password")?) {
            (Some(user), Some(password)) => Some((user, SecretString::new(password))),
            (None, None) => None,
            _ => {
                return Err(SourceError::InvalidPolicy(
                    "the secret has only one of username and password".into(),
                ));
            }
        };
        let token = text("token")?.map(SecretString::new);
        let ca_bundle = data.get("ca.crt").map(|value| value.expose().to_vec());
        if let Some(pem) = &ca_bundle
            && read_certificates(pem)?.is_empty()
        {
            return Err(SourceError::InvalidPolicy(
                "secret key \"ca.crt\" holds no PEM certificate".into(),
            ));
        }
        Ok(HttpAuth {
            basic,
            token,
            ca_bundle,
        })
    }

    fn redactor(&self) -> Redactor {
        let mut redactor = Redactor::new();
        if let Some((_, password)) = &self.basic {
            redactor.add_value(password.expose().as_bytes());
        }
        if let Some(token) = &self.token {
            redactor.add_value(token.expose().as_bytes());
        }
        redactor
    }

    fn header(&self) -> Option<String> {
        if let Some(token) = &self.token {
            return Some(format!("Bearer {}", token.expose()));
        }
        self.basic
            .as_ref()
            .map(|(user, password)| basic_header(user, password.expose()))
    }
}

fn basic_header(user: &str, password: &str) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

fn read_certificates(pem: &[u8]) -> Result<Vec<ureq::tls::Certificate<'static>>> {
    let mut certificates = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(certificate)) => certificates.push(certificate),
            Ok(_) => {}
            Err(error) => {
                return Err(SourceError::InvalidPolicy(format!(
                    "secret key \"ca.crt\" is not a PEM bundle: {error}"
                )));
            }
        }
    }
    Ok(certificates)
}

/// Everything needed to follow one chart source.
#[derive(Clone, Debug)]
pub struct ChartConfig {
    pub origin: ChartOrigin,
    pub auth: HttpAuth,
    pub interval: Duration,
    /// Time limit of each request.
    pub timeout: Duration,
    pub max_artifact_bytes: u64,
}

/// A resolved chart revision and its stored archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChartRevision {
    /// `<chart>@<version>` (Helm repository) or `<tag>@sha256:<manifest>` (OCI).
    pub revision: String,
    pub artifact: StoredArtifact,
}

/// Follows one chart source: the chart source's counterpart of [`crate::SourceWatcher`].
#[derive(Debug)]
pub struct ChartWatcher {
    client: Client,
    config: ChartConfig,
    store: Arc<ArtifactStore>,
    last_good: Option<ChartRevision>,
    error: Option<ErrorStatus>,
}

impl ChartWatcher {
    pub fn new(config: ChartConfig, store: Arc<ArtifactStore>) -> Result<ChartWatcher> {
        if config.interval.is_zero() {
            return Err(SourceError::InvalidPolicy(
                "the polling interval must be greater than zero".into(),
            ));
        }
        Ok(ChartWatcher {
            client: Client::new(&config.auth, config.timeout)?,
            config,
            store,
            last_good: None,
            error: None,
        })
    }

    /// Starts from the committed revision (after a restart or an ownership move), so an
    /// unchanged chart is not reported as a change.
    pub fn with_last_good(mut self, revision: ChartRevision) -> Self {
        self.last_good = Some(revision);
        self
    }

    pub fn last_good(&self) -> Option<&ChartRevision> {
        self.last_good.as_ref()
    }

    /// The message of a `Ready` condition: the error, with the revision still in use.
    pub fn message(&self) -> String {
        crate::watcher::ready_message(
            self.error.as_ref(),
            self.last_good.as_ref().map(|good| good.revision.clone()),
        )
    }

    /// The delay before the next poll: the interval ±10%, from `seed`.
    pub fn next_delay(&self, seed: u64) -> Duration {
        jittered_interval(self.config.interval, seed)
    }

    /// Resolves, and downloads the archive when the revision changed. Blocking.
    pub fn poll(&mut self) -> PollOutcome {
        let described = self.config.origin.describe();
        match resolve(
            &self.client,
            &self.config,
            &self.store,
            self.last_good.as_ref(),
        ) {
            Ok(resolved) => {
                let changed = self.last_good.as_ref().is_none_or(|good| {
                    good.revision != resolved.revision
                        || good.artifact.digest != resolved.artifact.digest
                });
                if changed {
                    tracing::info!(source = %described, revision = %resolved.revision, digest = %resolved.artifact.digest, "chart revision changed");
                }
                self.last_good = Some(resolved);
                self.error = None;
                PollOutcome {
                    changed,
                    fetched: changed,
                    error: None,
                    notices: Vec::new(),
                }
            }
            Err(error) => {
                let error = self.client.redacted(error);
                tracing::warn!(source = %described, reason = error.kind().reason(), %error, "chart source poll failed");
                self.error = Some(error.status());
                PollOutcome::failed(&error)
            }
        }
    }

    /// [`ChartWatcher::poll`] on tokio's blocking pool.
    pub async fn poll_async(&mut self) -> PollOutcome {
        let mut worker = ChartWatcher {
            client: self.client.clone(),
            config: self.config.clone(),
            store: Arc::clone(&self.store),
            last_good: self.last_good.clone(),
            error: self.error.clone(),
        };
        let task = tokio::task::spawn_blocking(move || {
            let outcome = worker.poll();
            (worker, outcome)
        });
        match task.await {
            Ok((worker, outcome)) => {
                (self.last_good, self.error) = (worker.last_good, worker.error);
                outcome
            }
            Err(error) => {
                let error = SourceError::io(
                    format!("poll of {} stopped", self.config.origin.describe()),
                    std::io::Error::other(error.to_string()),
                );
                self.error = Some(error.status());
                PollOutcome::failed(&error)
            }
        }
    }
}

/// Fetches the archive of a committed revision again, for a node whose peers lack it: the
/// version's archive from the repository, or the blob by its digest from the registry.
pub fn materialize_chart(
    config: &ChartConfig,
    store: &ArtifactStore,
    revision: &str,
    digest: &Digest,
) -> Result<StoredArtifact> {
    if let Some(stored) = store.get(digest) {
        return Ok(stored);
    }
    let client = Client::new(&config.auth, config.timeout)?;
    let fetched = match &config.origin {
        ChartOrigin::HelmRepository { url, chart, .. } => {
            let version = revision
                .strip_prefix(chart.as_str())
                .and_then(|rest| rest.strip_prefix('@'))
                .ok_or_else(|| {
                    SourceError::InvalidPolicy(format!(
                        "revision {revision:?} is not a version of chart {chart}"
                    ))
                })?;
            let exact = VersionPolicy::parse(version)?;
            let (_, archive_url, _) = select_in_repository(&client, url, chart, &exact)?;
            client.get_bytes(&archive_url, None, config.max_artifact_bytes)
        }
        ChartOrigin::Oci {
            registry,
            repository,
            ..
        } => {
            let url = format!("{registry}/v2/{repository}/blobs/{digest}");
            client.get_bytes(&url, None, config.max_artifact_bytes)
        }
    }
    .map_err(|error| client.redacted(error))?;
    store_archive(store, &fetched, Some(digest), config.max_artifact_bytes)
}

fn resolve(
    client: &Client,
    config: &ChartConfig,
    store: &ArtifactStore,
    last_good: Option<&ChartRevision>,
) -> Result<ChartRevision> {
    // The revision in use, when its archive is still here: nothing to download.
    let unchanged = |revision: &str, digest: Option<&Digest>| {
        last_good
            .filter(|good| good.revision == revision)
            .filter(|good| digest.is_none_or(|d| *d == good.artifact.digest))
            .and_then(|good| store.get(&good.artifact.digest))
            .map(|artifact| ChartRevision {
                revision: revision.to_owned(),
                artifact,
            })
    };
    match &config.origin {
        ChartOrigin::HelmRepository { url, chart, policy } => {
            let (version, archive_url, stated) = select_in_repository(client, url, chart, policy)?;
            let revision = format!("{chart}@{version}");
            if let Some(same) = unchanged(&revision, stated.as_ref()) {
                return Ok(same);
            }
            let bytes = client.get_bytes(&archive_url, None, config.max_artifact_bytes)?;
            let artifact = store_archive(store, &bytes, stated.as_ref(), config.max_artifact_bytes)
                .map_err(|error| match error {
                    SourceError::Integrity { digest, message } => SourceError::Integrity {
                        digest,
                        message: format!(
                            "{archive_url} does not match the digest the index states ({message})"
                        ),
                    },
                    other => other,
                })?;
            Ok(ChartRevision { revision, artifact })
        }
        ChartOrigin::Oci {
            registry,
            repository,
            reference,
        } => {
            let tag = match reference {
                OciReference::Tag(tag) => tag.clone(),
                OciReference::Range(range) => highest_tag(client, registry, repository, range)?,
            };
            let manifest_url = format!("{registry}/v2/{repository}/manifests/{tag}");
            let (body, header_digest) =
                client.get_with_digest(&manifest_url, Some(MANIFEST_TYPES), MAX_MANIFEST_BYTES)?;
            let manifest_digest = header_digest
                .unwrap_or_else(|| format!("sha256:{}", hex::encode(Sha256::digest(&body))));
            let layer = chart_layer(&body, &manifest_url)?;
            let revision = format!("{tag}@{manifest_digest}");
            if let Some(same) = unchanged(&revision, Some(&layer.digest)) {
                return Ok(same);
            }
            if layer.size > config.max_artifact_bytes {
                return Err(SourceError::LimitExceeded(format!(
                    "layer {} of {manifest_url} has {} bytes, more than {}",
                    layer.digest, layer.size, config.max_artifact_bytes
                )));
            }
            let blob_url = format!("{registry}/v2/{repository}/blobs/{}", layer.digest);
            let bytes = client.get_bytes(&blob_url, None, config.max_artifact_bytes)?;
            let artifact = store_archive(
                store,
                &bytes,
                Some(&layer.digest),
                config.max_artifact_bytes,
            )?;
            Ok(ChartRevision { revision, artifact })
        }
    }
}

/// The version a policy selects in a repository, its archive's URL, and the digest the
/// index states for it (if any).
fn select_in_repository(
    client: &Client,
    url: &str,
    chart: &str,
    policy: &VersionPolicy,
) -> Result<(Version, String, Option<Digest>)> {
    let index_url = format!("{}/index.yaml", url.trim_end_matches('/'));
    let bytes = client.get_bytes(&index_url, None, helm_repo::MAX_INDEX_BYTES as u64)?;
    let index = helm_repo::parse_index(&bytes, url)?;
    let selected = helm_repo::select(&index, chart, policy, url)?;
    let archive_url = helm_repo::chart_url(url, &selected.entry)?;
    let stated = match selected.entry.digest.as_deref().filter(|d| !d.is_empty()) {
        None => None,
        Some(hex) => Some(
            format!("sha256:{}", hex.trim_start_matches("sha256:"))
                .parse::<Digest>()
                .map_err(|_| {
                    SourceError::InvalidPolicy(format!(
                        "the index of {url} states digest {hex:?} for {chart} {}, not a sha256",
                        selected.version
                    ))
                })?,
        ),
    };
    Ok((selected.version, archive_url, stated))
}

/// The highest tag of a repository in `range`.
fn highest_tag(
    client: &Client,
    registry: &str,
    repository: &str,
    range: &semver::VersionReq,
) -> Result<String> {
    #[derive(serde::Deserialize)]
    struct TagList {
        #[serde(default)]
        tags: Option<Vec<String>>,
    }
    let mut best: Option<(Version, String)> = None;
    let mut seen = 0usize;
    let mut next = Some(format!("{registry}/v2/{repository}/tags/list"));
    let mut pages = 0;
    while let Some(url) = next.take() {
        pages += 1;
        if pages > MAX_TAG_PAGES {
            return Err(SourceError::LimitExceeded(format!(
                "the tag list of {registry}/{repository} has more than {MAX_TAG_PAGES} pages"
            )));
        }
        let (body, link) = client.get_with_link(&url, MAX_MANIFEST_BYTES)?;
        let list: TagList = serde_json::from_slice(&body).map_err(|error| {
            SourceError::InvalidPolicy(format!("{url} is not a tag list: {error}"))
        })?;
        for tag in list.tags.unwrap_or_default() {
            seen += 1;
            let Some(version) = crate::policy::tag_version(&tag.replace('_', "+")) else {
                continue;
            };
            if range.matches(&version) && best.as_ref().is_none_or(|(b, _)| version > *b) {
                best = Some((version, tag));
            }
        }
        next = link.map(|path| {
            if path.starts_with('/') {
                format!("{registry}{path}")
            } else {
                path
            }
        });
    }
    best.map(|(_, tag)| tag)
        .ok_or_else(|| SourceError::NotFound {
            url: format!("{registry}/{repository}"),
            what: format!("a tag matching {range} (among {seen} tags)"),
        })
}

struct Layer {
    digest: Digest,
    size: u64,
}

/// The layer to deploy: the Helm chart's content layer, else the manifest's only tar.gz layer.
fn chart_layer(manifest: &[u8], url: &str) -> Result<Layer> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Descriptor {
        media_type: String,
        digest: String,
        #[serde(default)]
        size: u64,
    }
    #[derive(serde::Deserialize)]
    struct Manifest {
        #[serde(default)]
        layers: Vec<Descriptor>,
    }
    let manifest: Manifest = serde_json::from_slice(manifest).map_err(|error| {
        SourceError::InvalidPolicy(format!("{url} is not an image manifest: {error}"))
    })?;
    let gzipped = |media: &str| media.ends_with("tar+gzip") || media.ends_with("tar.gzip");
    let chosen = manifest
        .layers
        .iter()
        .find(|layer| layer.media_type == HELM_CHART_LAYER)
        .or_else(|| {
            let mut tarballs = manifest.layers.iter().filter(|l| gzipped(&l.media_type));
            match (tarballs.next(), tarballs.next()) {
                (Some(only), None) => Some(only),
                _ => None,
            }
        });
    let Some(layer) = chosen else {
        let types: Vec<&str> = manifest
            .layers
            .iter()
            .map(|l| l.media_type.as_str())
            .collect();
        return Err(SourceError::InvalidPolicy(format!(
            "{url} has no Helm chart layer ({HELM_CHART_LAYER}) and not exactly one tar.gz layer; its layers: [{}]",
            types.join(", ")
        )));
    };
    let digest = layer.digest.parse::<Digest>().map_err(|_| {
        SourceError::InvalidPolicy(format!(
            "layer digest {:?} of {url} is not a sha256 digest",
            layer.digest
        ))
    })?;
    Ok(Layer {
        digest,
        size: layer.size,
    })
}

/// Stores an archive under its own sha256, checked against `expected` when one is stated.
fn store_archive(
    store: &ArtifactStore,
    bytes: &[u8],
    expected: Option<&Digest>,
    max_bytes: u64,
) -> Result<StoredArtifact> {
    if bytes.len() < 2 || bytes[0] != 0x1f || bytes[1] != 0x8b {
        return Err(SourceError::InvalidPolicy(
            "the archive is not gzip-compressed (a chart is a .tgz)".into(),
        ));
    }
    let actual = Digest::from_bytes(Sha256::digest(bytes).into());
    let expected = expected.copied().unwrap_or(actual);
    let mut import = store.begin_import(expected, max_bytes)?;
    import.write_chunk(bytes)?;
    import.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_is_read_as_registries_send_it() {
        let challenge = BearerChallenge::parse(
            r#"Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:charts/web:pull""#,
        )
        .unwrap();
        assert_eq!(challenge.realm, "https://auth.example.com/token");
        assert_eq!(challenge.service.as_deref(), Some("registry.example.com"));
        assert_eq!(
            challenge.scope.as_deref(),
            Some("repository:charts/web:pull")
        );
        assert_eq!(BearerChallenge::parse(r#"Basic realm="x""#), None);
        assert_eq!(BearerChallenge::parse("Bearer service=x"), None, "no realm");
    }

    #[test]
    fn the_next_page_of_a_tag_list_is_found_in_its_link_header() {
        assert_eq!(
            next_link(r#"</v2/charts/web/tags/list?last=1.2.0&n=100>; rel="next""#).as_deref(),
            Some("/v2/charts/web/tags/list?last=1.2.0&n=100")
        );
        assert_eq!(next_link(r#"<https://x/a>; rel="prev""#), None);
    }

    #[test]
    fn the_chart_layer_is_chosen_else_the_only_tarball() {
        let manifest = |layers: &str| format!(r#"{{"schemaVersion":2,"layers":[{layers}]}}"#);
        let digest = format!("sha256:{}", "a".repeat(64));
        let config = format!(
            r#"{{"mediaType":"application/vnd.cncf.helm.config.v1+json","digest":"sha256:{}","size":10}}"#,
            "b".repeat(64)
        );
        let chart =
            format!(r#"{{"mediaType":"{HELM_CHART_LAYER}","digest":"{digest}","size":42}}"#);
        let found = chart_layer(manifest(&format!("{config},{chart}")).as_bytes(), "u").unwrap();
        assert_eq!((found.digest.to_string(), found.size), (digest.clone(), 42));
        let tarball = format!(
            r#"{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"{digest}","size":7}}"#
        );
        assert_eq!(
            chart_layer(manifest(&tarball).as_bytes(), "u")
                .unwrap()
                .size,
            7
        );
        let error = chart_layer(manifest(&format!("{tarball},{tarball}")).as_bytes(), "u")
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("not exactly one tar.gz layer"), "{error}");
    }

    #[test]
    fn secrets_give_basic_or_bearer_credentials_and_a_ca_bundle() {
        let data = |pairs: &[(&str, &str)]| -> BTreeMap<String, SecretBytes> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), SecretBytes::new(v.as_bytes().to_vec())))
                .collect()
        };
        let auth =
            HttpAuth::from_secret_data(&data(&[("username", "u"), ("password", "p")])).unwrap();
        assert_eq!(auth.header().as_deref(), Some("Basic dTpw"));
        let auth = HttpAuth::from_secret_data(&data(&[("token", "t0k")])).unwrap();
        assert_eq!(auth.header().as_deref(), Some("Bearer t0k"));
        assert!(!format!("{auth:?}").contains("t0k"), "Debug shows no token");
        let error = HttpAuth::from_secret_data(&data(&[("username", "u")]))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("only one of username and password"),
            "{error}"
        );
        let error = HttpAuth::from_secret_data(&data(&[("ca.crt", "not pem")]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("no PEM certificate"), "{error}");
    }

    #[test]
    fn an_oci_url_gives_the_registry_and_the_repository() {
        let origin = ChartOrigin::oci(
            "oci://127.0.0.1:5000/charts/web",
            OciReference::Tag("1".into()),
            true,
        )
        .unwrap();
        match origin {
            ChartOrigin::Oci {
                registry,
                repository,
                ..
            } => {
                assert_eq!(registry, "http://127.0.0.1:5000");
                assert_eq!(repository, "charts/web");
            }
            _ => unreachable!(),
        }
        assert!(ChartOrigin::oci("oci://host", OciReference::Tag("1".into()), false).is_err());
    }
}
