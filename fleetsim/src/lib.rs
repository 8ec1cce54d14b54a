//! fleetsim (being built).
