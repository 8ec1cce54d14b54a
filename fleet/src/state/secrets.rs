//! [`StoredSecret`]: a Secret as the replicated state holds it, as its compact JSON text.
//!
//! Every replica holds every kubeconfig and credential Secret of the fleet, one per cluster at
//! least, and a Secret is read only now and then (a sync's client, a source's credentials, a
//! view). As a `k8s_openapi` object a kubeconfig Secret took about 1.5 KB of heap: an
//! `ObjectMeta` of fifteen optional fields, and a map node of about 540 bytes for its one data
//! key. As text it takes the text and a pointer. Reads parse it again (a few microseconds for a
//! kubeconfig). Snapshots and backups see the Secret itself: the encoding is unchanged.

use std::fmt;

use k8s_openapi::api::core::v1::Secret;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A Secret kept as its JSON text (see the module documentation).
#[derive(Clone, PartialEq, Eq)]
pub struct StoredSecret(Box<str>);

impl StoredSecret {
    pub fn new(secret: &Secret) -> StoredSecret {
        // A Secret is plain data with string keys: serialising it cannot fail.
        StoredSecret(serde_json::to_string(secret).unwrap_or_default().into())
    }

    /// The Secret, parsed from its text.
    pub fn secret(&self) -> Secret {
        // The text was written from a Secret by `new`; it always parses back.
        serde_json::from_str(&self.0).unwrap_or_default()
    }

    /// The bytes of the text: what the Secret costs every replica beyond a pointer.
    pub fn text_len(&self) -> usize {
        self.0.len()
    }
}

impl From<Secret> for StoredSecret {
    fn from(secret: Secret) -> StoredSecret {
        StoredSecret::new(&secret)
    }
}

impl fmt::Debug for StoredSecret {
    /// Names the Secret and its size, never its data.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secret = self.secret();
        f.debug_struct("StoredSecret")
            .field("namespace", &secret.metadata.namespace)
            .field("name", &secret.metadata.name)
            .field("bytes", &self.0.len())
            .finish()
    }
}

impl Serialize for StoredSecret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.secret().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for StoredSecret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<StoredSecret, D::Error> {
        Secret::deserialize(deserializer).map(StoredSecret::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_reads_back_as_it_was_stored_and_debug_shows_no_data() {
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "c-kubeconfig", "namespace": "fleet", "labels": {"a": "b"}},
            "data": {"value": "c2VjcmV0LXRva2Vu"},
            "stringData": {"token": "hunter2"},
            "type": "Opaque",
        }))
        .unwrap();
        let stored = StoredSecret::new(&secret);
        assert_eq!(stored.secret(), secret);
        let round: StoredSecret =
            serde_json::from_str(&serde_json::to_string(&stored).unwrap()).unwrap();
        assert_eq!(round, stored);
        let debug = format!("{stored:?}");
        assert!(debug.contains("c-kubeconfig"), "{debug}");
        assert!(
            !debug.contains("hunter2") && !debug.contains("c2VjcmV0"),
            "{debug}"
        );
    }
}
