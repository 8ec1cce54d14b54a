//! The kinds Starling keeps and the identity of an object (`kind/namespace/name`), with the
//! names a user types for them (`starling get
//! sources|clusters|syncs|syncgroups|secrets|providers|alerts`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{DEFAULT_NAMESPACE, DocumentError};
use crate::resources::API_VERSION;

/// The kinds of object Starling keeps, in a stable order (the order of [`Ord`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Kind {
    Source,
    Cluster,
    Sync,
    SyncGroup,
    Secret,
    /// Where notifications go ([`crate::resources::Provider`]).
    Provider,
    /// Which events go to a Provider ([`crate::resources::Alert`]).
    Alert,
}

impl Kind {
    /// Every kind, in order.
    pub const ALL: [Kind; 7] = [
        Kind::Source,
        Kind::Cluster,
        Kind::Sync,
        Kind::SyncGroup,
        Kind::Secret,
        Kind::Provider,
        Kind::Alert,
    ];

    /// The kind as written in manifests (`SyncGroup`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Source => "Source",
            Kind::Cluster => "Cluster",
            Kind::Sync => "Sync",
            Kind::SyncGroup => "SyncGroup",
            Kind::Secret => "Secret",
            Kind::Provider => "Provider",
            Kind::Alert => "Alert",
        }
    }

    /// The lowercase plural of the API path and of `starling get` (`syncgroups`).
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Source => "sources",
            Kind::Cluster => "clusters",
            Kind::Sync => "syncs",
            Kind::SyncGroup => "syncgroups",
            Kind::Secret => "secrets",
            Kind::Provider => "providers",
            Kind::Alert => "alerts",
        }
    }

    /// The short name (`src`, `scl`, `ssync`, `sg`), as in the CRDs; none for Secret, and none
    /// for Provider and Alert, whose CRDs declare none (`kubectl get providers|alerts`, as
    /// with Flux's notification kinds, whose names they share).
    pub fn short_name(self) -> Option<&'static str> {
        match self {
            Kind::Source => Some("src"),
            Kind::Cluster => Some("scl"),
            Kind::Sync => Some("ssync"),
            Kind::SyncGroup => Some("sg"),
            Kind::Secret | Kind::Provider | Kind::Alert => None,
        }
    }

    /// The `apiVersion` manifests of this kind must have.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Secret => "v1",
            _ => API_VERSION,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Kind {
    type Err = DocumentError;

    /// Reads a kind, a plural, a singular or a short name, in any case, optionally followed by
    /// `.starling.dev` (`SyncGroup`, `syncgroups`, `sg`, `sources.starling.dev`).
    fn from_str(text: &str) -> Result<Kind, DocumentError> {
        let lower = text.to_ascii_lowercase();
        let bare = lower.strip_suffix(".starling.dev").unwrap_or(&lower);
        Kind::ALL
            .into_iter()
            .find(|kind| {
                bare == kind.as_str().to_ascii_lowercase()
                    || bare == kind.plural()
                    || Some(bare) == kind.short_name()
            })
            .ok_or_else(|| DocumentError::UnknownKind {
                kind: text.to_owned(),
            })
    }
}

/// The identity of an object: kind, namespace and name. Displays as `kind/namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectKey {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(kind: Kind, namespace: impl Into<String>, name: impl Into<String>) -> ObjectKey {
        ObjectKey {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

impl FromStr for ObjectKey {
    type Err = DocumentError;

    /// Reads `kind/namespace/name`, or `kind/name` in the default namespace.
    fn from_str(text: &str) -> Result<ObjectKey, DocumentError> {
        let parts: Vec<&str> = text.split('/').collect();
        let (kind, namespace, name) = match parts.as_slice() {
            [kind, name] => (*kind, DEFAULT_NAMESPACE, *name),
            [kind, namespace, name] => (*kind, *namespace, *name),
            _ => {
                return Err(DocumentError::BadKey {
                    key: text.to_owned(),
                });
            }
        };
        if namespace.is_empty() || name.is_empty() {
            return Err(DocumentError::BadKey {
                key: text.to_owned(),
            });
        }
        Ok(ObjectKey::new(kind.parse()?, namespace, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_from_every_name() {
        for (text, kind) in [
            ("sources", Kind::Source),
            ("Source", Kind::Source),
            ("src", Kind::Source),
            ("clusters", Kind::Cluster),
            ("scl", Kind::Cluster),
            ("sync", Kind::Sync),
            ("ssync", Kind::Sync),
            ("SYNCS", Kind::Sync),
            ("syncgroups", Kind::SyncGroup),
            ("sg", Kind::SyncGroup),
            ("syncgroups.starling.dev", Kind::SyncGroup),
            ("secret", Kind::Secret),
            ("secrets", Kind::Secret),
            ("providers", Kind::Provider),
            ("Provider", Kind::Provider),
            ("providers.starling.dev", Kind::Provider),
            ("alert", Kind::Alert),
            ("ALERTS", Kind::Alert),
        ] {
            assert_eq!(text.parse::<Kind>(), Ok(kind), "{text}");
        }
        let error = "pods".parse::<Kind>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown kind \"pods\" (expected Source, Cluster, Sync, SyncGroup, Secret, Provider or Alert)"
        );
    }

    #[test]
    fn object_keys_display_and_order() {
        let key = ObjectKey::new(Kind::SyncGroup, "default", "web");
        assert_eq!(key.to_string(), "SyncGroup/default/web");
        assert_eq!("sg/web".parse::<ObjectKey>().unwrap(), key);
        assert_eq!("SyncGroup/default/web".parse::<ObjectKey>().unwrap(), key);
        assert!("web".parse::<ObjectKey>().is_err());
        assert!(ObjectKey::new(Kind::Source, "z", "z") < ObjectKey::new(Kind::Cluster, "a", "a"));
    }
}
