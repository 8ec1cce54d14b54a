//! The state's snapshot encoding, shared by Raft snapshots and `starling export`:
//! `{"format": N, "state": …}` as JSON, gzip-compressed for Raft snapshots.
//!
//! ```text
//!   write_snapshot(writer)  state ──serde_json──► gzip ──► writer   (streamed: the JSON is
//!                                                                    never held whole)
//!   encode_snapshot()       state ──serde_json──► Vec               (plain: backups, fuzzing)
//!   decode_snapshot(bytes)  gzip (1f 8b) or plain JSON ──► format checked first ──► state
//! ```
//!
//! Decoding reads the envelope's `format` before the state and refuses formats this build does
//! not know, without building the rest. Compression is a container around the same document, so
//! the format number names the JSON; a payload that starts with the gzip magic is decompressed
//! as it is read.

use std::fmt;
use std::io::{BufReader, BufWriter, Write};

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{FleetState, Key};
use crate::resources::SyncTemplate;

/// The format version of [`FleetState::encode_snapshot`].
pub const SNAPSHOT_FORMAT: u32 = 1;

/// The two bytes every gzip stream starts with (RFC 1952); no JSON document does.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// A snapshot that cannot be decoded.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot format {found} is not supported (this build reads format {supported})")]
    UnsupportedFormat { found: u32, supported: u32 },
    #[error("snapshot is corrupt: {0}")]
    Corrupt(#[from] serde_json::Error),
    #[error("snapshot could not be written: {0}")]
    Io(#[from] std::io::Error),
    #[error("snapshot has no format")]
    MissingFormat,
    #[error("snapshot has no state")]
    MissingState,
}

#[derive(Serialize)]
struct SnapshotOut<'a> {
    format: u32,
    state: &'a FleetState,
}

/// The envelope as read: the state, or the unsupported format found before it.
enum Envelope {
    State(Option<u32>, Box<FleetState>),
    Unsupported(u32),
    Empty(Option<u32>),
}

impl<'de> Deserialize<'de> for Envelope {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Envelope, D::Error> {
        deserializer.deserialize_map(EnvelopeVisitor)
    }
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a snapshot envelope {\"format\": N, \"state\": …}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope, A::Error> {
        let mut format = None;
        let mut state = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "format" => {
                    let found: u32 = map.next_value()?;
                    if found != SNAPSHOT_FORMAT {
                        // Skip the rest unbuilt: it is in a schema this build does not know.
                        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                        return Ok(Envelope::Unsupported(found));
                    }
                    format = Some(found);
                }
                "state" => state = Some(Box::new(map.next_value::<FleetState>()?)),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(match state {
            Some(state) => Envelope::State(format, state),
            None => Envelope::Empty(format),
        })
    }
}

impl FleetState {
    /// Serialises the state with its format version as plain JSON (`starling export`).
    pub fn encode_snapshot(&self) -> Vec<u8> {
        // Serialising plain data with string keys into memory cannot fail.
        serde_json::to_vec(&SnapshotOut {
            format: SNAPSHOT_FORMAT,
            state: self,
        })
        .unwrap_or_default()
    }

    /// Streams the state, with its format version, gzip-compressed into `writer` (a Raft
    /// snapshot file): the JSON is compressed as it is produced and never held whole. Returns
    /// the writer, flushed.
    pub fn write_snapshot<W: Write>(&self, writer: W) -> Result<W, SnapshotError> {
        // Fast compression: the documents are repetitive (one Sync per cluster, alike), so even
        // the fastest level shrinks them several times, at a small share of the encoding's CPU.
        let gzip = flate2::write::GzEncoder::new(writer, flate2::Compression::fast());
        // serde_json writes in small pieces; the deflater is fed in larger ones.
        let mut buffered = BufWriter::with_capacity(64 * 1024, gzip);
        serde_json::to_writer(
            &mut buffered,
            &SnapshotOut {
                format: SNAPSHOT_FORMAT,
                state: self,
            },
        )?;
        let gzip = buffered.into_inner().map_err(|error| error.into_error())?;
        let mut writer = gzip.finish()?;
        writer.flush()?;
        Ok(writer)
    }

    /// Restores a state from [`FleetState::write_snapshot`] or [`FleetState::encode_snapshot`]
    /// output.
    pub fn decode_snapshot(bytes: &[u8]) -> Result<FleetState, SnapshotError> {
        let mut state = if bytes.starts_with(&GZIP_MAGIC) {
            let reader = BufReader::new(flate2::read::GzDecoder::new(bytes));
            read_envelope(serde_json::from_reader(reader))?
        } else {
            read_envelope(serde_json::from_slice(bytes))?
        };
        state.usage = state.count_usage();
        state.actionable_by_owner = state.actionable_by_owner_from_scratch();
        state.share_templates();
        state.share_inventories();
        state.share_strings();
        Ok(state)
    }

    /// Makes each generated Sync share its group's template again, as the state that wrote
    /// the snapshot did (decoding gives every Sync a template of its own: about 0.8 KB more per
    /// Sync).
    fn share_templates(&mut self) {
        let templates: BTreeMap<&str, &Arc<SyncTemplate>> = self
            .groups
            .iter()
            .map(|(key, group)| (key.as_str(), &group.object.spec.template))
            .collect();
        let unshared: Vec<(Key, Arc<SyncTemplate>)> = self
            .syncs
            .iter()
            .filter_map(|(key, entry)| {
                let template = templates.get(entry.group.as_deref()?)?;
                let own = &entry.object.spec.template;
                (!Arc::ptr_eq(template, own) && ***template == **own)
                    .then(|| (key.clone(), Arc::clone(template)))
            })
            .collect();
        for (key, template) in unshared {
            if let Some(entry) = self.syncs.get_mut(&key) {
                entry.object.spec.template = template;
            }
        }
    }
}

fn read_envelope(parsed: Result<Envelope, serde_json::Error>) -> Result<FleetState, SnapshotError> {
    match parsed? {
        Envelope::Unsupported(found) => Err(SnapshotError::UnsupportedFormat {
            found,
            supported: SNAPSHOT_FORMAT,
        }),
        Envelope::State(Some(_), state) => Ok(*state),
        Envelope::State(None, _) | Envelope::Empty(None) => Err(SnapshotError::MissingFormat),
        Envelope::Empty(Some(_)) => Err(SnapshotError::MissingState),
    }
}
