//! `starling rollout history SYNCGROUP`: the group's last rollouts (newest first), read from
//! `status.history`, and the choice of revision for `starling rollout undo`.

use serde_json::{Value, json};

use super::get::text_at;
use super::output::{NONE, ReportFormat, Table, short_revision, to_json};
use super::target::Target;

/// The records of `status.history`, newest first.
fn records(object: &Value) -> &[Value] {
    object
        .pointer("/status/history")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn count(record: &Value, field: &str) -> u64 {
    record
        .pointer(&format!("/summary/{field}"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

pub fn render(target: &Target, object: &Value, format: ReportFormat) -> anyhow::Result<String> {
    let records = records(object);
    if format == ReportFormat::Json {
        return to_json(&json!({
            "namespace": target.namespace,
            "name": target.name,
            "pinnedRevision": object.pointer("/spec/rollout/pinnedRevision"),
            "history": records,
        }));
    }
    let mut text = format!(
        "syncgroup {}/{}: {} rollouts recorded, newest first\n",
        target.namespace,
        target.name,
        records.len()
    );
    if let Some(pinned) = object
        .pointer("/spec/rollout/pinnedRevision")
        .and_then(Value::as_str)
    {
        text.push_str(&format!(
            "pinned to {pinned} (starling rollout unpin {})\n",
            target.name
        ));
    }
    if records.is_empty() {
        return Ok(text);
    }
    let mut table = Table::new([
        "ID", "REVISION", "TRIGGER", "STARTED", "FINISHED", "OUTCOME", "UPDATED", "FAILED", "HELD",
    ]);
    let mut notes = Vec::new();
    for record in records {
        let id = text_at(record, "/id");
        table.push(vec![
            id.clone(),
            short_revision(&text_at(record, "/revision")),
            text_at(record, "/trigger"),
            text_at(record, "/startedAt"),
            text_at(record, "/finishedAt"),
            text_at(record, "/outcome"),
            format!("{}/{}", count(record, "updated"), count(record, "total")),
            count(record, "failed").to_string(),
            count(record, "held").to_string(),
        ]);
        let reason = text_at(record, "/haltReason");
        if reason != NONE {
            notes.push(format!("{id}: halted: {reason}"));
        }
        for failure in record
            .get("failures")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            notes.push(format!("{id}: failed: {failure}"));
        }
    }
    text.push_str(&table.render());
    for note in notes {
        text.push_str(&format!("{note}\n"));
    }
    Ok(text)
}

/// What `rollout undo` goes back to: the newest revision, other than the current target,
/// whose rollout completed; else the newest other revision rolled out at all.
pub fn previous_revision(object: &Value) -> Option<String> {
    let current = object
        .pointer("/status/targetRevision")
        .and_then(Value::as_str);
    let earlier = || {
        records(object).iter().filter(move |record| {
            let revision = record.get("revision").and_then(Value::as_str);
            revision.is_some() && revision != current && record.get("artifact").is_some()
        })
    };
    earlier()
        .find(|record| record.get("outcome").and_then(Value::as_str) == Some("Complete"))
        .or_else(|| earlier().next())
        .and_then(|record| record.get("revision").and_then(Value::as_str))
        .map(String::from)
}

/// The full revision of the history that `given` names: itself, or a unique prefix of one
/// (as `rollout history` shortens them).
pub fn expand_revision(object: &Value, given: &str) -> Result<String, String> {
    let history = records(object);
    let mut revisions: Vec<&str> = history
        .iter()
        .filter_map(|record| record.get("revision").and_then(Value::as_str))
        .collect();
    revisions.sort_unstable();
    revisions.dedup();
    if revisions.contains(&given) {
        return Ok(given.to_owned());
    }
    // A rollout's ID, as the history lists it.
    let by_id = given.parse::<u64>().ok().and_then(|id| {
        history
            .iter()
            .find(|record| record.get("id").and_then(Value::as_u64) == Some(id))
            .and_then(|record| record.get("revision").and_then(Value::as_str))
    });
    // A prefix of the revision (`main@sha1:33c1`), or of its git commit (`33c19d`, or the
    // whole 40 hex digits).
    let sha = |revision: &str| {
        revision
            .rsplit_once(":")
            .map_or("", |(_, sha)| sha)
            .to_owned()
    };
    let looks_like_sha = given.len() >= 4 && given.chars().all(|c| c.is_ascii_hexdigit());
    let matches: Vec<&str> = revisions
        .iter()
        .copied()
        .filter(|revision| {
            revision.starts_with(given)
                || (looks_like_sha && sha(revision).starts_with(&given.to_ascii_lowercase()))
        })
        .collect();
    match (by_id, matches.as_slice()) {
        (Some(revision), []) => Ok(revision.to_owned()),
        (Some(revision), [one]) if *one == revision => Ok(revision.to_owned()),
        (Some(_), _) => Err(format!(
            "{given} is both a rollout ID and the start of a commit of the history; give more \
             of the commit, or the revision as `rollout history` shows it"
        )),
        (None, [one]) => Ok((*one).to_owned()),
        (None, []) => Err(format!(
            "{given} is not a revision, commit or rollout ID this syncgroup rolled out \
             (`starling rollout history`)"
        )),
        (None, several) => Err(format!(
            "{given} names {} revisions of the history; give more of it",
            several.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group() -> Value {
        json!({
            "metadata": {"name": "web"},
            "spec": {"rollout": {}},
            "status": {
                "targetRevision": "main@sha1:cccccccccccccccccccc",
                "history": [
                    {"id": 3, "revision": "main@sha1:cccccccccccccccccccc", "artifact": {"digest": "sha256:3", "size": 1},
                     "trigger": "Commit", "startedAt": "2026-01-01T03:00:00Z", "outcome": "Halted",
                     "summary": {"total": 4, "updated": 1, "inProgress": 0, "pending": 1, "failed": 2},
                     "haltReason": "2 clusters failed, more than maxFailures (1)",
                     "failures": ["c1: unreachable: connection refused"]},
                    {"id": 2, "revision": "main@sha1:bbbbbbbbbbbbbbbbbbbb", "artifact": {"digest": "sha256:2", "size": 1},
                     "trigger": "Commit", "startedAt": "2026-01-01T02:00:00Z", "outcome": "Superseded",
                     "summary": {"total": 4, "updated": 2, "inProgress": 2, "pending": 0, "failed": 0}},
                    {"id": 1, "revision": "main@sha1:aaaaaaaaaaaaaaaaaaaa", "artifact": {"digest": "sha256:1", "size": 1},
                     "trigger": "Spec", "startedAt": "2026-01-01T01:00:00Z", "finishedAt": "2026-01-01T01:05:00Z",
                     "outcome": "Complete", "summary": {"total": 4, "updated": 4, "inProgress": 0, "pending": 0, "failed": 0, "held": 1}}
                ]
            }
        })
    }

    #[test]
    fn history_lists_the_rollouts_with_their_halt_reasons_and_failures() {
        let text = render(
            &Target {
                name: "web".into(),
                namespace: "default".into(),
            },
            &group(),
            ReportFormat::Text,
        )
        .unwrap();
        assert!(text.starts_with("syncgroup default/web: 3 rollouts recorded, newest first\n"));
        assert!(text.contains("main@sha1:cccccccccccc   Commit"), "{text}");
        assert!(text.contains("Complete     4/4       0        1"), "{text}");
        assert!(text.contains("3: halted: 2 clusters failed, more than maxFailures (1)\n"));
        assert!(text.contains("3: failed: c1: unreachable: connection refused\n"));
        let json: Value = serde_json::from_str(
            &render(
                &Target {
                    name: "web".into(),
                    namespace: "default".into(),
                },
                &group(),
                ReportFormat::Json,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(json["history"].as_array().unwrap().len(), 3);
    }

    #[test]
    fn undo_goes_back_to_the_last_completed_revision_and_accepts_a_short_one() {
        assert_eq!(
            previous_revision(&group()).as_deref(),
            Some("main@sha1:aaaaaaaaaaaaaaaaaaaa")
        );
        assert_eq!(
            expand_revision(&group(), "main@sha1:bbbbbbbbbbbb").unwrap(),
            "main@sha1:bbbbbbbbbbbbbbbbbbbb"
        );
        assert!(
            expand_revision(&group(), "main@sha1:")
                .unwrap_err()
                .contains("3 revisions")
        );
        assert!(
            expand_revision(&group(), "v2")
                .unwrap_err()
                .contains("not a revision")
        );
    }

    /// Regression (issue 33, part 5): only the revision as the history shows it was taken; a
    /// short or full git commit and a rollout ID are what kubectl users type.
    #[test]
    fn undo_takes_a_commit_short_or_full_and_a_rollout_id() {
        for given in ["bbbb", "BBBBBBBB", "bbbbbbbbbbbbbbbbbbbb"] {
            assert_eq!(
                expand_revision(&group(), given).unwrap(),
                "main@sha1:bbbbbbbbbbbbbbbbbbbb",
                "{given}"
            );
        }
        assert_eq!(
            expand_revision(&group(), "1").unwrap(),
            "main@sha1:aaaaaaaaaaaaaaaaaaaa"
        );
        assert!(
            expand_revision(&group(), "77")
                .unwrap_err()
                .contains("not a revision, commit or rollout ID")
        );
    }
}
