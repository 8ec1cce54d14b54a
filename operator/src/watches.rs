//! The watches of the management cluster, merged into one stream of mirror entries: the
//! starling.dev kinds (typed), Secrets by their metadata only, and Cluster API Clusters
//! (`--capi`, dynamic). Each event carries the index of its [`Scope`].

use fleet::manifest::{Kind, ObjectKey, Resource};
use fleet::resources::{Alert, Cluster, Provider, Source, Sync, SyncGroup};
use futures::stream::{self, BoxStream, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::Operator;
use super::mirror::{Item, Observation, Observed, Scope, Spec, normalized_meta};

type Events = BoxStream<'static, (usize, Result<Event<Observation>, watcher::Error>)>;

/// The watch scopes: every kind in each watched namespace, or in all.
pub(crate) fn scopes(operator: &Operator) -> Vec<Scope> {
    let namespaces: Vec<Option<String>> = if operator.namespaces.is_empty() {
        vec![None]
    } else {
        operator.namespaces.iter().cloned().map(Some).collect()
    };
    namespaces
        .into_iter()
        .flat_map(|namespace| {
            Kind::ALL
                .into_iter()
                .map(|kind| Scope {
                    kind,
                    namespace: namespace.clone(),
                    capi: false,
                })
                .chain(operator.capi.then(|| Scope {
                    kind: Kind::Cluster,
                    namespace: namespace.clone(),
                    capi: true,
                }))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn api<K>(operator: &Operator, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(namespace) => Api::namespaced(operator.client.clone(), namespace),
        None => Api::all(operator.client.clone()),
    }
}

/// One typed watch, its events mapped to mirror entries.
fn typed<K>(operator: &Operator, scope: &Scope, index: usize, wrap: fn(K) -> Resource) -> Events
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
    K::DynamicType: Default,
{
    let api = api::<K>(operator, scope.namespace.as_deref());
    watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .map(move |event| (index, event.map(|event| lift(event, |k| observe(wrap(k))))))
        .boxed()
}

/// Every watch, merged; the index of each event is its scope's in [`scopes`].
pub(crate) fn watches(operator: &Operator, scopes: &[Scope]) -> Events {
    let streams: Vec<Events> = scopes
        .iter()
        .enumerate()
        .map(|(index, scope)| match scope.kind {
            Kind::Cluster if scope.capi => {
                let resource = super::capi::api_resource();
                let api: Api<DynamicObject> = match scope.namespace.as_deref() {
                    Some(namespace) => {
                        Api::namespaced_with(operator.client.clone(), namespace, &resource)
                    }
                    None => Api::all_with(operator.client.clone(), &resource),
                };
                watcher::watcher(api, watcher::Config::default())
                    .default_backoff()
                    .map(move |event| {
                        (
                            index,
                            event.map(|event| lift(event, |object| observe_capi(&object))),
                        )
                    })
                    .boxed()
            }
            Kind::Source => typed::<Source>(operator, scope, index, Resource::Source),
            Kind::Cluster => typed::<Cluster>(operator, scope, index, Resource::Cluster),
            Kind::Sync => typed::<Sync>(operator, scope, index, Resource::Sync),
            Kind::SyncGroup => typed::<SyncGroup>(operator, scope, index, Resource::SyncGroup),
            Kind::Provider => typed::<Provider>(operator, scope, index, Resource::Provider),
            Kind::Alert => typed::<Alert>(operator, scope, index, Resource::Alert),
            Kind::Secret => {
                // Metadata only: the Secrets' data never enters memory unless needed.
                let api = api::<PartialObjectMeta<Secret>>(operator, scope.namespace.as_deref());
                watcher::watcher(api, watcher::Config::default())
                    .default_backoff()
                    .map(move |event| {
                        (
                            index,
                            event.map(|event| {
                                lift(event, |secret| observe_secret(&secret.metadata))
                            }),
                        )
                    })
                    .boxed()
            }
        })
        .collect();
    stream::select_all(streams).boxed()
}

fn lift<K, T>(event: Event<K>, f: impl Fn(K) -> T) -> Event<T> {
    match event {
        Event::Apply(object) => Event::Apply(f(object)),
        Event::Delete(object) => Event::Delete(f(object)),
        Event::Init => Event::Init,
        Event::InitApply(object) => Event::InitApply(f(object)),
        Event::InitDone => Event::InitDone,
    }
}

fn status_value<S: serde::Serialize>(status: Option<S>) -> Value {
    status
        .and_then(|status| serde_json::to_value(status).ok())
        .unwrap_or(Value::Null)
}

/// A Cluster made from a Cluster API `Cluster`, as the mirror keeps it.
pub(crate) fn observe_capi(object: &DynamicObject) -> Observation {
    let mut observation = observe(Resource::Cluster(super::capi::to_cluster(object)));
    let observed = &mut observation.observed;
    observed.capi = true;
    observed.generation = object.metadata.generation;
    observed.resource_version = object.metadata.resource_version.clone().unwrap_or_default();
    observed.uid = object.metadata.uid.clone();
    observation
}

/// A starling.dev object as the mirror keeps it (its digest), and the object normalized.
pub(crate) fn observe(mut resource: Resource) -> Observation {
    let meta = resource.metadata().clone();
    let status = match &mut resource {
        Resource::Source(object) => status_value(object.status.take()),
        Resource::Cluster(object) => status_value(object.status.take()),
        Resource::Sync(object) => status_value(object.status.take()),
        Resource::SyncGroup(object) => status_value(object.status.take()),
        Resource::Provider(object) => status_value(object.status.take()),
        Resource::Alert(object) => status_value(object.status.take()),
        Resource::Secret(_) => Value::Null,
    };
    *resource.metadata_mut() = normalized_meta(&meta);
    let item = match Spec::of(&resource) {
        Some(spec) => Item::Object { spec, status },
        None => Item::Secret,
    };
    Observation {
        key: resource.key(),
        observed: Observed {
            generation: meta.generation,
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
            deleting: meta.deletion_timestamp.as_ref().map(|t| t.0.to_string()),
            finalizers: meta.finalizers.clone().unwrap_or_default(),
            capi: false,
            item,
        },
        resource: Some(Box::new(resource)),
    }
}

fn observe_secret(meta: &ObjectMeta) -> Observation {
    Observation {
        key: ObjectKey::new(
            Kind::Secret,
            meta.namespace.clone().unwrap_or_else(|| "default".into()),
            meta.name.clone().unwrap_or_default(),
        ),
        observed: Observed {
            generation: None,
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
            deleting: None,
            finalizers: Vec::new(),
            capi: false,
            item: Item::Secret,
        },
        resource: None,
    }
}

/// A watch error that says the resource is not served (404).
pub(crate) fn not_served(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(response))
        | watcher::Error::WatchStartFailed(kube::Error::Api(response))
        | watcher::Error::WatchFailed(kube::Error::Api(response)) => response.code == 404,
        _ => false,
    }
}
