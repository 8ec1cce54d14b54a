//! The snapshot decoder: a replica installs snapshots from its peers and from its own disk, so
//! any bytes must decode into a state or fail with an error. A decoded state encodes and
//! decodes again to the same bytes.
#![no_main]

use fleet::FleetState;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(state) = FleetState::decode_snapshot(data) else {
        return;
    };
    let encoded = state.encode_snapshot();
    let again = FleetState::decode_snapshot(&encoded).expect("an encoded snapshot decodes");
    assert_eq!(encoded, again.encode_snapshot(), "snapshot round trip is not stable");
});
