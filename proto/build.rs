//! Compiles the gRPC contract under `proto/` into Rust with protox (pure Rust), so a machine
//! without `protoc` builds it.

use std::path::Path;

const PROTO_ROOT: &str = "proto";
const PROTO_FILES: [&str; 6] = [
    "proto/starling/v1/raft.proto",
    "proto/starling/v1/fleet.proto",
    "proto/starling/v1/admin.proto",
    "proto/starling/v1/node.proto",
    "proto/starling/v1/artifacts.proto",
    "proto/starling/v1/agent.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for file in PROTO_FILES {
        if !Path::new(file).exists() {
            return Err(format!("missing proto file {file}").into());
        }
        println!("cargo:rerun-if-changed={file}");
    }
    println!("cargo:rerun-if-changed={PROTO_ROOT}");
    let descriptors = protox::compile(PROTO_FILES, [PROTO_ROOT])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .codec_path("crate::codec::StarlingCodec")
        .compile_fds(descriptors)?;
    Ok(())
}
