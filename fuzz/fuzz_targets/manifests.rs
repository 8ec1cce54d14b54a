//! Manifest parsing and validation: any text, as `starling apply -f` or a Source would hand it
//! over, is either parsed into valid resources or refused with an error, never a panic, a hang
//! or unbounded memory (alias bombs, deep nesting and oversized objects included).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(resources) = fleet::manifest::parse_manifests(text) else {
        return;
    };
    for resource in &resources {
        // A parsed resource has a key, and validation answers for it.
        let _ = resource.key();
        let _ = resource.validate();
    }
});
