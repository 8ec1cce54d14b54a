//! Configuration of a replica's Raft instance, with defaults in one place and a `validate` that
//! rejects nonsense before anything is opened.
//!
//! Timing defaults aim at a new leader within about a second of losing one, on a loaded
//! two-core machine. In openraft 0.9 a follower that has seen a leader waits
//! `election_timeout_max` (the leader lease) plus a random election timeout in
//! `[election_timeout_min, election_timeout_max]` of silence before it campaigns: with the
//! defaults (heartbeat 100 ms, elections 400–800 ms) that is 1.2–1.6 s. `crate::campaign`
//! starts the first other voter's campaign as soon as the lease and one heartbeat have passed
//! (0.9 s), the next ones later by rank. The heartbeat interval is also openraft's
//! append-entries RPC timeout, which is why large appends are split
//! (`NetworkConfig::max_append_bytes`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use openraft::SnapshotPolicy;

use crate::disk::SimDisk;
use crate::error::OpenError;
use crate::log_writer::WriterMode;
use crate::network::client::NetworkConfig;
use crate::types::NodeId;

/// Everything [`crate::RaftNode::open`] needs.
#[derive(Clone, Debug)]
pub struct RaftConfig {
    /// This replica's id; must be unique in the group and stable across restarts.
    pub id: NodeId,
    /// Where the log (`raft/log.redb`) and snapshots (`raft/snapshots/`) live.
    pub data_dir: PathBuf,
    /// `host:port` the other replicas reach this replica's gRPC server at.
    pub advertise_addr: String,
    /// Name of the group, checked by nothing but shown in logs.
    pub cluster_name: String,
    pub heartbeat_interval: Duration,
    pub election_timeout_min: Duration,
    pub election_timeout_max: Duration,
    /// The longest leader lease (openraft's `election_timeout_max`) of any voter in the group,
    /// when the voters' settings differ; `None`: this replica's own. A follower whose leader
    /// fell silent campaigns once this and a heartbeat have passed (`crate::campaign`), when
    /// every voter grants votes again.
    pub longest_vote_lease: Option<Duration>,
    /// Build a snapshot after this many entries were applied since the last one.
    pub snapshot_after_entries: u64,
    /// Entries kept in the log behind the latest snapshot (lets slightly lagging peers catch up
    /// from the log instead of a snapshot).
    pub logs_kept_after_snapshot: u64,
    /// Most entries sent in one append-entries RPC.
    pub max_payload_entries: u64,
    /// Time allowed for one snapshot chunk to be sent and installed.
    pub install_snapshot_timeout: Duration,
    /// Size of one snapshot chunk on the wire.
    pub snapshot_chunk_bytes: u64,
    /// How long a forwarded write may take, including finding the leader.
    pub forward_timeout: Duration,
    /// Capacity of the broadcast of applied entries (see [`crate::StateReader::subscribe`]).
    pub event_capacity: usize,
    pub network: NetworkConfig,
    /// Keep the log on this simulated disk instead of `raft/log.redb` (tests and the
    /// deterministic simulation only: it lives in memory).
    pub log_disk: Option<SimDisk>,
    /// Where the log's writer runs: its own thread (production) or a task on the runtime (the
    /// deterministic simulation, with `log_disk`).
    pub log_writer: WriterMode,
}

impl RaftConfig {
    /// A configuration with the default timing and limits.
    pub fn new(
        id: NodeId,
        data_dir: impl Into<PathBuf>,
        advertise_addr: impl Into<String>,
    ) -> RaftConfig {
        RaftConfig {
            id,
            data_dir: data_dir.into(),
            advertise_addr: advertise_addr.into(),
            cluster_name: "starling".to_owned(),
            heartbeat_interval: Duration::from_millis(100),
            election_timeout_min: Duration::from_millis(400),
            election_timeout_max: Duration::from_millis(800),
            longest_vote_lease: None,
            snapshot_after_entries: 10_000,
            logs_kept_after_snapshot: 1_000,
            max_payload_entries: 256,
            install_snapshot_timeout: Duration::from_secs(10),
            snapshot_chunk_bytes: 4 * 1024 * 1024,
            forward_timeout: Duration::from_secs(5),
            event_capacity: 4096,
            network: NetworkConfig::default(),
            log_disk: None,
            log_writer: WriterMode::Thread,
        }
    }

    /// Stretches the timing for replicas up to `max_rtt` apart (replicas in several regions).
    ///
    /// openraft uses the heartbeat interval as the time-out of an append-entries request, so
    /// a round trip longer than it fails every replication: the heartbeat becomes twice the
    /// round trip (never less than the default), the election timeouts four and eight times
    /// the heartbeat. Up to 50 ms nothing changes.
    pub fn with_round_trip(mut self, max_rtt: Duration) -> RaftConfig {
        self.heartbeat_interval = self.heartbeat_interval.max(max_rtt * 2);
        self.election_timeout_min = self.election_timeout_min.max(self.heartbeat_interval * 4);
        self.election_timeout_max = self.election_timeout_max.max(self.election_timeout_min * 2);
        self
    }

    /// Directory holding this crate's files inside `data_dir`.
    pub fn raft_dir(&self) -> PathBuf {
        self.data_dir.join("raft")
    }

    pub(crate) fn log_path(&self) -> PathBuf {
        self.raft_dir().join("log.redb")
    }

    pub(crate) fn snapshot_dir(&self) -> PathBuf {
        self.raft_dir().join("snapshots")
    }

    /// Rejects settings openraft would refuse or that cannot work.
    pub fn validate(&self) -> Result<(), OpenError> {
        let fail = |message: String| Err(OpenError::Config(message));
        if self.advertise_addr.trim().is_empty() || !self.advertise_addr.contains(':') {
            return fail(format!(
                "advertise address {:?} must be host:port",
                self.advertise_addr
            ));
        }
        if self.data_dir.as_os_str().is_empty() {
            return fail("data directory must not be empty".into());
        }
        if self.heartbeat_interval.is_zero() {
            return fail("heartbeat interval must be positive".into());
        }
        if self.election_timeout_min <= self.heartbeat_interval {
            return fail(format!(
                "election timeout minimum {:?} must exceed the heartbeat interval {:?}",
                self.election_timeout_min, self.heartbeat_interval
            ));
        }
        if self.election_timeout_max <= self.election_timeout_min {
            return fail(format!(
                "election timeout maximum {:?} must exceed the minimum {:?}",
                self.election_timeout_max, self.election_timeout_min
            ));
        }
        if self
            .longest_vote_lease
            .is_some_and(|lease| lease < self.election_timeout_max)
        {
            return fail(format!(
                "the longest vote lease {:?} cannot be shorter than this replica's own {:?}",
                self.longest_vote_lease, self.election_timeout_max
            ));
        }
        if self.snapshot_after_entries == 0 {
            return fail("snapshot_after_entries must be positive".into());
        }
        if self.max_payload_entries == 0 || self.snapshot_chunk_bytes == 0 {
            return fail("max_payload_entries and snapshot_chunk_bytes must be positive".into());
        }
        if self.snapshot_chunk_bytes >= self.network.max_message_bytes as u64 {
            return fail(format!(
                "snapshot chunk of {} bytes does not fit in a {}-byte message",
                self.snapshot_chunk_bytes, self.network.max_message_bytes
            ));
        }
        if self.network.max_append_bytes == 0
            || self.network.max_append_bytes >= self.network.max_message_bytes
        {
            return fail(format!(
                "max_append_bytes {} must be positive and below the message limit {}",
                self.network.max_append_bytes, self.network.max_message_bytes
            ));
        }
        if self.forward_timeout.is_zero() || self.install_snapshot_timeout.is_zero() {
            return fail("forward and install-snapshot timeouts must be positive".into());
        }
        self.openraft_config().map(|_| ())
    }

    pub(crate) fn openraft_config(&self) -> Result<openraft::Config, OpenError> {
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let config = openraft::Config {
            cluster_name: self.cluster_name.clone(),
            heartbeat_interval: millis(self.heartbeat_interval),
            election_timeout_min: millis(self.election_timeout_min),
            election_timeout_max: millis(self.election_timeout_max),
            install_snapshot_timeout: millis(self.install_snapshot_timeout),
            max_payload_entries: self.max_payload_entries,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_after_entries),
            max_in_snapshot_log_to_keep: self.logs_kept_after_snapshot,
            snapshot_max_chunk_size: self.snapshot_chunk_bytes,
            ..openraft::Config::default()
        };
        config
            .validate()
            .map_err(|error| OpenError::Config(error.to_string()))
    }
}

/// Creates `path` and its parents.
pub(crate) fn ensure_dir(path: &Path) -> Result<(), OpenError> {
    std::fs::create_dir_all(path).map_err(|source| OpenError::DataDir {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_round_trip_stretches_the_heartbeat_and_the_elections() {
        let near = RaftConfig::new(1, "/tmp/starling", "127.0.0.1:7000")
            .with_round_trip(Duration::from_millis(50));
        assert_eq!(near.heartbeat_interval, Duration::from_millis(100));
        assert_eq!(near.election_timeout_min, Duration::from_millis(400));
        let far = RaftConfig::new(1, "/tmp/starling", "127.0.0.1:7000")
            .with_round_trip(Duration::from_millis(150));
        assert_eq!(far.heartbeat_interval, Duration::from_millis(300));
        assert_eq!(far.election_timeout_min, Duration::from_millis(1200));
        assert_eq!(far.election_timeout_max, Duration::from_millis(2400));
        far.validate().expect("stretched timing is valid");
    }

    #[test]
    fn defaults_are_valid() {
        RaftConfig::new(1, "/tmp/starling", "127.0.0.1:7000")
            .validate()
            .expect("defaults validate");
    }

    #[test]
    fn nonsense_is_rejected_with_a_reason() {
        let mut config = RaftConfig::new(1, "/tmp/starling", "127.0.0.1:7000");
        config.election_timeout_min = Duration::from_millis(100);
        let error = config.validate().expect_err("election below heartbeat");
        assert!(
            error
                .to_string()
                .contains("must exceed the heartbeat interval"),
            "{error}"
        );

        let config = RaftConfig::new(1, "/tmp/starling", "localhost");
        assert!(config.validate().is_err(), "address without port");

        let mut config = RaftConfig::new(1, "/tmp/starling", "127.0.0.1:7000");
        config.snapshot_chunk_bytes = 1 << 40;
        assert!(config.validate().is_err(), "chunk larger than a message");
    }
}
