//! `starling crds` (being built).

#[derive(clap::Args, Debug)]
pub struct CrdsArgs {}

pub fn run(_args: CrdsArgs) -> anyhow::Result<()> {
    anyhow::bail!("`starling crds` is not built yet")
}
