//! Kernel symbols from `/proc/kallsyms`, to name the frames of the stacks the tracer records
//! for uninterruptible sleeps (root sees the real addresses; with `kptr_restrict` they read
//! as zero and nothing is named).

use std::path::Path;

/// Text symbols sorted by address.
#[derive(Clone, Debug, Default)]
pub struct Ksyms {
    syms: Vec<(u64, String)>,
}

impl Ksyms {
    /// The running kernel's symbols; empty (every frame unnamed) when they cannot be read.
    pub fn load() -> Ksyms {
        Ksyms::from_file(Path::new("/proc/kallsyms"))
    }

    pub fn from_file(path: &Path) -> Ksyms {
        std::fs::read_to_string(path)
            .map(|t| Ksyms::parse(&t))
            .unwrap_or_default()
    }

    /// Lines of `ADDR TYPE NAME [MODULE]`; only text symbols (t, T) with an address.
    pub fn parse(text: &str) -> Ksyms {
        let mut syms: Vec<(u64, String)> = text
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let addr = u64::from_str_radix(it.next()?, 16).ok()?;
                let kind = it.next()?;
                let name = it.next()?;
                (addr != 0 && matches!(kind, "t" | "T")).then(|| (addr, name.to_string()))
            })
            .collect();
        syms.sort_unstable_by_key(|s| s.0);
        Ksyms { syms }
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// The function holding `addr`: the last symbol at or below it.
    pub fn name(&self, addr: u64) -> Option<&str> {
        let i = self.syms.partition_point(|s| s.0 <= addr);
        (i > 0).then(|| self.syms[i - 1].1.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_an_address_by_the_symbol_below_it() {
        let k = Ksyms::parse(
            "ffffffff81000000 T _stext\n\
             ffffffff81001000 t folio_wait_bit_common\n\
             ffffffff81002000 D some_data\n\
             ffffffff81003000 T filemap_fault\n\
             0000000000000000 T hidden\n\
             garbage line\n",
        );
        assert_eq!(k.name(0xffffffff81001010), Some("folio_wait_bit_common"));
        // Data symbols do not end a function.
        assert_eq!(k.name(0xffffffff81002010), Some("folio_wait_bit_common"));
        assert_eq!(k.name(0xffffffff81003000), Some("filemap_fault"));
        assert_eq!(k.name(0x1000), None);
        assert!(Ksyms::parse("").is_empty());
    }
}
