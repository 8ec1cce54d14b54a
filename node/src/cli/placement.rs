//! `starling placement` (being built).

#[derive(clap::Args, Debug)]
pub struct PlacementArgs {}

pub fn run(_args: PlacementArgs) -> anyhow::Result<()> {
    anyhow::bail!("`starling placement` is not built yet")
}
