//! Equal inventories kept once: after results and after a snapshot.

use super::*;

/// Syncs that applied the same objects keep one copy of the list between them, after their
/// results and after a snapshot is decoded; a Sync that applied others keeps its own.
#[test]
fn equal_inventories_are_kept_once() {
    let mut state = fleet(6, "100%", "");
    resolve(&mut state, "main@sha1:aaa");
    let object = |name: &str| ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("demo".into()),
        name: name.into(),
    };
    let actionable: Vec<Key> = state.actionable.iter().cloned().collect();
    for (i, sync) in actionable.iter().enumerate() {
        let ticket = granted(begin(&mut state, sync, "main@sha1:aaa"));
        let name = if i == 0 { "other" } else { "web" };
        state.apply(Command::FinishSync {
            ticket: ticket.id,
            outcome: SyncOutcome::Succeeded {
                inventory: vec![object("config"), object(name)],
                health: ResourceStatus::Current,
                drift: None,
            },
            at: AT.into(),
        });
    }
    let shared = |state: &FleetState| {
        let inventories: Vec<crate::resources::Inventory> = actionable
            .iter()
            .map(|sync| state.syncs[sync].object.status.clone().unwrap().inventory)
            .collect();
        assert_eq!(inventories[0], vec![object("config"), object("other")]);
        assert_eq!(inventories[1], vec![object("config"), object("web")]);
        assert!(!inventories[0].shares(&inventories[1]));
        inventories[2..].iter().all(|i| i.shares(&inventories[1]))
    };
    assert!(shared(&state), "shared as the results are recorded");
    let restored = FleetState::decode_snapshot(&state.encode_snapshot()).unwrap();
    assert!(shared(&restored), "shared again after a snapshot");
    restored.check_invariants().unwrap();
}
