//! Fair shares of a node's sync slots across tenants (namespaces).
//!
//! Each SyncGroup's budget bounds how many of its Syncs are admitted, so one tenant's rollout
//! never takes another's admission. The node's slots (`--max-waiting-syncs`) are shared,
//! though: planned in key order, a tenant whose namespace sorts first with thousands of
//! admitted Syncs would fill them every time. The plan is therefore dealt out one at a time to
//! the tenant with the fewest syncs running or already dealt, so every tenant with work gets
//! slots as they free up.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

/// The namespace part of a `namespace/name` key.
pub(crate) fn tenant_of(key: &str) -> &str {
    key.split_once('/').map_or("", |(namespace, _)| namespace)
}

/// Reorders `plan` so that tenants take turns, fewest running first. The order within one
/// tenant is kept. `key` gives an item's `namespace/name`; `running` lists the keys running.
pub(crate) fn interleave<T>(
    plan: Vec<T>,
    key: impl Fn(&T) -> &str,
    running: impl IntoIterator<Item = impl AsRef<str>>,
) -> Vec<T> {
    let mut queues: BTreeMap<String, VecDeque<T>> = BTreeMap::new();
    for item in plan {
        let tenant = tenant_of(key(&item)).to_string();
        queues.entry(tenant).or_default().push_back(item);
    }
    if queues.len() <= 1 {
        return queues.into_values().flatten().collect();
    }
    let mut load: BTreeMap<&str, usize> = BTreeMap::new();
    for sync in running {
        let tenant = tenant_of(sync.as_ref());
        if let Some((name, _)) = queues.get_key_value(tenant) {
            *load.entry(name.as_str()).or_default() += 1;
        }
    }
    let names: Vec<String> = queues.keys().cloned().collect();
    let mut heap: BinaryHeap<Reverse<(usize, usize)>> = names
        .iter()
        .enumerate()
        .map(|(i, name)| Reverse((load.get(name.as_str()).copied().unwrap_or(0), i)))
        .collect();
    let total = queues.values().map(VecDeque::len).sum();
    let mut out = Vec::with_capacity(total);
    while let Some(Reverse((count, i))) = heap.pop() {
        let Some(item) = queues.get_mut(&names[i]).and_then(VecDeque::pop_front) else {
            continue;
        };
        out.push(item);
        heap.push(Reverse((count + 1, i)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(plan: &[String]) -> Vec<&str> {
        plan.iter().map(String::as_str).collect()
    }

    #[test]
    fn tenants_take_turns_and_keep_their_own_order() {
        let plan: Vec<String> = ["a/1", "a/2", "a/3", "b/1", "c/1", "c/2"]
            .map(String::from)
            .to_vec();
        let out = interleave(plan, |k| k.as_str(), Vec::<String>::new());
        assert_eq!(keys(&out), ["a/1", "b/1", "c/1", "a/2", "c/2", "a/3"]);
    }

    #[test]
    fn a_tenant_with_syncs_running_waits_for_the_others() {
        let plan: Vec<String> = ["big/4", "big/5", "small/1"].map(String::from).to_vec();
        let running = ["big/1", "big/2", "big/3"];
        let out = interleave(plan, |k| k.as_str(), running);
        assert_eq!(keys(&out), ["small/1", "big/4", "big/5"]);
    }
}
