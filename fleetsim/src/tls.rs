//! HTTPS for fleetsim, as every real API server serves: a CA made for this run, a serving
//! certificate for the listen address (and `127.0.0.1`, `localhost`), HTTP/2 and HTTP/1.1
//! offered through ALPN as kube-apiserver offers them, and client certificates signed by the
//! CA accepted beside bearer tokens (a client without one is let in, as the apiserver lets
//! anonymous requests reach authorization), and TLS 1.3 session tickets for resumption.
//!
//! Kubeconfigs carry the CA as `certificate-authority-data`; [`ServerTls::client_identity`]
//! issues a client certificate for callers that authenticate with one.

use std::net::SocketAddr;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::PrivateKeyDer;

use crate::error::FleetSimError;

/// Each cluster's kubeconfig names the server `<cluster>.<CLUSTER_DOMAIN>` (`tls-server-name`),
/// which the serving certificate covers: clients see one server per cluster, as in a real
/// fleet, and keep one TLS session per cluster (all of them are at the same address here).
pub(crate) const CLUSTER_DOMAIN: &str = "clusters.fleetsim.test";

/// The CA and the acceptor of one fleetsim run.
pub(crate) struct ServerTls {
    pub ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
    pub acceptor: tokio_rustls::TlsAcceptor,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

fn tls_error(message: impl std::fmt::Display) -> FleetSimError {
    FleetSimError::Tls(message.to_string())
}

impl ServerTls {
    /// A new CA and a serving certificate for `addr`.
    pub fn new(addr: SocketAddr) -> Result<ServerTls, FleetSimError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(tls_error)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "fleetsim CA");
        let ca_key = KeyPair::generate().map_err(tls_error)?;
        let ca = params.self_signed(&ca_key).map_err(tls_error)?;
        let ca_pem = ca.pem();
        let issuer = Issuer::new(params, ca_key);
        let mut names = vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
            format!("*.{CLUSTER_DOMAIN}"),
        ];
        let ip = addr.ip().to_string();
        if !addr.ip().is_unspecified() && !names.contains(&ip) {
            names.push(ip);
        }
        let mut serving = CertificateParams::new(names).map_err(tls_error)?;
        serving
            .distinguished_name
            .push(DnType::CommonName, "fleetsim");
        let serving_key = KeyPair::generate().map_err(tls_error)?;
        let serving_cert = serving
            .signed_by(&serving_key, &issuer)
            .map_err(tls_error)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.der().clone()).map_err(tls_error)?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(tls_error)?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(tls_error)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![serving_cert.der().clone(), ca.der().clone()],
                PrivateKeyDer::try_from(serving_key.serialize_der()).map_err(tls_error)?,
            )
            .map_err(tls_error)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        // Session tickets, as Go's crypto/tls (kube-apiserver) issues them: a returning client
        // resumes instead of verifying the certificate chain again.
        config.ticketer = rustls::crypto::ring::Ticketer::new().map_err(tls_error)?;
        // One ticket per handshake, as Go's server sends: each resumption uses one and gets one.
        config.send_tls13_tickets = 1;
        Ok(ServerTls {
            ca_pem,
            issuer,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// A client certificate signed by the run's CA: (certificate PEM, key PEM).
    pub fn client_identity(&self, user: &str) -> Result<(String, String), FleetSimError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(tls_error)?;
        params.distinguished_name.push(DnType::CommonName, user);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().map_err(tls_error)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(tls_error)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}
