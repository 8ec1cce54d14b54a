//! Envelope and JSON mapping tests: bytes kubectl sent, and round trips of every special
//! type through protobuf and back.

use serde_json::{Value, json};

use super::*;

/// `kubectl create namespace x` (kubectl 1.33) as it went over the wire.
const KUBECTL_NAMESPACE: &[u8] = &[
    0x6b, 0x38, 0x73, 0x00, 0x0a, 0x0f, 0x0a, 0x02, 0x76, 0x31, 0x12, 0x09, 0x4e, 0x61, 0x6d, 0x65,
    0x73, 0x70, 0x61, 0x63, 0x65, 0x12, 0x19, 0x0a, 0x11, 0x0a, 0x01, 0x78, 0x12, 0x00, 0x1a, 0x00,
    0x22, 0x00, 0x2a, 0x00, 0x32, 0x00, 0x38, 0x00, 0x42, 0x00, 0x12, 0x00, 0x1a, 0x02, 0x0a, 0x00,
    0x1a, 0x00, 0x22, 0x00,
];

#[test]
fn reads_the_envelope_kubectl_sends() {
    let envelope = decode_envelope(KUBECTL_NAMESPACE).expect("envelope");
    assert_eq!(envelope.api_version, "v1");
    assert_eq!(envelope.kind, "Namespace");
    assert_eq!(envelope.content_encoding, "");
    assert_eq!(envelope.content_type, "");
    assert_eq!(envelope.raw.len(), 25);
}

#[test]
fn decodes_a_namespace_as_go_writes_its_json() {
    // kubectl's JSON for the same object: `kubectl create namespace x --dry-run=client -o json`
    let object = decode_object(KUBECTL_NAMESPACE, None).expect("decodes");
    assert_eq!(
        object,
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "x", "creationTimestamp": null}, "spec": {}, "status": {}})
    );
}

#[test]
fn envelopes_round_trip_and_refuse_what_is_not_one() {
    let body = encode_envelope("apps/v1", "Deployment", vec![1, 2, 3]).expect("encodes");
    let envelope = decode_envelope(&body).expect("decodes");
    assert_eq!(
        envelope,
        Envelope {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            raw: vec![1, 2, 3],
            ..Envelope::default()
        }
    );
    assert!(matches!(
        decode_envelope(b"{\"kind\":1}"),
        Err(ProtobufError::NoMagic)
    ));
    assert!(matches!(
        decode_envelope(b"k8s\0\xff\xff"),
        Err(ProtobufError::Envelope(_))
    ));
    let widget = encode_envelope("example.com/v1", "Widget", Vec::new()).expect("encodes");
    let error = decode_object(&widget, None).expect_err("custom resources have no protobuf");
    assert_eq!(ApiError::from(error).code, 415);
}

fn round_trip(object: Value) -> Value {
    let body = encode_object(&object).expect("encodes");
    decode_object(&body, None).expect("decodes")
}

#[test]
fn secret_data_is_base64_and_maps_stay_maps() {
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s", "namespace": "default", "labels": {"a": "b", "c": "d"}},
        "data": {"password": "c2VjcmV0", "empty": ""},
        "stringData": {"plain": "text"},
        "type": "Opaque"
    });
    assert_eq!(round_trip(secret.clone()), secret);
    // the bytes on the wire are the decoded secret, not its base64
    let body = encode_object(&secret).expect("encodes");
    let raw = decode_envelope(&body).expect("envelope").raw;
    assert!(raw.windows(6).any(|w| w == b"secret"));
}

#[test]
fn times_int_or_strings_quantities_and_durations() {
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default",
                     "creationTimestamp": "2024-02-29T12:34:56Z"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 1}},
            "template": {
                "metadata": {"creationTimestamp": null, "labels": {"app": "web"}},
                "spec": {"containers": [{
                    "name": "web", "image": "nginx",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/", "port": "http"},
                                       "periodSeconds": 5}
                }]}
            }
        },
        "status": {}
    });
    assert_eq!(round_trip(deployment.clone()), deployment);
    let event = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "e", "namespace": "default"},
        "eventTime": "2024-02-29T12:34:56.789123Z",
        "reportingController": "c", "reportingInstance": "i", "action": "A", "reason": "R",
        "regarding": {"kind": "Pod", "name": "p"},
        "type": "Normal"
    });
    assert_eq!(round_trip(event.clone()), event);
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "default"},
        "spec": {"backoffLimit": 0, "suspend": false,
                 "template": {"metadata": {"creationTimestamp": null},
                              "spec": {"containers": null, "restartPolicy": "Never"}}}
    });
    assert_eq!(round_trip(job.clone()), job);
}

#[test]
fn zero_values_follow_the_go_tags() {
    // minReadySeconds (int32, omitempty) is dropped when zero, replicas (*int32) kept,
    // Container.name (no omitempty) kept even when empty
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "generateName": ""},
        "spec": {"replicas": 0, "minReadySeconds": 0, "paused": false,
                 "template": {"spec": {"containers": [{"name": "", "image": ""}]}}}
    });
    assert_eq!(
        round_trip(deployment),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {"replicas": 0, "template": {"spec": {"containers": [{"name": ""}]}}}
        })
    );
    // ClusterRole.rules has no omitempty: Go writes null for none
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                      "metadata": {"name": "r"}});
    assert_eq!(
        round_trip(role),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "r"}, "rules": null})
    );
}

#[test]
fn inline_fields_raw_extensions_and_managed_fields() {
    let revision = json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": "r", "namespace": "default",
                     "managedFields": [{"manager": "m", "operation": "Apply",
                                        "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
                                        "time": "2024-02-29T12:34:56Z",
                                        "fieldsV1": {"f:data": {}}}]},
        "data": {"spec": {"template": {"spec": {"volumes": [
            {"name": "v", "hostPath": {"path": "/tmp"}}
        ]}}}},
        "revision": 3
    });
    assert_eq!(round_trip(revision.clone()), revision);
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i",
                                 "envFrom": [{"configMapRef": {"name": "cm"}}]}],
                 "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Gi"}},
                             {"name": "s", "secret": {"secretName": "s", "defaultMode": 0}}]}
    });
    assert_eq!(round_trip(pod.clone()), pod);
}

#[test]
fn json_schema_props_keep_their_json_names() {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                      "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {
                        "spec": {"type": "object",
                                 "additionalProperties": {"type": "string"},
                                 "x-kubernetes-validations": [{"rule": "self.size() < 3"}]},
                        "tags": {"type": "array", "items": {"type": "string"},
                                 "x-kubernetes-list-type": "set"},
                        "open": {"type": "object", "additionalProperties": true},
                        "choice": {"anyOf": [{"type": "integer"}, {"type": "string"}],
                                   "x-kubernetes-int-or-string": true,
                                   "default": 1, "maximum": 10, "minimum": 0.5}
                    }
                }}}]
        }
    });
    assert_eq!(round_trip(crd.clone()), crd);
}

#[test]
fn refuses_values_of_the_wrong_type() {
    let bad = json!({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "c"}, "data": {"a": 1}});
    let error = encode_object(&bad).expect_err("a number is not a string");
    assert!(error.to_string().contains("expected a string"), "{error}");
    let bad_time = json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "c", "creationTimestamp": "yesterday"}});
    assert!(encode_object(&bad_time).is_err());
}
