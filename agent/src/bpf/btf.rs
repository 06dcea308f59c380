//! Just enough of the kernel's BTF (`/sys/kernel/btf/vmlinux`, the type
//! information a `CONFIG_DEBUG_INFO_BTF` kernel carries) for lockrun's unix
//! guard ([`super::guard`]): the id of a function, to attach a program to
//! it, and the byte offset of a struct's member, to read it. A function or
//! member this kernel does not have is `None`, and the guard does not load.
//!
//! The format (Documentation/bpf/btf.rst): a header, then the type
//! section, a sequence of `struct btf_type` (name offset, info word, size
//! or type), each followed by data of a length its kind decides; type ids
//! count from 1 in that order. Names are offsets into the string section.

use std::collections::HashMap;

/// `BTF_KIND_STRUCT`, `BTF_KIND_FUNC`.
const KIND_STRUCT: u32 = 4;
const KIND_FUNC: u32 = 12;

/// The functions and structs of one BTF blob that were asked for, by name.
#[derive(Debug, Default)]
pub struct Btf {
    funcs: HashMap<String, u32>,
    /// Struct name → its members' names and bit offsets (the first struct
    /// of a name: vmlinux has one of each).
    structs: HashMap<String, Vec<(String, u32)>>,
}

impl Btf {
    /// The running kernel's functions `funcs` and structs `structs`.
    pub fn of_kernel(funcs: &[&str], structs: &[&str]) -> std::io::Result<Self> {
        Self::parse(&std::fs::read("/sys/kernel/btf/vmlinux")?, funcs, structs).ok_or_else(|| {
            std::io::Error::other("/sys/kernel/btf/vmlinux is not BTF lockrun reads")
        })
    }

    /// The functions `funcs` and structs `structs` of `data` (those it
    /// has); `None` when it is not BTF (of this machine's byte order) or is
    /// cut short. Only those names are kept: vmlinux has tens of thousands
    /// of each.
    #[must_use]
    pub fn parse(data: &[u8], funcs: &[&str], structs: &[&str]) -> Option<Self> {
        let u32_at = |at: usize| -> Option<u32> {
            Some(u32::from_ne_bytes(data.get(at..at + 4)?.try_into().ok()?))
        };
        if data.get(..2)? != 0xeb9f_u16.to_ne_bytes() {
            return None;
        }
        let hdr_len = u32_at(4)? as usize;
        let (type_off, type_len) = (u32_at(8)? as usize, u32_at(12)? as usize);
        let (str_off, str_len) = (u32_at(16)? as usize, u32_at(20)? as usize);
        let types = hdr_len.checked_add(type_off)?;
        let types_end = types.checked_add(type_len)?;
        let strings = data.get(hdr_len + str_off..hdr_len + str_off + str_len)?;
        let name = |off: u32| -> Option<&str> {
            let s = strings.get(off as usize..)?;
            let end = s.iter().position(|b| *b == 0)?;
            std::str::from_utf8(&s[..end]).ok()
        };
        let mut btf = Self::default();
        let (mut at, mut id) = (types, 1u32);
        while at < types_end {
            let (name_off, info) = (u32_at(at)?, u32_at(at + 4)?);
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            let kind_flag = info >> 31 == 1;
            let extra = match kind {
                1 | 14 | 17 => 4,             // INT, VAR, DECL_TAG
                3 => 12,                      // ARRAY
                4 | 5 | 15 | 19 => 12 * vlen, // STRUCT, UNION, DATASEC, ENUM64
                6 | 13 => 8 * vlen,           // ENUM, FUNC_PROTO
                _ => 0,
            };
            match kind {
                KIND_FUNC => {
                    if let Some(n) = name(name_off).filter(|n| funcs.contains(n)) {
                        btf.funcs.entry(n.to_owned()).or_insert(id);
                    }
                }
                KIND_STRUCT => {
                    if let Some(n) = name(name_off).filter(|n| structs.contains(n)) {
                        if !btf.structs.contains_key(n) {
                            let mut members = Vec::with_capacity(vlen);
                            for m in 0..vlen {
                                let m_at = at + 12 + 12 * m;
                                let offset = u32_at(m_at + 8)?;
                                // With kind_flag: the bitfield size in the top 8 bits.
                                let bits = if kind_flag {
                                    offset & 0x00ff_ffff
                                } else {
                                    offset
                                };
                                let m_name = name(u32_at(m_at)?).unwrap_or_default();
                                members.push((m_name.to_owned(), bits));
                            }
                            btf.structs.insert(n.to_owned(), members);
                        }
                    }
                }
                _ => {}
            }
            at += 12 + extra;
            id += 1;
        }
        Some(btf)
    }

    /// The type id of function `name`.
    #[must_use]
    pub fn func(&self, name: &str) -> Option<u32> {
        self.funcs.get(name).copied()
    }

    /// The byte offset of `member` in `struct name` (a whole-byte member).
    #[must_use]
    pub fn offset(&self, name: &str, member: &str) -> Option<i32> {
        let bits = self.structs.get(name)?.iter().find(|(m, _)| m == member)?.1;
        (bits % 8 == 0).then(|| i32::try_from(bits / 8).ok())?
    }
}

#[cfg(test)]
mod tests {
    /// A blob of two types: `struct s { int a; long b; }` (b at byte 8) and
    /// `int f(void)` as a function.
    fn blob() -> Vec<u8> {
        let strings = b"\0s\0a\0b\0f\0";
        let mut types = Vec::new();
        let mut t = |words: &[u32]| {
            for w in words {
                types.extend_from_slice(&w.to_ne_bytes());
            }
        };
        // [1] INT "" size 4, encoding word
        t(&[0, 1 << 24, 4, 32]);
        // [2] STRUCT "s" vlen 2 size 16: a @0, b @64 bits
        t(&[1, (4 << 24) | 2, 16, 3, 1, 0, 5, 1, 64]);
        // [3] FUNC_PROTO vlen 0 → int
        t(&[0, 13 << 24, 1]);
        // [4] FUNC "f" → proto 3
        t(&[7, 12 << 24, 3]);
        let mut out = Vec::new();
        out.extend_from_slice(&0xeb9f_u16.to_ne_bytes());
        out.extend_from_slice(&[1, 0]);
        for w in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            out.extend_from_slice(&w.to_ne_bytes());
        }
        out.extend_from_slice(&types);
        out.extend_from_slice(strings);
        out
    }

    #[test]
    fn finds_functions_and_member_offsets() {
        let b = super::Btf::parse(&blob(), &["f", "g"], &["s", "t"]).unwrap();
        assert_eq!(b.func("f"), Some(4));
        assert_eq!(b.func("g"), None);
        assert_eq!(b.offset("s", "a"), Some(0));
        assert_eq!(b.offset("s", "b"), Some(8));
        assert_eq!(b.offset("s", "c"), None);
        assert_eq!(b.offset("t", "a"), None);
        // Only what was asked for is kept.
        assert_eq!(
            super::Btf::parse(&blob(), &[], &[]).unwrap().func("f"),
            None
        );
        assert!(super::Btf::parse(b"not btf at all, not at all", &["f"], &[]).is_none());
        let mut cut = blob();
        cut.truncate(40);
        assert!(super::Btf::parse(&cut, &["f"], &["s"]).is_none());
    }

    /// The kernel's own, where there is one: what the guard needs is there.
    #[test]
    fn the_kernels_btf_names_what_the_guard_reads() {
        let Ok(b) =
            super::Btf::of_kernel(&["security_unix_stream_connect"], &["unix_sock", "socket"])
        else {
            return;
        };
        assert!(b.func("security_unix_stream_connect").is_some());
        assert!(b.offset("unix_sock", "peer").is_some());
        assert_eq!(b.offset("socket", "sk").map(|o| o % 8), Some(0));
    }
}
