//! Files written whole or not at all (checkpoints, safetensors): a
//! temporary file, fsync, rename over the target, fsync of the folder.

use crate::error::{Error, Result};
use std::fs::File;
use std::io::Write;
use std::path::Path;

pub(crate) fn io(op: &'static str, path: &Path, e: std::io::Error) -> Error {
    Error::Io {
        op,
        what: format!("{}: {e}", path.display()),
    }
}

/// The file a save to `path` must replace: `path` itself, or, when it is a
/// symbolic link, the end of its chain of links (which need not exist yet).
/// Renaming the new file over the link would turn the link into a file and
/// leave the file it pointed to stale. Gives up after 40 links (a loop).
fn follow_links(op: &'static str, path: &Path) -> Result<std::path::PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&p).map_err(|e| io(op, &p, e))?;
                p = match p.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            _ => return Ok(p),
        }
    }
    Err(Error::Io {
        op,
        what: format!("{}: too many levels of symbolic links", path.display()),
    })
}

/// Writes `bytes` to `path` atomically: a fresh temporary file in the same
/// folder, fsync, rename over `path`, fsync of the folder. A `path` that is
/// a symbolic link is followed (see `follow_links`). On failure the
/// temporary file is removed and any earlier file at `path` is untouched,
/// so a crash leaves either the old file or the new one. `noun` names the
/// file in the message of a failed folder sync ("checkpoint").
pub(crate) fn write_atomic(op: &'static str, path: &Path, bytes: &[u8], noun: &str) -> Result<()> {
    let target = follow_links(op, path)?;
    let path = target.as_path();
    let name = path.file_name().ok_or_else(|| Error::Io {
        op,
        what: format!("{}: not a file path", path.display()),
    })?;
    // A fresh, exclusive temporary name: create_new refuses an existing
    // file or symlink planted at that name.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let (mut tmp, mut file) = (path.to_path_buf(), None);
    for attempt in 0..16u32 {
        let mut tmp_name = name.to_os_string();
        tmp_name.push(format!(
            ".tmp.{}.{:x}",
            std::process::id(),
            nanos.wrapping_add(attempt.wrapping_mul(0x9e37_79b9))
        ));
        tmp = path.with_file_name(tmp_name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(f) => {
                file = Some(f);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io(op, path, e)),
        }
    }
    let Some(mut f) = file else {
        return Err(Error::Io {
            op,
            what: format!("{}: no free temporary name", path.display()),
        });
    };
    let mut write = || -> std::io::Result<()> {
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(op, path, e)
    })?;
    // The new file is in place; make the rename itself durable. If that
    // fails the caller must know, but the earlier file is already gone,
    // so say so rather than imply nothing changed.
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::Io {
        op,
        what: format!(
            "{}: the {noun} was written and renamed into place, but syncing its folder failed ({e}); it may not survive a power loss",
            path.display()
        ),
    })
}
