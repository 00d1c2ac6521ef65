//! The program headers of a 64-bit ELF executable, from its first bytes: what exec and the
//! dynamic loader read before anything else. Read by the launcher (is it linked statically?)
//! and by the prefetch (which pages of the app's executable its exec touches first).

use object::elf::{FileHeader64, ProgramHeader64};
use object::read::elf::FileHeader;
use object::Endianness;

/// An executable's ELF header and program headers.
pub struct Headers<'a> {
    pub header: &'a FileHeader64<Endianness>,
    pub endian: Endianness,
    pub programs: &'a [ProgramHeader64<Endianness>],
}

/// The headers in `head`, the file's first bytes (linkers put the program headers right
/// after the ELF header); None for anything that is not a 64-bit ELF file whose program
/// headers lie within `head`.
pub fn headers(head: &[u8]) -> Option<Headers<'_>> {
    let header = FileHeader64::<Endianness>::parse(head).ok()?;
    let endian = header.endian().ok()?;
    let programs = header.program_headers(endian, head).ok()?;
    Some(Headers {
        header,
        endian,
        programs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_test_binary_and_refuses_other_bytes() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let h = headers(&exe[..4096.min(exe.len())]).expect("a 64-bit ELF file");
        assert!(
            h.programs
                .iter()
                .any(|p| object::read::elf::ProgramHeader::p_type(p, h.endian)
                    == object::elf::PT_LOAD)
        );
        assert!(headers(b"#!/bin/sh\necho hi\n").is_none());
        assert!(headers(&exe[..32]).is_none());
    }
}
