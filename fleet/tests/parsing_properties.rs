//! Properties of the parsers a user's text goes through: label selectors, durations and
//! variables. Each printed form reads back as the same value, and text without variables passes
//! through substitution unchanged.

use std::collections::BTreeMap;
use std::time::Duration;

use fleet::duration::{format_duration, parse_duration};
use fleet::selector::{Operator, Requirement, Selector};
use fleet::vars::{ClusterContext, check_syntax, substitute};
use proptest::prelude::*;

fn label_key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]([a-z0-9._-]{0,10}[a-z0-9])?",
        "[a-z]{1,5}\\.io/[A-Za-z]([A-Za-z0-9_-]{0,8}[A-Za-z0-9])?",
    ]
}

fn label_value() -> impl Strategy<Value = String> {
    "([A-Za-z0-9]([A-Za-z0-9._-]{0,8}[A-Za-z0-9])?)?"
}

fn requirement() -> impl Strategy<Value = Requirement> {
    let operator = prop_oneof![
        Just(Operator::In),
        Just(Operator::NotIn),
        Just(Operator::Exists),
        Just(Operator::DoesNotExist),
    ];
    (
        label_key(),
        operator,
        prop::collection::vec(label_value(), 1..4),
    )
        .prop_map(|(key, operator, values)| {
            let values = match operator {
                Operator::In | Operator::NotIn => values,
                Operator::Exists | Operator::DoesNotExist => Vec::new(),
            };
            Requirement::new(&key, operator, values).expect("generated requirements are valid")
        })
}

proptest! {
    #[test]
    fn selectors_read_back_from_both_forms(requirements in prop::collection::vec(requirement(), 0..5)) {
        let selector = Selector::from_requirements(requirements);
        let text = selector.to_string();
        prop_assert_eq!(Selector::parse_str(&text), Ok(selector.clone()), "text {:?}", text);
        prop_assert_eq!(Selector::parse(&selector.to_label_selector()), Ok(selector));
    }

    #[test]
    fn selectors_match_as_their_requirements_do(
        requirements in prop::collection::vec(requirement(), 0..4),
        labels in prop::collection::btree_map(label_key(), label_value(), 0..4),
    ) {
        let selector = Selector::from_requirements(requirements.clone());
        let every = requirements.iter().all(|requirement| requirement.matches(&labels));
        prop_assert_eq!(selector.matches(&labels), every);
        prop_assert!(Selector::everything().matches(&labels));
    }

    #[test]
    fn durations_read_back_from_their_go_form(nanos in 0u64..=i64::MAX as u64) {
        let duration = Duration::from_nanos(nanos);
        prop_assert_eq!(parse_duration(&format_duration(duration)), Ok(duration));
    }

    #[test]
    fn durations_never_panic(text in "[-+0-9.a-zµ ]{0,12}") {
        let _ = parse_duration(&text);
    }

    #[test]
    fn text_without_references_is_unchanged(text in "[^$]{0,64}") {
        let out = substitute(&text, &BTreeMap::new(), &ClusterContext::default());
        prop_assert_eq!(out, Ok(text));
    }

    #[test]
    fn variable_syntax_checks_never_panic(text in "[$a-zA-Z{}:=._/ -]{0,24}") {
        let _ = check_syntax(&text);
        let _ = substitute(&text, &BTreeMap::new(), &ClusterContext::default());
    }
}
