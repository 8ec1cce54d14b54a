//! [`StoredSecret`]: a Secret as the replicated state holds it, as its compact JSON text,
//! compressed.
//!
//! Every replica holds every kubeconfig and credential Secret of the fleet, one per cluster at
//! least, and a Secret is read only now and then (a sync's client, a source's credentials, a
//! view). As a `k8s_openapi` object a kubeconfig Secret took about 1.5 KB of heap: an
//! `ObjectMeta` of fifteen optional fields, and a map node of about 540 bytes for its one data
//! key. As JSON text it took the text (580 bytes for the token kubeconfig of the benches), and
//! a kubeconfig is repetitive text (the cluster's name five times, base64 certificates), so
//! the text is kept deflated: 40–50% of it. Reads inflate and parse it again (a few
//! microseconds for a kubeconfig). Snapshots and backups see the Secret itself: the encoding
//! is unchanged.

use std::fmt;
use std::io::Write;

use flate2::Compression;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use k8s_openapi::api::core::v1::Secret;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A Secret kept as its JSON text, deflated (see the module documentation).
#[derive(Clone, PartialEq, Eq)]
pub struct StoredSecret(Box<[u8]>);

impl StoredSecret {
    pub fn new(secret: &Secret) -> StoredSecret {
        // A Secret is plain data with string keys, and writing into a `Vec` cannot fail: none
        // of these steps can fail.
        let text = serde_json::to_vec(secret).unwrap_or_default();
        let mut deflated = DeflateEncoder::new(Vec::new(), Compression::default());
        let _ = deflated.write_all(&text);
        StoredSecret(deflated.finish().unwrap_or_default().into_boxed_slice())
    }

    /// The Secret, inflated and parsed from its text.
    pub fn secret(&self) -> Secret {
        // The bytes were written from a Secret by `new`; they always read back.
        serde_json::from_reader(DeflateDecoder::new(&self.0[..])).unwrap_or_default()
    }

    /// The bytes kept: what the Secret costs every replica beyond a pointer.
    pub fn stored_len(&self) -> usize {
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
            .field("stored_bytes", &self.0.len())
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
        assert!(stored.stored_len() > 0);

        // A kubeconfig is kept in well under the bytes of its JSON text (half, here).
        let name = "cluster-00042";
        let kubeconfig = format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    server: https://127.0.0.1:6443/{name}\n  name: {name}\ncontexts:\n- context:\n    cluster: {name}\n    user: {name}\n  name: {name}\ncurrent-context: {name}\nkind: Config\nusers:\n- name: {name}\n  user:\n    token: abcdef\n"
        );
        let kubeconfig: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{name}-kubeconfig"), "namespace": "fleet"},
            "stringData": {"value": kubeconfig},
        }))
        .unwrap();
        let compact = StoredSecret::new(&kubeconfig);
        let text = serde_json::to_string(&kubeconfig).unwrap().len();
        assert!(
            compact.stored_len() * 2 <= text,
            "{} of {text}",
            compact.stored_len()
        );
        assert_eq!(compact.secret(), kubeconfig);

        let debug = format!("{stored:?}");
        assert!(debug.contains("c-kubeconfig"), "{debug}");
        assert!(
            !debug.contains("hunter2") && !debug.contains("c2VjcmV0"),
            "{debug}"
        );
    }
}
