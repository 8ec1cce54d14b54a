//! Variable substitution (`${VAR}`, `${VAR:=default}`, `${cluster.labels.x}`): any template with
//! any variable values renders or fails with an error naming the problem, and the output stays
//! within `MAX_SUBSTITUTED_BYTES`.
#![no_main]

use std::collections::BTreeMap;

use fleet::vars::{ClusterContext, MAX_SUBSTITUTED_BYTES, check_syntax, substitute};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Input layout: template \0 value-of-VAR \0 value-of-region-label.
    let mut parts = text.splitn(3, '\0');
    let template = parts.next().unwrap_or_default();
    let value = parts.next().unwrap_or_default();
    let label = parts.next().unwrap_or_default();
    let vars = BTreeMap::from([
        ("VAR".to_owned(), value.to_owned()),
        ("OTHER".to_owned(), format!("${{VAR}}{value}")),
    ]);
    let cluster = ClusterContext {
        name: "c001".to_owned(),
        namespace: "default".to_owned(),
        labels: BTreeMap::from([("region".to_owned(), label.to_owned())]),
    };
    let syntax = check_syntax(template);
    match substitute(template, &vars, &cluster) {
        Ok(output) => {
            assert!(output.len() <= MAX_SUBSTITUTED_BYTES);
            // What renders has valid syntax.
            assert!(syntax.is_ok(), "rendered a template check_syntax refuses");
        }
        Err(_) => {}
    }
});
