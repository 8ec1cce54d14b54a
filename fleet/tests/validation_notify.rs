//! The validation rules of the notification resources, as a user meets them: Providers
//! (type, urls, time limit) and Alerts (Provider, event sources, message filters), with the
//! message the user reads.

mod common;

use common::{ALERT, PROVIDER, assert_accepted, assert_rejected, edit};

#[test]
fn good_providers_and_alerts_are_accepted() {
    assert_accepted(PROVIDER);
    assert_accepted(ALERT);
    for provider_type in [
        "generic",
        "generic-hmac",
        "msteams",
        "discord",
        "github",
        "gitlab",
        "gitea",
        "alertmanager",
    ] {
        assert_accepted(&edit(
            PROVIDER,
            "type: slack",
            &format!("type: {provider_type}"),
        ));
    }
    // Neither the Secret nor the Provider has to exist yet: the state says so in `Ready`.
    assert_accepted(&edit(
        ALERT,
        "    name: chat\n",
        "    name: not-applied-yet\n",
    ));
}

#[test]
fn an_unknown_provider_type_is_refused_naming_the_allowed_ones() {
    assert_rejected(
        &edit(PROVIDER, "type: slack", "type: pagerduty"),
        &[
            "Provider \"chat\"",
            "spec.type: unknown variant `pagerduty`, expected one of `generic`, `generic-hmac`, `slack`, `msteams`, `discord`, `github`, `gitlab`, `gitea`, `alertmanager`",
        ],
    );
}

#[test]
fn provider_urls_must_be_http_or_https_naming_the_scheme() {
    assert_rejected(
        &edit(
            PROVIDER,
            "address: https://hooks.example.com/services",
            "address: ftp://hooks.example.com/services",
        ),
        &[
            "Provider \"chat\"",
            "spec.address: scheme \"ftp\" is not supported: expected an http:// or https:// url",
        ],
    );
    assert_rejected(
        &edit(
            PROVIDER,
            "proxy: http://proxy.example.com:3128",
            "proxy: socks5://proxy.example.com:1080",
        ),
        &["spec.proxy: scheme \"socks5\" is not supported: expected an http:// or https:// url"],
    );
    assert_rejected(
        &edit(
            PROVIDER,
            "address: https://hooks.example.com/services",
            "address: hooks.example.com/services",
        ),
        &["spec.address: not a url: expected an http:// or https:// url"],
    );
    // Credentials belong in the Secret; the message does not repeat them.
    let message = common::rejection(&edit(
        PROVIDER,
        "proxy: http://proxy.example.com:3128",
        "proxy: http://admin:hunter2@proxy.example.com:3128",
    ));
    assert!(
        message.contains("spec.proxy: the url carries credentials") && !message.contains("hunter2"),
        "{message}"
    );
}

#[test]
fn a_provider_timeout_must_be_a_positive_duration() {
    assert_accepted(&edit(PROVIDER, "timeout: 20s", "timeout: 1m30s"));
    assert_rejected(
        &edit(PROVIDER, "timeout: 20s", "timeout: soon"),
        &["spec.timeout: invalid duration \"soon\""],
    );
    assert_rejected(
        &edit(PROVIDER, "timeout: 20s", "timeout: \"0\""),
        &["spec.timeout: \"0\" must be greater than zero"],
    );
}

#[test]
fn provider_and_alert_names_and_references_are_dns_names() {
    assert_rejected(
        &edit(PROVIDER, "  name: chat\n", "  name: Chat_Hook\n"),
        &["metadata.name: \"Chat_Hook\" is not a valid name"],
    );
    assert_rejected(
        &edit(
            PROVIDER,
            "    name: chat-webhook\n",
            "    name: Chat Webhook\n",
        ),
        &["spec.secretRef.name: \"Chat Webhook\" is not a valid name"],
    );
    assert_rejected(
        &edit(ALERT, "  name: rollouts\n", "  name: -rollouts\n"),
        &[
            "Alert \"-rollouts\"",
            "metadata.name: \"-rollouts\" is not a valid name",
        ],
    );
    assert_rejected(
        &edit(ALERT, "    name: chat\n", "    name: \"\"\n"),
        &["spec.providerRef.name: must not be empty"],
    );
    assert_rejected(
        &edit(ALERT, "    name: chat\n", "    name: Chat!\n"),
        &["spec.providerRef.name: \"Chat!\" is not a valid name"],
    );
    assert_rejected(
        &edit(ALERT, "  providerRef:\n    name: chat\n", ""),
        &["Alert \"rollouts\"", "missing field `providerRef`"],
    );
}

#[test]
fn an_alert_names_known_kinds_in_at_least_one_event_source() {
    let without = ALERT.replace(
        "  eventSources:\n    - kind: SyncGroup\n      name: web\n    - kind: Cluster\n      matchLabels:\n        region: eu\n    - kind: \"*\"\n",
        "  eventSources: []\n",
    );
    assert_rejected(&without, &["spec.eventSources: must not be empty"]);
    assert_rejected(
        &edit(ALERT, "    - kind: Cluster\n", "    - kind: Pod\n"),
        &[
            "spec.eventSources[1].kind: unknown kind \"Pod\": expected SyncGroup, Sync, Source, Cluster, Replica or *",
        ],
    );
    for kind in ["Sync", "Source"] {
        assert_accepted(&edit(
            ALERT,
            "    - kind: Cluster\n",
            &format!("    - kind: {kind}\n"),
        ));
    }
    // Replica events are the installation's: a tenant's Alert may not watch them.
    let replica = edit(ALERT, "    - kind: Cluster\n", "    - kind: Replica\n");
    assert_rejected(
        &replica,
        &[
            "spec.eventSources[1].kind: Replica events are the installation's, not namespace \"fleet\"'s: only an Alert in namespace starling-system may watch them",
        ],
    );
    assert_accepted(&edit(
        &replica,
        "  namespace: fleet\n",
        "  namespace: starling-system\n",
    ));
    assert_rejected(
        &edit(ALERT, "      name: web\n", "      name: Web_App\n"),
        &["spec.eventSources[0].name: \"Web_App\" is not a valid name"],
    );
    assert_rejected(
        &edit(ALERT, "        region: eu\n", "        region: \"-eu\"\n"),
        &["spec.eventSources[1].matchLabels[\"region\"]: \"-eu\" is not a valid label"],
    );
}

#[test]
fn inclusion_and_exclusion_lists_must_be_regular_expressions() {
    assert_rejected(
        &edit(
            ALERT,
            "    - \"^Rollout\"\n",
            "    - \"^Rollout\"\n    - \"(unclosed\"\n",
        ),
        &["spec.inclusionList[1]: \"(unclosed\" is not a valid regular expression: unclosed group"],
    );
    assert_rejected(
        &edit(
            ALERT,
            "    - \"canary-[0-9]+\"\n",
            "    - \"canary-[9-0]\"\n",
        ),
        &[
            "spec.exclusionList[0]: \"canary-[9-0]\" is not a valid regular expression: invalid character class range",
        ],
    );
}

#[test]
fn an_alert_cannot_name_a_provider_in_another_namespace() {
    assert_rejected(
        &edit(
            ALERT,
            "    name: chat\n",
            "    name: chat\n    namespace: team-b\n",
        ),
        &[
            "Alert \"rollouts\"",
            "unknown field spec.providerRef.namespace",
        ],
    );
}
