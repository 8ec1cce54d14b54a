//! Providers and Alerts as specs: stored and removed like the other kinds (metadata stamped by
//! [`super::specs`]), and their `Ready` condition decided here, from what the state holds:
//!
//! ```text
//!  Alert applied, Provider applied or deleted ─► Alert    Ready=False ProviderNotFound
//!                                                         Ready=True  ProviderFound
//!  Provider applied, Secret created or deleted ─► Provider Ready=False SecretNotFound
//!                                                         otherwise the last delivery's
//!                                                         (Delivered, DeliveryFailed), or
//!                                                         Ready=True Configured before any
//! ```
//!
//! A reference is always in the object's own namespace (`providerRef`, `secretRef` and
//! `certSecretRef` carry only a name): an Alert never reaches a Provider of another tenant, and
//! a Provider never reads another tenant's Secret. Neither needs the other to exist when it is
//! applied; its condition says what is missing until it comes.

use super::notify::{AlertEntry, ProviderEntry};
use super::specs::{object_key, set_condition, stamp_against};
use super::{ApplyResult, FleetState, Key, Outcome, key_of};
use crate::manifest::Kind;
use crate::resources::{Alert, Condition, Provider};

/// The condition type both kinds report.
pub const READY_CONDITION: &str = "Ready";
/// An Alert whose Provider the state does not hold.
pub const PROVIDER_NOT_FOUND: &str = "ProviderNotFound";
/// A Provider whose Secret (`secretRef` or `certSecretRef`) the state does not hold.
pub const SECRET_NOT_FOUND: &str = "SecretNotFound";

/// Reasons of a Provider's `Ready` that come from deliveries
/// ([`super::Command::SettleNotifications`]): kept while its Secrets are there.
const DELIVERY_REASONS: [&str; 2] = ["Delivered", "DeliveryFailed"];

fn namespace_of(key: &str) -> &str {
    key.split_once('/')
        .map_or("default", |(namespace, _)| namespace)
}

impl FleetState {
    pub(super) fn upsert_provider(&mut self, mut object: Provider, at: &str) -> Outcome {
        let key = object_key(&object.metadata);
        let existing = self.providers.get(&key);
        let stored = existing.map(|e| (&e.object.metadata, &e.object.spec));
        let result = stamp_against(&mut object.metadata, &object.spec, stored, self.revision);
        object.status = match result {
            ApplyResult::Unchanged => return Outcome::Applied(result),
            ApplyResult::Configured => existing.and_then(|e| e.object.status.clone()),
            ApplyResult::Created => None,
        };
        self.providers.insert(key.clone(), ProviderEntry { object });
        self.refresh_provider(&key, at);
        if result == ApplyResult::Created {
            self.refresh_alerts_of(&key, at);
        }
        Outcome::Applied(result)
    }

    pub(super) fn upsert_alert(&mut self, mut object: Alert, at: &str) -> Outcome {
        let key = object_key(&object.metadata);
        let existing = self.alerts.get(&key);
        let stored = existing.map(|e| (&e.object.metadata, &e.object.spec));
        let result = stamp_against(&mut object.metadata, &object.spec, stored, self.revision);
        object.status = match result {
            ApplyResult::Unchanged => return Outcome::Applied(result),
            ApplyResult::Configured => existing.and_then(|e| e.object.status.clone()),
            ApplyResult::Created => None,
        };
        self.alerts.insert(key.clone(), AlertEntry { object });
        self.refresh_alert(&key, at);
        Outcome::Applied(result)
    }

    /// Removes a Provider with what it had still to be sent; its Alerts say it is missing.
    pub(super) fn delete_provider(&mut self, key: &str) -> bool {
        self.uncharge(Kind::Provider, key);
        if self.providers.remove(key).is_none() {
            return false;
        }
        self.notifications.remove(key);
        let at = self.clock.clone();
        self.refresh_alerts_of(key, &at);
        true
    }

    /// Removes an Alert, and the notifications queued for it that were not sent yet.
    pub(super) fn delete_alert(&mut self, key: &str) -> bool {
        self.uncharge(Kind::Alert, key);
        let Some(entry) = self.alerts.remove(key) else {
            return false;
        };
        let provider = key_of(namespace_of(key), &entry.object.spec.provider_ref.name);
        if let Some(queue) = self.notifications.get_mut(&provider) {
            queue.pending.retain(|event| event.alert != key);
            if queue.pending.is_empty() && queue.dropped == 0 {
                self.notifications.remove(&provider);
            }
        }
        true
    }

    /// A Secret was created or deleted: the Providers of its namespace that name it say
    /// whether they have it now.
    pub(super) fn secret_appeared_or_went(&mut self, secret: &str, at: &str) {
        if self.providers.is_empty() {
            return;
        }
        for provider in self.providers_of_secret(secret) {
            self.refresh_provider(&provider, at);
        }
    }

    /// The Alerts of `provider`'s namespace that name it.
    pub(crate) fn alerts_of_provider(&self, provider: &str) -> Vec<Key> {
        let namespace = namespace_of(provider);
        let name = provider.split_once('/').map_or(provider, |(_, name)| name);
        let prefix = format!("{namespace}/");
        self.alerts
            .range_from(&prefix)
            .take_while(|(key, _)| key.starts_with(&prefix))
            .filter(|(_, entry)| entry.object.spec.provider_ref.name == name)
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// The Providers of `secret`'s namespace that name it.
    pub(crate) fn providers_of_secret(&self, secret: &str) -> Vec<Key> {
        let namespace = namespace_of(secret);
        let prefix = format!("{namespace}/");
        self.providers
            .range_from(&prefix)
            .take_while(|(key, _)| key.starts_with(&prefix))
            .filter(|(_, entry)| {
                provider_secrets(&entry.object).any(|(_, name)| key_of(namespace, name) == secret)
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    fn refresh_alerts_of(&mut self, provider: &str, at: &str) {
        for alert in self.alerts_of_provider(provider) {
            self.refresh_alert(&alert, at);
        }
    }

    /// Sets an Alert's `Ready`: whether the state holds its Provider.
    fn refresh_alert(&mut self, key: &str, at: &str) {
        let namespace = namespace_of(key);
        let Some(entry) = self.alerts.get(key) else {
            return;
        };
        let provider = &entry.object.spec.provider_ref.name;
        let found = self.providers.contains_key(&key_of(namespace, provider));
        let (reason, message) = if found {
            (
                "ProviderFound",
                format!("provider {provider} takes its events"),
            )
        } else {
            (
                PROVIDER_NOT_FOUND,
                format!(
                    "provider {provider} not found in namespace {namespace}: nothing is sent until it is applied"
                ),
            )
        };
        let Some(entry) = self.alerts.get_mut(key) else {
            return;
        };
        let generation = entry.object.metadata.generation;
        let status = entry.object.status.get_or_insert_with(Default::default);
        status.observed_generation = generation;
        set_ready(
            &mut status.conditions,
            found,
            reason,
            message,
            at,
            generation,
        );
    }

    /// Sets a Provider's `Ready`: `SecretNotFound` while a Secret it names is missing; else the
    /// last delivery's condition, or `Configured` before any.
    fn refresh_provider(&mut self, key: &str, at: &str) {
        let namespace = namespace_of(key);
        let Some(entry) = self.providers.get(key) else {
            return;
        };
        let missing: Vec<String> = provider_secrets(&entry.object)
            .filter(|(_, name)| !self.secrets.contains_key(&key_of(namespace, name)))
            .map(|(field, name)| format!("secret {name} ({field})"))
            .collect();
        let Some(entry) = self.providers.get_mut(key) else {
            return;
        };
        let generation = entry.object.metadata.generation;
        let status = entry.object.status.get_or_insert_with(Default::default);
        status.observed_generation = generation;
        if !missing.is_empty() {
            let message = format!(
                "{} not found in namespace {namespace}: nothing is sent until it is applied",
                missing.join(" and ")
            );
            set_ready(
                &mut status.conditions,
                false,
                SECRET_NOT_FOUND,
                message,
                at,
                generation,
            );
            return;
        }
        let delivered = status
            .conditions
            .iter()
            .any(|c| c.type_ == READY_CONDITION && DELIVERY_REASONS.contains(&c.reason.as_str()));
        if !delivered {
            set_ready(
                &mut status.conditions,
                true,
                "Configured",
                "nothing was sent yet".into(),
                at,
                generation,
            );
        }
    }
}

/// The Secrets a Provider names, with the field that names each.
fn provider_secrets(provider: &Provider) -> impl Iterator<Item = (&'static str, &str)> {
    let spec = &provider.spec;
    [
        ("spec.secretRef", spec.secret_ref.as_ref()),
        ("spec.certSecretRef", spec.cert_secret_ref.as_ref()),
    ]
    .into_iter()
    .filter_map(|(field, reference)| Some((field, reference?.name.as_str())))
}

/// [`set_condition`] of `Ready`, with the generation it was decided at.
fn set_ready(
    conditions: &mut Vec<Condition>,
    ready: bool,
    reason: &str,
    message: String,
    at: &str,
    generation: Option<i64>,
) {
    set_condition(conditions, READY_CONDITION, ready, reason, message, at);
    if let Some(condition) = conditions.iter_mut().find(|c| c.type_ == READY_CONDITION) {
        condition.observed_generation = generation;
    }
}
