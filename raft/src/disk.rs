//! A simulated disk for the log database: in memory, with injected faults and power cuts.
//!
//! Production replicas keep their log in a file (`raft/log.redb`). Tests and the deterministic
//! simulation open it on a [`SimDisk`] instead ([`crate::RaftConfig::log_disk`]), which models
//! what a real disk may do to redb:
//!
//! ```text
//!   write / set_len ──► image (what reads see) + pending (not yet durable)
//!   sync_data ────────► pending becomes durable        (or fails, when a fault is armed)
//!   crash(seed) ──────► a new disk: durable + any subset of pending, the last write torn
//! ```
//!
//! A crash keeps every write that a successful `sync_data` covered, and an arbitrary subset of
//! the later ones, in any order, one of them cut short: the page cache of an operating system
//! that lost power. redb's commit protocol (checksummed commit slots) must recover the last
//! complete transaction from any such image, and the log store must never acknowledge an entry
//! before a sync covered it; `raft/tests/crash.rs` checks both.

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

/// One write not yet covered by a sync.
#[derive(Clone, Debug)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Default)]
struct DiskState {
    /// What reads see: every write so far.
    image: Vec<u8>,
    /// What survives a crash for certain: the image at the last successful sync.
    durable: Vec<u8>,
    /// Writes since the last successful sync, in order.
    pending: Vec<Pending>,
    /// Fail this many upcoming syncs (each failure leaves the pending writes pending).
    failing_syncs: u32,
    /// Cut the next write short after this many bytes and fail it.
    short_write: Option<usize>,
    /// Successful syncs so far.
    syncs: u64,
    /// Writes so far (failed ones included).
    writes: u64,
    /// Cut the power at the write with this number: it and everything after fail.
    power_cut_at: Option<u64>,
}

impl DiskState {
    fn powered(&self) -> Result<(), io::Error> {
        match self.power_cut_at {
            Some(at) if self.writes >= at => Err(io::Error::other("the power is cut")),
            _ => Ok(()),
        }
    }
}

/// An in-memory disk shared by its handles (cheap to clone; clones are the same disk).
#[derive(Clone, Default)]
pub struct SimDisk {
    state: Arc<Mutex<DiskState>>,
}

impl fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("SimDisk")
            .field("bytes", &state.image.len())
            .field("pending_writes", &state.pending.len())
            .field("syncs", &state.syncs)
            .field("writes", &state.writes)
            .finish()
    }
}

impl SimDisk {
    /// An empty disk.
    pub fn new() -> SimDisk {
        SimDisk::default()
    }

    fn lock(&self) -> MutexGuard<'_, DiskState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes the next `count` syncs fail with an I/O error (a failing fsync).
    pub fn fail_syncs(&self, count: u32) {
        self.lock().failing_syncs = count;
    }

    /// Makes the next write persist only its first `bytes` bytes and fail (a short write).
    pub fn short_write(&self, bytes: usize) {
        self.lock().short_write = Some(bytes);
    }

    /// Cuts the power in the middle of the `writes`-th write from now: that write and every
    /// later operation fail, and [`SimDisk::crash`] then yields what the cut left behind. Unlike
    /// calling `crash` from outside, this lands inside a transaction, with writes in flight.
    pub fn cut_power_after(&self, writes: u64) {
        let mut state = self.lock();
        state.power_cut_at = Some(state.writes + writes.max(1));
    }

    /// Whether the power was cut ([`SimDisk::cut_power_after`]).
    pub fn power_is_cut(&self) -> bool {
        self.lock().powered().is_err()
    }

    /// Successful syncs so far.
    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }

    /// Writes not yet covered by a sync.
    pub fn pending_writes(&self) -> usize {
        self.lock().pending.len()
    }

    /// The disk as it would be found after a power cut now: every synced write, and of the
    /// writes since, a subset chosen by `seed` (in any order), one of them torn. The original
    /// disk is left as it is.
    pub fn crash(&self, seed: u64) -> SimDisk {
        let state = self.lock();
        let mut rng = SplitMix64(seed);
        let mut image = state.durable.clone();
        let torn = if state.pending.is_empty() {
            None
        } else {
            Some(rng.below(state.pending.len() as u64) as usize)
        };
        for (index, pending) in state.pending.iter().enumerate() {
            let keep = rng.below(2) == 0;
            match pending {
                Pending::SetLen(len) => {
                    if keep {
                        image.resize(*len as usize, 0);
                    }
                }
                Pending::Write { offset, data } if Some(index) == torn => {
                    let cut = rng.below(data.len() as u64 + 1) as usize;
                    write_at(&mut image, *offset, &data[..cut]);
                }
                Pending::Write { offset, data } => {
                    if keep {
                        write_at(&mut image, *offset, data);
                    }
                }
            }
        }
        SimDisk {
            state: Arc::new(Mutex::new(DiskState {
                durable: image.clone(),
                image,
                ..DiskState::default()
            })),
        }
    }

    /// The redb storage backend on this disk.
    pub fn backend(&self) -> SimBackend {
        SimBackend { disk: self.clone() }
    }
}

fn write_at(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let offset = offset as usize;
    let end = offset + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[offset..end].copy_from_slice(data);
}

/// redb's view of a [`SimDisk`].
#[derive(Debug)]
pub struct SimBackend {
    disk: SimDisk,
}

impl redb::StorageBackend for SimBackend {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.disk.lock().image.len() as u64)
    }

    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, io::Error> {
        let state = self.disk.lock();
        let start = offset as usize;
        let end = start
            .checked_add(len)
            .filter(|end| *end <= state.image.len());
        match end {
            Some(end) => Ok(state.image[start..end].to_vec()),
            None => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "read of {len} bytes at {offset} past the end ({})",
                    state.image.len()
                ),
            )),
        }
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut state = self.disk.lock();
        state.powered()?;
        state.image.resize(len as usize, 0);
        state.pending.push(Pending::SetLen(len));
        Ok(())
    }

    fn sync_data(&self, _eventual: bool) -> Result<(), io::Error> {
        let mut state = self.disk.lock();
        state.powered()?;
        if state.failing_syncs > 0 {
            state.failing_syncs -= 1;
            return Err(io::Error::other("injected fsync failure"));
        }
        // Apply the pending writes to the durable image (cheaper than copying the image).
        let pending = std::mem::take(&mut state.pending);
        for write in pending {
            match write {
                Pending::Write { offset, data } => write_at(&mut state.durable, offset, &data),
                Pending::SetLen(len) => state.durable.resize(len as usize, 0),
            }
        }
        state.syncs += 1;
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut state = self.disk.lock();
        state.powered()?;
        state.writes += 1;
        if state.powered().is_err() {
            // The write the power cut interrupts: pending, and a crash may keep any part of it.
            state.pending.push(Pending::Write {
                offset,
                data: data.to_vec(),
            });
            return Err(io::Error::other("the power is cut"));
        }
        if let Some(cut) = state.short_write.take() {
            let part = data[..cut.min(data.len())].to_vec();
            write_at(&mut state.image, offset, &part);
            state.pending.push(Pending::Write { offset, data: part });
            return Err(io::Error::other("injected short write"));
        }
        write_at(&mut state.image, offset, data);
        state.pending.push(Pending::Write {
            offset,
            data: data.to_vec(),
        });
        Ok(())
    }
}

/// A tiny seeded generator (SplitMix64): crash images depend on the seed alone.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`bound` > 0).
    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::StorageBackend as _;

    #[test]
    fn a_crash_keeps_synced_writes_and_only_some_later_ones() {
        let disk = SimDisk::new();
        let backend = disk.backend();
        backend.write(0, b"synced").expect("write");
        backend.sync_data(false).expect("sync");
        backend.write(0, b"LATER!").expect("write");
        let mut saw_old = false;
        let mut saw_new_or_torn = false;
        for seed in 0..64 {
            let crashed = disk.crash(seed).backend();
            let bytes = crashed.read(0, 6).expect("read");
            if bytes == b"synced" {
                saw_old = true;
            } else {
                saw_new_or_torn = true;
            }
        }
        assert!(saw_old && saw_new_or_torn);
        // The disk itself is unchanged by a crash image.
        assert_eq!(backend.read(0, 6).expect("read"), b"LATER!");
    }

    #[test]
    fn injected_faults_fail_once_each() {
        let disk = SimDisk::new();
        let backend = disk.backend();
        disk.fail_syncs(1);
        assert!(backend.sync_data(false).is_err());
        assert!(backend.sync_data(false).is_ok());
        disk.short_write(2);
        assert!(backend.write(0, b"abcd").is_err());
        assert_eq!(backend.read(0, 2).expect("read"), b"ab");
        assert!(backend.write(0, b"abcd").is_ok());
    }
}
