//! Placement of clusters and sources on live nodes (filled in by the placement work).
