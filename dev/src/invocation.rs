//! How `starling dev` names this binary in the hints it prints: what a user can type in
//! another terminal to reach the demo.

use std::path::PathBuf;

/// How to run this same binary from a shell, for the hints printed once the demo runs:
/// `starling` when that is what `PATH` finds, else its path, relative to the current directory
/// when under it (`target/release/starling` after `cargo run --release -- dev`).
pub(super) fn invocation() -> String {
    let Ok(exe) = std::env::current_exe() else {
        return "starling".to_owned();
    };
    let path = std::env::var_os("PATH").unwrap_or_default();
    let cwd = std::env::current_dir().ok();
    invocation_from(&exe, cwd.as_deref(), std::env::split_paths(&path))
}

fn invocation_from(
    exe: &std::path::Path,
    cwd: Option<&std::path::Path>,
    path_dirs: impl IntoIterator<Item = PathBuf>,
) -> String {
    let same_file =
        |candidate: &std::path::Path| match (candidate.canonicalize(), exe.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => candidate == exe,
        };
    if path_dirs
        .into_iter()
        .any(|dir| same_file(&dir.join("starling")))
    {
        return "starling".to_owned();
    }
    let shown = match cwd.and_then(|cwd| exe.strip_prefix(cwd).ok()) {
        Some(relative) if relative.components().count() > 1 => relative.display().to_string(),
        Some(relative) => format!("./{}", relative.display()),
        None => exe.display().to_string(),
    };
    if shown.contains(char::is_whitespace) {
        format!("'{shown}'")
    } else {
        shown
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::invocation_from;

    #[test]
    fn hints_name_the_binary_the_user_can_run() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target/release");
        std::fs::create_dir_all(&target).unwrap();
        let exe = target.join("starling");
        std::fs::write(&exe, "").unwrap();
        // Run with `cargo run --release -- dev` from the checkout: the path under it.
        assert_eq!(
            invocation_from(&exe, Some(dir.path()), Vec::<PathBuf>::new()),
            "target/release/starling"
        );
        // Installed on PATH: its name.
        assert_eq!(
            invocation_from(&exe, Some(dir.path()), vec![target.clone()]),
            "starling"
        );
        // Elsewhere: the whole path.
        assert_eq!(
            invocation_from(&exe, Some(Path::new("/nowhere")), Vec::<PathBuf>::new()),
            exe.display().to_string()
        );
        assert_eq!(
            invocation_from(&exe, Some(&target), Vec::<PathBuf>::new()),
            "./starling"
        );
    }
}
