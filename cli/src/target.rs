//! The SyncGroup a rollout command names (`starling rollout ... NAME -n NS`): a leaf module that
//! the rollout and history commands share.

use fleet::manifest::DEFAULT_NAMESPACE;

/// The SyncGroup a rollout command is about.
#[derive(clap::Args, Debug, Clone)]
pub struct Target {
    /// The SyncGroup's name.
    #[arg(value_name = "SYNCGROUP")]
    pub name: String,
    /// The SyncGroup's namespace.
    #[arg(short = 'n', long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
}
