//! Who is calling, and what they may do: bearer tokens on the Fleet and Admin APIs.
//!
//! ```text
//!   authorization: Bearer <token> ──RequireToken (Authenticator)──► Principal in the request
//!        ├─ the admin token (--admin-token-file)        → admin of every namespace
//!        ├─ stl_<id>_<secret>, digest in FleetState.tokens → its role and tenants
//!        └─ missing or unknown (after CATCH_UP)          → Unauthenticated
//!   handler ──Principal::require(role, namespace)──► PermissionDenied, with the reason
//! ```
//!
//! Without `--admin-token-file` the API is open: every caller is an anonymous admin, as in
//! development. Tokens are compared by SHA-256 digest in constant time; a token never appears
//! in a log line, an error message or a metric. A token past its `expires` is refused. The
//! admin token's file is re-read every 2 s ([`Credentials::watch`]): writing a new token into
//! it (a Secret update) rotates it without a restart. Each replica notes which tokens were
//! presented and reports their last use once a minute ([`fleet::Command::NoteTokenUse`]).

use proto::ApiError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use fleet::state::{Role, TokenEntry};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;
use tonic::{Request, Status};

/// Every token `starling token create` makes starts with this.
pub(crate) const TOKEN_PREFIX: &str = "stl_";
/// The shortest admin token accepted from `--admin-token-file`.
pub(crate) const MIN_ADMIN_TOKEN_LEN: usize = 32;

/// The caller of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// For messages: `anonymous`, `the admin token` or `token <id>`.
    pub name: String,
    pub role: Role,
    /// Namespaces it acts in; `*` is all.
    pub tenants: Vec<String>,
    /// The API is open (no `--admin-token-file`): this caller may do anything, an agent's
    /// work included.
    pub open: bool,
}

impl Principal {
    /// Anyone, when the API is open.
    pub fn anonymous() -> Principal {
        Principal {
            name: "anonymous".into(),
            role: Role::Admin,
            tenants: vec!["*".into()],
            open: true,
        }
    }

    fn admin_token() -> Principal {
        Principal {
            name: "the admin token".into(),
            role: Role::Admin,
            tenants: vec!["*".into()],
            open: false,
        }
    }

    fn of_token(id: &str, entry: &TokenEntry) -> Principal {
        Principal {
            name: format!("token {id}"),
            role: entry.role,
            tenants: entry.tenants.clone(),
            open: false,
        }
    }

    /// Whether it acts in every namespace.
    pub fn everywhere(&self) -> bool {
        self.tenants.iter().any(|t| t == "*")
    }

    /// Whether it acts in `namespace`.
    pub fn serves(&self, namespace: &str) -> bool {
        self.tenants.iter().any(|t| t == "*" || t == namespace)
    }

    fn has(&self, need: Role) -> bool {
        if self.open {
            return true;
        }
        match need {
            Role::Admin => self.role == Role::Admin,
            Role::Writer => matches!(self.role, Role::Admin | Role::Writer),
            Role::Reader => matches!(self.role, Role::Admin | Role::Writer | Role::Reader),
            Role::Agent => self.role == Role::Agent,
        }
    }

    /// Refuses, with the reason, unless it has `need` in `namespace` (`None`: in every
    /// namespace, for what is not namespaced). `what` names the action for the message.
    pub fn require(&self, need: Role, namespace: Option<&str>, what: &str) -> Result<(), Status> {
        if !self.has(need) {
            return Err(refused(ApiError::permission_denied(format!(
                "{} ({} role) may not {what}: that needs the {need} role",
                self.name, self.role
            ))));
        }
        match namespace {
            Some(namespace) if !self.serves(namespace) => {
                Err(refused(ApiError::permission_denied(format!(
                    "{} may not {what} in namespace {namespace}: it acts only in {}",
                    self.name,
                    self.tenants.join(", ")
                ))))
            }
            None if !self.everywhere() => Err(refused(ApiError::permission_denied(format!(
                "{} may not {what}: that needs a token for every namespace (--tenant '*'), and it acts only in {}",
                self.name,
                self.tenants.join(", ")
            )))),
            _ => Ok(()),
        }
    }
}

/// The caller the [`Authenticator`] put in a request.
pub(crate) fn principal<T>(request: &Request<T>) -> Result<Principal, Status> {
    request
        .extensions()
        .get::<Principal>()
        .cloned()
        .ok_or_else(|| {
            refused(ApiError::internal(
                "the request was not authenticated (a server bug)",
            ))
        })
}

/// Who the audit log records for `request`: its principal (a token's id and tenants, never
/// its secret), this replica, and the client's address.
pub(crate) fn actor<T>(
    request: &Request<T>,
    replica: fleet::state::NodeId,
) -> Result<fleet::state::audit::Actor, Status> {
    let caller = principal(request)?;
    Ok(fleet::state::audit::Actor {
        name: caller.name,
        tenants: caller.tenants,
        replica,
        address: request
            .extensions()
            .get::<starling_transport::tls::PeerInfo>()
            .and_then(|peer| peer.remote)
            .or_else(|| request.remote_addr())
            .map(|address| address.to_string()),
    })
}

/// A new token: `(id, token, digest of its secret)`. The token is shown once; only the id and
/// the digest are kept.
pub(crate) fn new_token() -> (String, String, String) {
    let id = hex::encode(rand::random::<[u8; 6]>());
    let secret = hex::encode(rand::random::<[u8; 32]>());
    let digest = hex::encode(Sha256::digest(secret.as_bytes()));
    (id.clone(), format!("{TOKEN_PREFIX}{id}_{secret}"), digest)
}

/// Splits `stl_<id>_<secret>`.
fn parse_token(token: &str) -> Option<(&str, &str)> {
    token.strip_prefix(TOKEN_PREFIX)?.split_once('_')
}

/// The installation's credentials on this replica: the admin token (re-read from its file
/// when it changes, so it rotates without a restart) and the tokens seen since the last report
/// of their use.
pub struct Credentials {
    file: Option<std::path::PathBuf>,
    admin: RwLock<AdminSecret>,
    /// Token id → when it was last presented here (seconds since the epoch); at most one entry
    /// per token in the state, drained by [`Credentials::take_uses`].
    uses: Mutex<HashMap<String, i64>>,
}

struct AdminSecret {
    token: String,
    digest: [u8; 32],
}

impl AdminSecret {
    fn new(token: String) -> AdminSecret {
        AdminSecret {
            digest: Sha256::digest(token.as_bytes()).into(),
            token,
        }
    }
}

fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Credentials {
    /// Credentials with `token` as the admin token, read from `file` (re-read by
    /// [`Credentials::reload`]) when given.
    pub fn new(token: String, file: Option<std::path::PathBuf>) -> Credentials {
        Credentials {
            file,
            admin: RwLock::new(AdminSecret::new(token)),
            uses: Mutex::default(),
        }
    }

    /// The admin token now in use (for calls to peers).
    pub fn admin_token(&self) -> String {
        self.admin
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .token
            .clone()
    }

    /// Re-reads the admin token's file: `Ok(true)` when the token changed (the old one is
    /// refused from now on), `Ok(false)` when it is the same; an unreadable, blank or short
    /// file keeps the current token and says why.
    pub fn reload(&self) -> Result<bool, TokenFileError> {
        let Some(file) = &self.file else {
            return Ok(false);
        };
        let token = read_admin_token(file)?;
        let mut admin = self.admin.write().unwrap_or_else(|e| e.into_inner());
        if admin.token == token {
            return Ok(false);
        }
        *admin = AdminSecret::new(token);
        Ok(true)
    }

    /// Re-reads the admin token's file every `interval` until the task is aborted.
    pub async fn watch(self: Arc<Self>, interval: std::time::Duration) {
        loop {
            tokio::time::sleep(interval).await;
            match self.reload() {
                Ok(true) => tracing::info!(
                    file = %self.file.as_deref().unwrap_or(std::path::Path::new("")).display(),
                    "admin token reloaded: the previous one is refused from now on"
                ),
                Ok(false) => {}
                Err(error) => tracing::warn!(
                    %error,
                    "admin token not reloaded; the current one stays in use"
                ),
            }
        }
    }

    pub(crate) fn note_use(&self, id: &str, now: i64) {
        let mut uses = locked(&self.uses);
        match uses.get_mut(id) {
            Some(at) => *at = (*at).max(now),
            None => {
                uses.insert(id.to_owned(), now);
            }
        }
    }

    /// The uses seen since the last call, as `(id, RFC 3339)`, for
    /// [`fleet::Command::NoteTokenUse`].
    pub fn take_uses(&self) -> Vec<(String, String)> {
        let uses = std::mem::take(&mut *locked(&self.uses));
        let mut uses: Vec<(String, String)> = uses
            .into_iter()
            .map(|(id, at)| {
                let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(at.max(0) as u64);
                (id, humantime::format_rfc3339_seconds(time).to_string())
            })
            .collect();
        uses.sort();
        uses
    }
}

pub(crate) use crate::clock::unix_now;

/// Why the admin token file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenFileError {
    #[error("cannot read the admin token file {}: {message}", .path.display())]
    Unreadable {
        path: std::path::PathBuf,
        message: String,
    },
    #[error(
        "the admin token in {} is too short: it needs {min} characters at least",
        .path.display()
    )]
    TooShort {
        path: std::path::PathBuf,
        min: usize,
    },
}

/// Reads the admin token from `--admin-token-file`: trimmed, at least
/// [`MIN_ADMIN_TOKEN_LEN`] characters.
pub(crate) fn read_admin_token(path: &std::path::Path) -> Result<String, TokenFileError> {
    let text = std::fs::read_to_string(path).map_err(|error| TokenFileError::Unreadable {
        path: path.to_owned(),
        message: error.to_string(),
    })?;
    let token = text.trim().to_string();
    if token.len() < MIN_ADMIN_TOKEN_LEN {
        return Err(TokenFileError::TooShort {
            path: path.to_owned(),
            min: MIN_ADMIN_TOKEN_LEN,
        });
    }
    Ok(token)
}

/// Authenticates the bearer token of every client call ([`RequireToken`] runs it) and records the caller.
#[derive(Clone)]
pub struct Authenticator {
    /// `None`: the API is open.
    credentials: Option<Arc<Credentials>>,
    state: Option<Arc<starling_raft::StateReader>>,
}

impl Authenticator {
    /// An open API: every caller is [`Principal::anonymous`].
    pub fn open() -> Authenticator {
        Authenticator {
            credentials: None,
            state: None,
        }
    }

    /// Tokens required: the admin token, or one in the replicated state.
    pub fn with_tokens(
        credentials: Arc<Credentials>,
        state: starling_raft::StateReader,
    ) -> Authenticator {
        Authenticator {
            credentials: Some(credentials),
            state: Some(Arc::new(state)),
        }
    }

    /// Whether calls need a token.
    pub fn enforcing(&self) -> bool {
        self.credentials.is_some()
    }

    /// The caller a bearer token stands for, judged on this replica's applied state now.
    pub fn authenticate(&self, bearer: Option<&str>) -> Result<Principal, Status> {
        self.judge(bearer).map_err(Refusal::into_status)
    }

    /// As [`Authenticator::authenticate`], but a well-formed token this replica does not know
    /// yet gets up to [`CATCH_UP`] for its entry to be applied here: a token created through
    /// another replica works on this one at once, although a follower applies a few
    /// milliseconds behind the leader. Unknown tokens are refused after the wait.
    pub async fn authenticate_waiting(&self, bearer: Option<&str>) -> Result<Principal, Status> {
        let refusal = match self.judge(bearer) {
            Ok(principal) => return Ok(principal),
            Err(refusal @ Refusal::Unknown) => refusal,
            Err(refusal) => return Err(refusal.into_status()),
        };
        let Some(state) = &self.state else {
            return Err(refusal.into_status());
        };
        let mut applied = state.watch_applied();
        let deadline = tokio::time::Instant::now() + CATCH_UP;
        while let Ok(Ok(())) = tokio::time::timeout_at(deadline, applied.changed()).await {
            match self.judge(bearer) {
                Err(Refusal::Unknown) => continue,
                verdict => return verdict.map_err(Refusal::into_status),
            }
        }
        Err(Refusal::Unknown.into_status())
    }

    fn judge(&self, bearer: Option<&str>) -> Result<Principal, Refusal> {
        let Some(credentials) = &self.credentials else {
            return Ok(Principal::anonymous());
        };
        let Some(token) = bearer else {
            return Err(Refusal::Other(refused(ApiError::unauthenticated(
                "this installation requires a token: pass --token or set STARLING_TOKEN (an admin makes one with `starling token create`)",
            ))));
        };
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let admin = credentials
            .admin
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .digest;
        if bool::from(presented.ct_eq(&admin)) {
            return Ok(Principal::admin_token());
        }
        let (id, secret) = parse_token(token).ok_or(Refusal::Invalid)?;
        let digest: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        let state = self.state.as_ref().ok_or(Refusal::Invalid)?;
        let now = unix_now();
        let principal = state.read(|state| {
            let entry = state.tokens.get(id).ok_or(Refusal::Unknown)?;
            let stored = hex::decode(&entry.digest).map_err(|_| Refusal::Invalid)?;
            if !bool::from(stored.as_slice().ct_eq(&digest)) {
                return Err(Refusal::Invalid);
            }
            if entry.expired_at(now) {
                return Err(Refusal::Other(refused(ApiError::unauthenticated(format!(
                    "token {id} expired at {}: an admin makes a new one with `starling token create`",
                    entry.expires.as_deref().unwrap_or_default()
                )))));
            }
            Ok(Principal::of_token(id, entry))
        })?;
        credentials.note_use(id, now);
        Ok(principal)
    }
}

/// How long [`Authenticator::authenticate_waiting`] waits for a token it does not know yet.
pub(crate) const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(3);

/// Why a token was refused: [`Refusal::Unknown`] may only be early (its entry not applied
/// here yet); the others are final.
enum Refusal {
    Unknown,
    Invalid,
    Other(Status),
}

impl Refusal {
    fn into_status(self) -> Status {
        match self {
            Refusal::Unknown | Refusal::Invalid => {
                refused(ApiError::unauthenticated("invalid or revoked token"))
            }
            Refusal::Other(status) => status,
        }
    }
}

/// The client APIs' guard: every call carries the [`Principal`] its bearer token stands for,
/// or is answered with the refusal. A service around the gRPC service rather than a tonic
/// interceptor, because [`Authenticator::authenticate_waiting`] waits.
#[derive(Clone)]
pub(crate) struct RequireToken<S> {
    inner: S,
    authenticator: Authenticator,
}

impl<S> RequireToken<S> {
    pub(crate) fn new(inner: S, authenticator: Authenticator) -> RequireToken<S> {
        RequireToken {
            inner,
            authenticator,
        }
    }
}

impl<S> tonic::server::NamedService for RequireToken<S>
where
    S: tonic::server::NamedService,
{
    const NAME: &'static str = S::NAME;
}

type GrpcRequest = http::Request<tonic::body::Body>;
type GrpcResponse = http::Response<tonic::body::Body>;

impl<S> tonic::codegen::Service<GrpcRequest> for RequireToken<S>
where
    S: tonic::codegen::Service<GrpcRequest, Response = GrpcResponse> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = GrpcResponse;
    type Error = S::Error;
    type Future = tonic::codegen::BoxFuture<GrpcResponse, S::Error>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: GrpcRequest) -> Self::Future {
        // The clone that was polled ready serves this call; the new clone waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let authenticator = self.authenticator.clone();
        Box::pin(async move {
            let bearer = request
                .headers()
                .get(http::header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.strip_prefix("Bearer "))
                .map(|token| token.trim().to_string());
            match authenticator.authenticate_waiting(bearer.as_deref()).await {
                Ok(principal) => {
                    request.extensions_mut().insert(principal);
                    inner.call(request).await
                }
                Err(status) => Ok(status.into_http()),
            }
        })
    }
}

impl Authenticator {
    /// The token in an HTTP `Authorization` header: `Bearer <token>`, or `Basic` with the
    /// token as the password (what a browser asks for).
    pub fn http_bearer(header: Option<&str>) -> Option<String> {
        use base64::Engine as _;
        let header = header?.trim();
        if let Some(token) = header.strip_prefix("Bearer ") {
            return Some(token.trim().to_string());
        }
        let encoded = header.strip_prefix("Basic ")?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .ok()?;
        let text = String::from_utf8(decoded).ok()?;
        text.split_once(':')
            .map(|(_, password)| password.to_string())
    }
}

/// The status of a refused call: through the API error type, the one mapping of errors to
/// gRPC codes (`proto`).
fn refused(error: ApiError) -> Status {
    proto::status_from(&error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_and_never_contain_their_digest() {
        let (id, token, digest) = new_token();
        let (parsed_id, secret) = parse_token(&token).expect("parses");
        assert_eq!(parsed_id, id);
        assert_eq!(hex::encode(Sha256::digest(secret.as_bytes())), digest);
        assert!(!token.contains(&digest));
    }

    #[test]
    fn roles_and_tenants_decide_and_say_why() {
        let reader = Principal {
            name: "token abc".into(),
            role: Role::Reader,
            tenants: vec!["team-a".into()],
            open: false,
        };
        assert!(reader.require(Role::Reader, Some("team-a"), "list").is_ok());
        let write = reader
            .require(Role::Writer, Some("team-a"), "apply")
            .unwrap_err();
        assert_eq!(write.code(), tonic::Code::PermissionDenied);
        assert!(
            write.message().contains("needs the writer role"),
            "{}",
            write.message()
        );
        let other = reader
            .require(Role::Reader, Some("team-b"), "get")
            .unwrap_err();
        assert!(
            other.message().contains("namespace team-b"),
            "{}",
            other.message()
        );
        let global = reader
            .require(Role::Reader, None, "list members")
            .unwrap_err();
        assert!(
            global.message().contains("every namespace"),
            "{}",
            global.message()
        );
        let agent = Principal {
            role: Role::Agent,
            ..reader.clone()
        };
        assert!(agent.require(Role::Reader, Some("team-a"), "get").is_err());
        assert!(
            Principal::anonymous()
                .require(Role::Admin, None, "drain")
                .is_ok()
        );
    }

    #[test]
    fn an_open_api_needs_no_token_and_a_closed_one_refuses_a_missing_or_wrong_one() {
        assert_eq!(
            Authenticator::open().authenticate(None).unwrap(),
            Principal::anonymous()
        );
        let admin = "a".repeat(40);
        let auth = Authenticator {
            credentials: Some(Arc::new(Credentials::new(admin.clone(), None))),
            state: None,
        };
        assert_eq!(auth.authenticate(Some(&admin)).unwrap().role, Role::Admin);
        let missing = auth.authenticate(None).unwrap_err();
        assert_eq!(missing.code(), tonic::Code::Unauthenticated);
        let wrong = auth.authenticate(Some("stl_0011_secret")).unwrap_err();
        assert_eq!(wrong.code(), tonic::Code::Unauthenticated);
        assert!(!wrong.message().contains("secret"));
    }

    /// Issue 32, part 3: the admin token rotates by rewriting its file; a blank or short file
    /// keeps the current one.
    #[test]
    fn the_admin_token_rotates_when_its_file_changes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("token");
        let (old, new) = ("o".repeat(40), "n".repeat(40));
        std::fs::write(&file, &old).expect("write");
        let credentials = Arc::new(Credentials::new(old.clone(), Some(file.clone())));
        let auth = Authenticator {
            credentials: Some(credentials.clone()),
            state: None,
        };
        assert!(auth.authenticate(Some(&old)).is_ok());
        assert!(!credentials.reload().expect("same file"));
        std::fs::write(&file, format!("{new}\n")).expect("rewrite");
        assert!(credentials.reload().expect("new token"));
        assert!(auth.authenticate(Some(&new)).is_ok());
        assert!(auth.authenticate(Some(&old)).is_err());
        assert_eq!(credentials.admin_token(), new);
        std::fs::write(&file, "short").expect("rewrite");
        assert!(credentials.reload().is_err());
        assert!(auth.authenticate(Some(&new)).is_ok());
    }

    /// Uses are kept per token (the latest only) until taken, as RFC 3339 times.
    #[test]
    fn uses_are_kept_per_token_until_reported() {
        let credentials = Credentials::new("a".repeat(40), None);
        credentials.note_use("t1", 1_800_000_000);
        credentials.note_use("t1", 1_800_000_060);
        credentials.note_use("t1", 1_800_000_030);
        credentials.note_use("t2", 1_800_000_000);
        assert_eq!(
            credentials.take_uses(),
            [
                ("t1".to_owned(), "2027-01-15T08:01:00Z".to_owned()),
                ("t2".to_owned(), "2027-01-15T08:00:00Z".to_owned()),
            ]
        );
        assert!(credentials.take_uses().is_empty());
    }
}
