//! One installation per target: the identity, and an adoption recorded only when asked for.

use super::*;

#[test]
fn an_adoption_is_recorded_once_its_first_sync_succeeds_and_only_when_asked_for() {
    let mut state = fleet(2, "100%", "");
    let adopt = |state: &mut FleetState| {
        state.apply(Command::AdoptCluster {
            cluster: "fleet/c000".into(),
            at: AT.into(),
        })
    };
    assert!(
        matches!(adopt(&mut state), Outcome::Rejected { .. }),
        "no identity yet"
    );
    state.apply(Command::FormInstallation {
        id: "inst-aaaaaaaaaaaa".into(),
    });
    state.apply(Command::FormInstallation {
        id: "inst-bbbbbbbbbbbb".into(),
    });
    assert_eq!(state.installation.as_deref(), Some("inst-aaaaaaaaaaaa"));
    assert_eq!(adopt(&mut state), Outcome::Ok);
    assert!(state.clusters["fleet/c000"].adopt);
    let condition = |state: &FleetState, cluster: &str| {
        state.clusters[cluster]
            .object
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == ADOPTED_CONDITION))
            .map(|c| (c.status.clone(), c.reason.clone()))
    };
    assert_eq!(
        condition(&state, "fleet/c000"),
        Some(("False".into(), "Adopting".into()))
    );
    // Recovery adopts too, without asking: nothing is recorded for it.
    state.clusters.get_mut("fleet/c001").unwrap().adopt = true;
    resolve(&mut state, "main@sha1:aaa");
    sync_round(&mut state, "main@sha1:aaa", false);
    assert!(!state.clusters["fleet/c000"].adopt && !state.clusters["fleet/c001"].adopt);
    assert_eq!(
        condition(&state, "fleet/c000"),
        Some(("True".into(), "TakenOver".into()))
    );
    assert_eq!(condition(&state, "fleet/c001"), None);
    state.check_invariants().unwrap();
}
