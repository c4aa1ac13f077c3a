//! Output sets: the files one command run writes appear together, complete and on disk, or not
//! at all.
//!
//! A run stages its files in a directory inside the output directory
//! (`DIR/.lamino-staging-<pid>-<n>/`, the same filesystem, so moving a file into place is a
//! rename), under their final names. [`OutputSet::commit`] syncs every staged file, checks that
//! no rename can fail for a reason known in advance (a directory in the way), renames them into
//! `DIR`, removes the members of the previous set of the same kind that the new set does not
//! produce, records the new members and syncs `DIR`. Until then nothing in `DIR` changes, so a
//! run that fails (an error, a full disk, a kill) leaves the previous outputs whole, byte for
//! byte; [`OutputSet::complete`] says so in the error.
//!
//! A staging directory left by a killed process is never read as output (no reader looks inside
//! it); the next set begun in the same directory removes the staging directories of processes
//! that no longer exist (Linux: no `/proc/<pid>`) and leaves the others alone.
//!
//! A set of a *kind* (`OutputSet::begin(dir, "reconstruct")`) owns the files it wrote: they are
//! listed in `DIR/.lamino-<kind>.outputs`, each with a digest of its content, and the next set of
//! that kind removes those it does not write again (a `convergence.png` of an earlier run must
//! not sit beside the outputs of a run without one), but only where the file still has the
//! content recorded: a name alone (a line `notes.txt` added to the list, a file the user has
//! since replaced) never removes anything. A set of one user-named file ([`OutputSet::file`])
//! owns only that name.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::IoError;

/// What the name of every staging directory starts with.
pub const STAGING_PREFIX: &str = ".lamino-staging-";

/// The files of one command run, staged until [`commit`](Self::commit); dropped uncommitted,
/// the staged files are removed and the output directory is left as it was.
#[derive(Debug)]
pub struct OutputSet {
    dir: PathBuf,
    /// The manifest of the set's kind, when it has one.
    manifest: Option<PathBuf>,
    staging: PathBuf,
    members: Vec<String>,
    /// Whether the set made `dir`: dropped uncommitted, it removes it again when empty.
    created: bool,
}

fn write_error(path: &Path, doing: &str, e: impl Display) -> IoError {
    IoError::Write {
        path: path.into(),
        reason: format!("{doing}: {e}"),
    }
}

/// Whether `a` and `b` name the same existing file (hard links and other spellings included).
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
}

/// Flushes a file's (or, on unix, a directory's entries') writes to the disk.
fn sync(path: &Path) -> std::io::Result<()> {
    #[cfg(not(unix))]
    if path.is_dir() {
        // Directories cannot be opened as files elsewhere; their renames are the filesystem's.
        return Ok(());
    }
    std::fs::File::open(path)?.sync_all()
}

/// The metadata file at the root of a Zarr v3 store: a directory holding one is an output that
/// a new one may replace.
const ZARR_METADATA: &str = "zarr.json";

/// [`sync`] of a file, or of a directory with everything in it (an OME-Zarr output), children
/// first.
fn sync_tree(path: &Path) -> std::io::Result<()> {
    if path.is_dir() {
        for entry in std::fs::read_dir(path)? {
            sync_tree(&entry?.path())?;
        }
    }
    sync(path)
}

/// Whether the process that made a staging directory named `name` has ended. Only where
/// processes can be looked up (Linux: `/proc`); elsewhere no staging directory is called stale.
fn stale_staging(name: &str) -> bool {
    let Some(pid) = name
        .strip_prefix(STAGING_PREFIX)
        .and_then(|rest| rest.split('-').next())
        .and_then(|pid| pid.parse::<u32>().ok())
    else {
        return false;
    };
    let proc = Path::new("/proc");
    pid != std::process::id() && proc.join("self").exists() && !proc.join(pid.to_string()).exists()
}

impl OutputSet {
    /// Begins a set of kind `kind` in the directory `dir` (created if missing): the names the
    /// previous set of this kind wrote there and this one does not are removed at commit.
    pub fn begin(dir: &Path, kind: &str) -> Result<Self, IoError> {
        let mut set = Self::begin_in(dir)?;
        set.manifest = Some(dir.join(format!(".lamino-{kind}.outputs")));
        Ok(set)
    }

    /// Begins a set of the one file `path` (its directory is created if missing) and returns it
    /// with the staged path to write the file to.
    pub fn file(path: &Path) -> Result<(Self, PathBuf), IoError> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| write_error(path, "choosing the output", "the path names no file"))?;
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let mut set = Self::begin_in(dir)?;
        let staged = set.stage(name)?;
        Ok((set, staged))
    }

    fn begin_in(dir: &Path) -> Result<Self, IoError> {
        static SETS: AtomicU64 = AtomicU64::new(0);
        if dir.exists() && !dir.is_dir() {
            return Err(write_error(
                dir,
                "creating the output directory",
                "a file of that name exists",
            ));
        }
        let created = !dir.exists();
        std::fs::create_dir_all(dir)
            .map_err(|e| write_error(dir, "creating the output directory", e))?;
        let entries = std::fs::read_dir(dir)
            .map_err(|e| write_error(dir, "listing the output directory", e))?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.to_str().is_some_and(stale_staging) {
                // Best effort: a staging directory that stays is never read as output, and the
                // next set tries again.
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let staging = dir.join(format!(
            "{STAGING_PREFIX}{}-{}",
            std::process::id(),
            SETS.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&staging)
            .map_err(|e| write_error(&staging, "creating the staging directory", e))?;
        Ok(Self {
            dir: dir.into(),
            manifest: None,
            staging,
            members: Vec::new(),
            created,
        })
    }

    /// The output directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory the files are staged in: a writer that names its own files writes them
    /// here, and each is then added with [`stage`](Self::stage).
    pub fn staging_dir(&self) -> &Path {
        &self.staging
    }

    /// Where the file `name` appears at commit.
    pub fn final_path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Adds the file `name` (a plain file name) to the set and returns the staged path to write
    /// it to (or where it was written, in [`staging_dir`](Self::staging_dir)). Every staged file
    /// must exist at commit.
    pub fn stage(&mut self, name: &str) -> Result<PathBuf, IoError> {
        let path = self.final_path(name);
        let plain = Path::new(name).file_name().and_then(|n| n.to_str()) == Some(name);
        if !plain || name.starts_with(STAGING_PREFIX) {
            return Err(write_error(
                &path,
                "staging an output",
                "not a plain file name",
            ));
        }
        if self.members.iter().any(|m| m == name) {
            return Err(write_error(
                &path,
                "staging an output",
                "the command writes it twice",
            ));
        }
        self.members.push(name.into());
        Ok(self.staging.join(name))
    }

    /// The names the previous set of this kind recorded, with their digests (none for a set
    /// without a kind, or when no set of this kind was committed here). A line that is not
    /// `DIGEST NAME` of a plain name is no member.
    fn previous_members(&self) -> Vec<(String, u64)> {
        let Some(manifest) = &self.manifest else {
            return Vec::new();
        };
        std::fs::read_to_string(manifest)
            .map(|text| {
                text.lines()
                    .filter_map(|l| {
                        let (digest, name) = l.split_once(' ')?;
                        let plain = Path::new(name).file_name().and_then(|n| n.to_str());
                        (plain == Some(name) && digest.len() == 16).then(|| {
                            Some((name.to_string(), u64::from_str_radix(digest, 16).ok()?))
                        })?
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether `name` in the output directory is the member of the previous set that the
    /// manifest records: the name listed and the content of its digest.
    fn is_previous_member(previous: &[(String, u64)], path: &Path, name: &str) -> bool {
        previous
            .iter()
            .any(|(n, d)| n == name && digest(path).is_ok_and(|now| now == *d))
    }

    /// Refuses, before anything is written, to run when one of `inputs` is one of `outputs`
    /// (names in the output directory) or a file of the previous set that the commit would
    /// replace or remove: compared by file identity (device and inode on unix), so other
    /// spellings and hard links are caught too.
    /// An input folder (a folder of TIFFs) that is the output directory is refused too: the
    /// outputs would land among its frames and change what it holds.
    pub fn refuse_inputs(&self, outputs: &[&str], inputs: &[&Path]) -> Result<(), IoError> {
        if let Some(input) = inputs
            .iter()
            .find(|i| i.is_dir() && same_file(i, &self.dir))
        {
            return Err(IoError::InputIsOutput {
                input: input.to_path_buf(),
                output: self.dir.clone(),
            });
        }
        let previous = self.previous_members();
        let names = outputs
            .iter()
            .copied()
            .chain(previous.iter().map(|(name, _)| name.as_str()));
        for name in names {
            let output = self.final_path(name);
            if let Some(input) = inputs.iter().find(|i| same_file(i, &output)) {
                return Err(IoError::InputIsOutput {
                    input: input.to_path_buf(),
                    output,
                });
            }
        }
        Ok(())
    }

    /// The error of a run that did not reach its commit: `reason`, and that the previous outputs
    /// are unchanged. Drops the staged files.
    pub fn abandon(self, reason: impl Display) -> IoError {
        let (dir, reason) = (self.dir.clone(), reason.to_string());
        match self.created {
            true => IoError::NothingWritten { dir, reason },
            false => IoError::Unchanged { dir, reason },
        }
    }

    /// Commits the set when `result` is a success ([`commit`](Self::commit)), abandons it
    /// otherwise ([`abandon`](Self::abandon)); returns the result's value and the paths written.
    pub fn complete<T, E: Display>(
        self,
        result: Result<T, E>,
    ) -> Result<(T, Vec<PathBuf>), IoError> {
        match result {
            Ok(value) => Ok((value, self.commit()?)),
            Err(e) => Err(self.abandon(e)),
        }
    }

    /// Moves every staged file into the output directory once all are on disk, removes the
    /// members of the previous set of this kind that this one does not write, and returns the
    /// paths written. An error before the first rename leaves the previous outputs unchanged
    /// (and says so).
    pub fn commit(mut self) -> Result<Vec<PathBuf>, IoError> {
        let previous = self.previous_members();
        let mut digests = Vec::with_capacity(self.members.len());
        for name in &self.members {
            let staged = self.staging.join(name);
            match sync_tree(&staged).and_then(|()| digest(&staged)) {
                Ok(d) => digests.push(d),
                Err(e) => {
                    let reason = write_error(&self.final_path(name), "flushing it to disk", e);
                    return Err(self.abandon(reason));
                }
            }
            let path = self.final_path(name);
            // A directory output (OME-Zarr) replaces the one a previous run wrote; any other
            // directory is the user's.
            let replaceable = staged.is_dir()
                && (Self::is_previous_member(&previous, &path, name)
                    || path.join(ZARR_METADATA).is_file());
            if path.is_dir() && !replaceable {
                let reason = write_error(
                    &path,
                    "moving it into place",
                    "a directory of that name is in the way",
                );
                return Err(self.abandon(reason));
            }
        }
        let manifest = match &self.manifest {
            Some(path) => {
                let staged = self.staging.join(".manifest");
                let text: String = self
                    .members
                    .iter()
                    .zip(&digests)
                    .map(|(m, d)| format!("{d:016x} {m}\n"))
                    .collect();
                let written = std::fs::write(&staged, text).and_then(|()| sync(&staged));
                if let Err(e) = written {
                    let reason = write_error(path, "recording the outputs", e);
                    return Err(self.abandon(reason));
                }
                Some((staged, path.clone()))
            }
            None => None,
        };
        if let Err(e) = sync(&self.staging) {
            let reason = write_error(&self.staging, "flushing the staging directory", e);
            return Err(self.abandon(reason));
        }
        let mut written = Vec::with_capacity(self.members.len());
        for name in &self.members {
            let path = self.final_path(name);
            // A directory cannot be renamed over a non-empty one: the previous one is moved
            // aside, not deleted, until the new one is in place (then removed with the staging
            // directory), and moved back if the new one cannot be.
            let aside = self
                .staging
                .join(format!("{STAGING_PREFIX}replaced-{name}"));
            let moved_aside = path.is_dir();
            if moved_aside {
                std::fs::rename(&path, &aside)
                    .map_err(|e| write_error(&path, "moving the previous directory aside", e))?;
            }
            std::fs::rename(self.staging.join(name), &path).map_err(|e| {
                if moved_aside {
                    // Best effort: the error says what was replaced either way.
                    let _ = std::fs::rename(&aside, &path);
                }
                write_error(
                    &path,
                    "moving it into place",
                    format!(
                        "{e}; {} of the {} outputs in {} were replaced before it",
                        written.len(),
                        self.members.len(),
                        self.dir.display()
                    ),
                )
            })?;
            written.push(path);
        }
        for (stale, _) in previous.iter().filter(|(p, _)| !self.members.contains(p)) {
            let path = self.final_path(stale);
            // Only what is still the content this kind of set wrote there: never a name alone.
            if !Self::is_previous_member(&previous, &path, stale) {
                continue;
            }
            let removed = match path.is_dir() {
                true => std::fs::remove_dir_all(&path),
                false => std::fs::remove_file(&path),
            };
            match removed {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(write_error(
                        &path,
                        "removing this output of the previous run, which this run does not write",
                        e,
                    ));
                }
                _ => {}
            }
        }
        if let Some((staged, path)) = manifest {
            std::fs::rename(&staged, &path)
                .map_err(|e| write_error(&path, "recording the outputs", e))?;
        }
        sync(&self.dir).map_err(|e| write_error(&self.dir, "flushing the directory", e))?;
        self.created = false;
        Ok(written)
    }
}

/// A digest of an output: FNV-1a of a file's bytes, or of a directory's files (OME-Zarr), each
/// path relative to it and its bytes, in name order.
fn digest(path: &Path) -> std::io::Result<u64> {
    fn walk(path: &Path, relative: &str, state: u64) -> std::io::Result<u64> {
        let mut state = crate::hash::fnv1a_continue(state, relative.as_bytes());
        if std::fs::symlink_metadata(path)?.is_dir() {
            let mut names: Vec<_> = std::fs::read_dir(path)?
                .map(|e| e.map(|e| e.file_name()))
                .collect::<Result<_, _>>()?;
            names.sort();
            for name in names {
                let child = format!("{relative}/{}", name.to_string_lossy());
                state = walk(&path.join(&name), &child, state)?;
            }
            return Ok(state);
        }
        let mut file = std::fs::File::open(path)?;
        // A writer's buffer: digesting a volume written a slab at a time holds no more than
        // writing it did (tests/streaming.rs).
        let mut buffer = vec![0; 8 << 10];
        loop {
            match std::io::Read::read(&mut file, &mut buffer)? {
                0 => return Ok(state),
                n => state = crate::hash::fnv1a_continue(state, &buffer[..n]),
            }
        }
    }
    walk(path, "", crate::hash::FNV_OFFSET)
}

impl Drop for OutputSet {
    fn drop(&mut self) {
        // Best effort: whatever is left is a staging directory, never read as output, and removed
        // by the next set begun here once this process has ended.
        let _ = std::fs::remove_dir_all(&self.staging);
        if self.created {
            // Only when empty: a run that wrote nothing leaves no directory behind.
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

/// A set of the one file `path` and the path to write it to ([`OutputSet::file`]), or no set
/// when `path` is itself staged (in the staging directory of an enclosing set, which makes it
/// appear in place with the rest).
pub(crate) fn stage_one(path: &Path) -> Result<(Option<OutputSet>, PathBuf), IoError> {
    let staged = path
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(STAGING_PREFIX));
    if staged {
        return Ok((None, path.into()));
    }
    let (set, staged) = OutputSet::file(path)?;
    Ok((Some(set), staged))
}

/// Runs `write` on a staged file and moves it to `path` only once it is complete and on disk
/// (an [`OutputSet`] of one file, unless `path` is already staged), so an existing file is never
/// left damaged.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<(), IoError> {
    let (set, staged) = stage_one(path)?;
    let written = write(&staged).map_err(|reason| IoError::Write {
        path: path.into(),
        reason,
    });
    match set {
        Some(set) => set.complete(written).map(drop),
        None => written,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(&p).unwrap())
            })
            .collect();
        files.sort();
        files
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_set_appears_at_commit_and_replaces_the_previous_one_whole() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut first = OutputSet::begin(&out, "t").unwrap();
        for name in ["a.txt", "b.txt"] {
            std::fs::write(first.stage(name).unwrap(), name).unwrap();
        }
        assert!(entries(&out).iter().all(|n| n.starts_with(STAGING_PREFIX)));
        first.commit().unwrap();
        assert!(entries(&out) == [".lamino-t.outputs", "a.txt", "b.txt"]);
        let before = listing(&out);
        // A failing run leaves every byte as it was.
        let mut failing = OutputSet::begin(&out, "t").unwrap();
        std::fs::write(failing.stage("a.txt").unwrap(), "new").unwrap();
        let err = failing.complete(Err::<(), _>("disk full")).unwrap_err();
        assert!(err.to_string().contains("are unchanged"), "{err}");
        assert!(listing(&out) == before);
        assert!(entries(&out).len() == 3);
        // A run that writes only a.txt removes the b.txt of the previous set of its kind.
        let mut second = OutputSet::begin(&out, "t").unwrap();
        std::fs::write(second.stage("a.txt").unwrap(), "new").unwrap();
        second.commit().unwrap();
        assert!(entries(&out) == [".lamino-t.outputs", "a.txt"]);
        assert!(std::fs::read(out.join("a.txt")).unwrap() == b"new");
    }

    /// A name added to the manifest, or a member the user has since replaced, is not removed:
    /// only content the manifest's digest recognises is.
    #[test]
    fn only_files_with_the_recorded_content_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut first = OutputSet::begin(&out, "t").unwrap();
        for name in ["a.txt", "b.txt", "c.txt"] {
            std::fs::write(first.stage(name).unwrap(), name).unwrap();
        }
        first.commit().unwrap();
        let manifest = out.join(".lamino-t.outputs");
        let mut text = std::fs::read_to_string(&manifest).unwrap();
        text.push_str("notes.txt\n0000000000000000 notes.txt\n");
        std::fs::write(&manifest, text).unwrap();
        std::fs::write(out.join("notes.txt"), "the user's").unwrap();
        std::fs::write(out.join("c.txt"), "the user's now").unwrap();
        let mut second = OutputSet::begin(&out, "t").unwrap();
        std::fs::write(second.stage("a.txt").unwrap(), "new").unwrap();
        second.commit().unwrap();
        assert!(entries(&out) == [".lamino-t.outputs", "a.txt", "c.txt", "notes.txt"]);
        assert!(std::fs::read(out.join("notes.txt")).unwrap() == b"the user's");
    }

    #[test]
    fn staging_of_ended_processes_is_removed_and_others_are_left() {
        let dir = tempfile::tempdir().unwrap();
        // No process has pid 2^31 - 2 (pid_max is at most 2^22); pid 1 always exists.
        let dead = dir.path().join(format!("{STAGING_PREFIX}2147483646-0"));
        let alive = dir.path().join(format!("{STAGING_PREFIX}1-0"));
        for d in [&dead, &alive] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("x"), "x").unwrap();
        }
        let set = OutputSet::begin(dir.path(), "t").unwrap();
        assert!(alive.exists());
        assert!(dead.exists() != cfg!(target_os = "linux"));
        drop(set);
        assert!(entries(dir.path()).len() == 1 + usize::from(dead.exists()));
    }

    #[test]
    fn inputs_that_are_outputs_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("x.npy");
        std::fs::write(&input, "data").unwrap();
        let link = dir.path().join("other-name.npy");
        std::fs::hard_link(&input, &link).unwrap();
        let set = OutputSet::begin(dir.path(), "t").unwrap();
        let err = set.refuse_inputs(&["x.npy"], &[&link]).unwrap_err();
        assert!(matches!(err, IoError::InputIsOutput { .. }), "{err}");
        assert!(set.refuse_inputs(&["y.npy"], &[&link]).is_ok());
        // A folder of input frames that is the output directory.
        let err = set.refuse_inputs(&["y.npy"], &[dir.path()]).unwrap_err();
        assert!(matches!(err, IoError::InputIsOutput { .. }), "{err}");
    }

    #[test]
    fn a_file_in_place_of_the_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let err = OutputSet::begin(&file, "t").unwrap_err().to_string();
        assert!(
            err.contains(&*file.to_string_lossy()) && err.contains("a file"),
            "{err}"
        );
        let err = OutputSet::begin(&file.join("sub"), "t")
            .unwrap_err()
            .to_string();
        assert!(err.contains("creating the output directory"), "{err}");
    }
}
