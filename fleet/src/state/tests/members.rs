//! A replica stopping gracefully (`StopMember`) drains, and only its own return makes it Live.

use super::*;

#[test]
fn a_stopping_replica_drains_and_only_its_own_return_makes_it_live() {
    let mut state = fleet(30, "100%", "");
    let node = 1;
    assert!(!state.clusters_of(node).is_empty());
    state.apply(Command::StopMember {
        id: node,
        at: AT.into(),
    });
    state.check_invariants().unwrap();
    let member = &state.members[&node];
    assert_eq!(member.state, MemberState::Draining);
    assert!(member.stopping, "marked as a graceful stop");
    assert!(state.clusters_of(node).is_empty(), "its clusters moved");

    // Back: live again, with a share, and no longer stopping.
    state.apply(Command::SetMemberState {
        id: node,
        state: MemberState::Live,
        at: AT.into(),
    });
    assert!(!state.members[&node].stopping);
    assert!(!state.clusters_of(node).is_empty());

    // An operator's drain is not a graceful stop, and a stop does not turn it into one.
    state.apply(Command::SetMemberState {
        id: node,
        state: MemberState::Draining,
        at: AT.into(),
    });
    state.apply(Command::StopMember {
        id: node,
        at: AT.into(),
    });
    assert_eq!(state.members[&node].state, MemberState::Draining);
    assert!(!state.members[&node].stopping);
    state.check_invariants().unwrap();
}
