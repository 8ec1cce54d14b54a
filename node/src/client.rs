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
    /// Time limit for connecting and for each request (`10s`, `1m`, `500ms`).
    #[arg(long, global = true, default_value = "10s", value_parser = parse_timeout)]
    pub timeout: Duration,
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
    fleet: FleetClient<Channel>,
    admin: AdminClient<Channel>,
}

impl Client {
    /// Connects to `args.server`, failing with one line when it cannot.
    pub async fn connect(args: &ServerArgs) -> anyhow::Result<Client> {
        let uri = server_uri(&args.server)?;
        let endpoint = Endpoint::from(uri).connect_timeout(args.timeout);
        let channel = match tokio::time::timeout(args.timeout, endpoint.connect()).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(error)) => {
                return Err(anyhow!(
                    "cannot reach starling at {}: {}",
                    args.server,
                    root_cause(&error)
                ));
            }
            Err(_) => {
                return Err(anyhow!(
                    "cannot reach starling at {}: timed out after {}",
                    args.server,
                    fleet::duration::format_duration(args.timeout)
                ));
            }
        };
        Ok(Client::from_channel(channel, args))
    }

    fn from_channel(channel: Channel, args: &ServerArgs) -> Client {
        Client {
            server: args.server.clone(),
            timeout: args.timeout,
            fleet: FleetClient::new(channel.clone())
                .max_decoding_message_size(MAX_API_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_API_MESSAGE_BYTES),
            admin: AdminClient::new(channel)
                .max_decoding_message_size(MAX_API_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_API_MESSAGE_BYTES),
        }
    }

    /// The address as the user gave it, for messages.
    pub fn server(&self) -> &str {
        &self.server
    }

    pub async fn apply(&self, request: proto::ApplyRequest) -> anyhow::Result<proto::ApplyResponse> {
        let mut fleet = self.fleet.clone();
        self.call(fleet.apply(self.request(request))).await
    }

    pub async fn delete(
        &self,
        request: proto::DeleteRequest,
    ) -> anyhow::Result<proto::DeleteResponse> {
        let mut fleet = self.fleet.clone();
        self.call(fleet.delete(self.request(request))).await
    }

    pub async fn get(&self, request: proto::GetRequest) -> anyhow::Result<proto::GetResponse> {
        let mut fleet = self.fleet.clone();
        self.call(fleet.get(self.request(request))).await
    }

    pub async fn list(&self, request: proto::ListRequest) -> anyhow::Result<proto::ListResponse> {
        let mut fleet = self.fleet.clone();
        self.call(fleet.list(self.request(request))).await
    }

    pub async fn status(&self) -> anyhow::Result<proto::StatusResponse> {
        let mut fleet = self.fleet.clone();
        self.call(fleet.status(self.request(proto::StatusRequest {}))).await
    }

    pub async fn rollout_pause(
        &self,
        request: proto::RolloutRequest,
    ) -> anyhow::Result<proto::RolloutResponse> {
        let mut fleet = self.fleet.clone();
        self.call(fleet.rollout_pause(self.request(request))).await
    }

    pub async fn rollout_resume(
        &self,
        request: proto::RolloutRequest,
    ) -> anyhow::Result<proto::RolloutResponse> {
        let mut fleet = self.fleet.clone();
        self.call(fleet.rollout_resume(self.request(request))).await
    }

    pub async fn members(&self) -> anyhow::Result<proto::MembersResponse> {
        let mut admin = self.admin.clone();
        self.call(admin.members(self.request(proto::MembersRequest {}))).await
    }

    pub async fn add_node(
        &self,
        request: proto::AddNodeRequest,
    ) -> anyhow::Result<proto::MembershipResponse> {
        let mut admin = self.admin.clone();
        self.call(admin.add_node(self.request(request))).await
    }

    pub async fn remove_node(
        &self,
        request: proto::RemoveNodeRequest,
    ) -> anyhow::Result<proto::MembershipResponse> {
        let mut admin = self.admin.clone();
        self.call(admin.remove_node(self.request(request))).await
    }

    pub async fn drain(&self, request: proto::DrainRequest) -> anyhow::Result<proto::DrainResponse> {
        let mut admin = self.admin.clone();
        self.call(admin.drain(self.request(request))).await
    }

    pub async fn transfer_leadership(
        &self,
        request: proto::TransferLeadershipRequest,
    ) -> anyhow::Result<proto::TransferLeadershipResponse> {
        let mut admin = self.admin.clone();
        self.call(admin.transfer_leadership(self.request(request))).await
    }

    /// A request carrying the deadline (`grpc-timeout`), so the node gives up when we do.
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(self.timeout);
        request
    }

    async fn call<T>(
        &self,
        call: impl Future<Output = Result<tonic::Response<T>, Status>>,
    ) -> anyhow::Result<T> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(anyhow!(describe_status(&self.server, self.timeout, &status))),
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
        Some((scheme, _)) => {
            return Err(anyhow!("{}: scheme {scheme} is not supported (plain http/2 only)", invalid()));
        }
    };
    let uri: Uri = text.parse().with_context(invalid)?;
    if uri.host().is_none_or(str::is_empty) || uri.port_u16().is_none() {
        return Err(anyhow!(invalid()));
    }
    if uri.path_and_query().is_some_and(|path| path.as_str() != "/") {
        return Err(anyhow!(invalid()));
    }
    Ok(uri)
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
    let from_starling = status.metadata().contains_key(proto::status::ERROR_KIND_KEY);
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
                Some(leader @ proto::LeaderHint { addr: Some(addr), .. }) => {
                    line.push_str(&format!(" (leader is {leader}: retry with --server {addr})"));
                }
                Some(leader) => line.push_str(&format!(" (leader is {leader})")),
                None => {}
            }
            line
        }
        ErrorKind::InvalidArgument | ErrorKind::FailedPrecondition => format!("rejected: {message}"),
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
            line(ApiError::invalid_argument("SyncGroup \"web\": spec.rollout.maxUnavailable: 0")),
            "rejected: SyncGroup \"web\": spec.rollout.maxUnavailable: 0"
        );
        assert_eq!(
            line(ApiError::failed_precondition("specs are read-only in operator mode")),
            "rejected: specs are read-only in operator mode"
        );
        assert_eq!(line(ApiError::unavailable("election in progress")), "no leader: election in progress");
        let redirect = ApiError::unavailable("cannot forward to the leader").with_leader(Some(LeaderHint {
            id: 2,
            addr: Some("10.0.0.2:7400".into()),
        }));
        assert_eq!(
            line(redirect),
            "no leader: cannot forward to the leader (leader is node 2 at 10.0.0.2:7400: retry \
             with --server 10.0.0.2:7400)"
        );
        assert_eq!(line(ApiError::not_found("syncgroup default/web")), "not found: syncgroup default/web");
    }

    #[test]
    fn transport_statuses_say_the_server_is_unreachable() {
        let status = Status::new(Code::Unavailable, "tcp connect error");
        assert_eq!(
            describe_status(SERVER, TIMEOUT, &status),
            "cannot reach starling at 127.0.0.1:7400: tcp connect error"
        );
        let status = Status::new(Code::Unimplemented, "");
        assert!(describe_status(SERVER, TIMEOUT, &status).starts_with("the node at 127.0.0.1:7400 does not serve"));
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
        assert_eq!(server_uri("127.0.0.1:7400").unwrap().to_string(), "http://127.0.0.1:7400/");
        assert_eq!(server_uri("http://node-0.starling:7400").unwrap().port_u16(), Some(7400));
        assert!(server_uri("[::1]:7400").is_ok());
        for bad in ["localhost", "", "a b:1", "https://x:1", "x:1/path", ":7400"] {
            let error = server_uri(bad).unwrap_err().to_string();
            assert!(error.starts_with("invalid server address"), "{bad}: {error}");
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
        let args = ServerArgs { server: address.to_string(), timeout: TIMEOUT };
        let error = Client::connect(&args).await.unwrap_err();
        assert_eq!(format!("{error:#}"), format!("cannot reach starling at {address}: connection refused"));
    }
}

/// A tiny in-process node with canned answers, for tests of the client and the commands'
/// output over a real gRPC connection. The lead's multi-process harness tests the real node.
#[cfg(test)]
pub(crate) mod testing {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use fleet::manifest::{Kind, parse_manifests};
    use proto::admin_server::{Admin, AdminServer};
    use proto::fleet_server::{Fleet, FleetServer};
    use proto::{ApiError, ApplyAction, LeaderHint};
    use tonic::codegen::tokio_stream;
    use tonic::transport::Server;
    use tonic::transport::server::TcpIncoming;
    use tonic::{Request, Response, Status};

    use super::ServerArgs;

    type Key = (String, String, String);

    /// Objects stored by (kind, namespace, name), as JSON.
    #[derive(Default)]
    pub struct CannedNode {
        objects: Mutex<BTreeMap<Key, Vec<u8>>>,
    }

    /// Starts a node on a free loopback port; it serves until the test's runtime ends.
    pub async fn serve() -> ServerArgs {
        let incoming = TcpIncoming::bind("127.0.0.1:0".parse().expect("loopback address"))
            .expect("bind a loopback port");
        let address = incoming.local_addr().expect("bound address");
        let router = Server::builder()
            .add_service(FleetServer::new(CannedNode::default()))
            .add_service(AdminServer::new(CannedNode::default()));
        tokio::spawn(router.serve_with_incoming(incoming));
        ServerArgs { server: address.to_string(), timeout: std::time::Duration::from_secs(5) }
    }

    /// A stored SyncGroup with a status, as the real node would return it.
    pub fn syncgroup_json(name: &str, phase: &str, updated: u32) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "starling.dev/v1alpha1",
            "kind": "SyncGroup",
            "metadata": {"name": name, "namespace": "default", "generation": 1},
            "spec": {"sourceRef": {"name": "app"}, "clusterSelector": {}},
            "status": {
                "targetRevision": "main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",
                "phase": phase,
                "summary": {"total": 10, "updated": updated, "inProgress": 2, "pending": 10 - updated - 2, "failed": 0}
            }
        })
    }

    fn object_ref(key: &Key) -> proto::ObjectRef {
        proto::ObjectRef { kind: key.0.clone(), namespace: key.1.clone(), name: key.2.clone() }
    }

    fn key_of(object: Option<&proto::ObjectRef>) -> Result<Key, Status> {
        let object = object.ok_or_else(|| Status::from(ApiError::invalid_argument("missing object")))?;
        let kind = object
            .kind
            .parse::<Kind>()
            .map_err(|error| Status::from(ApiError::invalid_argument(error.to_string())))?;
        Ok((kind.as_str().to_owned(), object.namespace.clone(), object.name.clone()))
    }

    #[tonic::async_trait]
    impl Fleet for CannedNode {
        async fn apply(
            &self,
            request: Request<proto::ApplyRequest>,
        ) -> Result<Response<proto::ApplyResponse>, Status> {
            let request = request.into_inner();
            let text = String::from_utf8(request.manifests)
                .map_err(|_| Status::from(ApiError::invalid_argument("manifests are not utf-8")))?;
            let resources = parse_manifests(&text)
                .map_err(|error| Status::from(ApiError::invalid_argument(error.to_string())))?;
            let mut objects = self.objects.lock().expect("objects lock");
            let mut results = Vec::new();
            for resource in resources {
                if resource.name() == "forbidden" {
                    return Err(ApiError::failed_precondition("specs are read-only in operator mode").into());
                }
                let key: Key = (resource.kind().as_str().to_owned(), resource.namespace().to_owned(), resource.name().to_owned());
                let json = serde_json::to_vec(&resource).expect("serialize a resource");
                let action = match objects.get(&key) {
                    None => ApplyAction::Created,
                    Some(stored) if *stored == json => ApplyAction::Unchanged,
                    Some(_) => ApplyAction::Configured,
                };
                results.push(proto::ApplyResult { object: Some(object_ref(&key)), action: action.into(), generation: 1 });
                if !request.dry_run {
                    objects.insert(key, json);
                }
            }
            Ok(Response::new(proto::ApplyResponse { results, revision: 7 }))
        }

        async fn delete(
            &self,
            request: Request<proto::DeleteRequest>,
        ) -> Result<Response<proto::DeleteResponse>, Status> {
            let mut objects = self.objects.lock().expect("objects lock");
            let mut results = Vec::new();
            for object in &request.get_ref().objects {
                let key = key_of(Some(object))?;
                let deleted = objects.remove(&key).is_some();
                results.push(proto::DeleteResult { object: Some(object_ref(&key)), deleted });
            }
            Ok(Response::new(proto::DeleteResponse { results, revision: 8 }))
        }

        async fn get(
            &self,
            request: Request<proto::GetRequest>,
        ) -> Result<Response<proto::GetResponse>, Status> {
            let key = key_of(request.get_ref().object.as_ref())?;
            if key.0 == "SyncGroup" && key.2 == "canned" {
                let json = serde_json::to_vec(&syncgroup_json("canned", "Progressing", 4)).expect("json");
                let object = proto::Object { r#ref: Some(object_ref(&key)), json, revision: 3 };
                return Ok(Response::new(proto::GetResponse { object: Some(object), revision: 3 }));
            }
            let objects = self.objects.lock().expect("objects lock");
            let json = objects
                .get(&key)
                .ok_or_else(|| Status::from(ApiError::not_found(format!("{} {}/{} does not exist", key.0, key.1, key.2))))?;
            let object = proto::Object { r#ref: Some(object_ref(&key)), json: json.clone(), revision: 3 };
            Ok(Response::new(proto::GetResponse { object: Some(object), revision: 3 }))
        }

        async fn list(
            &self,
            request: Request<proto::ListRequest>,
        ) -> Result<Response<proto::ListResponse>, Status> {
            let request = request.into_inner();
            let kind = request
                .kind
                .parse::<Kind>()
                .map_err(|error| Status::from(ApiError::invalid_argument(error.to_string())))?;
            let objects = self.objects.lock().expect("objects lock");
            let objects = objects
                .iter()
                .filter(|(key, _)| key.0 == kind.as_str())
                .filter(|(key, _)| request.namespace.is_empty() || key.1 == request.namespace)
                .filter(|(key, _)| request.name.is_empty() || key.2 == request.name)
                .map(|(key, json)| proto::Object { r#ref: Some(object_ref(key)), json: json.clone(), revision: 3 })
                .collect();
            Ok(Response::new(proto::ListResponse { objects, revision: 3 }))
        }

        type WatchStream = tokio_stream::Empty<Result<proto::WatchEvent, Status>>;

        async fn watch(
            &self,
            _request: Request<proto::WatchRequest>,
        ) -> Result<Response<Self::WatchStream>, Status> {
            Err(Status::unimplemented("watch"))
        }

        async fn status(
            &self,
            _request: Request<proto::StatusRequest>,
        ) -> Result<Response<proto::StatusResponse>, Status> {
            Ok(Response::new(canned_status()))
        }

        async fn rollout_pause(
            &self,
            _request: Request<proto::RolloutRequest>,
        ) -> Result<Response<proto::RolloutResponse>, Status> {
            let hint = LeaderHint { id: 2, addr: Some("127.0.0.1:7402".into()) };
            Err(ApiError::unavailable("cannot forward to the leader").with_leader(Some(hint)).into())
        }

        async fn rollout_resume(
            &self,
            request: Request<proto::RolloutRequest>,
        ) -> Result<Response<proto::RolloutResponse>, Status> {
            match request.get_ref().name.as_str() {
                "canned" => Ok(Response::new(proto::RolloutResponse { revision: 9 })),
                other => Err(ApiError::not_found(format!("syncgroup default/{other} does not exist")).into()),
            }
        }
    }

    pub fn canned_status() -> proto::StatusResponse {
        let member = |id: u64, state: &str, role: &str, clusters: u32| proto::Member {
            id,
            address: format!("127.0.0.1:740{id}"),
            state: state.into(),
            role: role.into(),
            voter: role != "learner",
            applied_index: 120,
            clusters_owned: clusters,
            sources_owned: 1,
            syncs_in_flight: 2,
            last_heartbeat_millis: if role == "leader" { 0 } else { 250 },
        };
        proto::StatusResponse {
            members: vec![member(1, "live", "leader", 60), member(2, "draining", "follower", 0), member(3, "live", "learner", 40)],
            leader_id: 1,
            term: 4,
            commit_index: 121,
            revision: 120,
            rollouts: vec![proto::Rollout {
                namespace: "default".into(),
                name: "web".into(),
                target_revision: "main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567".into(),
                phase: "Progressing".into(),
                summary: Some(proto::RolloutSummary { total: 100, updated: 40, in_progress: 10, pending: 50, failed: 0 }),
            }],
        }
    }

    #[tonic::async_trait]
    impl Admin for CannedNode {
        async fn members(
            &self,
            _request: Request<proto::MembersRequest>,
        ) -> Result<Response<proto::MembersResponse>, Status> {
            let status = canned_status();
            Ok(Response::new(proto::MembersResponse { members: status.members, leader_id: status.leader_id }))
        }

        async fn add_node(
            &self,
            request: Request<proto::AddNodeRequest>,
        ) -> Result<Response<proto::MembershipResponse>, Status> {
            let request = request.into_inner();
            let (voters, learners) = if request.voter { (vec![1, 2, 3, request.id], vec![]) } else { (vec![1, 2, 3], vec![request.id]) };
            Ok(Response::new(proto::MembershipResponse { log_index: 130, voters, learners }))
        }

        async fn remove_node(
            &self,
            request: Request<proto::RemoveNodeRequest>,
        ) -> Result<Response<proto::MembershipResponse>, Status> {
            match request.get_ref().id {
                1..=3 => Ok(Response::new(proto::MembershipResponse { log_index: 131, voters: vec![1, 2], learners: vec![] })),
                id => Err(ApiError::failed_precondition(format!("node {id} is not a member")).into()),
            }
        }

        async fn drain(
            &self,
            request: Request<proto::DrainRequest>,
        ) -> Result<Response<proto::DrainResponse>, Status> {
            let moved = if request.get_ref().undo { 0 } else { 33 };
            Ok(Response::new(proto::DrainResponse { revision: 132, moved }))
        }

        async fn transfer_leadership(
            &self,
            request: Request<proto::TransferLeadershipRequest>,
        ) -> Result<Response<proto::TransferLeadershipResponse>, Status> {
            let target = match request.get_ref().target {
                0 => 2,
                id => id,
            };
            Ok(Response::new(proto::TransferLeadershipResponse { leader_id: target, term: 5 }))
        }

        async fn shards(
            &self,
            _request: Request<proto::ShardsRequest>,
        ) -> Result<Response<proto::ShardsResponse>, Status> {
            Err(Status::unimplemented("shards"))
        }
    }
}
