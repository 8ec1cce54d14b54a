//! Snapshots: they round-trip, refuse formats they do not know, and stream compressed.

use super::*;

#[test]
fn snapshots_round_trip_and_reject_unknown_formats() {
    let mut state = fleet(20, "5", "");
    resolve(&mut state, "main@sha1:aaa");
    sync_round(&mut state, "main@sha1:aaa", false);
    let bytes = state.encode_snapshot();
    let mut restored = FleetState::decode_snapshot(&bytes).unwrap();
    restored.check_invariants().unwrap();
    assert_eq!(restored.encode_snapshot(), bytes);
    // The restored state keeps working identically.
    assert_eq!(
        sync_round(&mut restored, "main@sha1:aaa", false),
        sync_round(&mut state, "main@sha1:aaa", false)
    );
    let future = String::from_utf8(bytes)
        .unwrap()
        .replacen("\"format\":1", "\"format\":99", 1);
    assert!(matches!(
        FleetState::decode_snapshot(future.as_bytes()),
        Err(SnapshotError::UnsupportedFormat { found: 99, .. })
    ));
}

#[test]
fn compressed_snapshots_stream_round_trip_and_are_checked_the_same() {
    let mut state = fleet(50, "5", "");
    resolve(&mut state, "main@sha1:aaa");
    sync_round(&mut state, "main@sha1:aaa", false);
    let plain = state.encode_snapshot();
    let compressed = state.write_snapshot(Vec::new()).unwrap();
    assert!(
        compressed.len() * 4 < plain.len(),
        "{} bytes compressed against {} plain",
        compressed.len(),
        plain.len()
    );
    let restored = FleetState::decode_snapshot(&compressed).unwrap();
    restored.check_invariants().unwrap();
    // Generated Syncs share their group's template again, as before the snapshot.
    let group = &restored
        .groups
        .get("fleet/app")
        .unwrap()
        .object
        .spec
        .template;
    let shared = restored
        .syncs
        .values()
        .filter(|s| std::sync::Arc::ptr_eq(&s.object.spec.template, group))
        .count();
    assert_eq!(shared, 50);
    assert_eq!(restored.encode_snapshot(), plain);
    assert_eq!(restored.usage, state.usage);

    // An unknown format inside the compressed stream is named, not reported as corruption.
    let future = String::from_utf8(plain)
        .unwrap()
        .replacen("\"format\":1", "\"format\":99", 1);
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gzip, future.as_bytes()).unwrap();
    assert!(matches!(
        FleetState::decode_snapshot(&gzip.finish().unwrap()),
        Err(SnapshotError::UnsupportedFormat { found: 99, .. })
    ));
    // A truncated stream is corrupt.
    assert!(FleetState::decode_snapshot(&compressed[..compressed.len() / 2]).is_err());
    // An envelope without its format is refused.
    assert!(matches!(
        FleetState::decode_snapshot(b"{\"note\":1}"),
        Err(SnapshotError::MissingFormat)
    ));
}
