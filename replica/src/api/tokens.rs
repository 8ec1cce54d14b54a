//! `starling token create|list|revoke`: API tokens, kept in the replicated state as digests.

use fleet::Command;
use fleet::state::{Role, TokenEntry};
use proto::ApiError;
use tonic::Status;

use super::recovery::propose_all;
use super::status;
use crate::node::Replica;

/// The longest description kept with a token.
const MAX_DESCRIPTION: usize = 256;
/// The longest a token may live: ten years.
const MAX_TTL_SECONDS: u64 = 10 * 365 * 86_400;

/// Makes a token; its secret is in the answer only.
pub(crate) async fn create(
    replica: &Replica,
    actor: &fleet::state::audit::Actor,
    request: proto::TokenCreateRequest,
) -> Result<proto::TokenCreateResponse, Status> {
    let role: Role = request
        .role
        .parse()
        .map_err(|message: String| status(ApiError::invalid_argument(message)))?;
    if request.tenants.is_empty() {
        return Err(status(ApiError::invalid_argument(
            "a token needs at least one tenant: --tenant NAMESPACE (or '*' for every namespace)",
        )));
    }
    for tenant in &request.tenants {
        if tenant != "*" && fleet::validate::check_dns1123_label(tenant).is_err() {
            return Err(status(ApiError::invalid_argument(format!(
                "{tenant:?} is not a namespace name"
            ))));
        }
    }
    if request.description.len() > MAX_DESCRIPTION {
        return Err(status(ApiError::invalid_argument(format!(
            "the description is longer than {MAX_DESCRIPTION} bytes"
        ))));
    }
    if request.ttl_seconds > MAX_TTL_SECONDS {
        return Err(status(ApiError::invalid_argument(format!(
            "a token lives at most {} days (--ttl {}h)",
            MAX_TTL_SECONDS / 86_400,
            MAX_TTL_SECONDS / 3_600
        ))));
    }
    let (id, token, digest) = crate::auth::new_token();
    let now = crate::clock::system_now();
    let expires = (request.ttl_seconds > 0).then(|| {
        humantime::format_rfc3339_seconds(now + std::time::Duration::from_secs(request.ttl_seconds))
            .to_string()
    });
    let entry = TokenEntry {
        role,
        tenants: request.tenants,
        digest,
        description: request.description,
        created: humantime::format_rfc3339_seconds(now).to_string(),
        expires,
        last_used: None,
    };
    propose_all(
        replica,
        vec![replica.audited(
            actor,
            Command::CreateToken {
                id: id.clone(),
                entry,
            },
        )],
    )
    .await?;
    let revision = replica.raft.reader().read(|state| state.revision);
    tracing::info!(token = %id, %role, "token created");
    Ok(proto::TokenCreateResponse {
        id,
        token,
        revision,
    })
}

/// Every token, without secrets or digests, with its expiry and last use.
pub(crate) fn list(replica: &Replica) -> proto::TokenListResponse {
    let now = crate::auth::unix_now();
    let tokens = replica.raft.reader().read(|state| {
        state
            .tokens
            .iter()
            .map(|(id, entry)| proto::TokenInfo {
                id: id.clone(),
                role: entry.role.to_string(),
                tenants: entry.tenants.clone(),
                description: entry.description.clone(),
                created: entry.created.clone(),
                expires: entry.expires.clone().unwrap_or_default(),
                last_used: entry.last_used.clone().unwrap_or_default(),
                expired: entry.expired_at(now),
            })
            .collect()
    });
    proto::TokenListResponse { tokens }
}

/// Revokes a token: the next call with it is refused.
pub(crate) async fn revoke(
    replica: &Replica,
    actor: &fleet::state::audit::Actor,
    request: proto::TokenRevokeRequest,
) -> Result<proto::TokenRevokeResponse, Status> {
    propose_all(
        replica,
        vec![replica.audited(
            actor,
            Command::RevokeToken {
                id: request.id.clone(),
            },
        )],
    )
    .await?;
    tracing::info!(token = %request.id, "token revoked");
    let revision = replica.raft.reader().read(|state| state.revision);
    Ok(proto::TokenRevokeResponse { revision })
}
