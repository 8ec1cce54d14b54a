//! Providers and Alerts as specs: applied, read back and deleted like every kind; their `Ready`
//! says what they miss (an Alert's Provider, a Provider's Secret) and follows it as it comes
//! and goes; an Alert reaches only its own namespace's Provider and events.

use super::*;
use crate::resources::Condition;

fn provider_yaml(name: &str, namespace: &str, extra: &str) -> String {
    format!(
        "apiVersion: starling.dev/v1alpha1\nkind: Provider\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  type: slack\n{extra}"
    )
}

fn alert_yaml(name: &str, namespace: &str, provider: &str) -> String {
    format!(
        "apiVersion: starling.dev/v1alpha1\nkind: Alert\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  providerRef:\n    name: {provider}\n  eventSources:\n    - kind: \"*\"\n"
    )
}

fn secret_yaml(name: &str, namespace: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {namespace}\nstringData:\n  address: \"{value}\"\n"
    )
}

fn source_yaml(namespace: &str) -> String {
    SOURCE.replace("namespace: fleet", &format!("namespace: {namespace}"))
}

fn ready_of(state: &FleetState, key: &ObjectKey) -> Condition {
    let conditions = match state.get(key) {
        Some(Resource::Provider(provider)) => provider.status.unwrap_or_default().conditions,
        Some(Resource::Alert(alert)) => alert.status.unwrap_or_default().conditions,
        other => panic!("{key}: expected a Provider or an Alert, got {other:?}"),
    };
    conditions
        .into_iter()
        .find(|c| c.type_ == READY_CONDITION)
        .unwrap_or_else(|| panic!("{key} has no Ready condition"))
}

fn ready(state: &FleetState, key: &ObjectKey) -> (String, String) {
    let condition = ready_of(state, key);
    (condition.status, condition.reason)
}

fn pair(status: &str, reason: &str) -> (String, String) {
    (status.to_string(), reason.to_string())
}

fn delete(state: &mut FleetState, key: &ObjectKey) -> Outcome {
    state.apply(Command::DeleteSpec { key: key.clone() })
}

fn resolve_in(state: &mut FleetState, source: &str, commit: u32) {
    let outcome = state.apply(Command::SourceResolved {
        source: source.into(),
        revision: format!("main@sha1:{commit:040x}"),
        artifact: None,
        expected: ExpectedRevision::Any,
        inputs: Default::default(),
        at: AT.into(),
    });
    assert_eq!(outcome, Outcome::SourceRecorded { changed: true });
}

fn pending_for(state: &FleetState, provider: &str) -> Vec<(String, String)> {
    state
        .notifications
        .get(provider)
        .map(|queue| {
            queue
                .pending
                .iter()
                .map(|event| {
                    (
                        event.alert.clone(),
                        format!("{}/{}", event.namespace, event.name),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn providers_and_alerts_are_applied_read_back_and_deleted() {
    let mut state = FleetState::default();
    let provider = ObjectKey::new(Kind::Provider, "team-a", "chat");
    let alert = ObjectKey::new(Kind::Alert, "team-a", "rollouts");
    let created = upsert(&mut state, &provider_yaml("chat", "team-a", ""));
    assert_eq!(created, Outcome::Applied(ApplyResult::Created));
    let created = upsert(&mut state, &alert_yaml("rollouts", "team-a", "chat"));
    assert_eq!(created, Outcome::Applied(ApplyResult::Created));
    assert!(state.contains(&provider) && state.contains(&alert));
    state.check_invariants().expect("invariants hold");
    assert_eq!(state.usage_of("team-a").objects, 2);

    let Some(Resource::Provider(stored)) = state.get(&provider) else {
        panic!("the provider reads back");
    };
    assert_eq!(stored.spec.type_, crate::resources::ProviderType::Slack);
    assert_eq!(stored.metadata.generation, Some(1));
    assert_eq!(state.list(Kind::Provider, Some("team-a")).len(), 1);
    assert_eq!(state.list(Kind::Alert, None).len(), 1);
    assert!(state.list(Kind::Alert, Some("team-b")).is_empty());

    // Applied again as it is: nothing changes; with a new spec: the generation moves.
    let again = upsert(&mut state, &provider_yaml("chat", "team-a", ""));
    assert_eq!(again, Outcome::Applied(ApplyResult::Unchanged));
    let changed = upsert(
        &mut state,
        &provider_yaml("chat", "team-a", "  channel: deploys\n"),
    );
    assert_eq!(changed, Outcome::Applied(ApplyResult::Configured));
    let Some(Resource::Provider(stored)) = state.get(&provider) else {
        panic!("the provider reads back");
    };
    assert_eq!(stored.metadata.generation, Some(2));
    assert_eq!(stored.spec.channel.as_deref(), Some("deploys"));

    assert_eq!(
        delete(&mut state, &alert),
        Outcome::Deleted { existed: true }
    );
    assert_eq!(
        delete(&mut state, &provider),
        Outcome::Deleted { existed: true }
    );
    assert_eq!(
        delete(&mut state, &provider),
        Outcome::Deleted { existed: false }
    );
    assert!(state.get(&provider).is_none() && state.list(Kind::Alert, None).is_empty());
    assert_eq!(state.usage_of("team-a").objects, 0);
    state.check_invariants().expect("invariants hold");
}

#[test]
fn an_alert_is_not_ready_while_its_provider_is_missing() {
    let mut state = FleetState::default();
    let alert = ObjectKey::new(Kind::Alert, "team-a", "rollouts");
    upsert(&mut state, &alert_yaml("rollouts", "team-a", "chat"));
    assert_eq!(ready(&state, &alert), pair("False", PROVIDER_NOT_FOUND));
    assert!(
        ready_of(&state, &alert)
            .message
            .contains("provider chat not found in namespace team-a"),
        "{:?}",
        ready_of(&state, &alert)
    );

    upsert(&mut state, &provider_yaml("chat", "team-a", ""));
    assert_eq!(ready(&state, &alert), pair("True", "ProviderFound"));

    delete(
        &mut state,
        &ObjectKey::new(Kind::Provider, "team-a", "chat"),
    );
    assert_eq!(ready(&state, &alert), pair("False", PROVIDER_NOT_FOUND));
}

#[test]
fn a_provider_is_not_ready_while_its_secret_is_missing_and_never_shows_it() {
    let mut state = FleetState::default();
    let provider = ObjectKey::new(Kind::Provider, "team-a", "chat");
    upsert(
        &mut state,
        &provider_yaml("chat", "team-a", "  secretRef:\n    name: chat-webhook\n"),
    );
    assert_eq!(ready(&state, &provider), pair("False", SECRET_NOT_FOUND));
    assert!(
        ready_of(&state, &provider)
            .message
            .contains("secret chat-webhook (spec.secretRef) not found in namespace team-a")
    );

    // The Secret of another namespace is not its Secret.
    upsert(
        &mut state,
        &secret_yaml("chat-webhook", "team-b", "https://hooks.example.com/b"),
    );
    assert_eq!(ready(&state, &provider), pair("False", SECRET_NOT_FOUND));

    upsert(
        &mut state,
        &secret_yaml(
            "chat-webhook",
            "team-a",
            "https://hooks.example.com/T0/B0/hunter2",
        ),
    );
    assert_eq!(ready(&state, &provider), pair("True", "Configured"));
    let shown = serde_json::to_string(&state.get(&provider)).unwrap()
        + &serde_json::to_string(&state.list(Kind::Provider, None)).unwrap();
    assert!(!shown.contains("hunter2"), "{shown}");

    delete(
        &mut state,
        &ObjectKey::new(Kind::Secret, "team-a", "chat-webhook"),
    );
    assert_eq!(ready(&state, &provider), pair("False", SECRET_NOT_FOUND));
}

#[test]
fn a_provider_keeps_the_outcome_of_its_last_delivery_while_its_secret_is_there() {
    let mut state = FleetState::default();
    let provider = ObjectKey::new(Kind::Provider, "team-a", "chat");
    upsert(&mut state, &provider_yaml("chat", "team-a", ""));
    upsert(&mut state, &alert_yaml("rollouts", "team-a", "chat"));
    upsert(&mut state, &source_yaml("team-a"));
    resolve_in(&mut state, "team-a/repo", 1);
    let ids: Vec<u64> = state.notifications["team-a/chat"]
        .pending
        .iter()
        .map(|event| event.id)
        .collect();
    assert_eq!(ids.len(), 1);
    state.apply(Command::SettleNotifications {
        provider: "team-a/chat".into(),
        ids,
        error: Some("503 from hooks.example.com".into()),
        at: AT.into(),
    });
    assert_eq!(ready(&state, &provider), pair("False", "DeliveryFailed"));
    upsert(
        &mut state,
        &provider_yaml("chat", "team-a", "  channel: deploys\n"),
    );
    assert_eq!(ready(&state, &provider), pair("False", "DeliveryFailed"));
}

#[test]
fn an_alert_reaches_only_the_provider_of_its_own_namespace() {
    // providerRef has no namespace: a manifest naming one is refused...
    let foreign = alert_yaml("rollouts", "team-a", "chat").replace(
        "    name: chat\n",
        "    name: chat\n    namespace: team-b\n",
    );
    let error = crate::manifest::parse_manifests(&foreign).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("unknown field spec.providerRef.namespace"),
        "{error}"
    );
    // ...and read without the check, the namespace is dropped: the Provider of the same name
    // in team-b is not the Alert's.
    let mut state = FleetState::default();
    upsert(&mut state, &provider_yaml("chat", "team-b", ""));
    let parsed =
        crate::manifest::parse_manifests_with(&foreign, crate::manifest::FieldValidation::Ignore)
            .unwrap()
            .resources
            .remove(0);
    state.apply(Command::UpsertSpec {
        resource: Box::new(parsed),
        at: AT.into(),
    });
    let alert = ObjectKey::new(Kind::Alert, "team-a", "rollouts");
    assert_eq!(ready(&state, &alert), pair("False", PROVIDER_NOT_FOUND));

    upsert(&mut state, &source_yaml("team-a"));
    resolve_in(&mut state, "team-a/repo", 1);
    assert!(state.notifications.is_empty(), "{:?}", state.notifications);
}

#[test]
fn an_alert_sees_only_the_events_of_its_own_namespace() {
    let mut state = FleetState::default();
    for namespace in ["team-a", "team-b"] {
        upsert(&mut state, &provider_yaml("chat", namespace, ""));
        upsert(&mut state, &source_yaml(namespace));
    }
    upsert(&mut state, &alert_yaml("everything", "team-a", "chat"));

    // An event in team-b, where no Alert is: nothing is queued, for team-a least of all.
    resolve_in(&mut state, "team-b/repo", 1);
    assert!(state.notifications.is_empty(), "{:?}", state.notifications);

    // team-b gets an Alert of its own: its events go to its own Provider only.
    upsert(&mut state, &alert_yaml("everything", "team-b", "chat"));
    resolve_in(&mut state, "team-b/repo", 2);
    assert!(pending_for(&state, "team-a/chat").is_empty());
    assert_eq!(
        pending_for(&state, "team-b/chat"),
        [("team-b/everything".to_string(), "team-b/repo".to_string())]
    );

    resolve_in(&mut state, "team-a/repo", 1);
    assert_eq!(
        pending_for(&state, "team-a/chat"),
        [("team-a/everything".to_string(), "team-a/repo".to_string())]
    );

    // A deleted Alert's events are not sent; a deleted Provider's queue goes with it.
    delete(
        &mut state,
        &ObjectKey::new(Kind::Alert, "team-a", "everything"),
    );
    assert!(!state.notifications.contains_key("team-a/chat"));
    delete(
        &mut state,
        &ObjectKey::new(Kind::Provider, "team-b", "chat"),
    );
    assert!(state.notifications.is_empty(), "{:?}", state.notifications);
    state.check_invariants().expect("invariants hold");
}

#[test]
fn watchers_hear_of_the_alerts_and_providers_whose_readiness_moved() {
    let mut state = FleetState::default();
    upsert(&mut state, &alert_yaml("rollouts", "team-a", "chat"));
    upsert(&mut state, &alert_yaml("other", "team-a", "elsewhere"));
    let touched = |state: &mut FleetState, yaml: &str| {
        let command = Command::UpsertSpec {
            resource: Box::new(resource(yaml)),
            at: AT.into(),
        };
        let touch = Touch::of(state, &command);
        let outcome = state.apply(command);
        let mut keys = BTreeSet::new();
        state.touched(touch, &outcome, &mut keys);
        keys.into_iter().map(|k| k.to_string()).collect::<Vec<_>>()
    };
    assert_eq!(
        touched(
            &mut state,
            &provider_yaml("chat", "team-a", "  secretRef:\n    name: chat-webhook\n")
        ),
        ["Provider/team-a/chat", "Alert/team-a/rollouts"]
    );
    assert_eq!(
        touched(
            &mut state,
            &secret_yaml("chat-webhook", "team-a", "https://hooks.example.com/x")
        ),
        ["Secret/team-a/chat-webhook", "Provider/team-a/chat"]
    );
}

#[test]
fn providers_and_alerts_survive_a_snapshot() {
    let mut state = FleetState::default();
    upsert(&mut state, &provider_yaml("chat", "team-a", ""));
    upsert(&mut state, &alert_yaml("rollouts", "team-a", "chat"));
    let decoded = FleetState::decode_snapshot(&state.encode_snapshot()).expect("decodes");
    assert!(decoded.contains(&ObjectKey::new(Kind::Alert, "team-a", "rollouts")));
    assert_eq!(decoded.usage_of("team-a"), state.usage_of("team-a"));
    assert_eq!(
        ready(&decoded, &ObjectKey::new(Kind::Alert, "team-a", "rollouts")),
        pair("True", "ProviderFound")
    );
    decoded.check_invariants().expect("invariants hold");
}
