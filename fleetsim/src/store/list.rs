//! List with label and field selectors, `limit` and `continue`.
//!
//! Pages are consistent as on a real apiserver: a continue token carries the
//! resourceVersion of the first page, and later pages are read as of that version by
//! undoing, through the event history, the changes made since (410 Expired once the
//! history no longer reaches back that far).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Value, json};

use super::delete::DeleteOptions;
use super::{ClusterState, ObjKey, StoredObject};
use crate::error::ApiError;
use crate::resources::ResourceInfo;
use crate::selector::{FieldSelector, LabelSelector};

/// What to list.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListQuery {
    /// None lists across all namespaces.
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

/// One page of a list.
#[derive(Debug, Clone)]
pub(crate) struct ListPage {
    pub items: Vec<Arc<StoredObject>>,
    pub rv: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

fn encode_token(rv: u64, key: &ObjKey) -> String {
    let raw = json!({"rv": rv, "ns": &*key.0, "name": &*key.1}).to_string();
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_token(token: &str) -> Result<(u64, ObjKey), ApiError> {
    let invalid = || ApiError::bad_request(format!("continue key is not valid: {token:?}"));
    if !token.len().is_multiple_of(2) || !token.is_ascii() {
        return Err(invalid());
    }
    let bytes: Vec<u8> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&token[i..i + 2], 16))
        .collect::<Result<_, _>>()
        .map_err(|_| invalid())?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    let rv = value
        .get("rv")
        .and_then(Value::as_u64)
        .ok_or_else(invalid)?;
    let ns = value
        .get("ns")
        .and_then(Value::as_str)
        .ok_or_else(invalid)?;
    let name = value
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(invalid)?;
    Ok((rv, (Box::from(ns), Box::from(name))))
}

impl ListQuery {
    pub fn matches(&self, object: &StoredObject) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| &*object.namespace == ns)
            && self.fields.matches(&object.namespace, &object.name)
            && self.labels.matches(&object.labels)
    }
}

impl ClusterState {
    /// Objects of a resource as of `at_rv` with keys after `after`.
    fn snapshot(
        &self,
        info: &ResourceInfo,
        at_rv: u64,
        after: Option<&ObjKey>,
    ) -> Result<Vec<Arc<StoredObject>>, ApiError> {
        let empty = BTreeMap::new();
        let table = self.tables.get(&info.storage_key).unwrap_or(&empty);
        let in_range = |key: &ObjKey| after.is_none_or(|a| key > a);
        if at_rv >= self.rv {
            return Ok(table
                .iter()
                .filter(|(k, _)| in_range(k))
                .map(|(_, v)| v.clone())
                .collect());
        }
        if at_rv < self.floor {
            return Err(ApiError::expired(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
            ));
        }
        // undo newer changes, newest first, so the oldest change's "previous" wins
        let mut overlay: BTreeMap<ObjKey, Option<Arc<StoredObject>>> = BTreeMap::new();
        let start = self.history.partition_point(|e| e.rv <= at_rv);
        for event in self.history.range(start..).rev() {
            if event.storage_key != info.storage_key {
                continue;
            }
            overlay.insert(event.object.key(), event.previous.clone());
        }
        let keys: BTreeSet<&ObjKey> = table
            .keys()
            .chain(overlay.keys())
            .filter(|k| in_range(k))
            .collect();
        Ok(keys
            .into_iter()
            .filter_map(|key| match overlay.get(key) {
                Some(previous) => previous.clone(),
                None => table.get(key).cloned(),
            })
            .collect())
    }

    pub fn list(&self, info: &ResourceInfo, query: &ListQuery) -> Result<ListPage, ApiError> {
        let (rv, after) = match &query.continue_token {
            Some(token) => {
                let (rv, key) = decode_token(token)?;
                (rv, Some(key))
            }
            None => (self.rv, None),
        };
        let candidates = self.snapshot(info, rv, after.as_ref())?;
        let mut matching = candidates.into_iter().filter(|o| query.matches(o));
        let limit = query.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let items: Vec<Arc<StoredObject>> = matching.by_ref().take(limit).collect();
        let rest = matching.count();
        let (continue_token, remaining) = match items.last() {
            Some(last) if rest > 0 => {
                let count = (query.labels.is_empty() && query.fields == FieldSelector::default())
                    .then_some(rest);
                (Some(encode_token(rv, &last.key())), count)
            }
            _ => (None, None),
        };
        Ok(ListPage {
            items,
            rv,
            continue_token,
            remaining,
        })
    }

    /// DELETE on a collection: deletes every matching object; returns their final states.
    pub fn delete_collection(
        &mut self,
        info: &ResourceInfo,
        query: &ListQuery,
        options: &DeleteOptions,
        now: &str,
    ) -> Result<Vec<Arc<StoredObject>>, ApiError> {
        let all = ListQuery {
            limit: None,
            continue_token: None,
            ..query.clone()
        };
        let page = self.list(info, &all)?;
        let mut deleted = Vec::with_capacity(page.items.len());
        for object in page.items {
            match self.delete(info, &object.namespace, &object.name, options, now) {
                Ok(outcome) => deleted.push(outcome.object),
                Err(error) if error.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_reject_garbage() {
        let key: ObjKey = (Box::from("default"), Box::from("web"));
        let token = encode_token(42, &key);
        assert_eq!(decode_token(&token).expect("valid token"), (42, key));
        assert_eq!(decode_token("zz").map_err(|e| e.code), Err(400));
        assert_eq!(decode_token("abc").map_err(|e| e.code), Err(400));
    }
}
