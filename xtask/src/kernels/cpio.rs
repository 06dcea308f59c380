//! A newc (`070701`) cpio archive, the format the kernel unpacks as its
//! initramfs: directories and regular files, owned by root.

/// An archive being written.
#[derive(Default)]
pub struct Writer {
    out: Vec<u8>,
    next_ino: u32,
}

impl Writer {
    /// A directory `path` (no leading `/`), mode 0755.
    pub fn dir(&mut self, path: &str) {
        self.entry(path, 0o040_755, &[]);
    }

    /// A regular file `path` with `mode`'s permission bits.
    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        self.entry(path, 0o100_000 | mode, data);
    }

    /// The archive, closed by its trailer.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.out
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.next_ino += 1;
        let nlink = if mode & 0o040_000 != 0 { 2 } else { 1 };
        let size = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let name_size = u32::try_from(name.len() + 1).unwrap_or(u32::MAX);
        // ino mode uid gid nlink mtime filesize devmajor devminor
        // rdevmajor rdevminor namesize check
        let fields = [
            self.next_ino,
            mode,
            0,
            0,
            nlink,
            0,
            size,
            0,
            0,
            0,
            0,
            name_size,
            0,
        ];
        self.out.extend_from_slice(b"070701");
        for f in fields {
            self.out.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Writer;

    #[test]
    fn entries_are_aligned_and_trailed() {
        let mut w = Writer::default();
        w.dir("bin");
        w.file("init", 0o755, b"#!/bin/sh\n");
        let a = w.finish();
        assert!(a.starts_with(b"070701"));
        // header (110) + "bin\0" (4) = 114, padded to 116
        assert_eq!(&a[116..122], b"070701");
        assert!(a.windows(10).any(|w| w == b"TRAILER!!!"));
        assert_eq!(a.len() % 4, 0);
    }
}
