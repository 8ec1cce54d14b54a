//! The order of writes: CRDs, then Namespaces, then other cluster-scoped objects, then
//! namespaced ones; inside each phase, kinds that others commonly refer to come first
//! (ServiceAccounts and ConfigMaps before the Deployments that mount them), then the render's
//! own order. Prune deletes in the reverse order, so a namespace goes after what it held and a
//! CRD after its custom resources.
//!
//! Pure functions only; the engine decides scope from discovery.

use fleet::resources::ObjectRef;

use crate::object::{is_crd, is_namespace};

/// The apply phases, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    Crds,
    Namespaces,
    ClusterScoped,
    Namespaced,
}

/// The phase of an object, given whether its kind is namespaced.
pub fn phase_of(object: &ObjectRef, namespaced: bool) -> Phase {
    if is_crd(object) {
        Phase::Crds
    } else if is_namespace(object) {
        Phase::Namespaces
    } else if namespaced {
        Phase::Namespaced
    } else {
        Phase::ClusterScoped
    }
}

/// The rank of a kind inside its phase: Helm's install order (kinds others depend on first:
/// ServiceAccounts and ConfigMaps before the Deployments that mount them); unknown kinds
/// (custom resources) come last.
pub fn kind_rank(kind: &str) -> usize {
    crate::render::object::install_rank(kind)
}

/// Sorts items into apply order, keeping the given order among equals.
pub fn sort_for_apply<T>(items: &mut [T], key: impl Fn(&T) -> (Phase, &str)) {
    items.sort_by_cached_key(|item| {
        let (phase, kind) = key(item);
        (phase, kind_rank(kind))
    });
}

/// Sorts items into prune order: the reverse of the apply order.
pub fn sort_for_prune<T>(items: &mut [T], key: impl Fn(&T) -> (Phase, &str)) {
    items.sort_by_cached_key(|item| {
        let (phase, kind) = key(item);
        std::cmp::Reverse((phase, kind_rank(kind)))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(api_version: &str, kind: &str, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: None,
            name: name.into(),
        }
    }

    fn namespaced(kind: &str) -> bool {
        !matches!(
            kind,
            "Namespace" | "CustomResourceDefinition" | "ClusterRole" | "Widget"
        )
    }

    #[test]
    fn crds_then_namespaces_then_cluster_scoped_then_namespaced() {
        let mut objects = vec![
            object("apps/v1", "Deployment", "web"),
            object("example.com/v1", "Gadget", "g"),
            object("v1", "ConfigMap", "config"),
            object("rbac.authorization.k8s.io/v1", "ClusterRole", "reader"),
            object("v1", "Namespace", "team"),
            object(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "gadgets.example.com",
            ),
            object("v1", "ServiceAccount", "web"),
            object("v1", "ConfigMap", "second"),
        ];
        sort_for_apply(&mut objects, |o| {
            (phase_of(o, namespaced(&o.kind)), o.kind.as_str())
        });
        let names: Vec<&str> = objects.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "gadgets.example.com",
                "team",
                "reader",
                "web",
                "config",
                "second",
                "web",
                "g"
            ]
        );
        assert_eq!(objects[3].kind, "ServiceAccount");
        sort_for_prune(&mut objects, |o| {
            (phase_of(o, namespaced(&o.kind)), o.kind.as_str())
        });
        assert_eq!(objects.first().map(|o| o.name.as_str()), Some("g"));
        assert_eq!(
            objects.last().map(|o| o.name.as_str()),
            Some("gadgets.example.com")
        );
    }

    #[test]
    fn a_kind_named_namespace_in_another_group_is_not_a_namespace() {
        let custom = object("example.com/v1", "Namespace", "n");
        assert_eq!(phase_of(&custom, true), Phase::Namespaced);
        let crd_lookalike = object("example.com/v1", "CustomResourceDefinition", "c");
        assert_eq!(phase_of(&crd_lookalike, false), Phase::ClusterScoped);
    }
}
