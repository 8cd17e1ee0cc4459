//! Embeds the golden vectors in the crate, so that the `fire-conformance` binary carries its
//! suite and runs from any directory (a `pip install`ed or `cargo install`ed binary has no
//! repository beside it). Every `.yaml` file under the suite folder is embedded byte for byte,
//! `MANIFEST.yaml` included; the loader then checks them exactly as it checks a folder on disk —
//! SHA-256 per file against the manifest, no unlisted file. spec: [vec.manifest]
//!
//! The suite folder is `vectors/` beside Cargo.toml (a link to the repository's `vectors/`), or
//! `FIRE_EMBED_VECTORS=DIR` when set. A missing folder is a build error that says so.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            walk(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "yaml") {
            let rel = path
                .strip_prefix(root)
                .map_err(std::io::Error::other)?
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            out.push((rel, path));
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-env-changed=FIRE_EMBED_VECTORS");
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    // `vectors` beside Cargo.toml is a symbolic link to the repository's `../vectors`, so that
    // `cargo package` and maturin's source distribution carry the suite inside the crate; a
    // checkout without symbolic links falls back to `../vectors`.
    let dir = match env::var_os("FIRE_EMBED_VECTORS") {
        Some(d) => PathBuf::from(d),
        None => [
            manifest_dir.join("vectors"),
            manifest_dir.join("../vectors"),
        ]
        .into_iter()
        .find(|d| d.join("MANIFEST.yaml").is_file())
        .unwrap_or_else(|| manifest_dir.join("vectors")),
    };
    if !dir.join("MANIFEST.yaml").is_file() {
        return Err(format!(
            "no golden-vector suite to embed: {} has no MANIFEST.yaml. Build fire-conformance \
             from a clone of the repository (the suite is its `vectors/` folder), or set \
             FIRE_EMBED_VECTORS=DIR",
            dir.display()
        )
        .into());
    }
    let dir = dir.canonicalize()?;
    // A new, removed or renamed file changes the folder listing; edited files rerun by name.
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files = Vec::new();
    walk(&dir, &dir, &mut files)?;
    files.sort();
    let mut code = String::from(
        "/// Every `.yaml` file of the embedded suite: (path relative to the suite, bytes).\n\
         pub static FILES: &[(&str, &[u8])] = &[\n",
    );
    for (rel, path) in &files {
        println!("cargo:rerun-if-changed={}", path.display());
        writeln!(
            code,
            "    ({rel:?}, include_bytes!({:?})),",
            path.display().to_string()
        )?;
    }
    code.push_str("];\n");
    fs::write(
        PathBuf::from(env::var("OUT_DIR")?).join("embedded_vectors.rs"),
        code,
    )?;
    Ok(())
}
