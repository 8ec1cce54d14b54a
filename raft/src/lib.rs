//! raft (being built).
