//! Parser for the binary sub-buffers ("pages") read from `per_cpu/cpuN/trace_pipe_raw`.
//! The layout is the kernel ring buffer's (kernel/trace/ring_buffer.c): a page header
//! (timestamp, commit) described by `events/header_page`, then 4-byte-aligned records whose
//! 32-bit header holds a 5-bit type_len and a 27-bit time delta.

use super::format::PageHeader;
use super::TraceError;

const TYPE_PADDING: u32 = 29;
const TYPE_TIME_EXTEND: u32 = 30;
const TYPE_TIME_STAMP: u32 = 31;
const TS_SHIFT: u32 = 27;
/// Commit-field flags (ring_buffer.c: RB_MISSED_EVENTS, RB_MISSED_STORED).
const MISSED_EVENTS: u64 = 1 << 31;
const MISSED_STORED: u64 = 1 << 30;
const COMMIT_MASK: u64 = (1 << 27) - 1;

/// What one page said about itself beyond its records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageInfo {
    pub records: usize,
    /// The kernel dropped events before this page (the count, when it stored one).
    pub missed: Option<u64>,
}

/// Walk the records of one page, calling `f(timestamp, payload)` for each data record.
/// Malformed input returns an error; it never reads out of bounds.
pub fn parse_page(
    page: &[u8],
    hdr: &PageHeader,
    mut f: impl FnMut(u64, &[u8]),
) -> Result<PageInfo, TraceError> {
    let bad = |what: &str| TraceError::Format(format!("ring buffer page: {what}"));
    let ts_bytes = page
        .get(hdr.timestamp_offset..hdr.timestamp_offset + 8)
        .ok_or_else(|| bad("too short for its header"))?;
    let mut ts = u64::from_le_bytes(ts_bytes.try_into().map_err(|_| bad("timestamp"))?);
    let commit_raw = page
        .get(hdr.commit_offset..hdr.commit_offset + hdr.commit_size)
        .ok_or_else(|| bad("too short for its header"))?;
    let commit = if hdr.commit_size == 8 {
        u64::from_le_bytes(commit_raw.try_into().map_err(|_| bad("commit"))?)
    } else {
        u32::from_le_bytes(commit_raw.try_into().map_err(|_| bad("commit"))?) as u64
    };
    let size = (commit & COMMIT_MASK) as usize;
    let data = page
        .get(hdr.data_offset..)
        .ok_or_else(|| bad("too short for its header"))?;
    if size > data.len() {
        return Err(bad("commit size larger than the page"));
    }
    let mut info = PageInfo::default();
    if commit & MISSED_EVENTS != 0 {
        let count = if commit & MISSED_STORED != 0 {
            data.get(size..size + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
        } else {
            None
        };
        info.missed = Some(count.unwrap_or(1).max(1));
    }
    let data = &data[..size];
    let mut pos = 0usize;
    let u32_at = |p: usize| -> Option<u32> {
        data.get(p..p + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    };
    while pos + 4 <= data.len() {
        let h = u32_at(pos).ok_or_else(|| bad("truncated record header"))?;
        let type_len = h & 0x1f;
        let delta = (h >> 5) as u64;
        match type_len {
            TYPE_PADDING => {
                if delta == 0 {
                    // Null padding: the rest of the page is unused.
                    break;
                }
                let len = u32_at(pos + 4).ok_or_else(|| bad("truncated padding"))? as usize;
                pos = pos
                    .checked_add(4 + len)
                    .ok_or_else(|| bad("padding length overflow"))?;
            }
            TYPE_TIME_EXTEND => {
                let hi = u32_at(pos + 4).ok_or_else(|| bad("truncated time extend"))? as u64;
                ts = ts.wrapping_add((hi << TS_SHIFT) | delta);
                pos += 8;
            }
            TYPE_TIME_STAMP => {
                // Absolute timestamp; the kernel keeps only the low 59 bits here, so the top
                // bits come from the page's running timestamp.
                let hi = u32_at(pos + 4).ok_or_else(|| bad("truncated time stamp"))? as u64;
                let abs = (hi << TS_SHIFT) | delta;
                const MSB_MASK: u64 = !((1u64 << 59) - 1);
                ts = (ts & MSB_MASK) | abs;
                pos += 8;
            }
            0 => {
                // Large record: the length (including its own 4 bytes) follows the header.
                let len = u32_at(pos + 4).ok_or_else(|| bad("truncated record length"))? as usize;
                if len < 4 {
                    return Err(bad("record length below 4"));
                }
                let start = pos + 8;
                let end = start
                    .checked_add(len - 4)
                    .ok_or_else(|| bad("record length overflow"))?;
                let payload = data
                    .get(start..end)
                    .ok_or_else(|| bad("record past commit"))?;
                ts = ts.wrapping_add(delta);
                f(ts, payload);
                info.records += 1;
                pos = (end + 3) & !3;
            }
            n => {
                let start = pos + 4;
                let end = start + n as usize * 4;
                let payload = data
                    .get(start..end)
                    .ok_or_else(|| bad("record past commit"))?;
                ts = ts.wrapping_add(delta);
                f(ts, payload);
                info.records += 1;
                pos = end;
            }
        }
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> PageHeader {
        PageHeader {
            timestamp_offset: 0,
            commit_offset: 8,
            commit_size: 8,
            data_offset: 16,
        }
    }

    fn page(ts: u64, commit_flags: u64, body: &[u8]) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&ts.to_le_bytes());
        p.extend_from_slice(&(body.len() as u64 | commit_flags).to_le_bytes());
        p.extend_from_slice(body);
        p.resize(4096, 0);
        p
    }

    #[test]
    fn small_large_extend_and_padding() {
        let mut body = Vec::new();
        // small record: type_len 2 (8 bytes), delta 10
        body.extend_from_slice(&((10u32 << 5) | 2).to_le_bytes());
        body.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        // time extend: +(1 << 27) + 3
        body.extend_from_slice(&((3u32 << 5) | TYPE_TIME_EXTEND).to_le_bytes());
        body.extend_from_slice(&1u32.to_le_bytes());
        // padding with a length (skipped); like the kernel's, the length counts itself
        body.extend_from_slice(&((1u32 << 5) | TYPE_PADDING).to_le_bytes());
        body.extend_from_slice(&8u32.to_le_bytes());
        body.extend_from_slice(&[0; 4]);
        // large record: type_len 0, length 4+6, delta 5
        body.extend_from_slice(&(5u32 << 5).to_le_bytes());
        body.extend_from_slice(&10u32.to_le_bytes());
        body.extend_from_slice(&[9, 9, 9, 9, 9, 9, 0, 0]);
        let p = page(1000, 0, &body);
        let mut got = Vec::new();
        let info = parse_page(&p, &header(), |ts, d| got.push((ts, d.to_vec()))).unwrap();
        assert_eq!(info.records, 2);
        assert_eq!(info.missed, None);
        assert_eq!(got[0], (1010, vec![1, 2, 3, 4, 5, 6, 7, 8]));
        assert_eq!(got[1].0, 1010 + (1 << 27) + 3 + 5);
        assert_eq!(got[1].1, vec![9; 6]);
    }

    #[test]
    fn reports_missed_events() {
        let mut body = Vec::new();
        body.extend_from_slice(&1u32.to_le_bytes()); // type_len 1, 4 bytes
        body.extend_from_slice(&[0; 4]);
        let mut p = page(0, MISSED_EVENTS | MISSED_STORED, &body);
        p[16 + 8..16 + 16].copy_from_slice(&42u64.to_le_bytes());
        let info = parse_page(&p, &header(), |_, _| {}).unwrap();
        assert_eq!(info.missed, Some(42));
        let p = page(0, MISSED_EVENTS, &body);
        assert_eq!(
            parse_page(&p, &header(), |_, _| {}).unwrap().missed,
            Some(1)
        );
    }

    #[test]
    fn malformed_pages_error_not_panic() {
        assert!(parse_page(&[0u8; 10], &header(), |_, _| {}).is_err());
        // commit larger than the page
        let mut p = page(0, 0, &[]);
        p[8..16].copy_from_slice(&100_000u64.to_le_bytes());
        assert!(parse_page(&p, &header(), |_, _| {}).is_err());
        // large record whose length runs past the commit
        let mut body = Vec::new();
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(&4000u32.to_le_bytes());
        assert!(parse_page(&page(0, 0, &body), &header(), |_, _| {}).is_err());
        // pseudo-random pages never panic
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            let mut p = vec![0u8; 4096];
            for b in p.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            let len = x % 4080;
            p[8..16].copy_from_slice(&len.to_le_bytes());
            let _ = parse_page(&p, &header(), |_, _| {});
        }
    }
}
