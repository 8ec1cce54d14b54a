//! source (being built).
