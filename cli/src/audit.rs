//! `starling audit`: who changed what in the installation, oldest first: applies and
//! deletions, rollout commands (pause, resume, undo, unpin), cluster holds and adoptions,
//! source polls, tokens, members and recoveries. Each line names the actor (a token's id,
//! `the admin token`), the object and its generation before and after, and the replica and
//! address that took the request. A token sees the entries of its own namespaces.

use std::time::{Duration, SystemTime};

use serde_json::json;

use super::output::{NONE, OutputFormat, ReportFormat, Table, emit, object_name_from, to_json};
use crate::client::{Client, ServerArgs, block_on};

#[derive(clap::Args, Debug, Clone)]
pub struct AuditArgs {
    /// Entries newer than this: a duration back from now (`1h`, `7d`) or an RFC 3339 time.
    #[arg(long, value_name = "DURATION|TIME")]
    pub since: Option<String>,
    /// Only this kind (`SyncGroup`, `Cluster`, `Secret`, `Token`, `Member`, ...).
    #[arg(long)]
    pub kind: Option<String>,
    /// Only objects of this name.
    #[arg(long)]
    pub name: Option<String>,
    /// Only this namespace (every namespace the token reads when unset).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Only this actor: a token id (`ci`), or as recorded (`the admin token`).
    #[arg(long, value_name = "TOKEN")]
    pub who: Option<String>,
    /// The newest this many entries (at most 10,000).
    #[arg(long, default_value_t = 200)]
    pub limit: u32,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    #[command(flatten)]
    pub server: ServerArgs,
}

pub fn run(args: AuditArgs) -> anyhow::Result<()> {
    let format = ReportFormat::from_output(args.output, "starling audit")?;
    let request = request(&args, SystemTime::now())?;
    let text = block_on(async {
        let client = Client::connect(&args.server).await?;
        let response = client.list_audit(request).await?;
        render(&response, format)
    })?;
    emit(&text)
}

/// The request `args` make at `now` (`--since 1h` becomes a time).
pub fn request(args: &AuditArgs, now: SystemTime) -> anyhow::Result<proto::ListAuditRequest> {
    let since = match args.since.as_deref() {
        None => String::new(),
        Some(text) if fleet::duration::unix_seconds(text).is_some() => text.to_owned(),
        Some(text) => {
            let back: Duration = fleet::duration::parse_duration(text).map_err(|error| {
                anyhow::anyhow!(
                    "--since {text:?} is neither a duration (1h, 7d) nor an RFC 3339 time: {error}"
                )
            })?;
            let at = now.checked_sub(back).unwrap_or(SystemTime::UNIX_EPOCH);
            humantime::format_rfc3339_seconds(at).to_string()
        }
    };
    Ok(proto::ListAuditRequest {
        since,
        kind: args.kind.clone().unwrap_or_default(),
        namespace: args.namespace.clone().unwrap_or_default(),
        name: args.name.clone().unwrap_or_default(),
        who: args.who.clone().unwrap_or_default(),
        limit: args.limit,
    })
}

/// `3→4`, `-→1` (created), `2→-` (deleted), or `-`.
pub fn generations(entry: &proto::AuditEntry) -> String {
    let shown = |generation: i64| {
        if generation == 0 {
            NONE.to_owned()
        } else {
            generation.to_string()
        }
    };
    if entry.generation_before == 0 && entry.generation_after == 0 {
        return NONE.to_owned();
    }
    format!(
        "{}→{}",
        shown(entry.generation_before),
        shown(entry.generation_after)
    )
}

fn object(entry: &proto::AuditEntry) -> String {
    match (entry.kind.as_str(), entry.name.as_str()) {
        ("", _) => NONE.to_owned(),
        (kind, name) if entry.namespace.is_empty() => object_name_from(kind, name),
        (kind, name) => format!("{}/{}", entry.namespace, object_name_from(kind, name)),
    }
}

/// The entries as a table, or as JSON.
pub fn render(response: &proto::ListAuditResponse, format: ReportFormat) -> anyhow::Result<String> {
    if format == ReportFormat::Json {
        let entries: Vec<_> = response
            .entries
            .iter()
            .map(|entry| {
                json!({
                    "seq": entry.seq,
                    "at": entry.at,
                    "actor": entry.actor,
                    "tenants": entry.tenants,
                    "replica": entry.replica,
                    "address": entry.address,
                    "action": entry.action,
                    "kind": entry.kind,
                    "namespace": entry.namespace,
                    "name": entry.name,
                    "generationBefore": entry.generation_before,
                    "generationAfter": entry.generation_after,
                    "specDigest": entry.spec_digest,
                    "detail": entry.detail,
                })
            })
            .collect();
        return to_json(&json!({"entries": entries, "more": response.more}));
    }
    if response.entries.is_empty() {
        return Ok("no audit entries match\n".to_owned());
    }
    let mut table = Table::new([
        "TIME",
        "WHO",
        "ACTION",
        "OBJECT",
        "GENERATION",
        "DETAIL",
        "VIA",
    ]);
    for entry in &response.entries {
        let via = match entry.address.as_str() {
            "" => format!("node {}", entry.replica),
            address => format!("node {} from {address}", entry.replica),
        };
        let detail = if entry.detail.is_empty() {
            NONE.to_owned()
        } else {
            entry.detail.clone()
        };
        table.push(vec![
            entry.at.clone(),
            entry.actor.clone(),
            entry.action.clone(),
            object(entry),
            generations(entry),
            detail,
            via,
        ]);
    }
    let mut text = table.render();
    if response.more > 0 {
        text.push_str(&format!(
            "({} older entries left out: narrow with --since, --kind, --name or --who, or raise --limit)\n",
            response.more
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(since: Option<&str>) -> AuditArgs {
        AuditArgs {
            since: since.map(str::to_owned),
            kind: Some("SyncGroup".into()),
            name: None,
            namespace: None,
            who: Some("ci".into()),
            limit: 200,
            output: OutputFormat::Text,
            server: ServerArgs {
                server: String::new(),
                timeout: None,
                token: None,
                tls_ca: None,
            },
        }
    }

    #[test]
    fn since_takes_a_duration_back_from_now_or_a_time() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let back = request(&args(Some("1h")), now).expect("request");
        assert_eq!(back.since, "2027-01-15T07:00:00Z");
        assert_eq!((back.kind.as_str(), back.who.as_str()), ("SyncGroup", "ci"));
        let at = request(&args(Some("2026-12-01T10:00:00Z")), now).expect("request");
        assert_eq!(at.since, "2026-12-01T10:00:00Z");
        let error = request(&args(Some("yesterday")), now).unwrap_err();
        assert!(
            error.to_string().contains("--since \"yesterday\""),
            "{error}"
        );
    }

    #[test]
    fn entries_print_as_a_table_with_what_was_left_out() {
        let entry = proto::AuditEntry {
            seq: 4,
            at: "2026-12-01T10:00:00Z".into(),
            actor: "token ci".into(),
            tenants: vec!["fleet".into()],
            replica: 2,
            address: "127.0.0.1:50000".into(),
            action: "rollout undo".into(),
            kind: "SyncGroup".into(),
            namespace: "fleet".into(),
            name: "web".into(),
            generation_before: 3,
            generation_after: 4,
            spec_digest: "xxh3:00".into(),
            detail: "to revision main@sha1:abc".into(),
        };
        let response = proto::ListAuditResponse {
            entries: vec![entry],
            more: 7,
            revision: 9,
        };
        let text = render(&response, ReportFormat::Text).expect("renders");
        assert!(text.contains("token ci"), "{text}");
        assert!(text.contains("fleet/syncgroup.starling.dev/web"), "{text}");
        assert!(text.contains("3→4"), "{text}");
        assert!(text.contains("node 2 from 127.0.0.1:50000"), "{text}");
        assert!(text.contains("7 older entries left out"), "{text}");
        let json = render(&response, ReportFormat::Json).expect("renders");
        assert!(json.contains("\"generationAfter\": 4"), "{json}");
    }
}
