//! Who is calling, and what they may do: bearer tokens on the Fleet and Admin APIs.
//!
//! ```text
//!   authorization: Bearer <token> ──Authenticator (interceptor)──► Principal in the request
//!        ├─ the admin token (--admin-token-file)        → admin of every namespace
//!        ├─ stl_<id>_<secret>, digest in FleetState.tokens → its role and tenants
//!        └─ missing or unknown                           → Unauthenticated
//!   handler ──Principal::require(role, namespace)──► PermissionDenied, with the reason
//! ```
//!
//! Without `--admin-token-file` the API is open: every caller is an anonymous admin, as in
//! development. Tokens are compared by SHA-256 digest in constant time; a token never appears
//! in a log line, an error message or a metric.

use std::sync::Arc;

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
            return Err(Status::permission_denied(format!(
                "{} ({} role) may not {what}: that needs the {need} role",
                self.name, self.role
            )));
        }
        match namespace {
            Some(namespace) if !self.serves(namespace) => Err(Status::permission_denied(format!(
                "{} may not {what} in namespace {namespace}: it acts only in {}",
                self.name,
                self.tenants.join(", ")
            ))),
            None if !self.everywhere() => Err(Status::permission_denied(format!(
                "{} may not {what}: that needs a token for every namespace (--tenant '*'), and it acts only in {}",
                self.name,
                self.tenants.join(", ")
            ))),
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
        .ok_or_else(|| Status::internal("the request was not authenticated (a server bug)"))
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

/// Authenticates every request of a service (a tonic interceptor) and records the caller.
#[derive(Clone)]
pub struct Authenticator {
    /// SHA-256 of the admin token; `None`: the API is open.
    admin: Option<[u8; 32]>,
    state: Option<Arc<starling_raft::StateReader>>,
}

impl Authenticator {
    /// An open API: every caller is [`Principal::anonymous`].
    pub fn open() -> Authenticator {
        Authenticator {
            admin: None,
            state: None,
        }
    }

    /// Tokens required: the admin token, or one in the replicated state.
    pub fn with_tokens(admin_token: &str, state: starling_raft::StateReader) -> Authenticator {
        Authenticator {
            admin: Some(Sha256::digest(admin_token.as_bytes()).into()),
            state: Some(Arc::new(state)),
        }
    }

    /// Whether calls need a token.
    pub fn enforcing(&self) -> bool {
        self.admin.is_some()
    }

    /// The caller a bearer token stands for.
    pub fn authenticate(&self, bearer: Option<&str>) -> Result<Principal, Status> {
        let Some(admin) = self.admin else {
            return Ok(Principal::anonymous());
        };
        let Some(token) = bearer else {
            return Err(Status::unauthenticated(
                "this installation requires a token: pass --token or set STARLING_TOKEN (an admin makes one with `starling token create`)",
            ));
        };
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if bool::from(presented.ct_eq(&admin)) {
            return Ok(Principal::admin_token());
        }
        let invalid = || Status::unauthenticated("invalid or revoked token");
        let (id, secret) = parse_token(token).ok_or_else(invalid)?;
        let digest: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        let state = self.state.as_ref().ok_or_else(invalid)?;
        state
            .read(|state| {
                let entry = state.tokens.get(id)?;
                let stored = hex::decode(&entry.digest).ok()?;
                bool::from(stored.as_slice().ct_eq(&digest)).then(|| Principal::of_token(id, entry))
            })
            .ok_or_else(invalid)
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

impl tonic::service::Interceptor for Authenticator {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let bearer = request
            .metadata()
            .get("authorization")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim);
        let principal = self.authenticate(bearer)?;
        request.extensions_mut().insert(principal);
        Ok(request)
    }
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
            admin: Some(Sha256::digest(admin.as_bytes()).into()),
            state: None,
        };
        assert_eq!(auth.authenticate(Some(&admin)).unwrap().role, Role::Admin);
        let missing = auth.authenticate(None).unwrap_err();
        assert_eq!(missing.code(), tonic::Code::Unauthenticated);
        let wrong = auth.authenticate(Some("stl_0011_secret")).unwrap_err();
        assert_eq!(wrong.code(), tonic::Code::Unauthenticated);
        assert!(!wrong.message().contains("secret"));
    }
}
