//! Per-namespace quotas: a write that would take a namespace past its objects or bytes is
//! refused with a message naming the limit; deleting frees room; the kept usage is always what
//! the objects count (the invariant check), also after a snapshot.

use super::*;
use crate::state::quota::{Quota, Usage};

fn apply_with(state: &mut FleetState, yaml: &str, quota: Quota) -> Outcome {
    let outcome = state.apply(Command::ApplySpec {
        resource: Box::new(resource(yaml)),
        at: AT.into(),
        quota: Some(quota),
    });
    state.check_invariants().expect("invariants hold");
    outcome
}

fn secret(name: &str, namespace: &str, bytes: usize) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {namespace}\nstringData:\n  value: \"{}\"\n",
        "x".repeat(bytes)
    )
}

fn refused(outcome: Outcome) -> String {
    match outcome {
        Outcome::Rejected { message } => message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_namespace_holds_at_most_its_quota_of_objects_and_bytes() {
    let mut state = fleet(3, "1", "");
    let quota = Quota {
        objects: 3,
        bytes: 10_000,
    };
    // Three objects fit, the fourth does not; another namespace has a quota of its own.
    for name in ["a", "b", "c"] {
        let outcome = apply_with(&mut state, &secret(name, "team-a", 100), quota);
        assert!(matches!(outcome, Outcome::Applied(_)), "{outcome:?}");
    }
    assert_eq!(
        state.usage_of("team-a"),
        Usage {
            objects: 3,
            bytes: 3 * (100 + 5)
        }
    );
    let message = refused(apply_with(&mut state, &secret("d", "team-a", 100), quota));
    assert!(
        message.contains("namespace team-a is at its quota of 3 objects")
            && message.contains("Secret d")
            && message.contains("--quota-objects"),
        "{message}"
    );
    assert!(!state.secrets.contains_key("team-a/d"));
    let other = apply_with(&mut state, &secret("d", "team-b", 100), quota);
    assert!(matches!(other, Outcome::Applied(_)), "{other:?}");

    // Updating one in place is no new object; growing it past the bytes is refused.
    let grown = refused(apply_with(&mut state, &secret("a", "team-a", 9_900), quota));
    assert!(
        grown.contains("over its quota of 9.8 KiB") && grown.contains("--quota-bytes"),
        "{grown}"
    );
    let fits = apply_with(&mut state, &secret("a", "team-a", 5_000), quota);
    assert!(matches!(fits, Outcome::Applied(_)), "{fits:?}");

    // Deleting frees room.
    state.apply(Command::DeleteSpec {
        key: ObjectKey::new(Kind::Secret, "team-a", "b"),
    });
    state.check_invariants().expect("invariants hold");
    let outcome = apply_with(&mut state, &secret("d", "team-a", 100), quota);
    assert!(matches!(outcome, Outcome::Applied(_)), "{outcome:?}");

    // A lowered quota refuses growth only: what is there can still shrink or go.
    let lowered = Quota {
        objects: 1,
        bytes: 100,
    };
    let shrink = apply_with(&mut state, &secret("a", "team-a", 10), lowered);
    assert!(matches!(shrink, Outcome::Applied(_)), "{shrink:?}");

    // The usage survives a snapshot, counted again from the objects.
    let restored = FleetState::decode_snapshot(&state.encode_snapshot()).unwrap();
    assert_eq!(restored.usage, state.usage);
}

#[test]
fn generated_syncs_count_nothing_and_the_usage_follows_every_removal() {
    let mut state = fleet(4, "1", "");
    // The source, four clusters and the group: the group's four Syncs are not counted.
    let usage = state.usage_of("fleet");
    assert_eq!(usage.objects, 6, "{usage:?}");
    // Deleting the group with its Syncs, a cluster, the source: counted down, and the
    // invariant check (counted against kept) holds after each.
    for key in [
        ObjectKey::new(Kind::SyncGroup, "fleet", "app"),
        ObjectKey::new(Kind::Cluster, "fleet", "c000"),
        ObjectKey::new(Kind::Source, "fleet", "repo"),
    ] {
        state.apply(Command::DeleteSpec { key });
        state.check_invariants().expect("invariants hold");
    }
    assert_eq!(state.usage_of("fleet").objects, 3);
}
