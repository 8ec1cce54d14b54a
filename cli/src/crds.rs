//! `starling crds`: the CustomResourceDefinitions of the `starling.dev` API, generated from the
//! `fleet` types. Prints them as multi-document YAML (for `kubectl apply -f -`), or with
//! `--output-dir` writes one file per CRD, named and written exactly as under `chart/crds/`.

use std::path::PathBuf;

use anyhow::Context;

#[derive(clap::Args, Debug)]
pub struct CrdsArgs {
    /// Write one file per CRD (`<plural>.starling.dev.yaml`) into this directory instead of
    /// printing them; the directory is created if needed.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
}

pub fn run(args: CrdsArgs) -> anyhow::Result<()> {
    let Some(dir) = args.output_dir else {
        print!("{}", fleet::crd::crds_yaml());
        return Ok(());
    };
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create directory {}", dir.display()))?;
    for crd in fleet::crd::crds() {
        let path = dir.join(fleet::crd::crd_file_name(&crd));
        std::fs::write(&path, fleet::crd::crd_file(&crd))
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
