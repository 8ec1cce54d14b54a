use serde_json::json;

use super::*;

fn database(status: Value) -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Database",
        "metadata": {"name": "orders", "namespace": "shop", "generation": 2, "managedFields": [{"manager": "starling"}]},
        "spec": {"size": "small"},
        "status": status,
    })
}

fn checks() -> HealthChecks {
    HealthChecks::compile(
        "spec.healthChecks",
        &[HealthCheck {
            api_version: "example.com/v1".to_owned(),
            kind: "Database".to_owned(),
            current: "self.status.phase == 'Ready'".to_owned(),
            in_progress: Some("status.phase == 'Provisioning'".to_owned()),
            failed: Some(
                "has(status.conditions) && status.conditions.exists(c, c.type == 'Ready' && c.reason == 'Broken')"
                    .to_owned(),
            ),
        }],
    )
    .expect("they compile")
}

#[test]
fn the_first_expression_that_holds_decides() {
    let checks = checks();
    let judged = |status: Value| {
        checks
            .judge(&database(status))
            .expect("a rule for Database")
    };
    assert_eq!(
        judged(json!({"phase": "Ready", "observedGeneration": 2})),
        (ResourceStatus::Current, String::new())
    );
    assert_eq!(
        judged(json!({"phase": "Provisioning"})).0,
        ResourceStatus::InProgress
    );
    let (status, message) = judged(json!({
        "phase": "Ready",
        "conditions": [{"type": "Ready", "status": "False", "reason": "Broken", "message": "disk full"}],
    }));
    // `failed` is tried before `current`.
    assert_eq!(
        (status, message.as_str()),
        (ResourceStatus::Failed, "disk full")
    );
    assert_eq!(
        judged(json!({"phase": "Deleting"})),
        (
            ResourceStatus::InProgress,
            "no health check holds yet".to_owned()
        )
    );
    assert_eq!(
        judged(json!({"phase": "Ready", "observedGeneration": 1})).0,
        ResourceStatus::InProgress,
        "an old status says nothing of this generation"
    );
}

#[test]
fn errors_at_run_time_make_the_object_unknown_with_the_message() {
    let checks = checks();
    let mut object = database(json!({}));
    object.as_object_mut().expect("object").remove("status");
    let (status, message) = checks.judge(&object).expect("a rule");
    assert_eq!(status, ResourceStatus::Unknown);
    assert!(
        message.contains("status.phase == 'Provisioning'"),
        "{message}"
    );
    let not_bool = HealthChecks::compile(
        "spec.healthChecks",
        &[HealthCheck {
            api_version: "example.com/v1".to_owned(),
            kind: "Database".to_owned(),
            current: "status.phase".to_owned(),
            ..HealthCheck::default()
        }],
    )
    .expect("compiles");
    let (status, message) = not_bool
        .judge(&database(json!({"phase": "Ready"})))
        .expect("a rule");
    assert_eq!(status, ResourceStatus::Unknown);
    assert!(message.contains("not a bool"), "{message}");
}

#[test]
fn other_kinds_are_left_to_kstatus() {
    let checks = checks();
    let mut object = database(json!({"phase": "Ready"}));
    object["kind"] = json!("Cache");
    assert_eq!(checks.judge(&object), None);
    object["kind"] = json!("Database");
    object["apiVersion"] = json!("example.com/v2");
    assert_eq!(checks.judge(&object), None);
}

#[test]
fn expressions_that_do_not_compile_are_refused_with_the_position() {
    let errors = HealthChecks::compile(
        "spec.healthChecks",
        &[HealthCheck {
            api_version: "example.com/v1".to_owned(),
            kind: "Database".to_owned(),
            current: "status.phase == ".to_owned(),
            failed: Some("x".repeat(MAX_EXPRESSION + 1)),
            ..HealthCheck::default()
        }],
    )
    .expect_err("malformed");
    let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert!(
        shown[0].starts_with("spec.healthChecks[0].failed: "),
        "{shown:?}"
    );
    assert!(
        shown[0].contains("more than the 4096 accepted"),
        "{shown:?}"
    );
    assert!(
        shown[1].starts_with(
            "spec.healthChecks[0].current: \"status.phase == \" does not compile: ERROR: <input>:1:"
        ),
        "{shown:?}"
    );
}

#[test]
fn compiled_checks_can_be_shared_between_tasks() {
    fn shared<T: Send + Sync>() {}
    shared::<HealthChecks>();
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

    /// Whatever a user writes, compiling it answers: it never panics (an older CEL parser did
    /// on `status.phase == `).
    #[test]
    fn compiling_any_text_answers(text in "[a-z.()\\[\\]'=!<>&|, 0-9+-]{0,40}") {
        let check = HealthCheck {
            api_version: "v1".to_owned(),
            kind: "ConfigMap".to_owned(),
            current: text,
            ..HealthCheck::default()
        };
        let _ = HealthChecks::compile("spec.healthChecks", &[check]);
    }
}
