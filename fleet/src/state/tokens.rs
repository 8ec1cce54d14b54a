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
    /// When it stops working (RFC 3339); never when unset (`starling token create --ttl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    /// When a replica last saw it presented (RFC 3339, to about a minute: replicas report
    /// uses in batches, [`super::Command::NoteTokenUse`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used: Option<String>,
}

impl TokenEntry {
    /// Whether it has expired at `now` (seconds since the epoch). An expiry that does not
    /// parse counts as expired: the API only writes ones that do.
    pub fn expired_at(&self, now: i64) -> bool {
        self.expires.as_deref().is_some_and(|expires| {
            crate::duration::unix_seconds(expires).is_none_or(|at| at <= now)
        })
    }

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

    /// [`super::Command::NoteTokenUse`]: moves each named token's last use forward (never
    /// back); ids no longer known are skipped (revoked since).
    pub(super) fn note_token_use(&mut self, uses: Vec<(String, String)>) -> Outcome {
        for (id, at) in uses {
            let Some(entry) = self.tokens.get_mut(&id) else {
                continue;
            };
            let Some(seconds) = crate::duration::unix_seconds(&at) else {
                continue;
            };
            let newer = entry
                .last_used
                .as_deref()
                .and_then(crate::duration::unix_seconds)
                .is_none_or(|previous| seconds > previous);
            if newer {
                entry.last_used = Some(at);
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Command;

    fn entry(expires: Option<&str>) -> TokenEntry {
        TokenEntry {
            role: Role::Reader,
            tenants: vec!["team-a".into()],
            digest: "00".repeat(32),
            description: String::new(),
            created: "2026-11-27T10:00:00Z".into(),
            expires: expires.map(str::to_owned),
            last_used: None,
        }
    }

    #[test]
    fn a_token_expires_at_its_time_and_an_unreadable_expiry_counts_as_expired() {
        let noon = crate::duration::unix_seconds("2026-11-27T12:00:00Z").expect("time");
        assert!(!entry(None).expired_at(noon));
        assert!(!entry(Some("2026-11-27T12:00:01Z")).expired_at(noon));
        assert!(entry(Some("2026-11-27T12:00:00Z")).expired_at(noon));
        assert!(entry(Some("soon")).expired_at(noon));
    }

    #[test]
    fn last_use_only_moves_forward_and_revoked_tokens_are_skipped() {
        let mut state = FleetState::default();
        state.apply(Command::CreateToken {
            id: "a1".into(),
            entry: entry(None),
        });
        let used = |state: &FleetState| state.tokens["a1"].last_used.clone();
        state.apply(Command::NoteTokenUse {
            uses: vec![
                ("a1".into(), "2026-11-27T12:00:00Z".into()),
                ("gone".into(), "2026-11-27T12:00:00Z".into()),
            ],
        });
        assert_eq!(used(&state).as_deref(), Some("2026-11-27T12:00:00Z"));
        // A replica reporting late does not move it back.
        state.apply(Command::NoteTokenUse {
            uses: vec![("a1".into(), "2026-11-27T11:00:00Z".into())],
        });
        assert_eq!(used(&state).as_deref(), Some("2026-11-27T12:00:00Z"));
        state.apply(Command::NoteTokenUse {
            uses: vec![("a1".into(), "2026-11-27T12:05:00Z".into())],
        });
        assert_eq!(used(&state).as_deref(), Some("2026-11-27T12:05:00Z"));
        assert!(!state.tokens.contains_key("gone"));
    }
}
