//! The binary container for everything stored as a blob (plans, raw runs): a 16-byte header
//! (magic, format version, flags, payload length, CRC32C of the payload) around a postcard
//! payload, deflated when that is smaller (flag `DEFLATE`: the payload is then the postcard
//! length as u32 LE, then the deflate stream). Decoding checks each part in turn and returns
//! an error, never panics, whatever the input.

use serde::de::DeserializeOwned;
use serde::Serialize;

pub const HEADER_LEN: usize = 16;

/// Header flag: the payload is deflated. A plan's paths share long prefixes: an 85 KB plan
/// deflates to 22 KB, and every 4 KiB database page less is one synchronous read less on the
/// launch's critical path (the launcher reads the plan from a cold cache before the app runs).
const DEFLATE: u16 = 1;

/// Most bytes a deflated payload may inflate to (a corrupt length must not allocate without
/// bound).
const MAX_INFLATED: u32 = 1 << 30;

/// A deflated payload inflates to at most this many times its size, or `INFLATE_FLOOR`: a
/// 1 MiB blob with a valid checksum that inflated to 1 GiB held `run` up 1.2-1.9 s (issue
/// #30). Plans and runs deflate 3-5x (an 85 KB plan to 22 KB); `encode` stores a payload
/// that would exceed the ratio uncompressed, so every blob it writes is read back.
const MAX_RATIO: usize = 64;
const INFLATE_FLOOR: usize = 16 << 20;

/// The most a deflated stream of `len` bytes may inflate to.
fn inflate_limit(len: usize) -> usize {
    len.saturating_mul(MAX_RATIO).max(INFLATE_FLOOR)
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("blob too short ({0} bytes) to hold a header")]
    TooShort(usize),
    #[error("not a {expected} blob (magic {found:02x?})")]
    BadMagic { expected: String, found: [u8; 4] },
    #[error("format version {found} is not supported (this warmstart reads version {supported}); relearn the app")]
    Version { found: u16, supported: u16 },
    #[error("payload length {declared} does not match the {actual} bytes present")]
    Length { declared: u32, actual: usize },
    #[error(
        "checksum mismatch (stored {stored:08x}, computed {computed:08x}): the blob is corrupt"
    )]
    Checksum { stored: u32, computed: u32 },
    #[error("payload does not decode: {0}")]
    Payload(String),
    #[error("payload is inconsistent: {0}")]
    Invalid(String),
}

pub fn encode<T: Serialize>(
    magic: [u8; 4],
    version: u16,
    value: &T,
) -> Result<Vec<u8>, CodecError> {
    let raw = postcard::to_allocvec(value).map_err(|e| CodecError::Payload(e.to_string()))?;
    let raw_len = u32::try_from(raw.len())
        .ok()
        .filter(|&l| l <= MAX_INFLATED)
        .ok_or_else(|| CodecError::Invalid("payload larger than 1 GiB".into()))?;
    let deflated = miniz_oxide::deflate::compress_to_vec(&raw, 6);
    let (flags, payload) =
        if deflated.len() + 4 < raw.len() && raw.len() <= inflate_limit(deflated.len()) {
            let mut p = Vec::with_capacity(4 + deflated.len());
            p.extend_from_slice(&raw_len.to_le_bytes());
            p.extend_from_slice(&deflated);
            (DEFLATE, p)
        } else {
            (0, raw)
        };
    let len = payload.len() as u32;
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&magic);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

pub fn decode<T: DeserializeOwned>(
    magic: [u8; 4],
    version: u16,
    bytes: &[u8],
) -> Result<T, CodecError> {
    decode_since(magic, version, version, bytes)
}

/// `decode` for a format whose versions `oldest..=version` are all read by the current
/// types (each newer version only added enum variants or fields at the end).
pub fn decode_since<T: DeserializeOwned>(
    magic: [u8; 4],
    oldest: u16,
    version: u16,
    bytes: &[u8],
) -> Result<T, CodecError> {
    if bytes.len() < HEADER_LEN {
        return Err(CodecError::TooShort(bytes.len()));
    }
    let le16 = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]);
    let le32 = |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    let found = [bytes[0], bytes[1], bytes[2], bytes[3]];
    if found != magic {
        return Err(CodecError::BadMagic {
            expected: String::from_utf8_lossy(&magic).into_owned(),
            found,
        });
    }
    let v = le16(4);
    if !(oldest..=version).contains(&v) {
        return Err(CodecError::Version {
            found: v,
            supported: version,
        });
    }
    let flags = le16(6);
    if flags & !DEFLATE != 0 {
        return Err(CodecError::Invalid(format!("unknown flags {flags:#06x}")));
    }
    let declared = le32(8);
    let payload = &bytes[HEADER_LEN..];
    if declared as usize != payload.len() {
        return Err(CodecError::Length {
            declared,
            actual: payload.len(),
        });
    }
    let stored = le32(12);
    let computed = crc32c::crc32c(payload);
    if stored != computed {
        return Err(CodecError::Checksum { stored, computed });
    }
    let inflated;
    let payload = if flags & DEFLATE != 0 {
        let (len, stream) = payload
            .split_first_chunk::<4>()
            .ok_or_else(|| CodecError::Payload("deflated payload without its length".into()))?;
        let want = u32::from_le_bytes(*len);
        if want > MAX_INFLATED || want as usize > inflate_limit(stream.len()) {
            return Err(CodecError::Invalid(format!(
                "inflated length {want} too large for its {} deflated bytes",
                stream.len()
            )));
        }
        inflated = miniz_oxide::inflate::decompress_to_vec_with_limit(stream, want as usize)
            .map_err(|e| CodecError::Payload(format!("does not inflate: {e}")))?;
        if inflated.len() != want as usize {
            return Err(CodecError::Length {
                declared: want,
                actual: inflated.len(),
            });
        }
        &inflated[..]
    } else {
        payload
    };
    let (value, rest) =
        postcard::take_from_bytes(payload).map_err(|e| CodecError::Payload(e.to_string()))?;
    if !rest.is_empty() {
        return Err(CodecError::Payload(format!(
            "{} trailing bytes",
            rest.len()
        )));
    }
    Ok(value)
}

/// Serde adapter storing paths as raw bytes: Linux paths need not be UTF-8.
pub mod path_bytes {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::path::{Path, PathBuf};

    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(p.as_os_str().as_bytes())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        let bytes: Vec<u8> = serde_bytes_vec(d)?;
        Ok(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
    }

    fn serde_bytes_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("path bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
                Ok(v.as_bytes().to_vec())
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = seq.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_bytes(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct T {
        a: u64,
        b: Vec<String>,
        #[serde(with = "path_bytes")]
        p: std::path::PathBuf,
    }

    const M: [u8; 4] = *b"TEST";

    fn sample() -> T {
        use std::os::unix::ffi::OsStringExt;
        T {
            a: 7,
            b: vec!["x".into(), "yy".into()],
            p: std::ffi::OsString::from_vec(vec![b'/', 0xff, b'z']).into(),
        }
    }

    /// A deflate bomb (a valid checksum, a tiny stream declaring a huge payload) is refused
    /// before it is inflated; the encoder never writes one (it stores such data raw).
    #[test]
    fn a_deflate_bomb_is_refused_and_never_written() {
        let zeros = vec![0u8; 20 << 20];
        let bytes = encode(M, 3, &zeros).unwrap();
        assert_eq!(u16::from_le_bytes([bytes[6], bytes[7]]), 0, "stored raw");
        assert_eq!(decode::<Vec<u8>>(M, 3, &bytes).unwrap().len(), zeros.len());
        // The same data deflated by hand behind a valid header.
        let raw = postcard::to_allocvec(&zeros).unwrap();
        let mut payload = (raw.len() as u32).to_le_bytes().to_vec();
        payload.extend_from_slice(&miniz_oxide::deflate::compress_to_vec(&raw, 6));
        let mut bomb = M.to_vec();
        bomb.extend_from_slice(&3u16.to_le_bytes());
        bomb.extend_from_slice(&DEFLATE.to_le_bytes());
        bomb.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        bomb.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        bomb.extend_from_slice(&payload);
        let e = decode::<Vec<u8>>(M, 3, &bomb).unwrap_err();
        assert!(matches!(e, CodecError::Invalid(_)), "{e}");
    }

    #[test]
    fn round_trip_including_non_utf8_paths() {
        let bytes = encode(M, 3, &sample()).unwrap();
        assert_eq!(decode::<T>(M, 3, &bytes).unwrap(), sample());
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Paths(Vec<String>);

    fn paths() -> Paths {
        Paths(
            (0..500)
                .map(|i| format!("/usr/lib/python3.11/encodings/__pycache__/cp{i}.cpython-311.pyc"))
                .collect(),
        )
    }

    #[test]
    fn compressible_payloads_are_deflated_and_round_trip() {
        let p = paths();
        let bytes = encode(M, 3, &p).unwrap();
        let raw = postcard::to_allocvec(&p).unwrap();
        assert_eq!(u16::from_le_bytes([bytes[6], bytes[7]]), DEFLATE);
        assert!(
            bytes.len() * 4 < raw.len(),
            "{} of {}",
            bytes.len(),
            raw.len()
        );
        assert_eq!(decode::<Paths>(M, 3, &bytes).unwrap(), p);
        // Blobs written before deflate (flags 0, plain postcard) still decode.
        let mut plain = bytes[..HEADER_LEN].to_vec();
        plain[6..8].copy_from_slice(&0u16.to_le_bytes());
        plain[8..12].copy_from_slice(&(raw.len() as u32).to_le_bytes());
        plain[12..16].copy_from_slice(&crc32c::crc32c(&raw).to_le_bytes());
        plain.extend_from_slice(&raw);
        assert_eq!(decode::<Paths>(M, 3, &plain).unwrap(), p);
    }

    /// Re-frame `payload` with a valid header, so only the inner checks can fail.
    fn framed(flags: u16, payload: &[u8]) -> Vec<u8> {
        let mut out = M.to_vec();
        out.extend_from_slice(&3u16.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn malformed_deflated_payloads_are_errors() {
        let bytes = encode(M, 3, &paths()).unwrap();
        let inner = &bytes[HEADER_LEN..];
        // Unknown flag bits.
        assert!(matches!(
            decode::<Paths>(M, 3, &framed(DEFLATE | 4, inner)),
            Err(CodecError::Invalid(_))
        ));
        // No room for the length, a stream cut short, garbage, a wrong or huge length.
        assert!(decode::<Paths>(M, 3, &framed(DEFLATE, &inner[..3])).is_err());
        assert!(decode::<Paths>(M, 3, &framed(DEFLATE, &inner[..inner.len() / 2])).is_err());
        assert!(decode::<Paths>(M, 3, &framed(DEFLATE, &[9, 0, 0, 0, 1, 2, 3])).is_err());
        let mut short = inner.to_vec();
        short[..4].copy_from_slice(&10u32.to_le_bytes());
        assert!(decode::<Paths>(M, 3, &framed(DEFLATE, &short)).is_err());
        let mut long = inner.to_vec();
        let want = u32::from_le_bytes([long[0], long[1], long[2], long[3]]);
        long[..4].copy_from_slice(&(want + 1).to_le_bytes());
        assert!(matches!(
            decode::<Paths>(M, 3, &framed(DEFLATE, &long)),
            Err(CodecError::Length { .. })
        ));
        long[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode::<Paths>(M, 3, &framed(DEFLATE, &long)),
            Err(CodecError::Invalid(_))
        ));
    }

    #[test]
    fn each_header_check_fires() {
        let bytes = encode(M, 3, &sample()).unwrap();
        assert!(matches!(
            decode::<T>(M, 3, &bytes[..5]),
            Err(CodecError::TooShort(5))
        ));
        assert!(matches!(
            decode::<T>(*b"NOPE", 3, &bytes),
            Err(CodecError::BadMagic { .. })
        ));
        assert!(matches!(
            decode::<T>(M, 4, &bytes),
            Err(CodecError::Version { found: 3, .. })
        ));
        assert!(matches!(
            decode::<T>(M, 3, &bytes[..bytes.len() - 1]),
            Err(CodecError::Length { .. })
        ));
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x10;
        assert!(matches!(
            decode::<T>(M, 3, &flipped),
            Err(CodecError::Checksum { .. })
        ));
    }

    #[test]
    fn every_single_bit_flip_is_rejected() {
        let bytes = encode(M, 3, &sample()).unwrap();
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[i / 8] ^= 1 << (i % 8);
            // Flags bytes (6..8) are reserved and not checked; everything else must fail.
            if (6..8).contains(&(i / 8)) {
                continue;
            }
            assert!(decode::<T>(M, 3, &b).is_err(), "bit {i} flip accepted");
        }
    }

    #[test]
    fn garbage_with_a_valid_header_errors() {
        // A correct header and CRC around a payload that is not a T.
        let payload = vec![0xffu8; 40];
        let mut b = Vec::new();
        b.extend_from_slice(&M);
        b.extend_from_slice(&3u16.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        b.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        b.extend_from_slice(&payload);
        assert!(matches!(decode::<T>(M, 3, &b), Err(CodecError::Payload(_))));
    }
}
