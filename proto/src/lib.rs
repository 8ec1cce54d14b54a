//! proto (being built).
