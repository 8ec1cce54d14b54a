//! `ListAudit` (`starling audit`, the fleet view's audit panel, `starling describe`'s history):
//! the audit log's entries that match a request and that the caller may read.
//!
//! A token sees the entries of the namespaces it acts in; entries of no namespace (tokens,
//! members, recovery) only a token for every namespace sees. The answer is bounded: the newest
//! `limit` matching entries (1,000 by default, 10,000 at most), with the count left out.

use fleet::state::audit::AuditEntry;
use proto::ApiError;
use tonic::Status;

use super::status;
use crate::auth::Principal;
use crate::node::Replica;

/// Entries answered when the request names no limit.
const DEFAULT_LIMIT: u32 = 1_000;
/// The most entries one answer holds.
const MAX_LIMIT: u32 = 10_000;

/// What a request asks for, checked.
struct Filter {
    since: Option<i64>,
    kind: String,
    namespace: String,
    name: String,
    who: String,
}

impl Filter {
    fn of(request: &proto::ListAuditRequest) -> Result<Filter, Status> {
        let since = match request.since.as_str() {
            "" => None,
            text => Some(fleet::duration::unix_seconds(text).ok_or_else(|| {
                status(ApiError::invalid_argument(format!(
                    "since {text:?} is not an RFC 3339 time (2026-12-01T10:00:00Z)"
                )))
            })?),
        };
        Ok(Filter {
            since,
            kind: request.kind.clone(),
            namespace: request.namespace.clone(),
            name: request.name.clone(),
            who: request.who.clone(),
        })
    }

    fn matches(&self, entry: &AuditEntry) -> bool {
        let who = &entry.actor.name;
        (self.kind.is_empty() || entry.kind.eq_ignore_ascii_case(&self.kind))
            && (self.namespace.is_empty() || entry.namespace == self.namespace)
            && (self.name.is_empty() || entry.name == self.name)
            && (self.who.is_empty()
                || *who == self.who
                || who.strip_prefix("token ") == Some(self.who.as_str()))
            && self.since.is_none_or(|since| {
                fleet::duration::unix_seconds(&entry.at).is_some_and(|at| at >= since)
            })
    }
}

/// Whether `caller` may read `entry`.
fn visible(caller: &Principal, entry: &AuditEntry) -> bool {
    if entry.namespace.is_empty() {
        caller.everywhere()
    } else {
        caller.serves(&entry.namespace)
    }
}

pub(crate) fn list(
    replica: &Replica,
    caller: &Principal,
    request: &proto::ListAuditRequest,
) -> Result<proto::ListAuditResponse, Status> {
    let limit = match request.limit {
        0 => DEFAULT_LIMIT,
        limit if limit > MAX_LIMIT => {
            return Err(status(ApiError::invalid_argument(format!(
                "limit {limit} is more than {MAX_LIMIT}: page with since"
            ))));
        }
        limit => limit,
    } as usize;
    let filter = Filter::of(request)?;
    let (mut entries, more, revision) = replica.raft.reader().read(|state| {
        let mut kept = Vec::new();
        let mut more = 0u32;
        for entry in state.audit.entries.iter().rev() {
            if !filter.matches(entry) || !visible(caller, entry) {
                continue;
            }
            if kept.len() < limit {
                kept.push(wire(entry));
            } else {
                more += 1;
            }
        }
        (kept, more, state.revision)
    });
    entries.reverse();
    Ok(proto::ListAuditResponse {
        entries,
        more,
        revision,
    })
}

fn wire(entry: &AuditEntry) -> proto::AuditEntry {
    proto::AuditEntry {
        seq: entry.seq,
        at: entry.at.clone(),
        actor: entry.actor.name.clone(),
        tenants: entry.actor.tenants.clone(),
        replica: entry.actor.replica,
        address: entry.actor.address.clone().unwrap_or_default(),
        action: entry.action.clone(),
        kind: entry.kind.clone(),
        namespace: entry.namespace.clone(),
        name: entry.name.clone(),
        generation_before: entry.generation_before.unwrap_or(0),
        generation_after: entry.generation_after.unwrap_or(0),
        spec_digest: entry.spec_digest.clone().unwrap_or_default(),
        detail: entry.detail.clone(),
    }
}
