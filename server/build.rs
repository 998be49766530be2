//! Records the git commit the server is built from, for
//! `borbaman_build_info` and `borbaman status`: `BORBAMAN_GIT_COMMIT` if
//! set (an image built without `.git`), else `git rev-parse`, else
//! `unknown`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=BORBAMAN_GIT_COMMIT");
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let commit = std::env::var("BORBAMAN_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    // Built again when HEAD moves (a commit or a checkout).
    for path in ["HEAD", "logs/HEAD"] {
        if let Some(file) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    println!("cargo:rustc-env=BORBAMAN_GIT_COMMIT={commit}");
}
