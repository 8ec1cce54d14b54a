//! Label selectors (`clusterSelector`, `starling get -l`): any selector text parses or fails
//! with an error; a parsed selector round-trips through its Kubernetes form and matches the
//! same label sets.
#![no_main]

use std::collections::BTreeMap;

use fleet::selector::Selector;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Input layout: selector \0 labels as k=v lines.
    let (selector, labels) = text.split_once('\0').unwrap_or((text, ""));
    let Ok(parsed) = Selector::parse_str(selector) else {
        return;
    };
    let labels: BTreeMap<String, String> = labels
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let matched = parsed.matches(&labels);
    let again = Selector::parse(&parsed.to_label_selector())
        .expect("a parsed selector's Kubernetes form parses again");
    assert_eq!(matched, again.matches(&labels), "round trip changed the match");
});
