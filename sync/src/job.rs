//! One sync of a pull cluster as its agent receives it from the owning replica: everything
//! the agent needs to build the [`SyncRequest`](crate::SyncRequest) the owner would have
//! built. It travels as JSON inside the Agent service's `Job` message.

use fleet::resources::{ObjectRef, SyncTemplate};
use serde::{Deserialize, Serialize};

/// One granted sync, as an agent receives it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AgentJob {
    /// `<namespace>/<name>` of the Sync.
    pub sync: String,
    /// The Cluster as `${cluster.*}` sees it.
    pub cluster_name: String,
    pub cluster_namespace: String,
    pub labels: std::collections::BTreeMap<String, String>,
    /// `node-<id>`: the owner (`x-starling-writer`).
    pub writer: String,
    /// The owner generation (the target's fence).
    pub generation: u64,
    /// The installation's identity, written into the fence.
    #[serde(default)]
    pub installation: String,
    /// Take the target over from another installation (`starling cluster adopt`).
    #[serde(default)]
    pub adopt: bool,
    pub revision: Option<String>,
    /// `sha256:<hex>`; empty when retiring.
    pub artifact: String,
    pub template: SyncTemplate,
    pub previous_inventory: Vec<ObjectRef>,
    pub wait: bool,
    pub retire: bool,
    /// The render digest recorded on the target with the revision.
    pub record_digest: Option<String>,
    /// `Some`: not a sync but a read for `starling recover`: the fence and these Syncs'
    /// inventory mirrors ([`crate::SyncEngine::survey`]); the answer is a [`SurveyAnswer`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub survey: Option<Vec<String>>,
    /// Release name, cluster annotations and `valuesFrom` documents for the render.
    #[serde(default)]
    pub render: crate::RenderInputs,
}

/// What an agent answers to a survey job.
pub type SurveyAnswer = Result<crate::TargetSurvey, String>;
