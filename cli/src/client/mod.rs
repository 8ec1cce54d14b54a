//! The operator CLI's gRPC client: one connection to any Starling node, shared by the `Fleet`
//! and `Admin` services, with a time limit on connecting and on every call, and the one place
//! where a failed call becomes the single line a person reads.
//!
//! ```text
//!   --server HOST:PORT / STARLING_SERVER ──connect (--timeout)──► Client
//!        │ refused, unreachable, timed out:  "cannot reach starling at HOST:PORT: <why>"
//!        ▼
//!   Client::apply/get/… ──call (--timeout)──► tonic::Status ──describe_status──► one line
//!        "rejected: …" · "no leader: …" · "not found: …" · "timed out after 10s …"
//! ```
//!
//! Writes sent to a follower are forwarded to the leader by the node itself; when it cannot
//! forward, the error names the leader (from the status metadata) so the user can retry there.

use std::error::Error as StdError;
use std::future::Future;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use proto::admin_client::AdminClient;
use proto::fleet_client::FleetClient;
use proto::limits::MAX_API_MESSAGE_BYTES;
use proto::{ApiError, ErrorKind};
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Status};

/// Where the CLI looks for a node when neither `--server` nor `STARLING_SERVER` is set.
pub const DEFAULT_SERVER: &str = "127.0.0.1:7400";

/// How to reach Starling; flattened into every command that talks to a node.
#[derive(clap::Args, Clone, Debug)]
pub struct ServerArgs {
    /// Address of any Starling node (writes are forwarded to the leader).
    #[arg(
        long,
        global = true,
        env = "STARLING_SERVER",
        default_value = DEFAULT_SERVER,
        value_name = "HOST:PORT"
    )]
    pub server: String,
    /// Time limit for connecting and for each request (`10s`, `1m`, `500ms`; 10s when unset).
    /// `rollout status --watch` also stops waiting after it.
    #[arg(long, global = true, value_parser = parse_timeout)]
    pub timeout: Option<Duration>,
    /// The API token, when the installation requires one (`starling token create`, or the
    /// admin token). Never printed.
    #[arg(long, global = true, env = "STARLING_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The installation's CA bundle (PEM): connect over TLS and trust the server's certificate
    /// when it chains to this CA. Unset: plain text (a node started with --insecure).
    #[arg(long, global = true, env = "STARLING_TLS_CA", value_name = "PATH")]
    pub tls_ca: Option<std::path::PathBuf>,
}

/// The time limit of one call when `--timeout` is not given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

impl ServerArgs {
    /// The time limit of a call: `--timeout`, or [`DEFAULT_TIMEOUT`].
    pub fn call_timeout(&self) -> Duration {
        self.timeout.unwrap_or(DEFAULT_TIMEOUT)
    }
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    match fleet::duration::parse_duration(text) {
        Ok(duration) if duration.is_zero() => Err("the timeout must be more than zero".into()),
        Ok(duration) => Ok(duration),
        Err(error) => Err(error.to_string()),
    }
}

/// A connection to one node.
#[derive(Clone, Debug)]
pub struct Client {
    server: String,
    timeout: Duration,
    token: Option<String>,
    /// Connected over TLS (`--tls-ca`).
    tls: bool,
    fleet: FleetClient<Channel>,
    admin: AdminClient<Channel>,
}

/// One method of [`Client`] per unary call: `service::name(Request) -> Response` sends the
/// request with the deadline and token ([`Client::request`]) and turns a failure into one line
/// ([`Client::call`]); `service::name() = request => Response` sends a fixed request.
macro_rules! rpc {
    ($service:ident::$name:ident($request:ty) -> $response:ty) => {
        pub async fn $name(&self, request: $request) -> anyhow::Result<$response> {
            let mut service = self.$service.clone();
            self.call(service.$name(self.request(request))).await
        }
    };
    ($service:ident::$name:ident() = $request:expr => $response:ty) => {
        pub async fn $name(&self) -> anyhow::Result<$response> {
            let mut service = self.$service.clone();
            self.call(service.$name(self.request($request))).await
        }
    };
}

impl Client {
    /// Connects to `args.server`, failing with one line when it cannot.
    pub async fn connect(args: &ServerArgs) -> anyhow::Result<Client> {
        let uri = server_uri(&args.server)?;
        let timeout = args.call_timeout();
        let endpoint = Endpoint::from(uri).connect_timeout(timeout);
        let connecting = match &args.tls_ca {
            None => futures::future::Either::Left(endpoint.connect()),
            Some(ca) => {
                let tls = starling_transport::tls::Tls::load(starling_transport::tls::TlsFiles {
                    ca: ca.clone(),
                    identity: None,
                })?;
                futures::future::Either::Right(
                    endpoint.connect_with_connector(starling_transport::dial(&tls.connector())),
                )
            }
        };
        let channel = match tokio::time::timeout(timeout, connecting).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(error)) => {
                return Err(anyhow!(
                    "cannot reach starling at {}: {}{}",
                    args.server,
                    root_cause(&error),
                    tls_hint(args.tls_ca.is_some(), &root_cause(&error))
                ));
            }
            Err(_) => {
                return Err(anyhow!(
                    "cannot reach starling at {}: timed out after {}",
                    args.server,
                    fleet::duration::format_duration(timeout)
                ));
            }
        };
        Ok(Client::from_channel(channel, args))
    }

    fn from_channel(channel: Channel, args: &ServerArgs) -> Client {
        Client {
            server: args.server.clone(),
            timeout: args.call_timeout(),
            token: args.token.clone(),
            tls: args.tls_ca.is_some(),
            fleet: FleetClient::new(channel.clone())
                .max_decoding_message_size(MAX_API_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_API_MESSAGE_BYTES),
            admin: AdminClient::new(channel)
                .max_decoding_message_size(MAX_API_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_API_MESSAGE_BYTES),
        }
    }

    rpc!(fleet::apply(proto::ApplyRequest) -> proto::ApplyResponse);
    rpc!(fleet::delete(proto::DeleteRequest) -> proto::DeleteResponse);
    rpc!(fleet::get(proto::GetRequest) -> proto::GetResponse);
    rpc!(fleet::list(proto::ListRequest) -> proto::ListResponse);
    rpc!(fleet::status() = proto::StatusRequest {} => proto::StatusResponse);
    rpc!(fleet::rollout_pause(proto::RolloutRequest) -> proto::RolloutResponse);
    rpc!(fleet::rollout_resume(proto::RolloutRequest) -> proto::RolloutResponse);
    rpc!(fleet::rollout_pin(proto::RolloutPinRequest) -> proto::RolloutResponse);
    rpc!(fleet::cluster_hold(proto::ClusterHoldRequest) -> proto::ClusterHoldResponse);
    rpc!(fleet::cluster_adopt(proto::ClusterAdoptRequest) -> proto::ClusterAdoptResponse);
    rpc!(fleet::source_poll(proto::SourcePollRequest) -> proto::SourcePollResponse);
    rpc!(fleet::list_audit(proto::ListAuditRequest) -> proto::ListAuditResponse);
    rpc!(admin::token_create(proto::TokenCreateRequest) -> proto::TokenCreateResponse);
    rpc!(admin::token_list() = proto::TokenListRequest {} => proto::TokenListResponse);
    rpc!(admin::token_revoke(proto::TokenRevokeRequest) -> proto::TokenRevokeResponse);
    rpc!(admin::members() = proto::MembersRequest {} => proto::MembersResponse);
    rpc!(admin::add_node(proto::AddNodeRequest) -> proto::MembershipResponse);
    rpc!(admin::remove_node(proto::RemoveNodeRequest) -> proto::MembershipResponse);
    rpc!(admin::drain(proto::DrainRequest) -> proto::DrainResponse);
    rpc!(admin::transfer_leadership(proto::TransferLeadershipRequest) -> proto::TransferLeadershipResponse);
    rpc!(admin::recover(proto::RecoverRequest) -> proto::RecoverResponse);

    /// The same connection with another time limit per call (long operations: export,
    /// import, recover).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// `starling export`: the whole backup, collected from the stream.
    pub async fn export(&self) -> anyhow::Result<Vec<u8>> {
        let mut admin = self.admin.clone();
        let request = self.request(proto::ExportRequest {});
        self.call(async move {
            let mut stream = admin.export(request).await?.into_inner();
            let mut bytes = Vec::new();
            while let Some(chunk) = stream.message().await? {
                bytes.extend(chunk.data);
            }
            Ok(tonic::Response::new(bytes))
        })
        .await
    }

    /// `starling diff`: the result, with each progress event given to `progress` meanwhile.
    pub async fn diff(
        &self,
        request: proto::DiffRequest,
        mut progress: impl FnMut(&proto::DiffProgress),
    ) -> anyhow::Result<proto::DiffResult> {
        let mut fleet = self.fleet.clone();
        let request = self.request(request);
        self.call(async move {
            let mut stream = fleet.diff(request).await?.into_inner();
            while let Some(event) = stream.message().await? {
                match event.event {
                    Some(proto::diff_event::Event::Progress(done)) => progress(&done),
                    Some(proto::diff_event::Event::Result(result)) => {
                        return Ok(tonic::Response::new(result));
                    }
                    None => {}
                }
            }
            Err(Status::unavailable("the diff ended without a result"))
        })
        .await
    }

    /// `starling import`: sends a backup in chunks.
    pub async fn import(&self, backup: Vec<u8>) -> anyhow::Result<proto::ImportResponse> {
        let mut admin = self.admin.clone();
        let chunks: Vec<proto::ImportChunk> = backup
            .chunks(1 << 20)
            .map(|chunk| proto::ImportChunk {
                data: chunk.to_vec(),
            })
            .collect();
        let request = self.request(futures::stream::iter(chunks));
        self.call(admin.import(request)).await
    }

    /// A request carrying the deadline (`grpc-timeout`), so the node gives up when we do.
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request =
            starling_transport::with_bearer(tonic::Request::new(message), self.token.as_deref());
        request.set_timeout(self.timeout);
        request
    }

    async fn call<T>(
        &self,
        call: impl Future<Output = Result<tonic::Response<T>, Status>>,
    ) -> anyhow::Result<T> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => {
                let mut line = describe_status(&self.server, self.timeout, &status);
                // A plain-text client at a TLS port sees the connection break, not an answer.
                if !self.tls
                    && !status
                        .metadata()
                        .contains_key(proto::status::ERROR_KIND_KEY)
                    && matches!(
                        status.code(),
                        Code::Unknown | Code::Unavailable | Code::Internal
                    )
                {
                    line.push_str(tls_hint(false, &line));
                }
                Err(anyhow!(line))
            }
            Err(_) => Err(anyhow!(timed_out(&self.server, self.timeout))),
        }
    }
}

/// Runs a command's async body on a current-thread runtime: the CLI does one thing at a time.
pub fn block_on<T>(future: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(future)
}

/// `HOST:PORT` (or `http://HOST:PORT`) as a URI tonic can dial.
fn server_uri(server: &str) -> anyhow::Result<Uri> {
    let invalid = || format!("invalid server address {server:?}: expected HOST:PORT");
    let text = match server.split_once("://") {
        None => format!("http://{server}"),
        Some(("http", _)) => server.to_owned(),
        // TLS comes from --tls-ca; the connection itself is made by the TLS connector.
        Some(("https", rest)) => format!("http://{rest}"),
        Some((scheme, _)) => {
            return Err(anyhow!(
                "{}: scheme {scheme} is not supported (http, or https with --tls-ca)",
                invalid()
            ));
        }
    };
    let uri: Uri = text.parse().with_context(invalid)?;
    if uri.host().is_none_or(str::is_empty) || uri.port_u16().is_none() {
        return Err(anyhow!(invalid()));
    }
    if uri
        .path_and_query()
        .is_some_and(|path| path.as_str() != "/")
    {
        return Err(anyhow!(invalid()));
    }
    Ok(uri)
}

/// A hint for a plain-text client whose connection broke without an answer: the server may
/// speak TLS. Nothing when it used TLS or nothing listens (connection refused).
fn tls_hint(tls: bool, error: &str) -> &'static str {
    if tls || error.contains("refused") {
        ""
    } else {
        " (an installation with TLS needs --tls-ca)"
    }
}

fn timed_out(server: &str, timeout: Duration) -> String {
    format!(
        "timed out after {} waiting for starling at {server}",
        fleet::duration::format_duration(timeout)
    )
}

/// The one line for a failed call. Statuses Starling sends carry their kind in the metadata;
/// an `Unavailable` without it comes from the transport (refused, reset, no route), not from a
/// node that lost its leader.
pub fn describe_status(server: &str, timeout: Duration, status: &Status) -> String {
    let from_starling = status
        .metadata()
        .contains_key(proto::status::ERROR_KIND_KEY);
    let error = ApiError::from_status(status);
    let message = one_line(&error.message);
    match error.kind {
        ErrorKind::Unavailable if !from_starling => {
            let reason = match status.source() {
                Some(source) => root_cause(source),
                None => message,
            };
            format!("cannot reach starling at {server}: {reason}")
        }
        ErrorKind::Unavailable => {
            let mut line = format!("no leader: {message}");
            match &error.leader {
                Some(
                    leader @ proto::LeaderHint {
                        addr: Some(addr), ..
                    },
                ) => {
                    line.push_str(&format!(
                        " (leader is {leader}: retry with --server {addr})"
                    ));
                }
                Some(leader) => line.push_str(&format!(" (leader is {leader})")),
                None => {}
            }
            line
        }
        ErrorKind::InvalidArgument | ErrorKind::FailedPrecondition => {
            format!("rejected: {message}")
        }
        // Nodes often say it already (`SyncGroup/default/web not found`): say it once.
        ErrorKind::NotFound if message.contains("not found") => message,
        ErrorKind::NotFound => format!("not found: {message}"),
        ErrorKind::Conflict => format!("conflict: {message} (a concurrent change won; retry)"),
        ErrorKind::ResourceExhausted => format!("over a limit: {message}"),
        ErrorKind::DeadlineExceeded if message.is_empty() => timed_out(server, timeout),
        ErrorKind::DeadlineExceeded => format!("timed out: {message}"),
        ErrorKind::PermissionDenied => format!("permission denied: {message}"),
        ErrorKind::Unauthenticated => format!("unauthenticated: {message}"),
        ErrorKind::Internal if status.code() == Code::Unimplemented => format!(
            "the node at {server} does not serve this call (is it a starling node of the same \
             version?): {message}"
        ),
        ErrorKind::Internal => format!("server error: {message}"),
    }
}

/// Why a connection failed, in a few words: the I/O error's kind when there is one
/// (`connection refused`), else the innermost message.
fn root_cause(error: &(dyn StdError + 'static)) -> String {
    let mut innermost = error;
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return io_reason(io);
        }
        innermost = error;
        current = error.source();
    }
    lowercase_first(&one_line(&innermost.to_string()))
}

fn io_reason(error: &std::io::Error) -> String {
    use std::io::ErrorKind as Io;
    match error.kind() {
        Io::ConnectionRefused => "connection refused".to_owned(),
        Io::ConnectionReset => "connection reset".to_owned(),
        Io::ConnectionAborted => "connection aborted".to_owned(),
        Io::TimedOut => "timed out".to_owned(),
        Io::AddrNotAvailable => "address not available".to_owned(),
        _ => {
            let text = error.to_string();
            // "No route to host (os error 113)" → "no route to host"
            let text = match text.rfind(" (os error ") {
                Some(at) => &text[..at],
                None => &text,
            };
            lowercase_first(&one_line(text))
        }
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::LeaderHint;

    const SERVER: &str = "127.0.0.1:7400";
    const TIMEOUT: Duration = Duration::from_secs(10);

    fn line(error: ApiError) -> String {
        describe_status(SERVER, TIMEOUT, &Status::from(error))
    }

    #[test]
    fn rejected_specs_and_lost_leaders_read_as_one_line() {
        assert_eq!(
            line(ApiError::invalid_argument(
                "SyncGroup \"web\": spec.rollout.maxUnavailable: 0"
            )),
            "rejected: SyncGroup \"web\": spec.rollout.maxUnavailable: 0"
        );
        assert_eq!(
            line(ApiError::failed_precondition(
                "specs are read-only in operator mode"
            )),
            "rejected: specs are read-only in operator mode"
        );
        assert_eq!(
            line(ApiError::unavailable("election in progress")),
            "no leader: election in progress"
        );
        let redirect =
            ApiError::unavailable("cannot forward to the leader").with_leader(Some(LeaderHint {
                id: 2,
                addr: Some("10.0.0.2:7400".into()),
            }));
        assert_eq!(
            line(redirect),
            "no leader: cannot forward to the leader (leader is node 2 at 10.0.0.2:7400: retry \
             with --server 10.0.0.2:7400)"
        );
        assert_eq!(
            line(ApiError::not_found("syncgroup default/web")),
            "not found: syncgroup default/web"
        );
        assert_eq!(
            line(ApiError::not_found("SyncGroup/default/web not found")),
            "SyncGroup/default/web not found"
        );
    }

    #[test]
    fn transport_statuses_say_the_server_is_unreachable() {
        let status = Status::new(Code::Unavailable, "tcp connect error");
        assert_eq!(
            describe_status(SERVER, TIMEOUT, &status),
            "cannot reach starling at 127.0.0.1:7400: tcp connect error"
        );
        let status = Status::new(Code::Unimplemented, "");
        assert!(
            describe_status(SERVER, TIMEOUT, &status)
                .starts_with("the node at 127.0.0.1:7400 does not serve")
        );
        let status = Status::new(Code::DeadlineExceeded, "");
        assert_eq!(
            describe_status(SERVER, TIMEOUT, &status),
            "timed out after 10s waiting for starling at 127.0.0.1:7400"
        );
    }

    #[test]
    fn io_errors_become_a_few_words() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(root_cause(&refused), "connection refused");
        let other = std::io::Error::other("No route to host (os error 113)");
        assert_eq!(root_cause(&other), "no route to host");
    }

    #[test]
    fn server_addresses_need_a_host_and_a_port() {
        assert_eq!(
            server_uri("127.0.0.1:7400").unwrap().to_string(),
            "http://127.0.0.1:7400/"
        );
        assert_eq!(
            server_uri("http://node-0.starling:7400")
                .unwrap()
                .port_u16(),
            Some(7400)
        );
        assert!(server_uri("[::1]:7400").is_ok());
        assert_eq!(
            server_uri("https://node-0.starling:7400")
                .unwrap()
                .to_string(),
            "http://node-0.starling:7400/",
            "TLS comes from --tls-ca, not the scheme"
        );
        for bad in ["localhost", "", "a b:1", "ftp://x:1", "x:1/path", ":7400"] {
            let error = server_uri(bad).unwrap_err().to_string();
            assert!(
                error.starts_with("invalid server address"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn timeouts_parse_as_durations() {
        assert_eq!(parse_timeout("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_timeout("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_timeout("0s").is_err());
        assert!(parse_timeout("soon").is_err());
    }

    #[tokio::test]
    async fn an_unreachable_server_is_one_line() {
        // A port that was just free: nothing listens on it.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let args = ServerArgs {
            server: address.to_string(),
            timeout: Some(TIMEOUT),
            token: None,
            tls_ca: None,
        };
        let error = Client::connect(&args).await.unwrap_err();
        assert_eq!(
            format!("{error:#}"),
            format!("cannot reach starling at {address}: connection refused")
        );
    }
}

#[cfg(test)]
pub(crate) mod testing;
