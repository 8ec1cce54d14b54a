//! Compiles the vendored Kubernetes `.proto` files (see `proto/README.md`) into one file
//! descriptor set with protox (pure Rust, no `protoc`), which `schema` loads at run time to
//! decode and encode protobuf bodies by reflection.

use std::path::{Path, PathBuf};

const PROTO_ROOT: &str = "proto/k8s";
/// Every group fleetsim serves; their imports (meta, runtime, intstr, resource) follow.
const PROTO_FILES: [&str; 10] = [
    "api/core/v1/generated.proto",
    "api/apps/v1/generated.proto",
    "api/batch/v1/generated.proto",
    "api/rbac/v1/generated.proto",
    "api/coordination/v1/generated.proto",
    "api/events/v1/generated.proto",
    "api/networking/v1/generated.proto",
    "api/policy/v1/generated.proto",
    "api/autoscaling/v2/generated.proto",
    "apiextensions_apiserver/pkg/apis/apiextensions/v1/generated.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={PROTO_ROOT}");
    for file in PROTO_FILES {
        let path = Path::new(PROTO_ROOT).join(file);
        if !path.exists() {
            return Err(format!("missing proto file {}", path.display()).into());
        }
    }
    let descriptors = protox::compile(PROTO_FILES, [PROTO_ROOT])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("kubernetes.fds");
    std::fs::write(&out, prost::Message::encode_to_vec(&descriptors))?;
    Ok(())
}
