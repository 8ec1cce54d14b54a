//! The events a rollout queues for an Alert's Provider: started, progress by tenths,
//! complete, halted with the failing clusters and sync failures; the severity filter; the
//! queue's bound; and settling.

use super::*;
use crate::resources::EventSeverity;
use crate::state::notify::MAX_PENDING;

const PROVIDER: &str = "apiVersion: starling.dev/v1alpha1\nkind: Provider\nmetadata:\n  name: hook\n  namespace: fleet\nspec:\n  type: generic\n  address: http://127.0.0.1:9/hook\n";

fn alert(severity: &str) -> String {
    format!(
        "apiVersion: starling.dev/v1alpha1\nkind: Alert\nmetadata:\n  name: app\n  namespace: fleet\nspec:\n  providerRef:\n    name: hook\n  eventSeverity: {severity}\n  eventSources:\n    - kind: SyncGroup\n      name: app\n"
    )
}

/// The reasons queued for Provider `fleet/hook`, in order.
fn reasons(state: &FleetState) -> Vec<String> {
    state
        .notifications
        .get("fleet/hook")
        .map(|q| q.pending.iter().map(|e| e.reason.clone()).collect())
        .unwrap_or_default()
}

fn with_alert(clusters: usize, max_unavailable: &str, extra: &str, severity: &str) -> FleetState {
    let mut state = fleet(clusters, max_unavailable, extra);
    upsert(&mut state, PROVIDER);
    upsert(&mut state, &alert(severity));
    state
}

#[test]
fn a_rollout_queues_started_progress_by_tenths_and_complete() {
    let mut state = with_alert(20, "2", "", "info");
    assert!(reasons(&state).is_empty());
    resolve(
        &mut state,
        "main@sha1:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    );
    while sync_round(
        &mut state,
        "main@sha1:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        false,
    ) > 0
    {}
    let reasons = reasons(&state);
    assert_eq!(reasons.first().map(String::as_str), Some("RolloutStarted"));
    assert_eq!(reasons.last().map(String::as_str), Some("RolloutComplete"));
    let progress = reasons.iter().filter(|r| *r == "RolloutProgress").count();
    // Two clusters a round out of twenty: every tenth is a step, from 1/10 to 9/10.
    assert_eq!(progress, 9, "{reasons:?}");
    let queue = &state.notifications["fleet/hook"];
    let complete = queue.pending.back().unwrap();
    assert_eq!(complete.counts.as_ref().unwrap().total, 20);
    assert_eq!(complete.counts.as_ref().unwrap().updated, 20);
    assert_eq!(
        complete.revision.as_deref(),
        Some("main@sha1:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
    );
    // Numbered in order, without gaps.
    let ids: Vec<u64> = queue.pending.iter().map(|e| e.id).collect();
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
}

#[test]
fn a_halt_names_the_failing_clusters_and_errors_only_skips_progress() {
    let mut state = with_alert(6, "2", "    maxFailures: 1\n", "error");
    resolve(
        &mut state,
        "main@sha1:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
    );
    sync_round(
        &mut state,
        "main@sha1:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
        true,
    );
    let reasons = reasons(&state);
    assert!(
        !reasons
            .iter()
            .any(|r| r == "RolloutStarted" || r == "RolloutProgress"),
        "an errors-only Alert got info events: {reasons:?}"
    );
    assert!(reasons.iter().any(|r| r == "SyncFailed"), "{reasons:?}");
    let halted = state.notifications["fleet/hook"]
        .pending
        .iter()
        .find(|e| e.reason == "RolloutHalted")
        .unwrap_or_else(|| panic!("no halt: {reasons:?}"));
    assert_eq!(halted.severity, EventSeverity::Error);
    assert!(!halted.failing.is_empty());
    assert!(
        halted.failing.iter().all(|f| f.contains("timed out")),
        "{:?}",
        halted.failing
    );
}

#[test]
fn a_full_queue_drops_the_oldest_and_counts_it_and_settling_empties_it() {
    let mut state = with_alert(1, "1", "", "info");
    for n in 0..(MAX_PENDING as u32 + 5) {
        let event = crate::state::notify::Emit::new(
            "SourceRevision",
            EventSeverity::Info,
            "SyncGroup",
            "fleet",
            "app",
            format!("revision {n}"),
        );
        state.emit(event);
    }
    let queue = &state.notifications["fleet/hook"];
    assert_eq!(queue.pending.len(), MAX_PENDING);
    assert_eq!(queue.dropped, 5);
    assert_eq!(queue.pending.front().unwrap().message, "revision 5");
    let ids: Vec<u64> = queue.pending.iter().map(|e| e.id).collect();
    state.apply(Command::SettleNotifications {
        provider: "fleet/hook".into(),
        ids,
        error: None,
        at: AT.into(),
    });
    assert!(state.notifications["fleet/hook"].pending.is_empty());
    assert_eq!(state.notifications["fleet/hook"].dropped, 5);
    let alert = &state.alerts["fleet/app"].object;
    assert_eq!(
        alert
            .status
            .as_ref()
            .and_then(|s| s.last_sent_time.as_deref()),
        Some(AT)
    );
}

#[test]
fn a_failed_delivery_keeps_the_events_and_says_so_on_the_provider() {
    let mut state = with_alert(2, "1", "", "info");
    resolve(
        &mut state,
        "main@sha1:cccccccccccccccccccccccccccccccccccccccc",
    );
    let queued = state.notifications["fleet/hook"].pending.len();
    assert!(queued > 0);
    state.apply(Command::SettleNotifications {
        provider: "fleet/hook".into(),
        ids: Vec::new(),
        error: Some("the generic receiver answered 503: down".into()),
        at: AT.into(),
    });
    assert_eq!(state.notifications["fleet/hook"].pending.len(), queued);
    let ready = state.providers["fleet/hook"]
        .object
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .cloned()
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "DeliveryFailed")
    );
    assert!(ready.message.contains("503"));
}
