//! What one watch of the management cluster covers: a kind, in one namespace or all (and the
//! Cluster API watch). A leaf module, so that the mirror and the comparison both use it.

use fleet::manifest::{Kind, ObjectKey};

/// What a watch stream covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Scope {
    pub kind: Kind,
    /// `None`: every namespace.
    pub namespace: Option<String>,
    /// The Cluster API `Cluster` watch (kind `Cluster`).
    pub capi: bool,
}

impl Scope {
    pub(crate) fn covers(&self, key: &ObjectKey) -> bool {
        key.kind == self.kind
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| *ns == key.namespace)
    }
}
