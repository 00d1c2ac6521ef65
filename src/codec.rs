//! The binary container for everything stored as a blob (plans, raw runs): a 16-byte header
//! (magic, format version, flags, payload length, CRC32C of the payload) around a postcard
//! payload. Decoding checks each part in turn and returns an error, never panics, whatever
//! the input.

use serde::de::DeserializeOwned;
use serde::Serialize;

pub const HEADER_LEN: usize = 16;

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
    let payload = postcard::to_allocvec(value).map_err(|e| CodecError::Payload(e.to_string()))?;
    let len = u32::try_from(payload.len())
        .map_err(|_| CodecError::Invalid("payload larger than 4 GiB".into()))?;
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&magic);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
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
    if v != version {
        return Err(CodecError::Version {
            found: v,
            supported: version,
        });
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

    #[test]
    fn round_trip_including_non_utf8_paths() {
        let bytes = encode(M, 3, &sample()).unwrap();
        assert_eq!(decode::<T>(M, 3, &bytes).unwrap(), sample());
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
