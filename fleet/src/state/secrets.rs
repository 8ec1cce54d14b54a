//! [`StoredSecret`]: a Secret as the replicated state holds it: compact text, compressed.
//!
//! Every replica holds every kubeconfig and credential Secret of the fleet, one per cluster at
//! least, and a Secret is read only now and then (a sync's client, a source's credentials, a
//! view). As a `k8s_openapi` object a kubeconfig Secret took about 1.5 KB of heap: an
//! `ObjectMeta` of fifteen optional fields, and a map node of about 540 bytes for its one data
//! key. As JSON text it took the text (580 bytes for the token kubeconfig of the benches). A
//! kubeconfig is repetitive text (the cluster's name five times), so the state keeps the
//! Secret's JSON, with the values of `data` as raw bytes rather than base64, deflated: 283
//! bytes for that kubeconfig. Certificates are random bytes and do not shrink below their
//! size (a kubeconfig with its own 1,000-byte CA takes about 1.7 KB).
//!
//! Reads inflate and parse it again (a few microseconds for a kubeconfig); a write deflates it
//! (about 20 µs, most of it resetting the compressor's tables: one compressor, kept for the
//! process, serves every write), which a snapshot install pays for every Secret: 0.3 s at
//! 10,000 clusters. Snapshots and backups see the Secret itself:
//! their encoding is unchanged.

use std::fmt;
use std::sync::{LazyLock, Mutex, PoisonError};

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use k8s_openapi::api::core::v1::Secret;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A Secret kept as its JSON text, deflated (see the module documentation).
#[derive(Clone, PartialEq, Eq)]
pub struct StoredSecret(Box<[u8]>);

// One compressor and one decompressor for the process, reset for each Secret: making one
// allocates tens of kilobytes (the compressor a third of a megabyte), which cost more than the
// work on a Secret of a few hundred bytes, and one per thread would keep that much per thread.
static DEFLATE: LazyLock<Mutex<Compress>> =
    LazyLock::new(|| Mutex::new(Compress::new(Compression::default(), false)));
static INFLATE: LazyLock<Mutex<Decompress>> = LazyLock::new(|| Mutex::new(Decompress::new(false)));

/// `text`, deflated (raw deflate, no header); `None` only if the compressor fails.
fn deflate(text: &[u8]) -> Option<Vec<u8>> {
    // A panic elsewhere cannot leave it half-used: it is reset first.
    let mut compress = DEFLATE.lock().unwrap_or_else(PoisonError::into_inner);
    compress.reset();
    let mut out = Vec::with_capacity(text.len() / 2 + 64);
    loop {
        let consumed = usize::try_from(compress.total_in()).ok()?;
        match compress.compress_vec(&text[consumed..], &mut out, FlushCompress::Finish) {
            Ok(Status::StreamEnd) => return Some(out),
            // It writes into the spare capacity only: room for more.
            Ok(_) => out.reserve(out.len().max(64)),
            Err(_) => return None,
        }
    }
}

/// The text `deflated` holds; `None` if it is not a whole raw-deflate stream.
fn inflate(deflated: &[u8]) -> Option<Vec<u8>> {
    let mut decompress = INFLATE.lock().unwrap_or_else(PoisonError::into_inner);
    decompress.reset(false);
    let mut out = Vec::with_capacity(deflated.len() * 3);
    loop {
        let consumed = usize::try_from(decompress.total_in()).ok()?;
        let before = decompress.total_out();
        match decompress.decompress_vec(&deflated[consumed..], &mut out, FlushDecompress::None) {
            Ok(Status::StreamEnd) => return Some(out),
            Ok(_) if out.len() < out.capacity() && decompress.total_out() == before => {
                // Room left and nothing came out: the stream is cut short.
                return None;
            }
            Ok(_) => out.reserve(out.len().max(64)),
            Err(_) => return None,
        }
    }
}

/// Appends `bytes` with its length before it (four bytes, little-endian).
fn put(plain: &mut Vec<u8>, bytes: &[u8]) {
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    plain.extend_from_slice(&len.to_le_bytes());
    plain.extend_from_slice(&bytes[..len as usize]);
}

/// Takes the next length-prefixed field off `plain`.
fn take<'a>(plain: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (len, rest) = plain.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
    let (field, rest) = (rest.get(..len)?, &rest[len..]);
    *plain = rest;
    Some(field)
}

/// The plain text of a stored Secret: its JSON without `data`, then a byte that says whether
/// it has `data`, then each data key and its value as raw bytes (not base64, which would hide
/// the value's repetitions from the compressor: a kubeconfig's certificates are base64
/// already, and base64 of base64 deflates poorly).
fn plain_text(secret: &Secret) -> Vec<u8> {
    let without_data = Secret {
        data: None,
        ..secret.clone()
    };
    // A Secret is plain data with string keys: serialising it cannot fail.
    let json = serde_json::to_vec(&without_data).unwrap_or_default();
    let mut plain = Vec::with_capacity(json.len() + 512);
    put(&mut plain, &json);
    plain.push(u8::from(secret.data.is_some()));
    for (key, value) in secret.data.iter().flatten() {
        put(&mut plain, key.as_bytes());
        put(&mut plain, &value.0);
    }
    plain
}

/// The Secret [`plain_text`] wrote; `None` if `plain` is not such a text.
fn from_plain_text(mut plain: &[u8]) -> Option<Secret> {
    let mut secret: Secret = serde_json::from_slice(take(&mut plain)?).ok()?;
    let (has_data, mut rest) = plain.split_first()?;
    if *has_data == 1 {
        let mut data = std::collections::BTreeMap::new();
        while !rest.is_empty() {
            let key = std::str::from_utf8(take(&mut rest)?).ok()?;
            let value = take(&mut rest)?;
            data.insert(key.to_owned(), k8s_openapi::ByteString(value.to_vec()));
        }
        secret.data = Some(data);
    }
    Some(secret)
}

impl StoredSecret {
    pub fn new(secret: &Secret) -> StoredSecret {
        // Deflating into a `Vec` does not fail.
        StoredSecret(
            deflate(&plain_text(secret))
                .unwrap_or_default()
                .into_boxed_slice(),
        )
    }

    /// The Secret, inflated and read from its text.
    pub fn secret(&self) -> Secret {
        // The bytes were written from a Secret by `new`; they always read back.
        inflate(&self.0)
            .and_then(|plain| from_plain_text(&plain))
            .unwrap_or_default()
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

        // A kubeconfig is kept in well under the bytes of its JSON text (about half, here).
        let name = "cluster-00042";
        let text = format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    server: https://127.0.0.1:6443/{name}\n  name: {name}\ncontexts:\n- context:\n    cluster: {name}\n    user: {name}\n  name: {name}\ncurrent-context: {name}\nkind: Config\nusers:\n- name: {name}\n  user:\n    token: abcdef\n"
        );
        let kubeconfig: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{name}-kubeconfig"), "namespace": "fleet"},
            "stringData": {"value": text.clone()},
        }))
        .unwrap();
        let compact = StoredSecret::new(&kubeconfig);
        let json = serde_json::to_string(&kubeconfig).unwrap().len();
        assert!(
            compact.stored_len() * 5 <= json * 3,
            "{} of {json}",
            compact.stored_len()
        );
        assert_eq!(compact.secret(), kubeconfig);
        // Given as `data` (base64 in JSON), the same kubeconfig takes no more: its bytes are
        // kept raw.
        let as_data = Secret {
            data: Some(
                [(
                    "value".to_string(),
                    k8s_openapi::ByteString(text.into_bytes()),
                )]
                .into(),
            ),
            string_data: None,
            ..kubeconfig.clone()
        };
        let compact_data = StoredSecret::new(&as_data);
        assert!(
            compact_data.stored_len() <= compact.stored_len() + 8,
            "{} against {}",
            compact_data.stored_len(),
            compact.stored_len()
        );
        assert_eq!(compact_data.secret(), as_data);
        // No `data` and an empty one stay apart.
        let empty = Secret {
            data: Some(Default::default()),
            ..Secret::default()
        };
        assert_eq!(StoredSecret::new(&empty).secret(), empty);
        assert_eq!(
            StoredSecret::new(&Secret::default()).secret(),
            Secret::default()
        );

        let debug = format!("{stored:?}");
        assert!(debug.contains("c-kubeconfig"), "{debug}");
        assert!(
            !debug.contains("hunter2") && !debug.contains("c2VjcmV0"),
            "{debug}"
        );
    }

    #[test]
    fn secrets_of_any_size_read_back() {
        // From one that deflates to a few bytes (far more output than input: inflated in
        // several steps) to one of random-looking bytes that does not shrink.
        let mut noise = 0x2545_f491_4f6c_dd1d_u64;
        let random: Vec<u8> = (0..50_000)
            .map(|_| {
                noise ^= noise << 13;
                noise ^= noise >> 7;
                noise ^= noise << 17;
                noise as u8
            })
            .collect();
        for size in [0, 10, 1_000, 9_900, 100_000] {
            let secret: Secret = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "a"},
                "stringData": {"value": "x".repeat(size)},
            }))
            .unwrap();
            let stored = StoredSecret::new(&secret);
            assert_eq!(stored.secret(), secret, "{size} bytes");
        }
        let secret = Secret {
            data: Some([("blob".to_string(), k8s_openapi::ByteString(random))].into()),
            ..Secret::default()
        };
        let stored = StoredSecret::new(&secret);
        assert!(stored.stored_len() > 50_000);
        assert_eq!(stored.secret(), secret);
    }
}
