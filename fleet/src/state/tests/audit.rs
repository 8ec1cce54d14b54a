//! The audit log: one entry per change made through the API, none for what changed nothing
//! or was refused, the bound kept by count and by age, kept through a snapshot.

use super::*;
use crate::state::audit::{Actor, AuditRetention};

fn actor(name: &str) -> Actor {
    Actor {
        name: name.into(),
        tenants: vec!["fleet".into()],
        replica: 2,
        address: Some("127.0.0.1:50000".into()),
    }
}

fn audited(state: &mut FleetState, who: &str, at: &str, command: Command) -> Outcome {
    audited_keeping(state, who, at, AuditRetention::default(), command)
}

fn audited_keeping(
    state: &mut FleetState,
    who: &str,
    at: &str,
    keep: AuditRetention,
    command: Command,
) -> Outcome {
    let outcome = state.apply(Command::Audited {
        actor: actor(who),
        at: at.into(),
        keep,
        command: Box::new(command),
    });
    state.check_invariants().expect("invariants hold");
    outcome
}

fn apply_yaml(yaml: &str) -> Command {
    Command::ApplySpec {
        resource: Box::new(resource(yaml)),
        at: AT.into(),
        quota: None,
    }
}

#[test]
fn each_change_leaves_one_entry_and_nothing_else_leaves_any() {
    let mut state = fleet(3, "1", "");
    let revision = state.revision;
    let group = group_yaml("app", "2", "");
    assert_eq!(
        audited(&mut state, "token ci", AT, apply_yaml(&group)),
        Outcome::Applied(ApplyResult::Configured)
    );
    // The same spec again, and a pause of a group that does not exist: nothing recorded.
    audited(&mut state, "token ci", AT, apply_yaml(&group));
    let missing = Command::PauseRollout {
        group: "fleet/none".into(),
    };
    assert!(matches!(
        audited(&mut state, "token ci", AT, missing),
        Outcome::Rejected { .. }
    ));
    let pause = Command::PauseRollout {
        group: "fleet/app".into(),
    };
    audited(&mut state, "token ops", AT, pause);
    let hold = Command::HoldCluster {
        cluster: "fleet/c001".into(),
        hold: true,
        at: AT.into(),
    };
    audited(&mut state, "the admin token", AT, hold);
    let delete = Command::DeleteSpec {
        key: ObjectKey {
            kind: Kind::Source,
            namespace: "fleet".into(),
            name: "repo".into(),
        },
    };
    audited(&mut state, "token ci", AT, delete);
    // Audited or not, the revision counts the same changes.
    assert_eq!(state.revision, revision + 4);

    let entries: Vec<_> = state.audit.entries.iter().collect();
    let summary: Vec<(&str, &str, &str, &str)> = entries
        .iter()
        .map(|e| {
            (
                e.actor.name.as_str(),
                e.action.as_str(),
                e.kind.as_str(),
                e.name.as_str(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("token ci", "apply", "SyncGroup", "app"),
            ("token ops", "rollout pause", "SyncGroup", "app"),
            ("the admin token", "cluster hold", "Cluster", "c001"),
            ("token ci", "delete", "Source", "repo"),
        ]
    );
    let apply = entries[0];
    assert_eq!(apply.seq, 0);
    assert_eq!(apply.namespace, "fleet");
    assert_eq!(apply.detail, "configured");
    assert_eq!(
        (apply.generation_before, apply.generation_after),
        (Some(1), Some(2))
    );
    assert!(
        apply
            .spec_digest
            .as_deref()
            .is_some_and(|d| d.starts_with("xxh3:"))
    );
    assert_eq!(apply.actor.replica, 2);
    assert_eq!(apply.actor.address.as_deref(), Some("127.0.0.1:50000"));
    let deleted = entries[3];
    assert_eq!(
        (deleted.generation_before, deleted.generation_after),
        (Some(1), None)
    );
    assert_eq!(deleted.spec_digest, None);
}

#[test]
fn a_secret_is_recorded_without_a_digest_of_its_data() {
    let mut state = FleetState::default();
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: kubeconfig\n  namespace: fleet\nstringData:\n  value: hunter2\n";
    audited(&mut state, "token ci", AT, apply_yaml(secret));
    let entry = &state.audit.entries[0];
    assert_eq!(
        (entry.kind.as_str(), entry.detail.as_str()),
        ("Secret", "created")
    );
    assert_eq!(entry.spec_digest, None);
    let recorded = serde_json::to_string(&state.audit).expect("encodes");
    assert!(!recorded.contains("hunter2"), "{recorded}");
}

#[test]
fn the_log_keeps_its_bound_by_count_and_by_age() {
    let mut state = fleet(3, "1", "");
    let keep = AuditRetention {
        entries: 3,
        max_age_seconds: 3600,
    };
    for i in 0..5 {
        let hold = Command::HoldCluster {
            cluster: "fleet/c001".into(),
            hold: i % 2 == 0,
            at: AT.into(),
        };
        audited_keeping(&mut state, "token ops", "2026-01-01T00:00:00Z", keep, hold);
    }
    let seqs: Vec<u64> = state.audit.entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [2, 3, 4]);
    // Two hours later: the old entries are past the age, only the new one stays.
    let pause = Command::PauseRollout {
        group: "fleet/app".into(),
    };
    audited_keeping(&mut state, "token ops", "2026-01-01T02:00:00Z", keep, pause);
    let seqs: Vec<u64> = state.audit.entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [5]);

    // Kept through a snapshot, and the next entry goes on from the seq.
    let bytes = state.encode_snapshot();
    let mut decoded = FleetState::decode_snapshot(&bytes).expect("decodes");
    assert_eq!(decoded.audit, state.audit);
    let resume = Command::ResumeRollout {
        group: "fleet/app".into(),
    };
    audited(&mut decoded, "token ops", "2026-01-01T02:00:01Z", resume);
    assert_eq!(decoded.audit.entries.back().map(|e| e.seq), Some(6));
}

#[test]
fn tokens_are_recorded_by_id_and_role_never_by_secret() {
    let mut state = FleetState::default();
    let entry = TokenEntry {
        role: Role::Writer,
        tenants: vec!["team-a".into()],
        digest: "d".repeat(64),
        description: String::new(),
        created: AT.into(),
        expires: None,
        last_used: None,
    };
    let create = Command::CreateToken {
        id: "ci".into(),
        entry,
    };
    audited(&mut state, "the admin token", AT, create);
    let entry = &state.audit.entries[0];
    assert_eq!(
        (
            entry.action.as_str(),
            entry.kind.as_str(),
            entry.name.as_str()
        ),
        ("token create", "Token", "ci")
    );
    assert_eq!(entry.detail, "role writer in team-a");
    let recorded = serde_json::to_string(&state.audit).expect("encodes");
    assert!(!recorded.contains(&"d".repeat(64)));
}
