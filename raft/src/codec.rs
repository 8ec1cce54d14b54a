//! Versioned encoding of everything this crate stores or sends: log entries, the vote and other
//! markers in redb, snapshot payloads, and the openraft messages inside gRPC payloads.
//!
//! A record is one format-version byte followed by the serde_json encoding of the value. A reader
//! rejects any other version with [`CodecError::UnsupportedVersion`] instead of guessing, so a
//! replica never misreads data written by a newer build.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The only record format this build writes and reads.
pub const FORMAT_VERSION: u8 = 1;

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("empty {what} record: no format version byte")]
    Empty { what: &'static str },
    #[error("{what} record has format version {found}; this build reads version {supported}")]
    UnsupportedVersion {
        what: &'static str,
        found: u8,
        supported: u8,
    },
    #[error("failed to encode {what}: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("failed to decode {what}: {source}")]
    Decode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// Encodes `value` as a versioned record; `what` names it in errors ("log entry", "vote").
pub fn encode<T: Serialize + ?Sized>(what: &'static str, value: &T) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(256);
    out.push(FORMAT_VERSION);
    serde_json::to_writer(&mut out, value).map_err(|source| CodecError::Encode { what, source })?;
    Ok(out)
}

/// Decodes a versioned record written by [`encode`].
pub fn decode<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T, CodecError> {
    let (&version, body) = bytes.split_first().ok_or(CodecError::Empty { what })?;
    if version != FORMAT_VERSION {
        return Err(CodecError::UnsupportedVersion {
            what,
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    serde_json::from_slice(body).map_err(|source| CodecError::Decode { what, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_the_value() {
        let bytes = encode("test", &vec![1u64, 2, 3]).expect("encode");
        assert_eq!(bytes[0], FORMAT_VERSION);
        let back: Vec<u64> = decode("test", &bytes).expect("decode");
        assert_eq!(back, vec![1, 2, 3]);
    }

    #[test]
    fn unknown_version_is_rejected_with_a_clear_error() {
        let mut bytes = encode("vote", &7u64).expect("encode");
        bytes[0] = 9;
        let error = decode::<u64>("vote", &bytes).expect_err("version 9 must be rejected");
        assert_eq!(
            error.to_string(),
            "vote record has format version 9; this build reads version 1"
        );
    }

    #[test]
    fn empty_and_garbled_records_are_errors() {
        assert!(matches!(
            decode::<u64>("entry", &[]),
            Err(CodecError::Empty { .. })
        ));
        assert!(matches!(
            decode::<u64>("entry", &[FORMAT_VERSION, b'{']),
            Err(CodecError::Decode { .. })
        ));
    }
}
