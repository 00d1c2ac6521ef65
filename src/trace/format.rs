//! Parser for tracefs `format` files (per event, and `events/header_page`). Field offsets come
//! from these files at run time, never from constants, so a kernel that reorders or resizes a
//! field is decoded correctly or rejected with the field's name.

use super::TraceError;

/// One field of an event record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    /// The C declaration without the name, e.g. `unsigned long`, `__data_loc char[]`.
    pub ctype: String,
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
}

impl Field {
    /// `__data_loc` fields hold `(len << 16) | offset` of a variable-length payload.
    pub fn is_data_loc(&self) -> bool {
        self.ctype.starts_with("__data_loc")
    }
}

/// The parsed `format` file of one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventFormat {
    pub name: String,
    pub id: u16,
    pub fields: Vec<Field>,
}

impl EventFormat {
    pub fn parse(text: &str) -> Result<EventFormat, TraceError> {
        let mut name = None;
        let mut id = None;
        let mut fields = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if let Some(v) = line.strip_prefix("name:") {
                name = Some(v.trim().to_string());
            } else if let Some(v) = line.strip_prefix("ID:") {
                id = v.trim().parse::<u16>().ok();
            } else if line.starts_with("field:") {
                fields.push(parse_field(line)?);
            }
        }
        let name = name.ok_or_else(|| TraceError::Format("no `name:` line".into()))?;
        let id = id.ok_or_else(|| TraceError::Format(format!("event {name}: no `ID:` line")))?;
        Ok(EventFormat { name, id, fields })
    }

    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// A field this decoder cannot work without.
    pub fn require(&self, name: &str) -> Result<FieldRef, TraceError> {
        self.field(name)
            .map(FieldRef::from)
            .ok_or_else(|| TraceError::MissingField {
                event: self.name.clone(),
                field: name.to_string(),
            })
    }
}

/// Parse `field:unsigned long i_ino;\toffset:16;\tsize:8;\tsigned:0;`.
fn parse_field(line: &str) -> Result<Field, TraceError> {
    let bad = || TraceError::Format(format!("unparsable field line: {line}"));
    let mut decl = None;
    let mut offset = None;
    let mut size = None;
    let mut signed = false;
    for part in line.split(';') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("field:") {
            decl = Some(v.trim());
        } else if let Some(v) = part.strip_prefix("offset:") {
            offset = v.trim().parse::<usize>().ok();
        } else if let Some(v) = part.strip_prefix("size:") {
            size = v.trim().parse::<usize>().ok();
        } else if let Some(v) = part.strip_prefix("signed:") {
            signed = v.trim() == "1";
        }
    }
    let decl = decl.ok_or_else(bad)?;
    // The name is the last identifier, before any array suffix: `char rwbs[10]`, `char data`.
    let without_array = match decl.find('[') {
        Some(i) if !decl.starts_with("__data_loc") => &decl[..i],
        _ => decl,
    };
    // After the last character not of an identifier, whatever its width (fuzzing found a
    // multi-byte one splitting the name inside a character).
    let name_start = without_array
        .char_indices()
        .rfind(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_'))
        .map(|(i, c)| i + c.len_utf8())
        .unwrap_or(0);
    let name = without_array[name_start..].to_string();
    if name.is_empty() {
        return Err(bad());
    }
    let ctype = without_array[..name_start].trim().to_string();
    Ok(Field {
        name,
        ctype,
        offset: offset.ok_or_else(bad)?,
        size: size.ok_or_else(bad)?,
        signed,
    })
}

/// Offset and size of one field, resolved once and used for every record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldRef {
    pub offset: usize,
    pub size: usize,
    pub data_loc: bool,
}

impl From<&Field> for FieldRef {
    fn from(f: &Field) -> FieldRef {
        FieldRef {
            offset: f.offset,
            size: f.size,
            data_loc: f.is_data_loc(),
        }
    }
}

impl FieldRef {
    /// Little-endian unsigned integer of 1, 2, 4 or 8 bytes; None if out of the record.
    pub fn uint(&self, rec: &[u8]) -> Option<u64> {
        let b = rec.get(self.offset..self.offset.checked_add(self.size)?)?;
        Some(match self.size {
            1 => b[0] as u64,
            2 => u16::from_le_bytes([b[0], b[1]]) as u64,
            4 => u32::from_le_bytes(b.try_into().ok()?) as u64,
            8 => u64::from_le_bytes(b.try_into().ok()?),
            _ => return None,
        })
    }

    /// Sign-extended integer (pid_t and friends).
    pub fn int(&self, rec: &[u8]) -> Option<i64> {
        let v = self.uint(rec)?;
        Some(match self.size {
            1 => v as u8 as i8 as i64,
            2 => v as u16 as i16 as i64,
            4 => v as u32 as i32 as i64,
            _ => v as i64,
        })
    }

    /// A string field: a fixed `char[N]` or a `__data_loc char[]`, NUL-terminated.
    pub fn string(&self, rec: &[u8]) -> Option<String> {
        let bytes = if self.data_loc {
            let loc = self.uint(rec)? as u32;
            let (off, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
            rec.get(off..off.checked_add(len)?)?
        } else {
            rec.get(self.offset..self.offset.checked_add(self.size)?)?
        };
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        Some(String::from_utf8_lossy(&bytes[..end]).into_owned())
    }
}

/// Layout of a ring-buffer sub-buffer ("page"), from `events/header_page`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageHeader {
    pub timestamp_offset: usize,
    pub commit_offset: usize,
    pub commit_size: usize,
    pub data_offset: usize,
}

impl PageHeader {
    pub fn parse(text: &str) -> Result<PageHeader, TraceError> {
        let mut ts = None;
        let mut commit = None;
        let mut data = None;
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("field:"))
        {
            let f = parse_field(line)?;
            match f.name.as_str() {
                "timestamp" => ts = Some(f),
                "commit" => commit = Some(f),
                "data" => data = Some(f),
                _ => {}
            }
        }
        let missing = |what: &str| TraceError::Format(format!("header_page has no `{what}` field"));
        let ts = ts.ok_or_else(|| missing("timestamp"))?;
        let commit = commit.ok_or_else(|| missing("commit"))?;
        let data = data.ok_or_else(|| missing("data"))?;
        if ts.size != 8 || !(commit.size == 4 || commit.size == 8) {
            return Err(TraceError::Format(
                "unexpected header_page field sizes".into(),
            ));
        }
        Ok(PageHeader {
            timestamp_offset: ts.offset,
            commit_offset: commit.offset,
            commit_size: commit.size,
            data_offset: data.offset,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADD: &str = include_str!(
        "../../tests/fixtures/linux-6.18/formats/filemap/mm_filemap_add_to_page_cache"
    );
    const ISSUE: &str =
        include_str!("../../tests/fixtures/linux-6.18/formats/block/block_rq_issue");
    const HEADER: &str = include_str!("../../tests/fixtures/linux-6.18/header_page");

    #[test]
    fn parses_event_format() {
        let f = EventFormat::parse(ADD).unwrap();
        assert_eq!(f.name, "mm_filemap_add_to_page_cache");
        assert_eq!(f.id, 600);
        let ino = f.field("i_ino").unwrap();
        assert_eq!((ino.offset, ino.size, ino.signed), (16, 8, false));
        assert_eq!(ino.ctype, "unsigned long");
        assert_eq!(f.field("s_dev").unwrap().offset, 32);
        assert!(f.field("common_pid").unwrap().signed);
        assert!(f.require("nonexistent").is_err());
    }

    #[test]
    fn parses_arrays_and_data_loc() {
        let f = EventFormat::parse(ISSUE).unwrap();
        let rwbs = f.field("rwbs").unwrap();
        assert_eq!((rwbs.offset, rwbs.size), (34, 10));
        assert!(!rwbs.is_data_loc());
        let cmd = f.field("cmd").unwrap();
        assert!(cmd.is_data_loc());
        assert_eq!(cmd.offset, 60);
    }

    #[test]
    fn parses_header_page() {
        let h = PageHeader::parse(HEADER).unwrap();
        assert_eq!(h.timestamp_offset, 0);
        assert_eq!(h.commit_offset, 8);
        assert_eq!(h.commit_size, 8);
        assert_eq!(h.data_offset, 16);
    }

    #[test]
    fn rejects_garbage() {
        assert!(EventFormat::parse("").is_err());
        assert!(EventFormat::parse("name: x\nID: 1\nfield:;\n").is_err());
        assert!(PageHeader::parse("nothing").is_err());
    }

    #[test]
    fn field_reads_are_bounds_checked() {
        let r = FieldRef {
            offset: 6,
            size: 4,
            data_loc: false,
        };
        assert_eq!(r.uint(&[0u8; 8]), None);
        let r = FieldRef {
            offset: 0,
            size: 2,
            data_loc: false,
        };
        assert_eq!(r.uint(&[0x34, 0x12]), Some(0x1234));
        let r = FieldRef {
            offset: 0,
            size: 4,
            data_loc: false,
        };
        assert_eq!(r.int(&(-5i32).to_le_bytes()), Some(-5));
        // data_loc pointing past the record
        let r = FieldRef {
            offset: 0,
            size: 4,
            data_loc: true,
        };
        assert_eq!(r.string(&((100u32 << 16) | 4).to_le_bytes()), None);
    }
}
