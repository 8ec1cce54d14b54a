//! Events as controllers record them: kube-runtime's `Recorder` writes `events.k8s.io/v1`
//! Events (a new Event, then a series on repeats), and `kubectl get events`-style lists read
//! them back, filtered by the object they concern.

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::common::{client, start};

#[tokio::test]
async fn a_recorder_publishes_events_and_folds_repeats_into_a_series() {
    let sim = start(1).await;
    let client = client(&sim, "c0");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut object = ConfigMap::default();
    object.metadata.name = Some("subject".into());
    let created = config_maps
        .create(&PostParams::default(), &object)
        .await
        .expect("config map");
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: created.metadata.name.clone(),
        namespace: Some("default".into()),
        uid: created.metadata.uid.clone(),
        ..ObjectReference::default()
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "starling".into(),
            instance: Some("starling-1".into()),
        },
    );
    let event = Event {
        type_: EventType::Normal,
        reason: "RolloutStarted".into(),
        note: Some("rolling out v2".into()),
        action: "Rollout".into(),
        secondary: None,
    };
    recorder
        .publish(&event, &reference)
        .await
        .expect("published");
    recorder
        .publish(&event, &reference)
        .await
        .expect("repeated");
    let warning = Event {
        type_: EventType::Warning,
        reason: "RolloutHalted".into(),
        note: Some("halted by maxFailures".into()),
        action: "Rollout".into(),
        secondary: None,
    };
    recorder
        .publish(&warning, &reference)
        .await
        .expect("warning");

    let events: Api<K8sEvent> = Api::namespaced(client, "default");
    let listed = events
        .list(&ListParams::default())
        .await
        .expect("events listed");
    let started: Vec<_> = listed
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("RolloutStarted"))
        .collect();
    assert_eq!(
        started.len(),
        1,
        "a repeat becomes a series, not a new Event"
    );
    let first = started[0];
    assert_eq!(
        first.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("subject")
    );
    assert_eq!(first.reporting_controller.as_deref(), Some("starling"));
    assert_eq!(first.type_.as_deref(), Some("Normal"));
    assert_eq!(first.series.as_ref().map(|s| s.count), Some(2), "{first:?}");
    assert!(
        listed
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("RolloutHalted")
                && e.type_.as_deref() == Some("Warning"))
    );
}
