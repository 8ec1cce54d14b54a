//! API tokens: who may call the gRPC API, in which role and for which tenants (namespaces).
//!
//! Only a token's SHA-256 digest is replicated; the token itself is shown once, when
//! `starling token create` makes it. The node checks a presented token against
//! [`FleetState::tokens`] (see the node's `auth` module).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{FleetState, Outcome};

/// The most tokens an installation keeps.
pub const MAX_TOKENS: usize = 10_000;

/// What a token may do, from most to least.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything in its tenants; with every tenant (`*`), the installation too: members,
    /// backups, recovery and tokens.
    Admin,
    /// Apply, delete, rollout and hold in its tenants, and read them.
    Writer,
    /// Read its tenants' objects.
    Reader,
    /// A `starling agent`: acts only for the pull clusters of its tenants.
    Agent,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Admin, Role::Writer, Role::Reader, Role::Agent];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Writer => "writer",
            Role::Reader => "reader",
            Role::Agent => "agent",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(text: &str) -> Result<Role, String> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == text)
            .ok_or_else(|| {
                format!("unknown role {text:?}: expected admin, writer, reader or agent")
            })
    }
}

/// One token, as replicated: never the token itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenEntry {
    pub role: Role,
    /// The namespaces it acts in; `*` is every namespace.
    pub tenants: Vec<String>,
    /// Hex SHA-256 of the token's secret part.
    pub digest: String,
    #[serde(default)]
    pub description: String,
    /// When it was created (RFC 3339).
    pub created: String,
}

impl TokenEntry {
    /// Whether the token acts in `namespace`.
    pub fn serves(&self, namespace: &str) -> bool {
        self.tenants.iter().any(|t| t == "*" || t == namespace)
    }
}

impl FleetState {
    pub(super) fn create_token(&mut self, id: String, entry: TokenEntry) -> Outcome {
        if self.tokens.contains_key(&id) {
            return Outcome::Rejected {
                message: format!("token {id} already exists"),
            };
        }
        if self.tokens.len() >= MAX_TOKENS {
            return Outcome::Rejected {
                message: format!(
                    "the installation already has {MAX_TOKENS} tokens: revoke some first (starling token revoke)"
                ),
            };
        }
        if entry.tenants.is_empty() {
            return Outcome::Rejected {
                message: "a token needs at least one tenant (--tenant NS, or * for all)".into(),
            };
        }
        self.tokens.insert(id, entry);
        Outcome::Ok
    }

    pub(super) fn revoke_token(&mut self, id: &str) -> Outcome {
        match self.tokens.remove(id) {
            Some(_) => Outcome::Ok,
            None => Outcome::Rejected {
                message: format!("token {id} not found"),
            },
        }
    }
}
