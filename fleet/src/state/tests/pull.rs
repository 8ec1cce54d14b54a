//! Pull clusters registered by their agents, decided in the state: one agent wins a cluster,
//! and a registration keeps what the agent does not own. Regression: the API read the claim,
//! cloned the stored Cluster and proposed an unconditional upsert of the copy, so a hold
//! committed in between was undone, and two agents claiming one cluster were both told OK.

use super::*;
use crate::state::{AGENT_ANNOTATION, AGENT_LABELS_ANNOTATION, RegisterPolicy, RegisterRefusal};

const STANDALONE: RegisterPolicy = RegisterPolicy {
    may_create: true,
    must_be_named: false,
};

fn token(state: &mut FleetState, id: &str) {
    state.apply(Command::CreateToken {
        id: id.into(),
        entry: crate::state::TokenEntry {
            digest: String::new(),
            role: crate::state::Role::Agent,
            tenants: vec!["fleet".into()],
            description: String::new(),
            created: String::new(),
            expires: None,
            last_used: None,
        },
    });
}

fn register(state: &mut FleetState, agent: &str, labels: &[(&str, &str)]) -> Outcome {
    state.apply(Command::RegisterPullCluster {
        cluster: "fleet/edge".into(),
        agent: agent.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        policy: STANDALONE,
        at: AT.into(),
    })
}

fn edge(state: &FleetState) -> crate::resources::Cluster {
    state.clusters["fleet/edge"].cluster()
}

#[test]
fn the_first_agent_wins_and_the_second_is_refused_until_its_token_goes() {
    let mut state = fleet(0, "1", "");
    token(&mut state, "a");
    token(&mut state, "b");
    assert_eq!(
        register(&mut state, "token a", &[("site", "lyon")]),
        Outcome::Registered {
            created: true,
            changed: true
        }
    );
    match register(&mut state, "token b", &[]) {
        Outcome::RegisterRefused {
            refusal: RegisterRefusal::HeldByAnother { holder, .. },
        } => assert_eq!(holder, "token a"),
        other => panic!("a second agent was let in: {other:?}"),
    }
    // Again by its holder: nothing changes.
    assert_eq!(
        register(&mut state, "token a", &[("site", "lyon")]),
        Outcome::Registered {
            created: false,
            changed: false
        }
    );
    state.apply(Command::RevokeToken { id: "a".into() });
    assert!(matches!(
        register(&mut state, "token b", &[]),
        Outcome::Registered { .. }
    ));
    assert_eq!(state.pull_claim("fleet/edge"), Some("token b"));
    state.check_invariants().unwrap();
}

#[test]
fn a_registration_keeps_the_hold_the_users_labels_and_the_generation() {
    let mut state = fleet(0, "1", "");
    token(&mut state, "a");
    register(&mut state, "token a", &[("site", "lyon"), ("zone", "z1")]);
    let generation = edge(&state).metadata.generation;
    state.apply(Command::HoldCluster {
        cluster: "fleet/edge".into(),
        hold: true,
        at: AT.into(),
    });
    // The user labels the cluster with `apply`, which keeps the agent's claim and labels.
    let mut object = edge(&state);
    object.metadata.annotations = None;
    object.metadata.generation = None;
    object.metadata.labels = Some([("team".to_string(), "ops".to_string())].into());
    state.apply(Command::ApplySpec {
        resource: Box::new(Resource::Cluster(object)),
        at: AT.into(),
        quota: None,
    });
    assert_eq!(state.pull_claim("fleet/edge"), Some("token a"));
    // The agent now sends `team` too and stops sending `zone`.
    register(
        &mut state,
        "token a",
        &[("site", "paris"), ("team", "edge")],
    );
    let after = edge(&state);
    assert!(after.spec.hold, "the hold was undone");
    assert_eq!(after.metadata.generation, generation.map(|g| g + 1));
    let labels = after.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("team").map(String::as_str), Some("ops"));
    assert_eq!(labels.get("site").map(String::as_str), Some("paris"));
    assert!(!labels.contains_key("zone"), "{labels:?}");
    let annotations = after.metadata.annotations.unwrap_or_default();
    assert_eq!(annotations[AGENT_ANNOTATION], "token a");
    assert_eq!(annotations[AGENT_LABELS_ANNOTATION], "site");
}

#[test]
fn operator_mode_registers_nothing_new_and_needs_a_named_agent() {
    let mut state = fleet(0, "1", "");
    token(&mut state, "a");
    let operator = RegisterPolicy {
        may_create: false,
        must_be_named: true,
    };
    let outcome = state.apply(Command::RegisterPullCluster {
        cluster: "fleet/edge".into(),
        agent: "token a".into(),
        labels: Default::default(),
        policy: operator,
        at: AT.into(),
    });
    assert!(
        matches!(
            outcome,
            Outcome::RegisterRefused {
                refusal: RegisterRefusal::NotFound { .. }
            }
        ),
        "{outcome:?}"
    );
    upsert(
        &mut state,
        "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: edge\n  namespace: fleet\nspec:\n  mode: pull\n",
    );
    assert!(matches!(
        state.check_pull_claim("fleet/edge", "token a", true),
        Err(RegisterRefusal::Unnamed { .. })
    ));
    assert!(matches!(
        state.check_pull_claim("fleet/c000", "token a", false),
        Err(RegisterRefusal::NotFound { .. })
    ));
}
