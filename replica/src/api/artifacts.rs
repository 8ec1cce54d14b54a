//! `starling.v1.Artifacts`: peers fetch artifacts by digest from this node's store, streamed
//! in chunks; the receiver checks the digest (design section 7).

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use proto::ApiError;
use source::Digest;
use tonic::{Request, Response, Status};

use super::status;
use crate::node::Replica;

pub(crate) struct ArtifactService {
    replica: Arc<Replica>,
}

impl ArtifactService {
    pub(crate) fn new(replica: Arc<Replica>) -> Self {
        Self { replica }
    }
}

pub(crate) fn digest(text: &str) -> Result<Digest, Status> {
    text.parse().map_err(|_| {
        status(ApiError::invalid_argument(format!(
            "{text:?} is not a sha256:<hex> digest"
        )))
    })
}

/// Chunks of an artifact, as `Fetch` streams them.
pub(crate) type FetchStream =
    Pin<Box<dyn Stream<Item = Result<proto::ArtifactChunk, Status>> + Send>>;

#[tonic::async_trait]
impl proto::artifacts_server::Artifacts for ArtifactService {
    type FetchStream = FetchStream;

    async fn fetch(
        &self,
        request: Request<proto::FetchRequest>,
    ) -> Result<Response<Self::FetchStream>, Status> {
        let digest = digest(&request.get_ref().digest)?;
        stream(&self.replica, digest).map(Response::new)
    }

    async fn has(
        &self,
        request: Request<proto::HasRequest>,
    ) -> Result<Response<proto::HasResponse>, Status> {
        let digest = digest(&request.get_ref().digest)?;
        let stored = self.replica.store.get(&digest);
        Ok(Response::new(proto::HasResponse {
            present: stored.is_some(),
            size: stored.map_or(0, |s| s.size),
        }))
    }
}

/// Streams artifact `digest` from this replica's store.
pub(crate) fn stream(replica: &Replica, digest: Digest) -> Result<FetchStream, Status> {
    let chunks = replica
        .store
        .chunk_stream(digest, proto::limits::ARTIFACT_CHUNK_BYTES)
        .map_err(|_| {
            status(ApiError::not_found(format!(
                "artifact {digest} not found on this node"
            )))
        })?;
    let mut offset = 0u64;
    let stream = chunks.map(move |chunk| match chunk {
        Ok(data) => {
            let item = proto::ArtifactChunk {
                offset,
                data,
                ..Default::default()
            };
            offset += item.data.len() as u64;
            Ok(item)
        }
        Err(error) => Err(status(ApiError::internal(format!(
            "reading artifact {digest}: {error}"
        )))),
    });
    Ok(Box::pin(stream))
}
