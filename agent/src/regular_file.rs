//! Files lockrun reads whose path a caller or a policy names (a policy file
//! and every file it `extends`): regular files only, and only up to a
//! bound, read by one helper.
//!
//! A path can name anything: `/dev/zero` never ends (read whole, it grew
//! lockrun by gigabytes in seconds), a FIFO blocks the `open` itself until a
//! writer comes, a device may act on being opened (`/dev/watchdog` arms the
//! machine's watchdog). So the path is first opened `O_PATH` (which opens
//! nothing of the file: no FIFO waits, no device acts), judged by `fstat`,
//! and only a regular file is opened for reading, through that descriptor
//! (`/proc/self/fd/N`: the same inode, whatever the path names meanwhile),
//! with `O_NONBLOCK` and `O_NOCTTY` besides, and read to at most a bound.
//! A leaf: it knows no policy, and any command may use it.

use std::fs::File;
use std::io::Read as _;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::Path;

/// Why a file named to lockrun was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The path could not be opened (absent, not permitted, a loop).
    #[error("{0}")]
    Open(std::io::Error),
    /// Not a regular file: lockrun reads nothing else here.
    #[error("it is {0}, not a regular file")]
    NotRegular(&'static str),
    /// Larger than the bound.
    #[error("it is larger than {}, the most lockrun reads of such a file", shown(*.0))]
    TooLarge(u64),
    /// A read failed.
    #[error("{0}")]
    Read(std::io::Error),
    /// Not UTF-8 text where text is read.
    #[error("it is not UTF-8 text")]
    NotText,
}

/// A bound as people write it: `1 MiB`, `64 KiB`, `100 bytes`.
fn shown(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// What a file type is, as a refusal says it.
#[must_use]
pub fn kind(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_symlink() {
        "a symlink"
    } else {
        "a special file"
    }
}

/// Open `path` for reading if it is a regular file (following symlinks, as
/// any named path is followed), without blocking on or acting on anything
/// else. The caller reads it with a bound of its own ([`read`] does).
pub fn open(path: &Path) -> Result<File, ReadError> {
    let located = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)
        .map_err(ReadError::Open)?;
    let md = located.metadata().map_err(ReadError::Open)?;
    if !md.file_type().is_file() {
        return Err(ReadError::NotRegular(kind(md.file_type())));
    }
    // The inode just judged, opened for reading through its descriptor.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{}", located.as_raw_fd()))
        .map_err(ReadError::Open)?;
    let again = file.metadata().map_err(ReadError::Open)?;
    if !again.file_type().is_file() || (again.dev(), again.ino()) != (md.dev(), md.ino()) {
        return Err(ReadError::NotRegular(kind(again.file_type())));
    }
    Ok(file)
}

/// The bytes of the regular file at `path`, at most `limit` of them: a
/// longer file is refused whole ([`ReadError::TooLarge`]), never cut.
pub fn read(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let file = open(path)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::Read)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge(limit));
    }
    Ok(bytes)
}

/// [`read`], as UTF-8 text.
pub fn read_text(path: &Path, limit: u64) -> Result<String, ReadError> {
    String::from_utf8(read(path, limit)?).map_err(|_| ReadError::NotText)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "lockrun-regular-file-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_regular_file_within_the_bound_is_read_whole() {
        let d = scratch("ok");
        let f = d.join("f");
        std::fs::write(&f, b"12345").unwrap();
        assert_eq!(read(&f, 5).unwrap(), b"12345");
        assert_eq!(read_text(&f, 5).unwrap(), "12345");
        // Through a symlink, as a named path is followed.
        std::os::unix::fs::symlink(&f, d.join("l")).unwrap();
        assert_eq!(read(&d.join("l"), 5).unwrap(), b"12345");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_longer_file_is_refused_whole() {
        let d = scratch("long");
        let f = d.join("f");
        std::fs::write(&f, b"123456").unwrap();
        let e = read(&f, 5).unwrap_err();
        assert!(matches!(e, ReadError::TooLarge(5)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "it is larger than 5 bytes, the most lockrun reads of such a file"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn devices_directories_and_fifos_are_refused_without_reading_or_waiting() {
        let d = scratch("special");
        let fifo = d.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for (path, what) in [
            (Path::new("/dev/zero"), "a character device"),
            (Path::new("/dev/null"), "a character device"),
            (d.as_path(), "a directory"),
            (fifo.as_path(), "a FIFO"),
        ] {
            let started = std::time::Instant::now();
            let e = read(path, 1 << 20).unwrap_err();
            assert_eq!(e.to_string(), format!("it is {what}, not a regular file"));
            assert!(started.elapsed() < std::time::Duration::from_secs(2));
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn not_utf8_and_absent_files_say_so() {
        let d = scratch("text");
        let f = d.join("f");
        std::fs::write(&f, b"\xff\xfe").unwrap();
        assert!(matches!(read_text(&f, 10), Err(ReadError::NotText)));
        assert!(matches!(
            read(&d.join("absent"), 10),
            Err(ReadError::Open(e)) if e.kind() == std::io::ErrorKind::NotFound
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
